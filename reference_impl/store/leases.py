"""Statements of the writer-leases chapter."""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, insert, update

from reference_impl.store import tables as t
from reference_impl.store.common import Statements


class LeaseStatements(Statements):
    def take_expired_lease(self, session_id: str, lease: dict[str, Any], now: str) -> bool:
        """Take over a lease whose holder let it expire; False when none expired."""
        result = self.conn.execute(
            update(t.session_leases)
            .where(t.session_leases.c.session_id == session_id, t.session_leases.c.expires_at <= now)
            .values(**lease)
        )
        return result.rowcount == 1

    def insert_lease(self, row: dict[str, Any]) -> None:
        """Raises IntegrityError when another writer holds the session's lease."""
        self.conn.execute(insert(t.session_leases).values(**row))

    def renew_lease(self, session_id: str, lease_id: str, expires_at: str, now: str) -> bool:
        result = self.conn.execute(
            update(t.session_leases)
            .where(
                t.session_leases.c.session_id == session_id,
                t.session_leases.c.lease_id == lease_id,
                t.session_leases.c.expires_at > now,
            )
            .values(expires_at=expires_at)
        )
        return result.rowcount == 1

    def delete_lease(self, session_id: str, lease_id: str, now: str) -> bool:
        result = self.conn.execute(
            delete(t.session_leases).where(
                t.session_leases.c.session_id == session_id,
                t.session_leases.c.lease_id == lease_id,
                t.session_leases.c.expires_at > now,
            )
        )
        return result.rowcount == 1
