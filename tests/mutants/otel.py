"""Mutants that only traces can judge (issue 21): the reference exporting its spans, broken where
the header cannot show it or where the spans cannot be found.

They are their own registry, not `MUTANTS`: each needs the suite's OTLP receiver, so
tests/test_otel_mutants.py runs them with one (tests/test_mutants.py runs every mutant without);
`OTEL_CATCHES` names the requirements they prove checkable.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace

from opentelemetry import context as otel_context
from sqlalchemy import select
from starlette.applications import Starlette
from starlette.types import ASGIApp, Receive, Scope, Send

from conformance import otlp
from conformance.config import load
from conformance.embedded import free_port
from reference_impl import diagnostics
from reference_impl.http.app import build_app
from reference_impl.services import build_services
from reference_impl.settings import Settings
from reference_impl.store import Transaction
from reference_impl.store import tables as t
from reference_impl.store.rows import ChainLink
from reference_impl.telemetry import instrument
from tests.mutants import open_store

TRACE_HEADERS = (b"traceparent", b"tracestate")


def traced_app(
    settings: Settings, transaction_class: type[Transaction] = Transaction, inner: type | None = None
) -> tuple[Starlette, Callable[[], None]]:
    """The reference app (store transactions replaced, if asked; `inner` middleware inside the
    server span) exporting its spans to `settings.otlp_endpoint`, as `create_app` does; and its
    flush-and-stop call."""
    store = open_store(settings, transaction_class)
    app = build_app(build_services(store, settings), settings)
    if inner is not None:
        app.add_middleware(inner)
    return app, instrument(app, [store.engine], settings.otlp_endpoint or "")


class OutsideTheTrace:
    """Runs the request's work in an empty trace context: its statements start traces of their own."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        token = otel_context.attach(otel_context.Context())
        try:
            await self.app(scope, receive, send)
        finally:
            otel_context.detach(token)


def database_spans_outside_the_request_trace(settings: Settings) -> tuple[ASGIApp, Callable[[], None]]:
    """The server span continues the caller's trace; the statements' client spans are in other traces."""
    return traced_app(settings, inner=OutsideTheTrace)


class HiddenAncestorReads(Transaction):
    """Reads a lineage chain, then each ancestor's session row once more: one statement per
    ancestor that `Storage-Round-Trips` leaves out."""

    def chain(self, session_id: str, max_hops: int, viewer: str | None = None) -> list[ChainLink]:
        chain = super().chain(session_id, max_hops, viewer)
        for link in chain[:-1]:
            self.conn.execute(select(t.sessions.c.session_id).where(t.sessions.c.session_id == link.session.session_id)).first()
            counter = diagnostics._current.get()  # the request's header count, lowered by the statement just sent
            if counter is not None:
                counter.statements -= 1
        return chain


def header_hides_ancestor_reads(settings: Settings) -> tuple[ASGIApp, Callable[[], None]]:
    """Every read through the lineage costs one more round trip per ancestor than its header says."""
    return traced_app(settings, HiddenAncestorReads)


def _fresh_trace_per_request(settings: Settings) -> tuple[ASGIApp, Callable[[], None]]:
    """Exports its spans, but drops the caller's `traceparent` first: each request starts a trace of its own."""
    app, stop = traced_app(settings)

    async def without_trace_context(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            scope = {**scope, "headers": [(k, v) for k, v in scope["headers"] if k.lower() not in TRACE_HEADERS]}
        await app(scope, receive, send)

    return without_trace_context, stop


def trace_not_continued(settings: Settings) -> tuple[ASGIApp, Callable[[], None]]:
    """Spans in a fresh trace per request, and `Storage-Round-Trips` as the reference sends it."""
    return _fresh_trace_per_request(settings)


def trace_not_continued_without_header(settings: Settings) -> tuple[ASGIApp, Callable[[], None]]:
    """Spans in a fresh trace per request, and no `Storage-Round-Trips` header (nor its capability)."""
    return _fresh_trace_per_request(
        replace(settings, disabled_capabilities=settings.disabled_capabilities | {"diagnostics.query-count"})
    )


# The requirements each traced mutant must fail (the others must never pass a cost rule from spans).
OTEL_CATCHES: dict[str, tuple[str, ...]] = {
    "header_hides_ancestor_reads": ("DIAG-COUNTS-AGREE-001",),
    "database_spans_outside_the_request_trace": ("DIAG-SPANS-001",),
}
OTEL_MUTANTS: dict[str, Callable[[Settings], tuple[ASGIApp, Callable[[], None]]]] = {
    build.__name__: build
    for build in (
        header_hides_ancestor_reads, trace_not_continued, trace_not_continued_without_header,
        database_spans_outside_the_request_trace,
    )
}


@contextmanager
def receiver() -> Iterator[tuple[str, str]]:
    """The suite's OTLP receiver on a free port, for one test: (the `otlp_receiver` setting, the
    URL a server exports to)."""
    setting = f"127.0.0.1:{free_port()}"
    config = load(overrides={"otlp_receiver": setting, "target": "http://127.0.0.1:9", "tokens": ["a", "b"]}, environ={})
    otlp.start(config)
    try:
        yield setting, otlp.receiver_url(config) or ""
    finally:
        otlp.stop(config)


__all__ = ["OTEL_CATCHES", "OTEL_MUTANTS", "receiver", "traced_app"]
