"""The Schemathesis checks run in a second process beside the others (conformance/lanes.py): judged
as at home, reported in the run's order, what they create purged, a broken lane the suite's error."""

from __future__ import annotations

from typing import Any

from conformance.config import load
from conformance.embedded import serve_app
from conformance.registry import Check, all_checks
from conformance.results import Outcome
from conformance.runner import run
from reference_impl.settings import Settings
from tests.mutants import reference_app, rewrite_responses
from tests.test_audit_diagnostics import lineage_answers

TOKENS = {"lane-alice": "alice", "lane-bob": "bob"}
SELECT = ["sessions.create_root_session", "fuzz.generated_valid_requests", "capabilities.discovery_document"]


def _run(app: Any, parallel: bool, checks: list[Check] | None = None, select: list[str] = SELECT) -> Any:
    with serve_app(app) as server:
        config = load(overrides={"target": server.url, "tokens": list(TOKENS), "select": select, "seed": 31,
                                 "fuzz_examples": 3, "parallel": parallel}, environ={})
        return run(config, checks=checks)


def _settings(tmp_path: Any, name: str) -> Settings:
    return Settings(database_url=f"sqlite:///{tmp_path / name}", tokens=TOKENS)


def test_checks_run_apart_are_judged_and_ordered_as_at_home_and_their_sessions_purged(tmp_path: Any) -> None:
    names = [c.name for c in all_checks() if c.name.startswith(tuple(SELECT))]
    assert any(c.apart for c in all_checks() if c.name in names) and not all(c.apart for c in all_checks() if c.name in names)
    apart = _run(reference_app(_settings(tmp_path, "apart.db")), parallel=True)
    home = _run(reference_app(_settings(tmp_path, "home.db")), parallel=False)
    for result in (apart, home):
        assert [c.name for c in result.checks] == names
        assert all(c.outcome is Outcome.PASS for c in result.checks), [(c.name, c.message[:300]) for c in result.checks]
    assert [c.seed for c in apart.checks] == [c.seed for c in home.checks]
    # the fuzz created sessions in the second process (a seed replays its requests): the run's
    # cleanup knew of every one and purged them all, as at home
    assert len(apart.cleanup.sessions) == len(home.cleanup.sessions) > 1, (apart.cleanup.note, home.cleanup.note)
    assert not apart.cleanup.left_behind and len(apart.cleanup.removed) == len(apart.cleanup.sessions), apart.cleanup.note


def test_a_failure_found_apart_cites_its_rule_and_keeps_its_reproducer(tmp_path: Any) -> None:
    app = rewrite_responses(reference_app(_settings(tmp_path, "plain.db")), lineage_answers(404, b"text/plain", None, False))
    result = _run(app, parallel=True)
    fuzz = next(c for c in result.checks if c.name == "fuzz.generated_valid_requests")
    assert fuzz.outcome is Outcome.FAIL and fuzz.failed_requirements == ["ERR-PROBLEM-001"], (fuzz.failed_requirements, fuzz.message[:500])
    assert fuzz.reproducer and fuzz.exchange is not None


def test_a_lane_that_cannot_run_a_check_reports_a_suite_error_not_a_failure(tmp_path: Any) -> None:
    """The second process knows only the registered checks: one it cannot find is the suite's error."""
    stranger = Check("fuzz.known_only_here", "A check the second process cannot import", "fuzz", ("ERR-NO-5XX-001",), (),
                     lambda ctx: None, apart=True)
    home = next(c for c in all_checks() if c.name == "capabilities.discovery_document")
    result = _run(reference_app(_settings(tmp_path, "lost.db")), parallel=True, checks=[stranger, home],
                  select=["capabilities.discovery_document", "fuzz.known_only_here"])
    assert [c.name for c in result.checks] == ["fuzz.known_only_here", "capabilities.discovery_document"]
    lost, kept = result.checks
    assert kept.outcome is Outcome.PASS
    assert lost.outcome is Outcome.ERROR and "suite defect: the second process running fuzz.known_only_here gave no result: LookupError" in lost.message, lost.message
    assert "fuzz.known_only_here" not in {c.name for c in all_checks()}
