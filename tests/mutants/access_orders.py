"""Mutants: access that depends on the order of grant, revoke, fork and delete
(checks/authorization/orders.py).

Each is right along the usual path (grant, fork, read) and wrong after one order of events only.
"""

from __future__ import annotations

from starlette.types import ASGIApp

from reference_impl.errors import AncestorNotReadable
from reference_impl.services.access import Access
from reference_impl.services.common import timestamp, utcnow
from reference_impl.services.grants import GrantsService
from reference_impl.settings import Settings
from reference_impl.store import Transaction
from reference_impl.store.rows import ChainLink, SessionRow
from tests.mutants import app_with_service, mutant

ORDERS = ("authorization.access_under_every_order",)


@mutant("AUTH-REVOKE-CASCADE-001", select=ORDERS,
        description="A revoked grant still serves reads through forks made before the revocation")
def revocation_spares_earlier_forks(settings: Settings) -> ASGIApp:
    revoked_at: dict[tuple[str, str], str] = {}

    class Grants(GrantsService):
        def revoke_grant(self, principal: str, session_id: str, grantee: str) -> None:
            super().revoke_grant(principal, session_id, grantee)
            revoked_at[(session_id, grantee)] = timestamp(utcnow())

    class Reads(Access):
        def require_ancestors(self, principal: str, chain: list[ChainLink]) -> None:
            def kept(position: int) -> bool:  # the grant held when the next session was forked
                when = revoked_at.get((chain[position].session.session_id, principal))
                return when is not None and chain[position + 1].session.created_at < when

            if not all(self.can_read(principal, link.session) or kept(n) for n, link in enumerate(chain[:-1])):
                raise AncestorNotReadable(f"session {chain[-1].session.session_id} inherits from a session you may not read")

    return app_with_service(settings, Grants, Reads)


@mutant("DEL-DESCENDANTS-001", select=ORDERS,
        description="A deleted ancestor stops serving reads through its descendants")
def deleted_ancestor_stops_serving(settings: Settings) -> ASGIApp:
    class Reads(Access):
        def require_ancestors(self, principal: str, chain: list[ChainLink]) -> None:
            if any(link.session.deleted_at is not None for link in chain[:-1]):
                raise AncestorNotReadable(f"session {chain[-1].session.session_id} inherits from a deleted session")
            super().require_ancestors(principal, chain)

    return app_with_service(settings, Reads)


@mutant("DEL-SOFT-001", select=ORDERS,
        description="The owner's owner-only operations (a grant among them) still reach a session it deleted")
def grant_on_deleted_session(settings: Settings) -> ASGIApp:
    class Owners(Access):
        def owned_session(self, tx: Transaction, principal: str, session_id: str, deleted_too: bool = False) -> SessionRow:
            return super().owned_session(tx, principal, session_id, deleted_too=True)

    return app_with_service(settings, Owners)
