"""Traces catch what the header hides, a trace that cannot be found is never a pass, and a server
with no header at all gets cost verdicts from its stock instrumentation alone (issue 21)."""

from __future__ import annotations

import pytest

from conformance.config import load
from conformance.embedded import serve_app
from conformance.results import CheckResult, Outcome, RunResult
from conformance.runner import run
from reference_impl.settings import Limits, Settings
from tests.mutants.otel import OTEL_CATCHES, OTEL_MUTANTS, receiver
from tests.servers import TOKENS as SERVER_TOKENS
from tests.servers import server_processes

TOKENS = {"otel-alice": "alice", "otel-bob": "bob"}
DEPTH_CHECK = "diagnostics.transcript_cost_by_depth"
AGREE_CHECK = "diagnostics.header_and_spans_agree"
SHALLOW = 8  # the mutants' advertised max_lineage_depth: chains half as long as the reference's 16, as telling
# The cost checks tests/otel_server.py gets verdicts from: reads at depths 0, 1, 5 and the maximum
# (DIAG-DEPTH-001), every page of a long history (DIAG-PAGE-COST-001), forks of small and large
# sources (DIAG-FORK-COST-001).
INSTRUMENTED_ONLY_CHECKS = [DEPTH_CHECK, "diagnostics.page_cost_by_position", "diagnostics.fork_cost_by_source_size"]


def run_mutant(name: str, tmp_path, select: list[str], receiving: bool = True) -> RunResult:
    """The traced mutant under the suite, with the suite's OTLP receiver (or without: header only)."""
    with receiver() as (setting, url):
        settings = Settings(database_url=f"sqlite:///{tmp_path / 'otel.db'}", tokens=TOKENS, otlp_endpoint=url,
                            limits=Limits(max_lineage_depth=SHALLOW))
        app, stop = OTEL_MUTANTS[name](settings)
        try:
            with serve_app(app) as server:
                tracing = {"otlp_receiver": setting, "otlp_wait": 1} if receiving else {}
                config = load(overrides={"target": server.url, "tokens": list(TOKENS), "select": select, "seed": 21,
                                         **tracing}, environ={})
                return run(config)
        finally:
            stop()


def by_name(result: RunResult) -> dict[str, CheckResult]:
    return {check.name: check for check in result.checks}


def outcomes(result: RunResult) -> dict[str, str]:
    return {v.id: v.outcome.value for v in result.requirements}


def test_header_that_hides_a_statement_per_ancestor_is_caught_by_the_spans(tmp_path) -> None:
    result = run_mutant("header_hides_ancestor_reads", tmp_path, [DEPTH_CHECK, "DIAG-COUNTS-AGREE"])
    judged = outcomes(result)
    assert all(judged[rule] == "fail" for rule in OTEL_CATCHES["header_hides_ancestor_reads"]), judged
    assert judged["DIAG-DEPTH-001"] != "pass", judged
    assert result.exit_code == 1


def test_database_spans_outside_the_request_trace_fail_the_span_rule(tmp_path) -> None:
    """The server span is found, but the statements' spans are in traces of their own: DIAG-SPANS-001."""
    result = run_mutant("database_spans_outside_the_request_trace", tmp_path, ["DIAG-SPANS"])
    judged = outcomes(result)
    assert all(judged[rule] == "fail" for rule in OTEL_CATCHES["database_spans_outside_the_request_trace"]), [
        (c.name, c.outcome, c.message[:300]) for c in result.checks
    ]


@pytest.mark.deep
def test_header_that_hides_a_statement_per_ancestor_passes_on_the_header_alone(tmp_path) -> None:
    """What the spans catch above is what the header hides: judged by the header, the rule passes."""
    check = by_name(run_mutant("header_hides_ancestor_reads", tmp_path, [DEPTH_CHECK], receiving=False))[DEPTH_CHECK]
    assert check.outcome is Outcome.PASS, (check.outcome, check.message)
    assert {count["source"] for count in check.details["round_trips"]} == {"header"}


def test_spans_outside_the_callers_trace_without_header_are_not_verified(tmp_path) -> None:
    result = run_mutant("trace_not_continued_without_header", tmp_path, [DEPTH_CHECK])
    check = by_name(result)[DEPTH_CHECK]
    assert check.outcome is Outcome.NOT_VERIFIED, (check.outcome, check.message)
    assert outcomes(result)["DIAG-DEPTH-001"] == "not-verified"


@pytest.mark.deep
def test_spans_outside_the_callers_trace_with_the_header_never_pass_from_spans(tmp_path) -> None:
    """With the header too: no count is taken from spans of some other trace. The header, evidence of
    its own, still judges the cost rule; the agreement of the two sources is not verified."""
    result = run_mutant("trace_not_continued", tmp_path, [DEPTH_CHECK, AGREE_CHECK])
    check = by_name(result)[DEPTH_CHECK]
    assert check.outcome is Outcome.PASS, (check.outcome, check.message)
    counts = check.details.get("round_trips", [])
    assert counts and {count["source"] for count in counts} == {"header"}, check.details
    assert all("spans_not_used" in count for count in counts), counts
    assert outcomes(result)["DIAG-COUNTS-AGREE-001"] == "not-verified"


def instrumented_only_verdicts(tmp_path, select: list[str]) -> tuple[RunResult, RunResult]:
    """tests/otel_server.py exporting to the suite's receiver: the run with it, the run without."""
    with receiver() as (setting, url):
        env = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": url, "OTEL_BSP_SCHEDULE_DELAY": "100"}
        with server_processes(f"sqlite:///{tmp_path / 'plain.db'}", tmp_path, count=1, extra_env=env,
                              module="tests.otel_server") as (server,):

            def suite(**overrides: object) -> RunResult:
                return run(load(overrides={"target": server.url, "tokens": list(SERVER_TOKENS), "profile": "core",
                                           "select": select, "seed": 21, **overrides}, environ={}))

            return suite(otlp_receiver=setting), suite()


def assert_verdicts_from_spans_alone(traced: RunResult, untraced: RunResult, select: list[str]) -> None:
    """With the receiver every check passes on span counts alone; without it, none is verified."""
    assert sorted(check.name for check in traced.checks) == sorted(select)
    for check in traced.checks:
        assert check.outcome is Outcome.PASS, (check.name, check.outcome, check.message)
        counts = check.details["round_trips"]
        assert counts and all(c["source"] == "spans" and "header" not in c for c in counts), counts
    assert {c.name: c.outcome for c in untraced.checks} == {name: Outcome.NOT_VERIFIED for name in select}


def test_server_with_only_stock_instrumentation_gets_the_depth_verdict_from_its_spans(tmp_path) -> None:
    """Plain sqlite3, no diagnostics header: reads at depths 0, 1, 5 and the maximum judged by spans."""
    assert_verdicts_from_spans_alone(*instrumented_only_verdicts(tmp_path, [DEPTH_CHECK]), [DEPTH_CHECK])


@pytest.mark.deep
def test_server_with_only_stock_instrumentation_gets_every_cost_verdict_it_offers(tmp_path) -> None:
    select = INSTRUMENTED_ONLY_CHECKS
    assert_verdicts_from_spans_alone(*instrumented_only_verdicts(tmp_path, select), select)
