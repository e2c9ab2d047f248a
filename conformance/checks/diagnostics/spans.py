"""Chapter diagnostics, the round trips shown by spans (DIAG-SPANS-001) and the agreement of header and
spans (DIAG-COUNTS-AGREE-001): one set of answers of every kind, read through both sources."""

from __future__ import annotations

from conformance.client import Response
from conformance.context import CheckContext
from conformance.counts import (
    QUERY_COUNT,
    header_round_trips,
    request_spans,
    round_trips,
    sources,
)
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


# The answers of _storage_requests that must consult stored data: reads of a stored session (found or
# not), a fork that stores a child, a fork refused for a turn the source does not hold. Discovery and
# the request without credentials may make no round trip, and a server need not export server spans,
# so their traces may well hold nothing.
_CONSULT_STORAGE = (1, 2, 3, 4, 5, 6)
_ANONYMOUS = 7  # the request without credentials


@check("DIAG-SPANS-001", title="The caller's trace is continued, and each round trip is one database client span",
       needs=(TRACE_CAPABILITY,))
def spans_continue_the_trace(ctx: CheckContext) -> None:
    if "spans" not in sources(ctx.capabilities, ctx.config):
        raise NotVerified("the target's spans are observable only through the suite's OTLP receiver: run with --otlp-receiver [HOST:]PORT")
    responses = _storage_requests(ctx)
    counts: dict[str, int | None] = {}
    found: dict[int, int] = {}  # request number -> database client spans (round trips) in its trace
    unseen: list[str] = []
    for number, response in enumerate(responses):
        what = f"{response.exchange.method} {response.exchange.url}"
        try:
            found[number] = len(request_spans(ctx.config, response).round_trips)
        except NotVerified as exc:  # nothing of its trace arrived: no span of it can be judged
            unseen.append(str(exc))
        counts[what] = found.get(number)
    ctx.details["span_round_trips"] = counts
    if not found:
        raise NotVerified(f"no span of any of the {len(responses)} requests' traces reached the receiver: " + unseen[0])
    storage = [number for number in _CONSULT_STORAGE if number < len(responses)]
    # A server that answers reads of stored sessions and stores a fork asks its storage (a key lookup,
    # a query or a statement: DIAG-HEADER-001's definition), and each such round trip is a database
    # client span of the request's trace; how many each takes is the server's business.
    ctx.expect(
        sum(found.get(number, 0) for number in storage) >= 1,
        "reads of a stored session, its transcript and its lineage, a fork and two refusals that look up "
        "stored data exported no database client span (kind CLIENT, with db.system.name or db.system) "
        f"in the caller's traces, although their traces reached the receiver: {counts}",
    )


@check("DIAG-COUNTS-AGREE-001", title="Header and spans count the same round trips for every request",
       needs=(TRACE_CAPABILITY, QUERY_COUNT))  # the rule binds servers of both (a server of one: out of scope)
def header_and_spans_agree(ctx: CheckContext) -> None:
    if sources(ctx.capabilities, ctx.config) != ("header", "spans"):
        raise NotVerified("the spans are observable only through the suite's OTLP receiver: run with --otlp-receiver [HOST:]PORT")
    for response in _storage_requests(ctx):
        try:
            round_trips(ctx, response, require_spans=True)  # fails DIAG-COUNTS-AGREE-001, naming the request, when they differ
        except NotVerified:
            # No span of its trace arrived. With no round trip and no server span (which DIAG-SPANS-001
            # leaves optional) there is nothing to export: a header of 0 agrees. Otherwise unverified.
            if header_round_trips(response) != 0:
                raise
