"""Mutants: the diagnostics headers (round trips by depth, stored items written, copying forks,
stored records examined)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from sqlalchemy import (
    Column,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    and_,
    cast,
    func,
    insert,
    literal,
    or_,
    select,
)
from starlette.types import ASGIApp

from reference_impl.services.fork import ForkOutcome, ForkService
from reference_impl.services.sessions import SessionsService
from reference_impl.services.transcript import Page, TranscriptService
from reference_impl.settings import Settings
from reference_impl.store import Transaction
from reference_impl.store import tables as t
from reference_impl.store.common import sid_of
from reference_impl.store.engine import make_engine
from reference_impl.store.rows import RecordRow, Segment
from reference_impl.store.transcript import _records_sql
from tests.mutants import (
    app_with_layers,
    app_with_service,
    app_with_transaction,
    mutant,
    reference_app,
    rewrite_responses,
)

ITEMS_WRITTEN = b"storage-items-written"
BYTES_WRITTEN = b"storage-bytes-written"
RECORDS_EXAMINED = b"storage-records-examined"
Headers = list[tuple[bytes, bytes]]


# ---------------------------------------------------------------- DIAG-DEPTH-001
@mutant("DIAG-DEPTH-001", select=("diagnostics.transcript_cost_by_depth",),
        description="A transcript page costs 4 round trips at every depth: equal across depths, over the bound of 2")
def transcript_page_four_round_trips(settings: Settings) -> ASGIApp:
    class Service(TranscriptService):
        def transcript(self, principal: str, session_id: str, cursor: str | None, limit: int | None) -> Page:
            with self.store.read() as tx:  # a session lookup and a turn count before the page: 2 more
                tx.session(session_id)
                tx.last_finished_turn(session_id)
            return super().transcript(principal, session_id, cursor, limit)

    return app_with_service(settings, Service)


@mutant("DIAG-DEPTH-001", select=("diagnostics.transcript_cost_by_depth",),
        description="GET /sessions/{id} reads the session, then its lineage row in a second statement")
def session_read_two_round_trips(settings: Settings) -> ASGIApp:
    class Service(SessionsService):
        def get_session(self, principal: str, session_id: str) -> dict[str, Any]:
            with self.store.read() as tx:
                tx.conn.execute(select(t.session_lineage).where(t.session_lineage.c.session_id == session_id)).first()
            return super().get_session(principal, session_id)

    return app_with_service(settings, Service)


# ---------------------------------------------------------------- DIAG-WRITES-001
@mutant("DIAG-WRITES-001", select=("diagnostics.items_written_on_every_response",),
        description="Storage-Items-Written is only sent on successful responses")
def items_written_missing_on_errors(settings: Settings) -> ASGIApp:
    def rewrite(scope: dict[str, Any], status: int, headers: Headers, body: bytes) -> tuple[int, Headers, bytes]:
        if status >= 400:
            headers = [(k, v) for k, v in headers if k.lower() != ITEMS_WRITTEN]
        return status, headers, body

    return rewrite_responses(reference_app(settings), rewrite)


@mutant("DIAG-WRITES-001", select=("diagnostics.items_written_on_every_response",),
        description="Storage-Items-Written is an estimate: 2 for every POST or DELETE, 0 for every read")
def items_written_estimated(settings: Settings) -> ASGIApp:
    def rewrite(scope: dict[str, Any], status: int, headers: Headers, body: bytes) -> tuple[int, Headers, bytes]:
        estimate = b"0" if scope["method"] == "GET" else b"2"
        return status, [(k, v) for k, v in headers if k.lower() != ITEMS_WRITTEN] + [(ITEMS_WRITTEN, estimate)], body

    return rewrite_responses(reference_app(settings), rewrite)


# ---------------------------------------------------------------- DIAG-BYTES-001
@mutant("DIAG-BYTES-001", select=("diagnostics.items_written_on_every_response",),
        description="Storage-Bytes-Written counts the bytes of the request body: a refused POST reports what it was sent")
def bytes_written_from_the_request(settings: Settings) -> ASGIApp:
    def rewrite(scope: dict[str, Any], status: int, headers: Headers, body: bytes) -> tuple[int, Headers, bytes]:
        sent = dict(scope.get("headers") or []).get(b"content-length", b"0")
        return status, [(k, v) for k, v in headers if k.lower() != BYTES_WRITTEN] + [(BYTES_WRITTEN, sent or b"0")], body

    return rewrite_responses(reference_app(settings), rewrite)


# ---------------------------------------------------------------- DIAG-FORK-WRITES-001
CHECKPOINTS = MetaData()
# What a checkpointing store keeps per fork: a full copy of the state the child inherits.
fork_checkpoints = Table(
    "fork_checkpoints",
    CHECKPOINTS,
    Column("child_session_id", String(128), primary_key=True),
    Column("record_id", String(64), primary_key=True),
    Column("session_id", String(128), nullable=False),
    Column("record_index", Integer, nullable=False),
    Column("content", Text, nullable=False),
)


# A record's session id and its id: records hold their session's integer key, and the ids the
# reference derives from the session's token are not stored (reference_impl/store/tables.py, ids.py).
_RECORD_SESSION_ID = select(t.sessions.c.session_id).where(t.sessions.c.sid == t.records.c.sid).scalar_subquery()
_RECORD_ID = func.coalesce(
    t.records.c.record_id,
    select(t.sessions.c.token).where(t.sessions.c.sid == t.records.c.sid).scalar_subquery()
    + "r" + cast(t.records.c.record_index, String),
)


def _inherited_record_bounds(tx: Transaction, child_id: str, max_depth: int) -> list[Any]:
    """The WHERE terms selecting every record a new child inherits, one per ancestor with records."""
    return [
        and_(t.records.c.sid == sid_of(link.session.session_id), t.records.c.record_index <= link.record_bound)
        for link in tx.chain(child_id, max_depth)
        if link.record_bound not in (-1, None)
    ]


def copying_after_each_fork(settings: Settings, copy: Callable[[Transaction, str, int], None]) -> ASGIApp:
    """The reference, where every new fork (not a replay) also runs `copy(tx, child id, max depth)`
    in its own transaction: what a copying store adds to a fork."""

    class Service(ForkService):
        def _fork_in(self, tx: Transaction, *args: Any) -> ForkOutcome:
            outcome = super()._fork_in(tx, *args)
            if not outcome.replayed:
                copy(tx, outcome.body["session"]["session_id"], self.limits.max_lineage_depth)
            return outcome

    return app_with_layers(settings, Service)


@mutant("DIAG-FORK-WRITES-001", select=("diagnostics.fork_writes_by_source_size",),
        description="A fork copies every inherited record into a checkpoint of the child, keeping record ids and "
                    "provenance, in one INSERT ... SELECT: ids unchanged and round trips flat, writes grow with the source")
def fork_copies_inherited_records_keeping_ids(settings: Settings) -> ASGIApp:
    engine = make_engine(settings.database_url)
    CHECKPOINTS.create_all(engine)
    engine.dispose()

    def copy(tx: Transaction, child_id: str, max_depth: int) -> None:
        bounds = _inherited_record_bounds(tx, child_id, max_depth)
        if bounds:
            copied = select(
                literal(child_id), _RECORD_ID, _RECORD_SESSION_ID,
                t.records.c.record_index, t.records.c.content,
            ).where(or_(*bounds))
            tx.conn.execute(
                insert(fork_checkpoints).from_select(
                    ["child_session_id", "record_id", "session_id", "record_index", "content"], copied
                )
            )

    return copying_after_each_fork(settings, copy)


# ---------------------------------------------------------------- DIAG-FORK-WRITES-002
# What a checkpointing store keeps per fork: one item, the whole state the child inherits.
fork_states = Table(
    "fork_states",
    CHECKPOINTS,
    Column("child_session_id", String(128), primary_key=True),
    Column("state", Text, nullable=False),
)


def _checkpointing_fork(settings: Settings) -> ASGIApp:
    """Every fork also stores one checkpoint item holding a full copy of what the child inherits
    (record ids, provenance and contents): ids kept, one more stored item whatever the source, and
    the bytes it wrote (honestly counted from the bound values) grow with the source."""
    engine = make_engine(settings.database_url)
    CHECKPOINTS.create_all(engine)
    engine.dispose()

    def copy(tx: Transaction, child_id: str, max_depth: int) -> None:
        bounds = _inherited_record_bounds(tx, child_id, max_depth)
        state = []
        if bounds:
            rows = tx.conn.execute(
                select(_RECORD_ID, _RECORD_SESSION_ID, t.records.c.record_index, t.records.c.content)
                .where(or_(*bounds))
            ).all()
            state = [list(row) for row in rows]
        tx.conn.execute(insert(fork_states).values(child_session_id=child_id, state=json.dumps(state, default=str)))

    return copying_after_each_fork(settings, copy)


@mutant("DIAG-FORK-WRITES-002", "FORK-NO-COPY-001",
        select=("diagnostics.fork_writes_by_source_size", "fork.fork_stores_no_copy"),
        description="A fork stores one checkpoint of the whole inherited state (ids kept): the same stored items "
                    "whatever the source, honest Storage-Bytes-Written growing with it")
def fork_checkpoints_whole_state(settings: Settings) -> ASGIApp:
    return _checkpointing_fork(settings)


def without_diagnostics(settings: Settings) -> Settings:
    """The settings of a server that advertises no diagnostics capability: what storage does is unseen."""
    return replace(settings, query_count_diagnostics=False, write_count_diagnostics=False,
                   records_examined_diagnostics=False)


def fork_checkpoints_whole_state_without_diagnostics(settings: Settings) -> ASGIApp:
    """The same copying server advertising no diagnostics: nothing the API shows tells the copy
    apart, so FORK-NO-COPY-001 is not verified (tests/test_no_copy.py); not a mutant, since no
    requirement can fail."""
    return _checkpointing_fork(without_diagnostics(settings))


# ---------------------------------------------------------------- DIAG-RECORDS-001
@mutant("DIAG-RECORDS-001", select=("diagnostics.records_examined_on_every_response",),
        description="Storage-Records-Examined is only sent on successful responses")
def records_examined_missing_on_errors(settings: Settings) -> ASGIApp:
    def rewrite(scope: dict[str, Any], status: int, headers: Headers, body: bytes) -> tuple[int, Headers, bytes]:
        if status >= 400:
            headers = [(k, v) for k, v in headers if k.lower() != RECORDS_EXAMINED]
        return status, headers, body

    return rewrite_responses(reference_app(settings), rewrite)


@mutant("DIAG-RECORDS-001", select=("diagnostics.records_examined_on_every_response",),
        description="Storage-Records-Examined is an estimate: 0 on every answer")
def records_examined_always_zero(settings: Settings) -> ASGIApp:
    def rewrite(scope: dict[str, Any], status: int, headers: Headers, body: bytes) -> tuple[int, Headers, bytes]:
        return status, [(k, v) for k, v in headers if k.lower() != RECORDS_EXAMINED] + [(RECORDS_EXAMINED, b"0")], body

    return rewrite_responses(reference_app(settings), rewrite)


# ---------------------------------------------------------------- DIAG-RECORDS-PAGE-001
@mutant("DIAG-RECORDS-PAGE-001", select=("diagnostics.records_examined_by_depth",),
        description="The 1.1 records query: every segment's branch reads up to the page size + 1, whether the page "
                    "reaches it or not, and the rows beyond the page are dropped after reading (still one statement)")
def page_reads_every_segment(settings: Settings) -> ASGIApp:
    class Tx(Transaction):
        def records(self, segments: Sequence[Segment], limit: int) -> list[RecordRow]:
            if not segments:
                return []
            params: dict[str, Any] = {}
            for n, segment in enumerate(segments):
                params[f"s{n}"], params[f"a{n}"], params[f"l{n}"] = segment.session_id, segment.after, limit
                if segment.upto is not None:
                    params[f"u{n}"] = segment.upto
            query = _records_sql(tuple(segment.upto is not None for segment in segments))
            return self.read_records(query, params)[:limit]

    return app_with_transaction(settings, Tx)
