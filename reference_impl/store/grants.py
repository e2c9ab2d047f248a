"""Statements of grants: who holds which role on a session."""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.dialects import postgresql, sqlite

from reference_impl.store import tables as t
from reference_impl.store.common import Statements
from reference_impl.store.rows import GrantRow


class GrantStatements(Statements):
    def grants(self, session_id: str) -> list[GrantRow]:
        query = select(t.session_grants).where(t.session_grants.c.session_id == session_id).order_by(
            t.session_grants.c.principal
        )
        return [GrantRow(**row) for row in self.conn.execute(query).mappings()]

    def put_grant(self, row: dict[str, Any]) -> None:
        """Create the grant, or replace the role of an existing one: one statement."""
        dialect = postgresql if self.conn.dialect.name == "postgresql" else sqlite
        statement = dialect.insert(t.session_grants).values(**row)
        statement = statement.on_conflict_do_update(
            index_elements=["session_id", "principal"],
            set_={"role": statement.excluded.role, "granted_at": statement.excluded.granted_at},
        )
        self.conn.execute(statement)

    def delete_grant(self, session_id: str, principal: str) -> bool:
        result = self.conn.execute(
            delete(t.session_grants).where(
                t.session_grants.c.session_id == session_id, t.session_grants.c.principal == principal
            )
        )
        return result.rowcount == 1
