"""Mutants named in the core slice: idempotency, cutoff, N+1 reads, depth, running turns, 500s."""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp

from reference_impl.services.fork import ForkOutcome, ForkService
from reference_impl.services.transcript import TranscriptService
from reference_impl.settings import Settings
from reference_impl.store import Transaction
from reference_impl.store.rows import ChainLink, Segment
from tests.mutants import app_with_layers, app_with_service, app_with_transaction, mutant, reference_app


@mutant("FORK-IDEMPOTENT-001", "FORK-IDEMPOTENT-CONCURRENT-001", description="Idempotency keys are ignored: every retry creates a new child")
def fork_not_idempotent(settings: Settings) -> ASGIApp:
    class Service(ForkService):
        def fork(self, principal: str, source_id: str, body: dict[str, Any], idempotency_key: str | None) -> ForkOutcome:
            return super().fork(principal, source_id, body, None)

    return app_with_service(settings, Service)


# The state machine catches these too (tests/test_layers.py); the quick set runs the direct checks.
@mutant("FORK-SNAPSHOT-001", "XS-EFFECTIVE-001", description="The cutoff is ignored on read: later parent records leak into the child",
        select=("fork.snapshot_isolation", "transcript.effective_order_depth_5", "vectors"))
def cutoff_ignored(settings: Settings) -> ASGIApp:
    class Tx(Transaction):
        def records(self, segments: Any, limit: int) -> Any:
            return super().records([Segment(s.session_id, s.after, None) for s in segments], limit)

    class Service(TranscriptService):
        @staticmethod
        def _require_complete(*args: Any) -> None:
            return None  # a naive server trusts whatever the records query returns

    return app_with_layers(settings, Service, transaction_class=Tx)


@mutant("DIAG-DEPTH-001", description="The lineage chain is read one ancestor per query (N+1)")
def one_query_per_ancestor(settings: Settings) -> ASGIApp:
    class Tx(Transaction):
        def chain(self, session_id: str, max_hops: int, viewer: str | None = None) -> list[ChainLink]:
            links = super().chain(session_id, max_hops, viewer)
            for link in links[:-1]:
                self.session(link.session.session_id)  # the per-ancestor lookups a naive reader makes
            return links

    return app_with_transaction(settings, Tx)


@mutant("FORK-DEPTH-001", description="The maximum lineage depth is not enforced")
def depth_not_enforced(settings: Settings) -> ASGIApp:
    class Service(ForkService):
        def _fork_in(self, tx: Transaction, *args: Any) -> ForkOutcome:
            limits = self.limits
            object.__setattr__(limits, "max_lineage_depth", 10**6)
            try:
                return super()._fork_in(tx, *args)
            finally:
                object.__setattr__(limits, "max_lineage_depth", settings.limits.max_lineage_depth)

    return app_with_service(settings, Service)


@mutant("FORK-CUT-LATEST-001", description="A latest cut includes the running turn and its records",
        select=("fork.cut_latest", "vectors.snapshots"))
def running_turn_inherited(settings: Settings) -> ASGIApp:
    class Tx(Transaction):
        def last_finished_turn(self, session_id: str, turn_ranges: Any = None) -> Any:
            from reference_impl.store import tables as t
            from reference_impl.store.common import TURN_SELECT, TURNS_WITH_SESSION
            from sqlalchemy import select

            row = self.conn.execute(
                select(*TURN_SELECT).select_from(TURNS_WITH_SESSION).where(t.sessions.c.session_id == session_id)
                .order_by(t.turns.c.turn_index.desc()).limit(1)
            ).mappings().first()
            if row is None:
                return None
            from reference_impl.store.common import turn_from

            fields = dict(row)
            if fields["end_record_index"] is None:
                session = self.session(session_id)
                fields["end_record_index"] = session.record_count if session else 0
            return turn_from(fields)

    return app_with_transaction(settings, Tx)


@mutant("ERR-MALFORMED-001", "ERR-NO-5XX-001", description="Malformed JSON crashes the handler with a 500", select=("ERR-MALFORMED-001",))
def crash_on_malformed_json(settings: Settings) -> ASGIApp:
    app = reference_app(settings)

    async def crashing(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            body = b""
            more = True
            messages = []
            while more:
                message = await receive()
                messages.append(message)
                body += message.get("body", b"")
                more = message.get("more_body", False)
            try:
                json.loads(body or b"null")
            except ValueError:
                await send({"type": "http.response.start", "status": 500, "headers": [(b"content-type", b"text/plain")]})
                await send({"type": "http.response.body", "body": b"Internal Server Error"})
                return
            replay = iter(messages)

            async def again() -> dict[str, Any]:
                return next(replay, {"type": "http.disconnect"})

            await app(scope, again, send)
            return
        await app(scope, receive, send)

    return crashing


