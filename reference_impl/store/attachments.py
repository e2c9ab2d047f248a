"""Statements of attachments. Bytes live in the core store, in the row of the session that holds them.

A session reaches its own attachments and those of its ancestors whose position lies below the
number of the ancestor's records it inherits; one statement finds an id among all of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import and_, delete, exists, or_, select

from reference_impl.store import tables as t
from reference_impl.store.common import Statements
from reference_impl.store.rows import AttachmentRow

ROW_COLUMNS = [column for column in t.attachments.c if column.name != "content"]


def _row(mapping: Any) -> AttachmentRow:
    return AttachmentRow(**{name: mapping[name] for name in AttachmentRow.__dataclass_fields__})


class AttachmentStatements(Statements):
    def insert_attachment(self, row: dict[str, Any]) -> None:
        """Raises IntegrityError when the session already holds the id."""
        self.conn.execute(t.attachments.insert().values(**row))

    def reachable_attachment(
        self, reach: Sequence[tuple[str, int | None]], attachment_id: str, with_content: bool = False
    ) -> tuple[AttachmentRow, bytes | None] | None:
        """The attachment with this id among those the sessions of `reach` lend: (session, bound)
        pairs, where a session lends attachments whose position is at most `bound` (None: all)."""
        a = t.attachments
        lent = [
            and_(a.c.session_id == session_id, a.c.position <= bound) if bound is not None else a.c.session_id == session_id
            for session_id, bound in reach
        ]
        if not lent:
            return None
        columns = [*ROW_COLUMNS, a.c.content] if with_content else ROW_COLUMNS
        query = select(*columns).where(a.c.attachment_id == attachment_id, or_(*lent)).limit(1)
        found = self.conn.execute(query).mappings().first()
        if found is None:
            return None
        return _row(found), (found["content"] if with_content else None)

    def inherited_by_a_child(self, session_id: str, position: int) -> bool:
        """Whether a child of the session inherits the session's records from `position` on, and so
        the attachment at that position (grandchildren inherit no more of it than their parents)."""
        lineage = t.session_lineage
        query = select(
            exists().where(
                lineage.c.parent_session_id == session_id,
                lineage.c.cutoff_session_id == session_id,
                lineage.c.cutoff_record_index >= position,
            )
        )
        return bool(self.conn.execute(query).scalar())

    def delete_attachment(self, session_id: str, attachment_id: str) -> bool:
        result = self.conn.execute(
            delete(t.attachments).where(
                t.attachments.c.session_id == session_id, t.attachments.c.attachment_id == attachment_id
            )
        )
        return result.rowcount == 1
