"""Who may see and write what: the rules every chapter applies before it touches a session.

A session the caller may not read is reported exactly as a missing one (404), and a read through
the lineage needs every ancestor to be readable.
"""

from __future__ import annotations

from reference_impl.errors import NotFound
from reference_impl.services import leases
from reference_impl.settings import Limits
from reference_impl.store import Transaction
from reference_impl.store.rows import ChainLink, LeaseRow, SessionRow


class Access:
    def __init__(self, limits: Limits) -> None:
        self.limits = limits

    def can_read(self, principal: str, session: SessionRow) -> bool:
        return session.owner == principal

    def check_writer(self, lease: LeaseRow | None, session_id: str, lease_id: str | None) -> None:
        leases.check_writer(lease, session_id, lease_id)

    def visible_session(self, tx: Transaction, principal: str, session_id: str) -> SessionRow:
        session = tx.session(session_id)
        if session is None or not self.can_read(principal, session):
            raise NotFound(f"session {session_id} not found")
        return session

    def visible_chain(self, tx: Transaction, principal: str, session_id: str) -> list[ChainLink]:
        """The chain root first; 404 unless the caller may read every session in it."""
        chain = tx.chain(session_id, max_hops=self.limits.max_lineage_depth)
        if not chain or not all(self.can_read(principal, link.session) for link in chain):
            raise NotFound(f"session {session_id} not found")
        return chain

    def writable_session(self, tx: Transaction, principal: str, session_id: str, lease_id: str | None) -> SessionRow:
        """The session a write goes to, after visibility and writer-lease checks (one statement)."""
        found = tx.session_for_write(session_id)
        if found is None or not self.can_read(principal, found[0]):
            raise NotFound(f"session {session_id} not found")
        self.check_writer(found[1], session_id, lease_id)
        return found[0]
