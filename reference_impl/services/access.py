"""Who may see and write what: the rules every chapter applies before it touches a session.

A principal's role on a session is `owner`, a granted `writer` or `reader`, or none. A session the
caller has no role on, or that is deleted, is reported exactly as a missing one (404). A read of
what a session inherits needs a role on every ancestor: without one the answer is 403
`ancestor-not-readable`, never the ancestor's content. Roles are read in the statement that reads
the session (or the whole chain), so checking them costs no extra round trip.
"""

from __future__ import annotations

from reference_impl.errors import AncestorNotReadable, Forbidden, NotFound, SessionDeleted
from reference_impl.principals import Directory
from reference_impl.services import leases
from reference_impl.settings import Limits
from reference_impl.store import Transaction
from reference_impl.store.rows import ChainLink, LeaseRow, SessionRow

OWNER, WRITER, READER = "owner", "writer", "reader"
WRITE_ROLES = (OWNER, WRITER)


class Access:
    def __init__(self, limits: Limits, directory: Directory | None = None) -> None:
        self.limits = limits
        self.directory = directory or Directory({}, open=True)

    # ---------------------------------------------------------------- roles
    @staticmethod
    def role(principal: str, session: SessionRow) -> str | None:
        """The principal's role on the session: owner, a grant read for it, or None."""
        if session.owner == principal:
            return OWNER
        if session.viewer == principal:
            return session.viewer_grant
        return None

    def can_read(self, principal: str, session: SessionRow) -> bool:
        return self.role(principal, session) is not None

    def check_writer(self, lease: LeaseRow | None, session_id: str, lease_id: str | None) -> None:
        leases.check_writer(lease, session_id, lease_id)

    def not_found(self, session_id: str) -> NotFound:
        return NotFound(f"session {session_id} not found")

    # ---------------------------------------------------------------- lookups
    def visible_session(self, tx: Transaction, principal: str, session_id: str) -> SessionRow:
        """The session, if the caller has a role on it and it is not deleted; else 404."""
        session = tx.session(session_id, viewer=principal)
        if session is None or not self.can_read(principal, session) or session.deleted_at is not None:
            raise self.not_found(session_id)
        return session

    def visible_chain(self, tx: Transaction, principal: str, session_id: str) -> list[ChainLink]:
        """The chain root first, for a read through the lineage: 404 unless the caller may read the
        session, 403 `ancestor-not-readable` unless it may read every ancestor (deleted or not)."""
        return self.visible(principal, session_id, tx.chain(session_id, max_hops=self.limits.max_lineage_depth, viewer=principal))

    def chain_of(self, tx: Transaction, principal: str, session_id: str) -> list[ChainLink]:
        """The chain, root first; 404 unless the caller may read the session itself."""
        return self.readable(principal, session_id, tx.chain(session_id, max_hops=self.limits.max_lineage_depth, viewer=principal))

    def visible(self, principal: str, session_id: str, chain: list[ChainLink]) -> list[ChainLink]:
        """`visible_chain` of a chain in hand (the export reads it with its documents)."""
        self.require_ancestors(principal, self.readable(principal, session_id, chain))
        return chain

    def readable(self, principal: str, session_id: str, chain: list[ChainLink]) -> list[ChainLink]:
        """The chain; 404 unless the caller may read the session itself."""
        session = chain[-1].session if chain else None
        if session is None or not self.can_read(principal, session) or session.deleted_at is not None:
            raise self.not_found(session_id)
        return chain

    def require_ancestors(self, principal: str, chain: list[ChainLink]) -> None:
        unreadable = [link.session.session_id for link in chain[:-1] if not self.can_read(principal, link.session)]
        if unreadable:
            raise AncestorNotReadable(
                f"session {chain[-1].session.session_id} inherits from a session you may not read"
            )

    def writable_session(self, tx: Transaction, principal: str, session_id: str, lease_id: str | None) -> SessionRow:
        """The session a write goes to, after visibility, role and writer-lease checks (one statement)."""
        found = tx.session_for_write(session_id, viewer=principal)
        return self.writable_from(principal, found[0] if found else None, found[1] if found else None, session_id, lease_id)

    def writable_from(
        self, principal: str, session: SessionRow | None, lease: LeaseRow | None, session_id: str, lease_id: str | None
    ) -> SessionRow:
        """`writable_session` on a session and lease a chapter read in a statement of its own."""
        checked = self._require_role(principal, session, session_id, WRITE_ROLES)
        self.check_writer(lease, session_id, lease_id)
        return checked

    def writer_session(self, tx: Transaction, principal: str, session_id: str, lock: bool = False) -> SessionRow:
        """The session, if the caller may write it (owner or writer), whoever holds its lease."""
        return self.session_with_role(tx, principal, session_id, WRITE_ROLES, lock)

    def source_chain(self, tx: Transaction, principal: str, source_id: str) -> list[ChainLink]:
        """The chain of a fork's source: as `visible_chain`, but a deleted source answers its
        owner 409 `session-deleted`."""
        chain = tx.chain(source_id, max_hops=self.limits.max_lineage_depth, viewer=principal)
        source = chain[-1].session if chain else None
        if source is not None and source.deleted_at is not None and source.owner == principal:
            raise SessionDeleted(f"session {source_id} is deleted")
        if source is None or not self.can_read(principal, source) or source.deleted_at is not None:
            raise self.not_found(source_id)
        self.require_ancestors(principal, chain)
        return chain

    def session_with_role(
        self, tx: Transaction, principal: str, session_id: str, roles: tuple[str, ...], lock: bool = False
    ) -> SessionRow:
        """The session, if the caller's role is one of `roles` (404 without a role, 403 with another)."""
        found = tx.session_for_write(session_id, viewer=principal, lock=lock)
        return self._require_role(principal, found[0] if found else None, session_id, roles)

    def owned_session(self, tx: Transaction, principal: str, session_id: str, deleted_too: bool = False) -> SessionRow:
        """A session for an owner-only operation; `deleted_too` lets its owner reach it once deleted."""
        session = tx.session(session_id, viewer=principal)
        if session is not None and deleted_too and session.deleted_at is not None and session.owner == principal:
            return session
        return self._require_role(principal, session, session_id, (OWNER,))

    def _require_role(self, principal: str, session: SessionRow | None, session_id: str, roles: tuple[str, ...]) -> SessionRow:
        role = self.role(principal, session) if session is not None else None
        if session is None or role is None or session.deleted_at is not None:
            raise self.not_found(session_id)
        if role not in roles:
            raise Forbidden(f"your role on session {session_id} is {role}; this needs {' or '.join(roles)}")
        return session
