"""Mutants: revert (with the session ETag) and the partial update of session metadata."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import delete, update
from starlette.types import ASGIApp

from reference_impl import etags
from reference_impl.services.revert import RevertService
from reference_impl.services.session_patch import SessionPatchService
from reference_impl.services.transcript import Page, TranscriptService
from reference_impl.settings import Settings
from reference_impl.store import Transaction
from reference_impl.store import tables as t
from reference_impl.store.common import sid_of
from reference_impl.store.rows import ChainLink
from tests.mutants import app_with_layers, app_with_service, app_with_transaction, mutant


class UncheckedRevert(Transaction):
    """Applies a revert whatever the session's version is now."""

    def apply_revert(self, session_id: str, version: int, own_segments: str) -> tuple[int, int] | None:
        sessions = t.sessions
        row = self.conn.execute(
            update(sessions)
            .where(sessions.c.session_id == session_id, sessions.c.running_turn_id.is_(None))
            .values(own_segments=own_segments, version=sessions.c.version + 1, revision=sessions.c.revision + 1)
            .returning(sessions.c.version, sessions.c.revision)
        ).first()
        return (int(row[0]), int(row[1])) if row else None


@mutant("REVERT-CAS-001", select=("revert.revert_compares_the_etag",),
        description="A revert ignores If-Match: no version check, stale writers win")
def revert_without_version_check(settings: Settings) -> ASGIApp:
    class Service(RevertService):
        def revert(self, principal: str, session_id: str, body: dict[str, Any], lease_id: str | None,
                   if_match: list[str] | None) -> Any:
            return super().revert(principal, session_id, body, lease_id, ["*"])

    return app_with_layers(settings, Service, transaction_class=UncheckedRevert)


@mutant("REVERT-CONCURRENT-001", select=("revert.concurrent_reverts",),
        description="A revert compares If-Match in one transaction and applies the revert without a version "
                    "condition in another: concurrent reverts with one If-Match all succeed")
def revert_checked_then_swapped(settings: Settings) -> ASGIApp:
    class Service(RevertService):
        def revert(self, principal: str, session_id: str, body: dict[str, Any], lease_id: str | None,
                   if_match: list[str] | None) -> Any:
            with self.store.read() as tx:
                found = tx.session(session_id)
                if found is not None:
                    etags.require_match(if_match, etags.etag(found))
            time.sleep(0.005)
            return super().revert(principal, session_id, body, lease_id, ["*"])

    return app_with_layers(settings, Service, transaction_class=UncheckedRevert)


@mutant("REVERT-KEEP-001", select=("revert.reverted_records_stay_readable",),
        description="A revert deletes the records it takes out of the transcript")
def revert_deletes_records(settings: Settings) -> ASGIApp:
    class Service(RevertService):
        def revert(self, principal: str, session_id: str, body: dict[str, Any], lease_id: str | None,
                   if_match: list[str] | None) -> Any:
            result = super().revert(principal, session_id, body, lease_id, if_match)
            with self.store.write() as tx:
                for gone in result["revert"]["reverted_records"]:
                    tx.records_conn.execute(
                        delete(t.records).where(
                            t.records.c.sid == sid_of(session_id),
                            t.records.c.record_index >= gone["first_index"],
                            t.records.c.record_index < gone["end_index"],
                        )
                    )
            return result

    return app_with_service(settings, Service)


@mutant("REVERT-EFFECTIVE-001", select=("revert.reverted_records_never_come_back",),
        description="A fork of a reverted session forgets its segments: reverted records come back in the child")
def fork_forgets_reverted_segments(settings: Settings) -> ASGIApp:
    class Tx(Transaction):
        def insert_lineage(self, row: dict[str, Any]) -> None:
            super().insert_lineage({k: v for k, v in row.items() if k != "cutoff_segments"})

    return app_with_transaction(settings, Tx)


@mutant("REVERT-FORKS-001", select=("revert.earlier_forks_keep_their_view",),
        description="Descendants read an ancestor through its current segments, so a revert reaches earlier forks")
def forks_follow_later_reverts(settings: Settings) -> ASGIApp:
    class Tx(Transaction):
        def chain(self, session_id: str, max_hops: int, viewer: str | None = None) -> list[ChainLink]:
            links = super().chain(session_id, max_hops, viewer)
            return [
                ChainLink(link.session, link.hops, link.turn_bound, link.record_bound, link.session.own_segments)
                for link in links
            ]

    return app_with_transaction(settings, Tx)


@mutant("REVERT-CURSOR-001", select=("revert.cursors_from_before_a_revert",),
        description="Transcript cursors issued before a revert go on as if nothing happened")
def cursor_survives_revert(settings: Settings) -> ASGIApp:
    import reference_impl.cursors as cursors_module

    class Service(TranscriptService):
        def transcript(self, principal: str, session_id: str, cursor: str | None, limit: int | None) -> Page:
            if cursor is not None:
                with self.store.read() as tx:
                    links = self.access.visible_chain(tx, principal, session_id)
                position = cursors_module.decode(cursor, "transcript", session_id)
                revision = links[-1].session.revision
                cursor = cursors_module.encode(
                    cursors_module.Position("transcript", session_id, position.session_id, position.index, revision)
                )
            return super().transcript(principal, session_id, cursor, limit)

    return app_with_service(settings, Service)


@mutant("REVERT-SCOPE-001", select=("revert.revert_touches_only_the_transcript",),
        description="A revert also clears the session's description")
def revert_clears_description(settings: Settings) -> ASGIApp:
    class Tx(Transaction):
        def apply_revert(self, session_id: str, version: int, own_segments: str) -> tuple[int, int] | None:
            applied = super().apply_revert(session_id, version, own_segments)
            if applied is not None:
                self.conn.execute(update(t.sessions).where(t.sessions.c.session_id == session_id).values(description=None))
            return applied

    return app_with_transaction(settings, Tx)


@mutant("REVERT-001", select=("revert.revert_before_a_turn",),
        description="A revert goes ahead while a turn of the session is running")
def revert_while_running(settings: Settings) -> ASGIApp:
    class Tx(Transaction):
        def apply_revert(self, session_id: str, version: int, own_segments: str) -> tuple[int, int] | None:
            sessions = t.sessions
            row = self.conn.execute(
                update(sessions)
                .where(sessions.c.session_id == session_id, sessions.c.version == version)
                .values(own_segments=own_segments, version=sessions.c.version + 1, revision=sessions.c.revision + 1)
                .returning(sessions.c.version, sessions.c.revision)
            ).first()
            return (int(row[0]), int(row[1])) if row else None

    class Service(RevertService):
        def revert(self, principal: str, session_id: str, body: dict[str, Any], lease_id: str | None,
                   if_match: list[str] | None) -> Any:
            from reference_impl.store.rows import SessionRow

            original = self.access.writable_session

            def not_running(tx: Any, *args: Any) -> SessionRow:
                from dataclasses import replace

                return replace(original(tx, *args), running_turn_id=None)

            self.access.writable_session = not_running  # type: ignore[method-assign]
            try:
                return super().revert(principal, session_id, body, lease_id, if_match)
            finally:
                del self.access.writable_session

    return app_with_layers(settings, Service, transaction_class=Tx)


@mutant("REVERT-ETAG-001", select=("revert.etag_follows_changes",),
        description="Appending records leaves the session's version, and so its ETag, unchanged")
def etag_blind_to_appends(settings: Settings) -> ASGIApp:
    class Tx(Transaction):
        def reserve_record_indexes(self, session_id: str, turn_id: str, count: int) -> int | None:
            row = self.conn.execute(
                update(t.sessions)
                .where(t.sessions.c.session_id == session_id, t.sessions.c.running_turn_id == turn_id)
                .values(record_count=t.sessions.c.record_count + count)
                .returning(t.sessions.c.record_count)
            ).first()
            return int(row[0]) - count if row else None

    return app_with_transaction(settings, Tx)


@mutant("REVERT-COST-001", select=("revert.reverted_transcript_cost",),
        description="A transcript page of a reverted session reads the revert history first: one more round trip")
def reverted_reads_cost_more(settings: Settings) -> ASGIApp:
    class Service(TranscriptService):
        def transcript(self, principal: str, session_id: str, cursor: str | None, limit: int | None) -> Page:
            with self.store.read() as tx:
                tx.reverts(session_id)
            return super().transcript(principal, session_id, cursor, limit)

    return app_with_service(settings, Service)


@mutant("SESS-PATCH-001", select=("session_patch.merge_patch_semantics",),
        description="PATCH treats null as absent: a member set to null leaves its field unchanged")
def patch_null_as_absent(settings: Settings) -> ASGIApp:
    class Service(SessionPatchService):
        def patch(self, principal: str, session_id: str, body: dict[str, Any], lease_id: str | None,
                  if_match: list[str] | None) -> Any:
            return super().patch(principal, session_id, {k: v for k, v in body.items() if v is not None}, lease_id, if_match)

    return app_with_service(settings, Service)


@mutant("SESS-PATCH-001", select=("session_patch.merge_patch_semantics",),
        description="PATCH stores the empty string as null")
def patch_empty_as_null(settings: Settings) -> ASGIApp:
    class Service(SessionPatchService):
        def patch(self, principal: str, session_id: str, body: dict[str, Any], lease_id: str | None,
                  if_match: list[str] | None) -> Any:
            return super().patch(principal, session_id, {k: (v or None) for k, v in body.items()}, lease_id, if_match)

    return app_with_service(settings, Service)


@mutant("SESS-PATCH-CAS-001", select=("session_patch.patch_compares_the_etag",),
        description="PATCH ignores If-Match")
def patch_without_version_check(settings: Settings) -> ASGIApp:
    class Service(SessionPatchService):
        def patch(self, principal: str, session_id: str, body: dict[str, Any], lease_id: str | None,
                  if_match: list[str] | None) -> Any:
            with self.store.read() as tx:
                found = tx.session(session_id)
            current = etags.etag(found) if found is not None else "*"
            return super().patch(principal, session_id, body, lease_id, [current])

    return app_with_service(settings, Service)
