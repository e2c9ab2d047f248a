"""Statements of the legacy-import chapter: one row per (principal, legacy session id).

An upload claims the row with a conditional write (`claimed_until` holds the claim's expiry and
a token); every batch it commits re-checks the claim in the same statement that records its
progress, so two uploads of one history never both write to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, insert, or_, select, update

from reference_impl.store import tables as t
from reference_impl.store.common import Statements


@dataclass(frozen=True)
class ImportRow:
    principal: str
    legacy_id: str
    session_id: str | None
    status: str
    fingerprint: str | None
    bytes_done: int
    lines_done: int
    claimed_until: str | None
    state: str
    created_at: str
    updated_at: str


class LegacyImportStatements(Statements):
    def legacy_import(self, principal: str, legacy_id: str) -> ImportRow | None:
        table = t.legacy_imports
        row = self.conn.execute(
            select(table).where(table.c.principal == principal, table.c.legacy_id == legacy_id)
        ).mappings().first()
        return ImportRow(**row) if row else None

    def insert_legacy_import(self, row: dict[str, Any]) -> None:
        self.conn.execute(insert(t.legacy_imports).values(**row))

    def claim_legacy_import(self, principal: str, legacy_id: str, claim: str, now: str) -> ImportRow | None:
        """Take the row when nobody holds it, or the holder's claim has expired: the row as taken
        (None when it is held). The row read before the claim may be older than the one taken: on
        PostgreSQL another upload can finish and let go of it in between."""
        table = t.legacy_imports
        row = self.conn.execute(
            update(table)
            .where(
                table.c.principal == principal,
                table.c.legacy_id == legacy_id,
                or_(table.c.claimed_until.is_(None), table.c.claimed_until < now),
            )
            .values(claimed_until=claim, updated_at=now)
            .returning(*table.c)
        ).mappings().first()
        return ImportRow(**row) if row else None

    def save_legacy_import(self, principal: str, legacy_id: str, claim: str, **values: Any) -> bool:
        """Record progress, only while `claim` still holds the row."""
        table = t.legacy_imports
        result = self.conn.execute(
            update(table)
            .where(and_(table.c.principal == principal, table.c.legacy_id == legacy_id, table.c.claimed_until == claim))
            .values(**values)
        )
        return result.rowcount == 1
