"""Mutants: reads (capabilities, transcript pages and cursors, lineage, diagnostics)."""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from dataclasses import replace
from typing import Any

from sqlalchemy import insert, update
from starlette.types import ASGIApp

from reference_impl import cursors, views
from reference_impl.errors import InvalidCursor
from reference_impl.services.capabilities import CapabilitiesService
from reference_impl.services.common import new_id
from reference_impl.services.fork import ForkOutcome, ForkService
from reference_impl.services.sessions import SessionsService
from reference_impl.services.transcript import Page, TranscriptService
from reference_impl.settings import Settings
from reference_impl.store import Transaction
from reference_impl.store import tables as t
from reference_impl.store.common import sid_of
from reference_impl.store.rows import RecordRow, Segment
from reference_impl.services.common import ChapterService
from tests.mutants import app_with_service, app_with_transaction, mutant, reference_app, rewrite_responses

ROUND_TRIPS = b"storage-round-trips"
Headers = list[tuple[bytes, bytes]]


def _effective_segments(tx: Transaction, service: ChapterService, principal: str, session_id: str) -> list[Segment]:
    """The segments of a session's whole effective transcript, root first."""
    chain = service.access.visible_chain(tx, principal, session_id)
    return [Segment(link.session.session_id, -1, link.record_bound) for link in chain if link.record_bound != -1]


# ---------------------------------------------------------------- capabilities
@mutant("CAP-LIMITS-001", select=("capabilities.minimum_limits",),
        description="The discovery document swaps max_page_size and default_page_size (default above max)")
def page_size_limits_swapped(settings: Settings) -> ASGIApp:
    class Service(CapabilitiesService):
        def capabilities(self, spec_version: str) -> dict[str, Any]:
            document = super().capabilities(spec_version)
            limits = document["limits"]
            limits["max_page_size"], limits["default_page_size"] = limits["default_page_size"], limits["max_page_size"]
            return document

    return app_with_service(settings, Service)


@mutant("CAP-VERSION-001", select=("capabilities.discovery_document",),
        description="spec_version reports the implementation's own 0.x version instead of the spec version")
def implementation_version_advertised(settings: Settings) -> ASGIApp:
    class Service(CapabilitiesService):
        def capabilities(self, spec_version: str) -> dict[str, Any]:
            return super().capabilities("0.4.2")

    return app_with_service(settings, Service)


@mutant("CAP-PUBLIC-001", select=("capabilities.discovery_without_credentials",), description="The discovery document answers 401 to a client without credentials.")
def capabilities_require_credentials(settings: Settings) -> ASGIApp:
    """The discovery document answers 401 to a client without credentials (CAP-PUBLIC-001)."""

    def rewrite(scope: dict[str, Any], status: int, headers: Headers, body: bytes) -> tuple[int, Headers, bytes]:
        if scope["path"] != "/capabilities" or any(key.lower() == b"authorization" for key, _ in scope["headers"]):
            return status, headers, body
        problem = {"type": "urn:session-lineage:problem:unauthenticated", "title": "Missing or unknown credentials", "status": 401}
        headers = [(k, v) for k, v in headers if k.lower() != b"content-type"] + [(b"content-type", b"application/problem+json")]
        return 401, headers, json.dumps(problem).encode()

    return rewrite_responses(reference_app(settings), rewrite)


@mutant("CAP-NAMES-001", select=("capabilities.core_capability_names",),
        description="The core capability 'idempotency' is not listed")
def idempotency_capability_unlisted(settings: Settings) -> ASGIApp:
    class Service(CapabilitiesService):
        def capabilities(self, spec_version: str) -> dict[str, Any]:
            document = super().capabilities(spec_version)
            document["capabilities"].remove("idempotency")
            return document

    return app_with_service(settings, Service)


@mutant("CAP-NAMES-001", select=("capabilities.core_capability_names",),
        description="diagnostics.query_count is true but 'diagnostics.query-count' is not listed")
def query_count_capability_unlisted(settings: Settings) -> ASGIApp:
    class Service(CapabilitiesService):
        def capabilities(self, spec_version: str) -> dict[str, Any]:
            document = super().capabilities(spec_version)
            document["capabilities"].remove("diagnostics.query-count")
            return document

    return app_with_service(settings, Service)


# ---------------------------------------------------------------- transcript
@mutant("XS-PROVENANCE-001", select=("transcript.effective_order_depth_5",),
        description="Inherited records are served with a record_id derived from the reading session")
def inherited_record_ids_rewritten(settings: Settings) -> ASGIApp:
    class Service(TranscriptService):
        def transcript(self, principal: str, session_id: str, cursor: str | None, limit: int | None) -> Page:
            page = super().transcript(principal, session_id, cursor, limit)
            records = [
                record if record["session_id"] == session_id
                else {**record, "record_id": str(uuid.uuid5(uuid.NAMESPACE_URL, f"{session_id}/{record['record_id']}"))}
                for record in page.records
            ]
            return replace(page, records=records)

    return app_with_service(settings, Service)


@mutant("XS-PROVENANCE-001", select=("transcript.effective_order_depth_5",),
        description="Inherited records are served with the reading session's id instead of their own")
def inherited_records_relabelled(settings: Settings) -> ASGIApp:
    class Service(TranscriptService):
        def transcript(self, principal: str, session_id: str, cursor: str | None, limit: int | None) -> Page:
            page = super().transcript(principal, session_id, cursor, limit)
            return replace(page, records=[{**record, "session_id": session_id} for record in page.records])

    return app_with_service(settings, Service)


@mutant("XS-ROOT-001", select=("transcript.root_and_physical",),
        description="GET /records serves the effective transcript, inherited records included")
def own_records_include_inherited(settings: Settings) -> ASGIApp:
    class Service(TranscriptService):
        def own_records(self, principal: str, session_id: str, cursor: str | None, limit: int | None) -> Page:
            return self.transcript(principal, session_id, cursor, limit)

    return app_with_service(settings, Service)


@mutant("XS-PAGE-001", select=("transcript.pagination_walk",),
        description="A page keeps the look-ahead row and holds limit + 1 records")
def page_keeps_lookahead_record(settings: Settings) -> ASGIApp:
    class Service(TranscriptService):
        @staticmethod
        def _page(kind: str, session_id: str, rows: list[Any], size: int, cursor: str | None) -> Page:
            page = TranscriptService._page(kind, session_id, rows, size + 1, cursor)
            return replace(page, has_more=len(rows) > size)

    return app_with_service(settings, Service)


@mutant("XS-PAGE-001", select=("transcript.pagination_walk",),
        description="has_more is computed after the look-ahead row was dropped, so it is always false")
def has_more_always_false(settings: Settings) -> ASGIApp:
    class Service(TranscriptService):
        @staticmethod
        def _page(kind: str, session_id: str, rows: list[Any], size: int, cursor: str | None) -> Page:
            return TranscriptService._page(kind, session_id, rows[:size], size, cursor)

    return app_with_service(settings, Service)


@mutant("XS-PAGE-LIMIT-001", select=("transcript.page_limit_bounds",),
        description="A limit outside 1..max_page_size is clamped instead of refused")
def page_limit_clamped(settings: Settings) -> ASGIApp:
    class Service(TranscriptService):
        def _page_size(self, limit: int | None) -> int:
            if limit is None:
                return self.limits.default_page_size
            return min(max(limit, 1), self.limits.max_page_size)

    return app_with_service(settings, Service)


@mutant("XS-PAGE-GROWTH-001", select=("transcript.cursor_survives_growth",),
        description="The last page's next_cursor is null, so a reader cannot resume after the session grows")
def last_page_drops_cursor(settings: Settings) -> ASGIApp:
    class Service(TranscriptService):
        def transcript(self, principal: str, session_id: str, cursor: str | None, limit: int | None) -> Page:
            page = super().transcript(principal, session_id, cursor, limit)
            return page if page.has_more else replace(page, next_cursor=None)

    return app_with_service(settings, Service)


@mutant("XS-PAGE-GROWTH-001", select=("transcript.cursor_survives_growth",),
        description="Cursors pin the transcript to its length when the walk began: later records are never reached")
def cursor_pins_transcript_end(settings: Settings) -> ASGIApp:
    class Service(TranscriptService):
        def transcript(self, principal: str, session_id: str, cursor: str | None, limit: int | None) -> Page:
            end: int | None = None
            if cursor is not None:
                cursor, _, pinned = cursor.rpartition(".")
                if not pinned.isdigit():
                    raise InvalidCursor("the cursor is not one this server issued")
                end = int(pinned)
            page = super().transcript(principal, session_id, cursor, limit)
            if end is None:
                with self.store.read() as tx:
                    session = tx.session(session_id)
                end = session.record_count if session else 0
            records = [r for r in page.records if r["session_id"] != session_id or r["index"] < end]
            has_more = page.has_more and len(records) == len(page.records)
            next_cursor = f"{page.next_cursor}.{end}" if page.next_cursor else None
            return Page(session_id, records, has_more, next_cursor)

    return app_with_service(settings, Service)


def _offset_cursor(session_id: str, offset: int) -> str:
    raw = json.dumps({"session": session_id, "offset": offset}).encode()
    return base64.urlsafe_b64encode(raw).decode()


@mutant("XS-CURSOR-INVALID-001", select=("transcript.invalid_cursor",),
        description="Cursors are offsets whose session is never checked, so foreign and forged cursors are accepted")
def offset_cursor_ignores_session(settings: Settings) -> ASGIApp:
    class Service(TranscriptService):
        def transcript(self, principal: str, session_id: str, cursor: str | None, limit: int | None) -> Page:
            size = self._page_size(limit)
            offset = 0
            if cursor is not None:
                try:
                    payload = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
                    offset = int(payload["offset"])
                except (binascii.Error, ValueError, TypeError, KeyError, UnicodeDecodeError) as exc:
                    raise InvalidCursor("the cursor is not one this server issued") from exc
            with self.store.read() as tx:
                rows = tx.records(_effective_segments(tx, self, principal, session_id), offset + size + 1)[offset:]
            shown = rows[:size]
            return Page(session_id, [views.record(row) for row in shown], len(rows) > size, _offset_cursor(session_id, offset + len(shown)))

    return app_with_service(settings, Service)


@mutant("XS-CURSOR-INVALID-001", select=("transcript.invalid_cursor",),
        description="A cursor the server cannot decode is ignored and the walk restarts from the first page")
def invalid_cursor_restarts_walk(settings: Settings) -> ASGIApp:
    class Service(TranscriptService):
        def transcript(self, principal: str, session_id: str, cursor: str | None, limit: int | None) -> Page:
            try:
                return super().transcript(principal, session_id, cursor, limit)
            except InvalidCursor:
                return super().transcript(principal, session_id, None, limit)

    return app_with_service(settings, Service)


@mutant("XS-CURSOR-SCOPE-001", select=("transcript.cursor_scope",), description="A cursor is accepted for any read whose transcript holds its position.")
def cursor_not_bound_to_read(settings: Settings) -> ASGIApp:
    """A cursor is accepted for any read whose transcript holds its position (XS-CURSOR-SCOPE-001)."""

    class Service(TranscriptService):
        def transcript(self, principal: str, session_id: str, cursor: str | None, limit: int | None) -> Page:
            if cursor is not None:
                try:
                    payload = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
                except (binascii.Error, ValueError, UnicodeDecodeError) as exc:
                    raise InvalidCursor("the cursor is not one this server issued") from exc
                if isinstance(payload, dict):
                    payload = {**payload, "k": "transcript", "r": session_id}
                    cursor = base64.urlsafe_b64encode(json.dumps(payload).encode()).decode().rstrip("=")
            return super().transcript(principal, session_id, cursor, limit)

    return app_with_service(settings, Service)


# ---------------------------------------------------------------- lineage
@mutant("LIN-READ-001", select=("lineage.lineage_read",),
        description="Lineage ancestors are listed from the parent up to the root")
def ancestors_parent_first(settings: Settings) -> ASGIApp:
    class Service(TranscriptService):
        def lineage(self, principal: str, session_id: str) -> dict[str, Any]:
            read = super().lineage(principal, session_id)
            return {**read, "ancestors": read["ancestors"][::-1]}

    return app_with_service(settings, Service)


@mutant("LIN-READ-001", select=("lineage.lineage_read",),
        description="Each ancestor reports the inherited turn count of the edge above it instead of below it")
def ancestor_count_from_edge_above(settings: Settings) -> ASGIApp:
    class Service(TranscriptService):
        def lineage(self, principal: str, session_id: str) -> dict[str, Any]:
            read = super().lineage(principal, session_id)
            counts = [0] + [ancestor["inherited_turn_count"] for ancestor in read["ancestors"]]
            return {**read, "ancestors": [{**a, "inherited_turn_count": c} for a, c in zip(read["ancestors"], counts)]}

    return app_with_service(settings, Service)


@mutant("LIN-SUMMARY-001", select=("lineage.lineage_summary",),
        description="GET /sessions/{id} recomputes inherited_turn_count from the parent's current turn count")
def inherited_count_recomputed_on_read(settings: Settings) -> ASGIApp:
    class Service(SessionsService):
        def get_session(self, principal: str, session_id: str) -> dict[str, Any]:
            view = super().get_session(principal, session_id)
            lineage = view["lineage"]
            if lineage is None:
                return view
            with self.store.read() as tx:
                parent = tx.session(lineage["parent_session_id"])
            assert parent is not None
            above = parent.lineage.inherited_turn_count if parent.lineage else 0
            return {**view, "lineage": {**lineage, "inherited_turn_count": above + parent.turn_count}}

    return app_with_service(settings, Service)


# ---------------------------------------------------------------- diagnostics
@mutant("DIAG-HEADER-001", select=("diagnostics.header_on_every_response",),
        description="The round-trip header is only sent on successful responses")
def round_trips_missing_on_errors(settings: Settings) -> ASGIApp:
    def rewrite(scope: dict[str, Any], status: int, headers: Headers, body: bytes) -> tuple[int, Headers, bytes]:
        if status >= 400:
            headers = [(k, v) for k, v in headers if k.lower() != ROUND_TRIPS]
        return status, headers, body

    return rewrite_responses(reference_app(settings), rewrite)


@mutant("DIAG-HEADER-001", select=("diagnostics.header_on_every_response",), description="Storage-Round-Trips is an estimate, always 2, not a count.")
def constant_round_trip_header(settings: Settings) -> ASGIApp:
    """Storage-Round-Trips is an estimate, always 2, not a count (DIAG-HEADER-001)."""

    def rewrite(scope: dict[str, Any], status: int, headers: Headers, body: bytes) -> tuple[int, Headers, bytes]:
        return status, [(k, v) for k, v in headers if k.lower() != ROUND_TRIPS] + [(ROUND_TRIPS, b"2")], body

    return rewrite_responses(reference_app(settings), rewrite)


@mutant("DIAG-PAGE-COST-001", select=("diagnostics.page_cost_by_position",),
        description="Cursors are page numbers: page N is reached by re-reading the N pages before it")
def page_number_cursor_rereads_pages(settings: Settings) -> ASGIApp:
    class Service(TranscriptService):
        def transcript(self, principal: str, session_id: str, cursor: str | None, limit: int | None) -> Page:
            number = 0
            if cursor is not None:
                if not cursor.startswith("page-") or not cursor[5:].isdigit():
                    raise InvalidCursor("the cursor is not one this server issued")
                number = int(cursor[5:])
            position: str | None = None
            for _ in range(number):
                position = super().transcript(principal, session_id, position, limit).next_cursor
            page = super().transcript(principal, session_id, position, limit)
            return replace(page, next_cursor=f"page-{number + 1}")

    return app_with_service(settings, Service)


@mutant("DIAG-FORK-COST-001", "FORK-NO-COPY-001",
        select=("diagnostics.fork_cost_by_source_size", "fork.fork_creates_child"),
        description="A fork copies every inherited record into the child, one insert per record")
def fork_copies_records(settings: Settings) -> ASGIApp:
    class Tx(Transaction):
        def _inherited(self, row: dict[str, Any]) -> list[RecordRow]:
            if row["cutoff_session_id"] is None:
                return []
            segments = []
            for link in self.chain(row["parent_session_id"], max_hops=settings.limits.max_lineage_depth):
                sid = link.session.session_id
                if sid == row["cutoff_session_id"]:
                    segments.append(Segment(sid, -1, row["cutoff_record_index"]))
                    break
                if link.record_bound != -1:
                    segments.append(Segment(sid, -1, link.record_bound))
            return self.records(segments, 10**9)

        def insert_lineage(self, row: dict[str, Any]) -> None:
            copies = self._inherited(row)
            for index, record in enumerate(copies):
                self.conn.execute(insert(t.records).values(
                    record_id=new_id(), sid=sid_of(row["session_id"]), record_index=index,
                    turn_id=record.turn_id, turn_index=record.turn_index, record_type=record.record_type,
                    content=json.dumps(record.content), created_at=record.created_at,
                ).inline())
            self.conn.execute(update(t.sessions).where(t.sessions.c.session_id == row["session_id"]).values(record_count=len(copies)))
            super().insert_lineage({**row, "cutoff_session_id": None, "cutoff_turn_index": -1, "cutoff_record_index": -1})

    return app_with_transaction(settings, Tx)


@mutant("DIAG-FORK-COST-001", select=("diagnostics.fork_cost_by_source_size",), description="A fork reads the source's whole transcript before writing.")
def fork_reads_source_records(settings: Settings) -> ASGIApp:
    """A fork reads the source's whole transcript, ten records per query, before writing (DIAG-FORK-COST-001)."""

    class Service(ForkService):
        def _fork_in(self, tx: Transaction, principal: str, source_id: str, *args: Any) -> ForkOutcome:
            segments = _effective_segments(tx, self, principal, source_id)
            while segments:
                rows = tx.records(segments, 10)
                if len(rows) < 10:
                    break
                last = rows[-1]
                rank = next(n for n, s in enumerate(segments) if s.session_id == last.session_id)
                segments = [replace(segments[rank], after=last.record_index), *segments[rank + 1:]]
            return super()._fork_in(tx, principal, source_id, *args)

    return app_with_service(settings, Service)


@mutant("XS-CURSOR-SCOPE-001", select=("transcript.cursor_scope",),
        description="A cursor is bound to its session but not to the kind of read: a transcript cursor pages /records")
def cursor_not_bound_to_kind(settings: Settings) -> ASGIApp:
    def rebind(cursor: str | None, kind: str) -> str | None:
        if cursor is None:
            return None
        try:
            payload = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        except (binascii.Error, ValueError, UnicodeDecodeError) as exc:
            raise InvalidCursor("the cursor is not one this server issued") from exc
        if isinstance(payload, dict):
            payload = {**payload, "k": kind}
        return base64.urlsafe_b64encode(json.dumps(payload).encode()).decode().rstrip("=")

    class Service(TranscriptService):
        def transcript(self, principal: str, session_id: str, cursor: str | None, limit: int | None) -> Page:
            return super().transcript(principal, session_id, rebind(cursor, "transcript"), limit)

        def own_records(self, principal: str, session_id: str, cursor: str | None, limit: int | None) -> Page:
            return super().own_records(principal, session_id, rebind(cursor, "records"), limit)

    return app_with_service(settings, Service)


@mutant("XS-PAGE-EMPTY-001", select=("transcript.empty_page",),
        description="A page without records answers next_cursor null, so a poller has to start over")
def empty_page_drops_cursor(settings: Settings) -> ASGIApp:
    class Service(TranscriptService):
        @staticmethod
        def _page(kind: str, session_id: str, rows: list[Any], size: int, cursor: str | None) -> Page:
            page = TranscriptService._page(kind, session_id, rows, size, cursor)
            return page if page.records else replace(page, next_cursor=None)

    return app_with_service(settings, Service)


@mutant("XS-PAGE-EMPTY-001", select=("transcript.empty_page",),
        description="The first page of an empty session hands out a cursor instead of null")
def empty_first_page_invents_cursor(settings: Settings) -> ASGIApp:
    class Service(TranscriptService):
        @staticmethod
        def _page(kind: str, session_id: str, rows: list[Any], size: int, cursor: str | None) -> Page:
            page = TranscriptService._page(kind, session_id, rows, size, cursor)
            if page.next_cursor is None:
                return replace(page, next_cursor=cursors.encode(cursors.Position(kind, session_id, session_id, -1)))
            return page

    return app_with_service(settings, Service)


# ---------------------------------------------------------------- capabilities made normative in 1.1
@mutant("CAP-LIMITS-001", select=("capabilities.minimum_limits",),
        description="The server supports lineage only 4 deep, below the spec's minimum of 5")
def lineage_depth_below_minimum(settings: Settings) -> ASGIApp:
    return reference_app(replace(settings, limits=replace(settings.limits, max_lineage_depth=4)))


@mutant("CAP-LIMITS-001", select=("capabilities.minimum_limits",),
        description="max_request_bytes is too small to carry one record of max_record_bytes")
def request_limit_below_record_limit(settings: Settings) -> ASGIApp:
    return reference_app(replace(settings, limits=replace(settings.limits, max_request_bytes=65_536, max_record_bytes=65_536)))


@mutant("CAP-DOC-001", select=("capabilities.discovery_document",),
        description="writer-lease is advertised without max_lease_seconds")
def lease_limit_unadvertised(settings: Settings) -> ASGIApp:
    class Service(CapabilitiesService):
        def capabilities(self, spec_version: str) -> dict[str, Any]:
            document = super().capabilities(spec_version)
            document["limits"].pop("max_lease_seconds")
            return document

    return app_with_service(settings, Service)


@mutant("CAP-UNADVERTISED-001", select=("capabilities.unadvertised_operations",),
        description="writer-lease is not advertised, yet its operations still take leases")
def unadvertised_leases_still_served(settings: Settings) -> ASGIApp:
    class Service(CapabilitiesService):
        def capabilities(self, spec_version: str) -> dict[str, Any]:
            document = super().capabilities(spec_version)
            document["capabilities"].remove("writer-lease")
            document["limits"].pop("max_lease_seconds")
            return document

    return app_with_service(settings, Service)
