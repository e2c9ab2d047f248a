"""Chapter: authorization - the caller, and grants of `reader` or `writer` on one session.

A grant names one session: it gives nothing on the session's ancestors or descendants, and a fork
starts without grants. Revocation deletes the grant; every later read looks roles up afresh.
"""

from __future__ import annotations

from typing import Any

from reference_impl import views
from reference_impl.errors import GrantToOwner, UnknownPrincipal
from reference_impl.principals import DEFAULT_PROJECT, Caller, public_id
from reference_impl.services.common import ChapterService, timestamp, utcnow
from reference_impl.store.rows import GrantRow


class GrantsService(ChapterService):
    chapter = "grants"
    capabilities = ("sharing",)

    def project_of(self, principal: str) -> str:
        if isinstance(principal, Caller):
            return principal.project
        return self.access.directory.project_of(principal) or DEFAULT_PROJECT

    def me(self, principal: str) -> dict[str, Any]:
        return {"principal_id": str(principal), "project_id": self.project_of(principal)}

    def list_grants(self, principal: str, session_id: str) -> dict[str, Any]:
        with self.store.read() as tx:
            self.access.owned_session(tx, principal, session_id)
            grants = tx.grants(session_id)
        return {"session_id": public_id(session_id), "grants": [views.grant(row) for row in grants]}

    def put_grant(self, principal: str, session_id: str, grantee: str, body: dict[str, Any]) -> dict[str, Any]:
        """Grant `reader` or `writer` to a principal of the owner's project (or change its role)."""
        with self.store.write() as tx:
            session = self.access.owned_session(tx, principal, session_id)
            if self.access.directory.project_of(grantee) != self.project_of(principal):
                raise UnknownPrincipal(f"no principal {grantee} in your project")
            if grantee == session.owner:
                raise GrantToOwner(f"{grantee} owns the session and holds every right on it; grant to another principal")
            row = {"session_id": session_id, "principal": grantee, "role": body["role"], "granted_at": timestamp(utcnow())}
            tx.put_grant(row)
        return views.grant(GrantRow(**row))

    def revoke_grant(self, principal: str, session_id: str, grantee: str) -> None:
        """Take the grant back, also on a deleted session; revoking an absent grant changes nothing."""
        with self.store.write() as tx:
            self.access.owned_session(tx, principal, session_id, deleted_too=True)
            tx.delete_grant(session_id, grantee)
