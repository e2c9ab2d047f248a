"""The reference's OpenTelemetry spans count what its `Storage-Round-Trips` header counts (issue 21).

A round trip in span terms is a database client span (kind CLIENT, `db.system`) that is not
transaction control (BEGIN, COMMIT, ROLLBACK, SAVEPOINT, RELEASE): the header's definition too. The
reference is read at depths 0, 1, 5 and the maximum, on SQLite and on PostgreSQL, each request in a
trace of the test's own, and the spans of that trace are counted.
"""

from __future__ import annotations

import secrets
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from conformance.embedded import serve_app
from reference_impl.http.app import build_app, open_store
from reference_impl.services import build_services
from reference_impl.settings import Settings
from reference_impl.telemetry import instrument

TRANSACTION_CONTROL = ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE")
READS = ("transcript", "lineage", "session")


def is_round_trip(span: ReadableSpan) -> bool:
    attributes = span.attributes or {}
    statement = str(attributes.get("db.statement") or attributes.get("db.query.text") or span.name)
    is_client = span.kind is SpanKind.CLIENT and ("db.system" in attributes or "db.system.name" in attributes)
    return is_client and not statement.lstrip().upper().startswith(TRANSACTION_CONTROL)


@contextmanager
def traced_reference(database_url: str, records_database_url: str | None = None) -> Iterator[tuple[str, InMemorySpanExporter]]:
    """The reference (every engine instrumented, as `create_app` does) exporting to memory."""
    settings = Settings(database_url=database_url, records_database_url=records_database_url)
    store = open_store(settings)
    app = build_app(build_services(store, settings), settings)
    exporter = InMemorySpanExporter()
    engines = [engine for engine in (store.engine, store.records_engine) if engine is not None]
    stop = instrument(app, engines, "", exporter=exporter)
    try:
        with serve_app(app) as server:
            yield server.url, exporter
    finally:
        stop()  # flushes every span into the exporter


def traced_get(http: httpx.Client, path: str) -> tuple[str, str, int]:
    """GET in a fresh trace: (trace id, the caller's span id, the header's round trips)."""
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    response = http.get(path, headers={"traceparent": f"00-{trace_id}-{span_id}-01"})
    assert response.status_code == 200, response.text
    return trace_id, span_id, int(response.headers["Storage-Round-Trips"])


def counts_by_depth(database_url: str, records_database_url: str | None = None) -> dict[str, dict[int, tuple[int, int]]]:
    """(header, spans) for each read at depths 0, 1, 5 and the maximum."""
    with traced_reference(database_url, records_database_url) as (url, exporter):
        with httpx.Client(base_url=url, headers={"Authorization": "Bearer alice"}) as http:
            maximum = http.get("/capabilities").json()["limits"]["max_lineage_depth"]
            ids = [http.post("/sessions", json={}).json()["session_id"]]
            finished_turn = {"role": "user", "status": "completed", "records": [{"type": "m", "content": {}}]}
            for _ in range(maximum):  # each a turn written in one request (turn-write), then a fork
                assert http.post(f"/sessions/{ids[-1]}/turns", json=finished_turn).status_code == 201
                ids.append(http.post(f"/sessions/{ids[-1]}/fork", json={"cut": {"mode": "latest"}}).json()["session"]["session_id"])
            sent: dict[str, dict[int, tuple[str, str, int]]] = {read: {} for read in READS}
            for depth in (0, 1, 5, maximum):
                sid = ids[depth]
                sent["transcript"][depth] = traced_get(http, f"/sessions/{sid}/transcript")
                sent["lineage"][depth] = traced_get(http, f"/sessions/{sid}/lineage")
                sent["session"][depth] = traced_get(http, f"/sessions/{sid}")
    spans: dict[str, list[ReadableSpan]] = defaultdict(list)
    for span in exporter.get_finished_spans():
        spans[format(span.context.trace_id, "032x")].append(span)
    counts: dict[str, dict[int, tuple[int, int]]] = {read: {} for read in READS}
    for read, by_depth in sent.items():
        for depth, (trace_id, span_id, header) in by_depth.items():
            trace = spans[trace_id]
            server = [s for s in trace if s.kind is SpanKind.SERVER]
            assert len(server) == 1 and format(server[0].parent.span_id, "016x") == span_id, (
                f"{read} at depth {depth}: the server span does not continue the caller's trace"
            )
            counts[read][depth] = (header, sum(1 for s in trace if is_round_trip(s)))
    return counts


def assert_agree(counts: dict[str, dict[int, tuple[int, int]]]) -> None:
    disagree = {read: by_depth for read, by_depth in counts.items() if any(h != s for h, s in by_depth.values())}
    assert not disagree, f"header and span counts differ (header, spans) by depth: {disagree}"
    assert all(header >= 1 for by_depth in counts.values() for header, _ in by_depth.values()), counts


@pytest.mark.deep  # quick: the two-store case below, on SQLite too, and the run through the suite's receiver
def test_spans_equal_the_header_on_sqlite(tmp_path) -> None:
    counts = counts_by_depth(f"sqlite:///{tmp_path / 'otel.db'}")
    assert_agree(counts)
    assert {spans for _, spans in counts["transcript"].values()} == {2}  # one chain query, one records query


def test_spans_equal_the_header_on_two_stores(tmp_path) -> None:
    """Both engines of a two-store deployment are traced: the records store's statements count too."""
    assert_agree(counts_by_depth(f"sqlite:///{tmp_path / 'sessions.db'}", f"sqlite:///{tmp_path / 'records.db'}"))


@pytest.mark.postgres
def test_spans_equal_the_header_on_postgres(postgres_url: str) -> None:
    assert_agree(counts_by_depth(postgres_url))


def test_trace_capability_is_advertised_only_while_tracing(tmp_path) -> None:
    from reference_impl.settings import TRACE_CAPABILITY

    def advertised(**settings: object) -> list[str]:
        chosen = Settings(database_url=f"sqlite:///{tmp_path / 'caps.db'}", **settings)  # type: ignore[arg-type]
        return build_services(open_store(chosen), chosen).capabilities.capabilities("1.3.0")["capabilities"]

    assert TRACE_CAPABILITY in advertised(otlp_endpoint="http://127.0.0.1:4318/v1/traces")
    assert TRACE_CAPABILITY not in advertised()
    assert TRACE_CAPABILITY not in advertised(
        otlp_endpoint="http://127.0.0.1:4318/v1/traces", disabled_capabilities=frozenset({TRACE_CAPABILITY})
    )


def test_serve_without_the_extra_exits_2_naming_it(monkeypatch, capsys, tmp_path) -> None:
    """The endpoint from the standard environment variable; the extra missing: one line, exit 2."""
    import sys

    from reference_impl.cli import main

    monkeypatch.delitem(sys.modules, "reference_impl.telemetry", raising=False)
    monkeypatch.setitem(sys.modules, "opentelemetry.instrumentation.asgi", None)  # as if not installed
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:4318/v1/traces")
    assert main(["--database-url", f"sqlite:///{tmp_path / 'x.db'}"]) == 2
    error = capsys.readouterr().err
    assert "pip install -e '.[otel]'" in error and "opentelemetry.instrumentation.asgi" in error, error


def test_serve_refuses_an_endpoint_that_is_no_url(capsys, tmp_path) -> None:
    from reference_impl.cli import main

    assert main(["--database-url", f"sqlite:///{tmp_path / 'x.db'}", "--otlp-endpoint", "4318"]) == 2
    assert "--otlp-endpoint '4318' is not an http(s) URL" in capsys.readouterr().err


def test_embedded_reference_traces_to_the_runs_receiver(monkeypatch) -> None:
    """`check --embedded` with a receiver: the reference exports there; without the extra, exit 2's error."""
    import sys

    from conformance.config import ConfigError, load
    from conformance.embedded import trace_endpoint

    def config(**overrides: object):
        return load(overrides={"target": "http://127.0.0.1:9", "tokens": ["a", "b"], **overrides}, environ={})

    assert trace_endpoint(config()) is None
    assert trace_endpoint(config(otlp_receiver="4318")) == "http://127.0.0.1:4318/v1/traces"
    monkeypatch.delitem(sys.modules, "reference_impl.telemetry", raising=False)
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)
    with pytest.raises(ConfigError, match=r"pip install -e '\.\[otel\]'"):
        trace_endpoint(config(otlp_receiver="4318"))


COST_CHECKS = ["DIAG-SPANS", "DIAG-COUNTS-AGREE", "DIAG-DEPTH", "DIAG-PAGE-COST", "DIAG-FORK-COST", "DIAG-LIST-COST",
               "EXPORT-COST", "TURN-POS-COST", "TURN-WRITE-COST", "CONTEXT-COST", "REVERT-COST", "REPLAY-COST"]


def check_traced(tmp_path, select: list[str], where: tuple[str, ...] = ("--embedded",), setting: str | None = None) -> tuple[int, dict]:
    """`session-lineage check --otlp-receiver [HOST:]PORT` against `where` (the embedded reference
    by default): (exit code, JSON report)."""
    import json

    from conformance import otlp
    from conformance.cli import main
    from conformance.config import load
    from conformance.embedded import free_port

    setting, report = setting or f"127.0.0.1:{free_port()}", tmp_path / "report.json"
    selected = [arg for prefix in select for arg in ("--select", prefix)]
    try:
        code = main(["check", *where, "--otlp-receiver", setting, "--report-json", str(report), "--seed", "21", *selected])
    finally:
        otlp.stop(load(overrides={"target": "http://127.0.0.1:9", "tokens": ["a", "b"], "otlp_receiver": setting}, environ={}))
    return code, json.loads(report.read_text(encoding="utf-8"))


def assert_counted_from_both(code: int, report: dict) -> None:
    """Every check passed, and every count it read came from the header and the spans, equal."""
    assert code == 0, [(c["name"], c["outcome"], c.get("message", "")[:300]) for c in report["checks"]]
    counts_line = next(item["message"] for item in report["preflight"] if item["name"] == "counts")
    assert counts_line.startswith("round trips from the Storage-Round-Trips header and spans"), counts_line
    counts = [count for check in report["checks"] for count in check["details"].get("round_trips", [])]
    assert counts and all(check["outcome"] == "pass" for check in report["checks"])
    assert {count["source"] for count in counts} == {"both"}, counts
    assert all(count["header"] == count["spans"] for count in counts), counts


def test_check_embedded_with_a_receiver_passes_the_depth_rule_counted_from_header_and_spans(tmp_path) -> None:
    assert_counted_from_both(*check_traced(tmp_path, ["DIAG-COUNTS-AGREE", "DIAG-DEPTH"]))


@pytest.mark.deep
def test_check_embedded_with_a_receiver_passes_every_cost_rule_counted_from_header_and_spans(tmp_path) -> None:
    assert_counted_from_both(*check_traced(tmp_path, COST_CHECKS))


def test_each_worker_process_traces_itself(monkeypatch, tmp_path) -> None:
    """`serve --workers N` hands the endpoint to every worker through the environment: the app a
    worker builds advertises the capability and exports the caller's trace to the receiver."""
    from conformance import otlp
    from conformance.config import load
    from reference_impl.http.factory import ENV, app_from_environment, settings_to_environment
    from tests.mutants.otel import receiver

    monkeypatch.delenv(ENV, raising=False)
    with receiver() as (setting, url):
        settings_to_environment(Settings(database_url=f"sqlite:///{tmp_path / 'workers.db'}", otlp_endpoint=url))
        app = app_from_environment()
        try:
            with serve_app(app) as server:
                trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
                response = httpx.get(f"{server.url}/capabilities", headers={"traceparent": f"00-{trace_id}-{span_id}-01"})
        finally:
            app.state.stop_tracing()
        config = load(overrides={"target": server.url, "tokens": ["a", "b"], "otlp_receiver": setting}, environ={})
        trace = otlp.running(config).trace(trace_id, span_id)
    assert "diagnostics.trace-context" in response.json()["capabilities"]
    assert trace is not None and trace.server_span(span_id) is not None


@pytest.mark.deep
@pytest.mark.postgres
def test_serve_with_workers_on_postgres_traces_every_process(postgres_url: str, tmp_path) -> None:
    """`serve --workers 2 --otlp-endpoint URL` on PostgreSQL: whichever process answers, its counts
    come from header and spans, equal."""
    from tests.mutants.otel import receiver
    from tests.servers import TOKENS, server_processes

    with receiver() as (setting, url):
        args = ["--workers", "2", "--otlp-endpoint", url]
        with server_processes(postgres_url, tmp_path, count=1, args=args, extra_env={"OTEL_BSP_SCHEDULE_DELAY": "100"}) as (server,):
            where = ("--target", server.url, *(arg for token in TOKENS for arg in ("--token", token)))
            assert_counted_from_both(*check_traced(tmp_path, ["DIAG-COUNTS-AGREE", "DIAG-DEPTH"], where, setting))
