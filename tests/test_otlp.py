"""The suite's OTLP receiver and its round-trip counts (issue 21): spans grouped by trace, database
client spans counted less transaction control, a bounded wait, not verified when no trace arrives,
a failure of DIAG-COUNTS-AGREE-001 when header and spans differ, and a fresh W3C traceparent on
every request the suite sends. Spans are built with opentelemetry-proto and posted here, as an
exporter would."""

from __future__ import annotations

import gzip
import re
import secrets
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

import spec
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest, ExportTraceServiceResponse
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from conformance import SUITE_VERSION, counts, otlp
from conformance.client import ApiClient, Recorder
from conformance.config import load
from conformance.errors import CheckFailed, NotVerified
from conformance.preflight import ITEM_NAMES, run_preflight
from conformance.response import Response
from conformance.results import Exchange

TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-01$")
CLIENT, SERVER, INTERNAL = Span.SPAN_KIND_CLIENT, Span.SPAN_KIND_SERVER, Span.SPAN_KIND_INTERNAL


def span(trace: str, parent: str, kind: int, name: str, **attributes: str) -> Span:
    """One span of `trace` (hex), a child of `parent` (hex), with string attributes (dots as `__`)."""
    item = Span(trace_id=bytes.fromhex(trace), span_id=secrets.token_bytes(8), parent_span_id=bytes.fromhex(parent), kind=kind, name=name)
    item.attributes.extend(KeyValue(key=key.replace("__", "."), value=AnyValue(string_value=value)) for key, value in attributes.items())
    return item


def export(receiver: otlp.Receiver, spans: list[Span], compress: bool = False) -> httpx.Response:
    body = ExportTraceServiceRequest(resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=spans)])]).SerializeToString()
    headers = {"Content-Type": "application/x-protobuf"}
    if compress:
        body, headers["Content-Encoding"] = gzip.compress(body), "gzip"
    return httpx.post(receiver.url, content=body, headers=headers)


def request_spans(trace: str, parent: str) -> list[Span]:
    """What an instrumented server exports for one request: a server span, two statements, transaction
    control in every form the definition names, an internal span and a client span that is no statement."""
    server = "00000000000000aa"
    return [
        span(trace, server, CLIENT, "BEGIN", db__system="sqlite", db__statement="BEGIN (implicit)"),
        span(trace, server, CLIENT, "SELECT app", db__system__name="postgresql", db__query__text="/* app */ SELECT * FROM sessions"),
        span(trace, server, CLIENT, "WITH app", db__system="sqlite", db__statement="WITH RECURSIVE chain AS (SELECT 1) SELECT * FROM chain"),
        span(trace, server, CLIENT, "app", db__system="postgresql", db__operation__name="COMMIT"),
        span(trace, server, CLIENT, "SAVEPOINT sa_1", db__system="postgresql", db__operation="SAVEPOINT"),
        span(trace, server, CLIENT, "START", db__system="mysql", db__statement="start transaction"),
        span(trace, server, CLIENT, "GET", http__request__method="GET"),  # no db.system: another service
        span(trace, server, INTERNAL, "SELECT", db__system="sqlite"),  # not a client span
        Span(trace_id=bytes.fromhex(trace), span_id=bytes.fromhex(server), parent_span_id=bytes.fromhex(parent), kind=SERVER, name="GET /sessions/{id}"),
    ]


@pytest.fixture
def receiver() -> Any:
    config = load(overrides={"target": "http://127.0.0.1:9", "tokens": ["a", "b"], "otlp_receiver": "127.0.0.1:0"}, environ={})
    started = otlp.start(config)
    yield started
    otlp.stop(config)


@pytest.mark.parametrize("compress", [False, True])
def test_spans_are_grouped_by_trace_and_counted_without_transaction_control(receiver: otlp.Receiver, compress: bool) -> None:
    mine, other, parent = secrets.token_hex(16), secrets.token_hex(16), "00000000000000bb"
    answer = export(receiver, [*request_spans(mine, parent), span(other, "0" * 16, CLIENT, "SELECT", db__system="sqlite")], compress)
    assert answer.status_code == 200
    assert ExportTraceServiceResponse.FromString(answer.content) == ExportTraceServiceResponse()
    trace = receiver.trace(mine, parent, wait_s=2)
    assert trace is not None and trace.server_span(parent) is not None
    assert [s.name for s in trace.round_trips] == ["SELECT app", "WITH app"]
    assert trace.round_trips[0].label() == "SELECT app: /* app */ SELECT * FROM sessions"
    assert len(receiver.trace(other, parent, wait_s=0.2).round_trips) == 1  # no server span: the quiet period ends it


def test_the_receiver_refuses_what_is_not_an_otlp_protobuf_export(receiver: otlp.Receiver) -> None:
    assert httpx.post(receiver.url, content=b"\xff\xff", headers={"Content-Type": "application/x-protobuf"}).status_code == 400
    assert httpx.post(receiver.url, json={}).status_code == 415
    assert httpx.post(receiver.url.replace("/v1/traces", "/v1/logs"), content=b"").status_code == 404


def test_the_wait_is_bounded_and_ends_when_the_server_span_arrives(receiver: otlp.Receiver) -> None:
    trace_id, parent = secrets.token_hex(16), "00000000000000cc"
    late = threading.Timer(0.3, lambda: export(receiver, request_spans(trace_id, parent)))
    late.start()
    started = time.monotonic()
    trace = receiver.trace(trace_id, parent, wait_s=60, quiet_s=30)
    assert trace is not None and len(trace.round_trips) == 2
    assert 0.25 <= time.monotonic() - started < 30  # ended by the server span, not by the quiet period
    started = time.monotonic()
    assert receiver.trace(secrets.token_hex(16), parent, wait_s=0.4) is None  # never arrives: None once the bound passes
    assert 0.35 <= time.monotonic() - started < 30
    late.join()


@dataclass
class FakeRun:
    """What counts.round_trips reads of a check's context."""

    config: Any
    capabilities: dict[str, Any]
    details: dict[str, Any] = field(default_factory=dict)


def answered(trace_id: str, parent: str, header: int | None = None) -> Response:
    headers = {"Storage-Round-Trips": str(header)} if header is not None else {}
    exchange = Exchange("GET", "http://target/sessions/s-1/transcript", {"traceparent": f"00-{trace_id}-{parent}-01"}, None, 200, headers, b"{}")
    return Response(exchange)


def run_with(receiver: otlp.Receiver, *capabilities: str) -> FakeRun:
    port = receiver.url.split(":")[2].split("/")[0]
    config = load(overrides={"target": "http://target", "tokens": ["a", "b"], "otlp_receiver": f"127.0.0.1:{port}", "otlp_wait": 0.5}, environ={})
    return FakeRun(config, {"capabilities": list(capabilities)})


def test_a_request_whose_trace_never_arrives_is_not_verified(receiver: otlp.Receiver) -> None:
    run = run_with(receiver, otlp.TRACE_CAPABILITY)
    never, internal = secrets.token_hex(16), secrets.token_hex(16)
    with pytest.raises(NotVerified, match=f"GET http://target/sessions/s-1/transcript: no span of its trace {never}"):
        counts.round_trips(run, answered(never, "00000000000000dd"))
    export(receiver, [span(internal, "0" * 16, INTERNAL, "handler")])  # arrives, but shows nothing countable
    with pytest.raises(NotVerified, match="no server span for the suite's request and no database client span"):
        counts.round_trips(run, answered(internal, "00000000000000dd"))
    assert counts.sources(run.capabilities, load(overrides={"target": "http://t", "tokens": ["a", "b"]}, environ={})) == ()


def test_spans_count_and_agree_with_the_header_or_fail_the_agreement_rule(receiver: otlp.Receiver) -> None:
    parent = "00000000000000ee"
    agreeing, hiding = secrets.token_hex(16), secrets.token_hex(16)
    export(receiver, request_spans(agreeing, parent) + request_spans(hiding, parent))
    spans_only = run_with(receiver, otlp.TRACE_CAPABILITY)
    assert counts.round_trips(spans_only, answered(agreeing, parent)) == 2
    assert spans_only.details[counts.DETAILS_KEY][0]["source"] == "spans"
    both = run_with(receiver, otlp.TRACE_CAPABILITY, counts.QUERY_COUNT)
    assert counts.round_trips(both, answered(agreeing, parent, header=2)) == 2
    with pytest.raises(CheckFailed) as failure:
        counts.round_trips(both, answered(hiding, parent, header=3))
    assert failure.value.requirements == [counts.AGREEMENT]
    assert "Storage-Round-Trips: 3" in failure.value.message and "2 database round trip span(s)" in failure.value.message
    assert "SELECT app: /* app */ SELECT * FROM sessions" in failure.value.message
    assert [e["source"] for e in both.details[counts.DETAILS_KEY]] == ["both", "both"]


def test_every_request_the_suite_sends_carries_a_fresh_valid_traceparent() -> None:
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["traceparent"])
        retry = request.url.path == "/busy" and len(seen) == 1
        return httpx.Response(503, headers={"Retry-After": "0"}) if retry else httpx.Response(200, json={})

    client = ApiClient("http://target", "token", "principal-1", Recorder())
    client._http = httpx.MockTransport(answer)
    responses = [client.get("/busy", validate_response=False)]  # retried after its 503: a new trace per attempt
    responses += [client.request(method, "/sessions", validate_response=False) for method in ("GET", "POST", "DELETE") * 5]
    assert all(TRACEPARENT.match(value) for value in seen), seen
    assert len(set(seen)) == len(seen) == 17
    assert len({value.split("-")[1] for value in seen}) == 17  # a fresh trace id each time, not only a span id
    assert [r.trace for r in responses] == [TRACEPARENT.match(v).groups() for v in seen[1:]]


def test_preflight_stops_when_the_receiver_port_cannot_be_bound() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        config = load(overrides={"target": "http://127.0.0.1:9", "tokens": ["a", "b"], "otlp_receiver": str(taken),
                                 "skip_preflight": [name for name in ITEM_NAMES if name != "counts"]}, environ={})
        state = run_preflight(config)
    [item] = [item for item in state.items if item.name == "counts"]
    assert item.status == "failed" and f"cannot listen on {taken}" in item.message, item
    assert not state.ok


def test_reports_show_the_counts_their_source_and_the_spans_of_the_offending_request() -> None:
    import io

    from conformance.reports import make_console, render_console
    from conformance.reports.html_report import render_html
    from conformance.results import CheckResult, Outcome
    from tests.test_not_verified import _run

    def entry(depth: int, spans: int, trace: str) -> dict[str, Any]:
        names = [f"SELECT db: SELECT {'x' * 100} FROM t{n}"[:79] + "…" for n in range(spans)]
        return {"request": f"GET http://target/s-{depth}/transcript", "what": f"depth {depth} transcript page", "source": "spans",
                "trace_id": trace, "spans": spans, "span_names": names}

    failing = Exchange("GET", "http://target/s-5/transcript", {"traceparent": f"00-{'b' * 32}-{'c' * 16}-01"}, None, 200, {}, b"{}")
    check = CheckResult("diagnostics.transcript_cost_by_depth", "cost", "diagnostics", ["DIAG-DEPTH-001"], Outcome.FAIL,
                        "a transcript page cost more than 2 round trips", ["DIAG-DEPTH-001"], exchange=failing,
                        details={counts.DETAILS_KEY: [entry(0, 2, "a" * 32), entry(5, 6, "b" * 32), entry(1, 2, "d" * 32)]})
    result = _run(strict=False)
    result.checks.append(check)
    buffer = io.StringIO()
    render_console(result, make_console(buffer))
    text = buffer.getvalue()
    assert "round trips from spans: depth 0 transcript page 2 · depth 5 transcript page 6 · depth 1 transcript page 2" in text
    assert "offending request: GET http://target/s-5/transcript (depth 5 transcript page): 6 round trips; spans: SELECT db: SELECT xx" in text
    html = render_html(result)
    assert "round trips from spans (3 requests counted)" in html and "depth 5 transcript page" in html and "SELECT db: SELECT" in html


def test_profile_full_is_reached_with_either_source_of_round_trips() -> None:
    import spec
    from conformance.profiles import Claim, Scope, describe, profile_results

    catalogue = {req["id"]: req for req in spec.requirements()}
    scope = Scope(Claim("full", "1.3.0", "default"), catalogue)
    held = spec.profile_capabilities("full", "1.3.0")
    header_only = [name for name in held if name != otlp.TRACE_CAPABILITY]
    spans_only = [name for name in held if name != counts.QUERY_COUNT]
    neither = [name for name in spans_only if name != otlp.TRACE_CAPABILITY]
    for advertised in (held, header_only, spans_only):
        assert next(p for p in profile_results(scope, [], advertised, False) if p.name == "full").reached
    full = next(p for p in profile_results(scope, [], neither, False) if p.name == "full")
    assert full.missing_capabilities == [counts.QUERY_COUNT]
    assert describe(full) == f"{counts.QUERY_COUNT} (or {otlp.TRACE_CAPABILITY}) missing"
    older = Scope(Claim("full", "1.2.0", "configuration"), catalogue)  # before 1.3.0 only the header counts
    assert next(p for p in profile_results(older, [], spans_only, False) if p.name == "full").missing_capabilities == [counts.QUERY_COUNT]


@pytest.mark.parametrize(
    ("advertised", "rule", "needs", "outcome"),
    [
        ([otlp.TRACE_CAPABILITY], "DIAG-DEPTH-001", (counts.QUERY_COUNT,), "pass"),  # spans stand in for the header
        ([counts.QUERY_COUNT], "DIAG-DEPTH-001", (counts.QUERY_COUNT,), "pass"),
        ([], "DIAG-DEPTH-001", (counts.QUERY_COUNT,), "fail"),  # untestable: full needs one of them
        ([otlp.TRACE_CAPABILITY], "EXPORT-COST-001", ("transcript-export", counts.QUERY_COUNT), "pass"),
        ([], "EXPORT-COST-001", ("transcript-export", counts.QUERY_COUNT), "not-verified"),  # evidence of either is missing
        ([counts.QUERY_COUNT], "DIAG-SPANS-001", (otlp.TRACE_CAPABILITY,), "out-of-scope"),  # binds span servers only
        ([otlp.TRACE_CAPABILITY], "DIAG-HEADER-001", (counts.QUERY_COUNT,), "out-of-scope"),  # binds header servers only
        ([], "DIAG-SPANS-001", (otlp.TRACE_CAPABILITY,), "out-of-scope"),  # the header rules carry the failure
        ([otlp.TRACE_CAPABILITY], "DIAG-COUNTS-AGREE-001", (otlp.TRACE_CAPABILITY, counts.QUERY_COUNT), "out-of-scope"),
        ([counts.QUERY_COUNT], "DIAG-COUNTS-AGREE-001", (otlp.TRACE_CAPABILITY, counts.QUERY_COUNT), "out-of-scope"),
        ([], "DIAG-COUNTS-AGREE-001", (otlp.TRACE_CAPABILITY, counts.QUERY_COUNT), "out-of-scope"),
        ([otlp.TRACE_CAPABILITY, counts.QUERY_COUNT], "DIAG-COUNTS-AGREE-001", (otlp.TRACE_CAPABILITY, counts.QUERY_COUNT), "pass"),
    ],
)
def test_a_cost_check_runs_with_either_capability(advertised: list[str], rule: str, needs: tuple[str, ...], outcome: str) -> None:
    from conformance.registry import Check
    from conformance.target import Target

    ran: list[bool] = []
    item = Check(f"diagnostics.fake_{rule}", "t", "diagnostics", (rule,), needs, lambda ctx: ran.append(True))
    config = load(overrides={"target": "http://127.0.0.1:9", "tokens": ["a", "b"]}, environ={})
    target = Target(config, {"capabilities": ["fork", "effective-transcript", "lineage", "idempotency", "transcript-export", *advertised]}, {})
    try:
        result = target.run_check(item)
    finally:
        target.close()
    assert result.outcome.value == outcome, result.message or result.reason
    assert ran == ([True] if outcome == "pass" else [])


def test_preflight_and_runner_judge_a_checks_needs_alike() -> None:
    """A cost check's `diagnostics.query-count` is met by `diagnostics.trace-context` alone (its rules
    accept either), for the runner and for preflight's role count (one function: target.offered);
    a need no rule lets another capability meet is not."""
    from conformance.registry import all_checks
    from conformance.target import offered

    catalogue = {req["id"]: req for req in spec.requirements()}
    checks = {item.name: item for item in all_checks()}
    spans_only = ["diagnostics.trace-context", "sharing"]
    assert offered(checks["diagnostics.transcript_cost_by_depth"], "diagnostics.query-count", spans_only, catalogue)
    assert offered(checks["export.export_cost_by_depth"], "diagnostics.query-count", spans_only, catalogue)
    assert not offered(checks["diagnostics.header_on_every_response"], "diagnostics.query-count", spans_only, catalogue)
    assert not offered(checks["diagnostics.listing_cost_by_depth"], "sharing", ["diagnostics.trace-context"], catalogue)


def test_the_suite_names_itself_keeps_no_cookie_and_lets_a_check_send_its_own_headers() -> None:
    """ApiClient sends through httpx's transport, without an `httpx.Client` around it: its own
    User-Agent and Accept-Encoding unless a check names its own, and no cookie a target sets ever
    comes back (a replayed reproducer carries none either)."""
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, headers={"Set-Cookie": "session=abc; Path=/"}, json={"ok": True})

    client = ApiClient("http://target", "token", "principal-1", Recorder())
    client._http = httpx.MockTransport(answer)
    first = client.get("/one", validate_response=False)
    client.get("/two", validate_response=False, headers={"User-Agent": "a-check/1"})
    client.post("/three", json={"a": 1}, validate_response=False, repeated_headers=[("Accept-Encoding", "identity")])
    assert first.json() == {"ok": True}
    assert [r.headers.get_list("user-agent") for r in seen] == [
        [f"session-lineage-conformance/{SUITE_VERSION}"], ["a-check/1"], [f"session-lineage-conformance/{SUITE_VERSION}"]
    ]
    assert [r.headers.get_list("accept-encoding") for r in seen] == [["gzip, deflate"], ["gzip, deflate"], ["identity"]]
    assert all("cookie" not in r.headers for r in seen)
    assert seen[2].content == b'{"a": 1}' and seen[2].headers["content-type"] == "application/json"
