"""Statements of the export chapter: the effective turns of a chain in one statement, and one turn
by its index.

The records of an export or of a turn are read with the transcript chapter's records statement
(`TranscriptStatements.records`), which reads only the index ranges asked for.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from sqlalchemy import select, text
from sqlalchemy.sql.elements import TextClause

from reference_impl.store import tables as t
from reference_impl.store.common import Statements, turn_from
from reference_impl.store.rows import TurnRow

TURN_COLUMNS = (
    "turn_id, session_id, turn_index, role, status, first_record_index, end_record_index, created_at, finished_at"
)


@lru_cache(maxsize=64)
def _turns_sql(spans: int) -> TextClause:
    """One statement for the turns of `spans` sessions, each up to an inclusive turn index."""
    branches = " UNION ALL ".join(
        f"SELECT {TURN_COLUMNS}, {n} AS span_ordinal FROM turns "
        f"WHERE session_id = :s{n} AND turn_index >= :f{n} AND turn_index <= :u{n}"
        for n in range(spans)
    )
    return text(f"SELECT * FROM ({branches}) AS spans ORDER BY span_ordinal, turn_index")


class ExportStatements(Statements):
    def effective_turns(self, spans: Sequence[tuple[str, int, int]]) -> list[TurnRow]:
        """The turns of each (session, first, last turn index) span, in span then index order: one statement."""
        if not spans:
            return []
        params: dict[str, Any] = {}
        for n, (session_id, first, upto) in enumerate(spans):
            params[f"s{n}"], params[f"f{n}"], params[f"u{n}"] = session_id, first, upto
        rows = self.conn.execute(_turns_sql(len(spans)), params).mappings()
        return [turn_from(row) for row in rows]

    def turn_at_index(self, session_id: str, turn_index: int) -> TurnRow | None:
        """The turn of a session with this index: one statement (the unique index on both)."""
        query = select(t.turns).where(t.turns.c.session_id == session_id, t.turns.c.turn_index == turn_index)
        row = self.conn.execute(query).mappings().first()
        return turn_from(row) if row else None
