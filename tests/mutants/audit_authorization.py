"""Mutants from the audit of the authorization checks (issue 17 item 4): each breaks a rule that a
deletion, listing or attachment check used to blame on its own rule. The rule broken is caught by
the check that declares it; tests/test_audit_authorization.py also holds the audited checks to
passing against the ones that break another rule than theirs.
"""

from __future__ import annotations

from typing import Any

from starlette.types import ASGIApp

from reference_impl.errors import Forbidden, NotFound
from reference_impl.services.access import OWNER, Access
from reference_impl.services.attachments import AttachmentsService, Stored
from reference_impl.services.grants import GrantsService
from reference_impl.services.listing import ListingService
from reference_impl.settings import Settings
from reference_impl.store import Transaction
from reference_impl.store.rows import SessionRow
from tests.mutants import app_with_service, mutant

AUTH = "authorization."


@mutant("AUTH-ROLES-001", select=(AUTH + "authorization_matrix",),
        description="An owner-only operation (delete, grant, purge) answers a grantee 404, as if the session were not there")
def owner_operations_hidden_from_grantees(settings: Settings) -> ASGIApp:
    class Service(Access):
        def owned_session(self, tx: Transaction, principal: str, session_id: str, deleted_too: bool = False) -> SessionRow:
            session = tx.session(session_id, viewer=principal)
            if session is not None and session.deleted_at is None and self.role(principal, session) not in (None, OWNER):
                raise self.not_found(session_id)
            return super().owned_session(tx, principal, session_id, deleted_too)

    return app_with_service(settings, Service)


@mutant("AUTH-HIDE-001", select=(AUTH + "invisible_sessions",),
        description="The descendants listing of a session the caller has no role on answers 403, not 404")
def descendants_forbidden_to_strangers(settings: Settings) -> ASGIApp:
    class Service(ListingService):
        def descendants(self, principal: str, session_id: str, cursor: str | None, limit: int | None) -> dict[str, Any]:
            with self.store.read() as tx:
                session = tx.session(session_id, viewer=principal)
                if session is not None and session.deleted_at is None and self.access.role(principal, session) is None:
                    raise Forbidden(f"you have no role on session {session_id}")
            return super().descendants(principal, session_id, cursor, limit)

    return app_with_service(settings, Service)


def _deleted(service: GrantsService, principal: str, session_id: str) -> bool:
    with service.store.read() as tx:
        session = tx.session(session_id, viewer=principal)
        return session is not None and session.deleted_at is not None and session.owner == principal


@mutant("AUTH-REVOKE-001", select=(AUTH + "access_under_every_order",),
        description="The owner's revocation of a grant on a session it deleted answers 403 forbidden")
def revoke_on_deleted_refused(settings: Settings) -> ASGIApp:
    class Service(GrantsService):
        def revoke_grant(self, principal: str, session_id: str, grantee: str) -> None:
            if _deleted(self, principal, session_id):
                raise Forbidden(f"session {session_id} is deleted: its grants stay as they are")
            super().revoke_grant(principal, session_id, grantee)

    return app_with_service(settings, Service)


@mutant("DEL-SOFT-001", select=(AUTH + "soft_delete",),
        description="The owner's revocation of a grant on a session it deleted answers 404, as for an unknown id")
def revoke_on_deleted_hidden(settings: Settings) -> ASGIApp:
    class Service(GrantsService):
        def revoke_grant(self, principal: str, session_id: str, grantee: str) -> None:
            if _deleted(self, principal, session_id):
                raise NotFound(f"no session {session_id}")
            super().revoke_grant(principal, session_id, grantee)

    return app_with_service(settings, Service)


@mutant("ATT-STORE-001", select=(AUTH + "attachments_round_trip",),
        description="An attachment stored in a fork is described as its root's")
def fork_attachment_described_at_root(settings: Settings) -> ASGIApp:
    class Service(AttachmentsService):
        def upload(self, principal: str, session_id: str, media_type: str, content: bytes, key: str | None) -> Stored:
            stored = super().upload(principal, session_id, media_type, content, key)
            with self.store.read() as tx:
                session = tx.session(session_id, viewer=principal)
            if session is not None and session.lineage is not None:
                return Stored({**stored.body, "session_id": session.lineage.root_session_id}, stored.replayed)
            return stored

    return app_with_service(settings, Service)
