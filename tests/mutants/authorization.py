"""Mutants: authorization - projects and ids, roles and grants, reads through the lineage,
attachments, deletion and listings. Each breaks one rule the way a plausible server would."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from starlette.types import ASGIApp

from reference_impl import views
from reference_impl.errors import AttachmentInherited, Forbidden, InvalidRequest, NotFound, SessionExists, UnknownPrincipal
from reference_impl.principals import public_id
from reference_impl.services.access import Access
from reference_impl.services.attachments import AttachmentsService, Stored, reach_of
from reference_impl.services.deletion import DeletionService
from reference_impl.services.common import timestamp, utcnow
from reference_impl.services.fork import ForkOutcome, ForkService
from reference_impl.services.grants import GrantsService
from reference_impl.services.sessions import SessionsService
from reference_impl.settings import Settings
from reference_impl.store import Transaction
from reference_impl.store import tables as t
from reference_impl.store.rows import ChainLink, GrantRow, SessionRow
from tests.mutants import app_with_service, app_with_transaction, mutant, reference_app, rewrite_responses

AUTH = "authorization."


# ---------------------------------------------------------------- non-disclosure and projects
@mutant("AUTH-HIDE-001", select=(AUTH + "invisible_sessions",),
        description="A stranger is told 403 forbidden for a session that exists, 404 only for one that does not")
def stranger_gets_forbidden(settings: Settings) -> ASGIApp:
    class Service(Access):
        def _require_role(self, principal: str, session: SessionRow | None, session_id: str, roles: tuple[str, ...]) -> SessionRow:
            if session is not None and self.role(principal, session) is None:
                raise Forbidden(f"session {session_id} belongs to someone else")
            return super()._require_role(principal, session, session_id, roles)

    return app_with_service(settings, Service)


@mutant("AUTH-HIDE-001", select=(AUTH + "invisible_sessions",),
        description="A hidden session costs one lookup more than an unknown id, which Storage-Round-Trips shows")
def hidden_session_costs_a_lookup(settings: Settings) -> ASGIApp:
    class Service(Access):
        def visible_session(self, tx: Transaction, principal: str, session_id: str) -> SessionRow:
            session = tx.session(session_id, viewer=principal)
            if session is not None and not self.can_read(principal, session):
                tx.grants(session_id)  # "maybe a grant makes it readable after all"
            return super().visible_session(tx, principal, session_id)

    return app_with_service(settings, Service)


@mutant("AUTH-PRINCIPAL-001", select=(AUTH + "projects_and_ids",),
        description="GET /me names one project for every principal")
def me_reports_one_project(settings: Settings) -> ASGIApp:
    class Service(GrantsService):
        def me(self, principal: str) -> dict[str, Any]:
            return {"principal_id": str(principal), "project_id": "default"}

    return app_with_service(settings, Service)


@mutant("AUTH-NAMESPACE-001", select=(AUTH + "projects_and_ids",),
        description="Session ids are global: an id taken in another project answers 409, telling its existence")
def ids_global_across_projects(settings: Settings) -> ASGIApp:
    class Service(SessionsService):
        def create_session(self, principal: str, body: dict[str, Any]) -> dict[str, Any]:
            chosen = body.get("session_id")
            if chosen is not None:
                wanted = public_id(chosen)
                with self.store.read() as tx:
                    keys = tx.conn.execute(select(t.sessions.c.session_id).where(t.sessions.c.session_id.like(f"%{wanted}")))
                    if any(public_id(key) == wanted for (key,) in keys):
                        raise SessionExists(f"session {wanted} already exists")
            return super().create_session(principal, body)

    return app_with_service(settings, Service)


# ---------------------------------------------------------------- roles and grants
@mutant("AUTH-ROLES-001", select=(AUTH + "authorization_matrix",),
        description="A reader may write: start turns, store and delete attachments")
def readers_may_write(settings: Settings) -> ASGIApp:
    class Service(Access):
        def _require_role(self, principal: str, session: SessionRow | None, session_id: str, roles: tuple[str, ...]) -> SessionRow:
            widened = roles + ("reader",) if "writer" in roles else roles
            return super()._require_role(principal, session, session_id, widened)

    return app_with_service(settings, Service)


@mutant("AUTH-GRANT-001", select=(AUTH + "grants",),
        description="A grant to a principal of another project is accepted")
def grants_cross_projects(settings: Settings) -> ASGIApp:
    class Service(GrantsService):
        def put_grant(self, principal: str, session_id: str, grantee: str, body: dict[str, Any]) -> dict[str, Any]:
            with self.store.write() as tx:
                session = self.access.owned_session(tx, principal, session_id)
                if self.access.directory.project_of(grantee) is None:  # known anywhere will do
                    raise UnknownPrincipal(f"no principal {grantee}")
                if grantee == session.owner:
                    raise InvalidRequest("grant to another principal")
                row = {"session_id": session_id, "principal": grantee, "role": body["role"], "granted_at": timestamp(utcnow())}
                tx.put_grant(row)
            return views.grant(GrantRow(**row))

    return app_with_service(settings, Service)


@mutant("AUTH-GRANT-LIST-001", select=(AUTH + "grants",),
        description="The grant listing leaves writers out")
def grant_list_without_writers(settings: Settings) -> ASGIApp:
    class Service(GrantsService):
        def list_grants(self, principal: str, session_id: str) -> dict[str, Any]:
            listed = super().list_grants(principal, session_id)
            return {**listed, "grants": [item for item in listed["grants"] if item["role"] == "reader"]}

    return app_with_service(settings, Service)


@mutant("AUTH-GRANT-SCOPE-001", select=(AUTH + "grant_scope",),
        description="A fork copies the source's grants, so the source's readers read every fork of it")
def forks_copy_grants(settings: Settings) -> ASGIApp:
    class Service(ForkService):
        def _fork_in(self, tx: Transaction, principal: str, source_id: str, *rest: Any) -> ForkOutcome:
            outcome = super()._fork_in(tx, principal, source_id, *rest)
            if not outcome.replayed:
                child = principal.key(outcome.body["session"]["session_id"])
                for row in tx.grants(source_id):
                    tx.put_grant({"session_id": child, "principal": row.principal, "role": row.role, "granted_at": row.granted_at})
            return outcome

    return app_with_service(settings, Service)


@mutant("AUTH-REVOKE-001", select=(AUTH + "revocation_cascades",),
        description="Revoking a grant that does not exist answers 404")
def revoking_nothing_is_not_found(settings: Settings) -> ASGIApp:
    class Tx(Transaction):
        def delete_grant(self, session_id: str, principal: str) -> bool:
            if not super().delete_grant(session_id, principal):
                raise NotFound(f"no grant for {principal}")
            return True

    return app_with_transaction(settings, Tx)


@mutant("AUTH-REVOKE-CASCADE-001", select=(AUTH + "revocation_cascades",),
        description="Access through the lineage is kept from fork time: the owner of a fork reads its ancestors after revocation")
def access_kept_from_fork_time(settings: Settings) -> ASGIApp:
    class Service(Access):
        def require_ancestors(self, principal: str, chain: list[ChainLink]) -> None:
            if chain[-1].session.owner == principal:
                return  # "they could read it when they forked"
            super().require_ancestors(principal, chain)

    return app_with_service(settings, Service)


@mutant("AUTH-LINEAGE-READ-001", select=(AUTH + "reads_need_every_ancestor",),
        description="Only the session named in the request is checked, never its ancestors")
def only_named_session_checked(settings: Settings) -> ASGIApp:
    class Service(Access):
        def require_ancestors(self, principal: str, chain: list[ChainLink]) -> None:
            return None

    return app_with_service(settings, Service)


@mutant("AUTH-FORK-001", select=(AUTH + "reads_need_every_ancestor",),
        description="A fork checks the source only: a reader of a fork can fork what it may not read")
def fork_checks_only_the_source(settings: Settings) -> ASGIApp:
    class Service(Access):
        def source_chain(self, tx: Transaction, principal: str, source_id: str) -> list[ChainLink]:
            chain = self.chain_of(tx, principal, source_id)
            return chain

    return app_with_service(settings, Service)


# ---------------------------------------------------------------- attachments
@mutant("ATT-STORE-001", select=(AUTH + "attachments_round_trip",),
        description="The advertised max_attachment_bytes is smaller than what the server accepts")
def attachment_limit_not_enforced(settings: Settings) -> ASGIApp:
    class Service(AttachmentsService):
        def advertised_limits(self) -> dict[str, Any]:
            return {"max_attachment_bytes": self.limits.max_attachment_bytes - 4096}

    return app_with_service(settings, Service)


@mutant("ATT-READ-001", select=(AUTH + "attachments_round_trip",),
        description="An attachment is served with its media type's parameters dropped")
def attachment_media_type_parameters_dropped(settings: Settings) -> ASGIApp:
    def rewrite(scope: dict[str, Any], status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> Any:
        if scope["method"] == "GET" and "/attachments/" in scope["path"] and status == 200:
            headers = [(k, v.split(b";")[0] if k.lower() == b"content-type" else v) for k, v in headers]
        return status, headers, body

    return rewrite_responses(reference_app(settings), rewrite)


@mutant("ATT-IDEMPOTENT-001", select=(AUTH + "attachment_upload_retries",),
        description="Uploads ignore Idempotency-Key: a retry stores the attachment twice")
def upload_key_ignored(settings: Settings) -> ASGIApp:
    class Service(AttachmentsService):
        def upload(self, principal: str, session_id: str, media_type: str, content: bytes, key: str | None) -> Stored:
            return super().upload(principal, session_id, media_type, content, None)

    return app_with_service(settings, Service)


@mutant("ATT-ID-001", select=(AUTH + "attachment_client_ids",),
        description="PUT of a taken attachment id replaces its content")
def put_replaces_attachment(settings: Settings) -> ASGIApp:
    class Service(AttachmentsService):
        def put(self, principal: str, session_id: str, attachment_id: str, media_type: str, content: bytes) -> Stored:
            with self.store.write() as tx:
                self.access.writer_session(tx, principal, session_id)
                tx.delete_attachment(session_id, attachment_id)
            return super().put(principal, session_id, attachment_id, media_type, content)

    return app_with_service(settings, Service)


@mutant("ATT-INHERIT-001", select=(AUTH + "attachment_inheritance",),
        description="A descendant reaches every attachment of its ancestors, also those stored after the fork")
def attachments_lent_without_bound(settings: Settings) -> ASGIApp:
    class Tx(Transaction):
        def reachable_attachment(self, reach: Any, attachment_id: str, with_content: bool = False) -> Any:
            return super().reachable_attachment([(session_id, None) for session_id, _ in reach], attachment_id, with_content)

    return app_with_transaction(settings, Tx)


def _delete_where_held(service: AttachmentsService, principal: str, session_id: str, attachment_id: str) -> None:
    with service.store.write() as tx:
        chain = tx.chain(session_id, service.limits.max_lineage_depth, viewer=principal)
        found = tx.reachable_attachment(reach_of(chain), attachment_id)
        if found is not None:
            tx.delete_attachment(found[0].session_id, attachment_id)


@mutant("ATT-IMMUTABLE-001", select=(AUTH + "attachment_immutability",),
        description="Deleting through a child deletes the inherited attachment at its ancestor")
def inherited_attachment_deletable(settings: Settings) -> ASGIApp:
    class Service(AttachmentsService):
        def delete(self, principal: str, session_id: str, attachment_id: str) -> None:
            try:
                super().delete(principal, session_id, attachment_id)
            except AttachmentInherited:
                _delete_where_held(self, principal, session_id, attachment_id)

    return app_with_service(settings, Service)


@mutant("DEL-STABLE-001", select=(AUTH + "attachment_immutability",),
        description="A refused attachment delete answers 409 but has removed the attachment already")
def refused_delete_still_deletes(settings: Settings) -> ASGIApp:
    class Service(AttachmentsService):
        def delete(self, principal: str, session_id: str, attachment_id: str) -> None:
            try:
                super().delete(principal, session_id, attachment_id)
            except AttachmentInherited:
                _delete_where_held(self, principal, session_id, attachment_id)
                raise

    return app_with_service(settings, Service)


# ---------------------------------------------------------------- deletion
@mutant("DEL-SOFT-001", select=(AUTH + "soft_delete",),
        description="A deleted session stays readable by its owner")
def owner_reads_deleted(settings: Settings) -> ASGIApp:
    class Service(Access):
        def visible_session(self, tx: Transaction, principal: str, session_id: str) -> SessionRow:
            session = tx.session(session_id, viewer=principal)
            if session is not None and session.owner == principal:
                return session
            return super().visible_session(tx, principal, session_id)

    return app_with_service(settings, Service)


@mutant("DEL-DESCENDANTS-001", select=(AUTH + "deleted_ancestors_serve",),
        description="A deleted ancestor breaks its descendants: their transcripts answer 404")
def deleted_ancestor_breaks_descendants(settings: Settings) -> ASGIApp:
    class Service(Access):
        def visible_chain(self, tx: Transaction, principal: str, session_id: str) -> list[ChainLink]:
            chain = super().visible_chain(tx, principal, session_id)
            if any(link.session.deleted_at is not None for link in chain):
                raise self.not_found(session_id)
            return chain

    return app_with_service(settings, Service)


@mutant("DEL-FORK-001", select=(AUTH + "soft_delete",),
        description="Forking a deleted session answers its owner 404, as for anyone")
def deleted_fork_not_explained(settings: Settings) -> ASGIApp:
    class Service(Access):
        def source_chain(self, tx: Transaction, principal: str, source_id: str) -> list[ChainLink]:
            return self.visible_chain(tx, principal, source_id)

    return app_with_service(settings, Service)


@mutant("DEL-PURGE-001", select=(AUTH + "purge",),
        description="A purge removes the records but keeps the session, so its id stays taken")
def purge_keeps_the_session(settings: Settings) -> ASGIApp:
    class Tx(Transaction):
        def purge_session(self, session_id: str, parent_id: str | None) -> None:
            return None

    return app_with_transaction(settings, Tx)


# ---------------------------------------------------------------- listings
@mutant("LIST-SESSIONS-001", select=(AUTH + "list_sessions",),
        description="The session listing holds owned sessions only, never granted ones")
def listing_without_grants(settings: Settings) -> ASGIApp:
    class Tx(Transaction):
        def visible_sessions(self, viewer: str, after: str, limit: int) -> list[SessionRow]:
            return [row for row in super().visible_sessions(viewer, after, limit) if row.owner == viewer]

    return app_with_transaction(settings, Tx)


@mutant("LIST-DESCENDANTS-001", select=(AUTH + "list_descendants",),
        description="The descendants listing holds children only, not their descendants")
def descendants_one_level(settings: Settings) -> ASGIApp:
    class Tx(Transaction):
        def descendants(self, session_id: str, viewer: str, after: str, limit: int, max_hops: int) -> list[SessionRow]:
            return super().descendants(session_id, viewer, after, limit, 1)

    return app_with_transaction(settings, Tx)


@mutant("DIAG-LIST-COST-001", select=("diagnostics.listing_cost_by_depth",),
        description="The branch family is walked one level per query")
def descendants_walked_level_by_level(settings: Settings) -> ASGIApp:
    class Tx(Transaction):
        def descendants(self, session_id: str, viewer: str, after: str, limit: int, max_hops: int) -> list[SessionRow]:
            frontier = [session_id]
            for _ in range(max_hops):  # the per-level lookups a naive tree walk makes
                lineage = t.session_lineage
                query = select(lineage.c.session_id).where(lineage.c.parent_session_id.in_(frontier))
                frontier = [key for (key,) in self.conn.execute(query)]
                if not frontier:
                    break
            return super().descendants(session_id, viewer, after, limit, max_hops)

    return app_with_transaction(settings, Tx)

