"""Chapter diagnostics, the round trips shown by spans (DIAG-SPANS-001) and the agreement of header and
spans (DIAG-COUNTS-AGREE-001): one set of answers of every kind, read through both sources."""

from __future__ import annotations

from conformance.client import Response, describe
from conformance.context import CheckContext
from conformance.counts import QUERY_COUNT, request_spans, round_trips, sources
from conformance.errors import NotVerified
from conformance.otlp import TRACE_CAPABILITY
from conformance.registry import check


def _storage_requests(ctx: CheckContext) -> list[Response]:
    """Answers of every kind: discovery, two reads that touch storage, the lineage, a fork, refusals
    (not found, a fork through a missing turn) and, last, a request without credentials."""
    source, _, _ = ctx.conversation(1)
    sid = source["session_id"]
    return [
        ctx.alice.get("/capabilities"),
        ctx.alice.get(f"/sessions/{sid}"),
        ctx.alice.get(f"/sessions/{sid}/transcript"),
        ctx.alice.get(f"/sessions/{sid}/lineage"),
        ctx.fork(sid, {"mode": "latest"}),
        ctx.alice.get(f"/sessions/{ctx.new_id('missing')}"),
        ctx.fork(sid, {"mode": "through", "turn_id": ctx.new_id("missing")}),
        ctx.anonymous.get(f"/sessions/{sid}"),
    ]


@check("DIAG-SPANS-001", title="The caller's trace is continued, and each round trip is one database client span",
       needs=(TRACE_CAPABILITY,))
def spans_continue_the_trace(ctx: CheckContext) -> None:
    if "spans" not in sources(ctx.capabilities, ctx.config):
        raise NotVerified("the target's spans are observable only through the suite's OTLP receiver: run with --otlp-receiver [HOST:]PORT")
    responses = _storage_requests(ctx)
    traces = [request_spans(ctx.config, response) for response in responses]
    for response, trace in zip(responses, traces):
        trace_id, span_id = response.trace or ("", "")
        server = trace.server_span(span_id)
        ctx.expect(
            server is not None or bool(trace.round_trips),
            f"{describe(response.exchange)}: its trace {trace_id} holds neither a server span that continues the "
            f"suite's span {span_id} nor a database client span",
        )
    counts = {f"{r.exchange.method} {r.exchange.url}": len(t.round_trips) for r, t in zip(responses, traces)}
    ctx.details["span_round_trips"] = counts
    reads = [len(traces[n].round_trips) for n in (1, 2)]
    ctx.expect(
        all(count >= 1 for count in reads),
        f"a session read and a transcript read, which touch storage, exported {reads} database client spans: "
        f"every round trip is one span ({counts})",
    )


@check("DIAG-COUNTS-AGREE-001", title="Header and spans count the same round trips for every request",
       needs=(TRACE_CAPABILITY, QUERY_COUNT))  # the rule binds servers of both (a server of one: out of scope)
def header_and_spans_agree(ctx: CheckContext) -> None:
    if sources(ctx.capabilities, ctx.config) != ("header", "spans"):
        raise NotVerified("the spans are observable only through the suite's OTLP receiver: run with --otlp-receiver [HOST:]PORT")
    for response in _storage_requests(ctx):
        round_trips(ctx, response, require_spans=True)  # fails DIAG-COUNTS-AGREE-001, naming the request, when they differ
