"""Statements of the fork chapter: lineage rows and idempotency records."""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, insert, select

from reference_impl.store import tables as t
from reference_impl.store.common import Statements
from reference_impl.store.rows import IdempotencyRow


_INSERT_LINEAGE = insert(t.session_lineage)


class ForkStatements(Statements):
    def insert_lineage(self, row: dict[str, Any]) -> None:
        self.conn.execute(_INSERT_LINEAGE, row)

    def idempotency(self, principal: str, key: str) -> IdempotencyRow | None:
        query = select(t.idempotency_keys).where(
            t.idempotency_keys.c.principal == principal,
            t.idempotency_keys.c.idempotency_key == key,
        )
        row = self.conn.execute(query).mappings().first()
        return IdempotencyRow(**row) if row else None

    def insert_idempotency(self, row: dict[str, Any]) -> None:
        self.conn.execute(insert(t.idempotency_keys).values(**row))

    def delete_idempotency(self, principal: str, key: str) -> None:
        self.conn.execute(
            delete(t.idempotency_keys).where(
                t.idempotency_keys.c.principal == principal,
                t.idempotency_keys.c.idempotency_key == key,
            )
        )
