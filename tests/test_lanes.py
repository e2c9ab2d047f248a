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


def test_checks_meant_apart_that_no_lane_took_run_at_home(tmp_path: Any, monkeypatch: Any) -> None:
    """Lanes that die at once each lose the check they were handed (the suite's error, named); the
    checks to run apart that no lane took, the suite runs itself, judged as usual."""
    import subprocess
    import sys

    from conformance import lanes

    monkeypatch.setattr(lanes, "_spawn", lambda: subprocess.Popen([sys.executable, "-c", "pass"], stdin=subprocess.PIPE, stdout=subprocess.PIPE))
    ran: list[str] = []
    apart = [Check(f"fuzz.apart_{n}", "A check to run apart", "fuzz", ("ERR-NO-5XX-001",), (),
                   lambda ctx, n=n: ran.append(f"fuzz.apart_{n}"), apart=True) for n in range(lanes.LANES + 1)]
    home = next(c for c in all_checks() if c.name == "capabilities.discovery_document")
    result = _run(reference_app(_settings(tmp_path, "dead.db")), parallel=True, checks=[*apart, home],
                  select=["capabilities.discovery_document", "fuzz.apart_"])
    outcomes = {c.name: c.outcome for c in result.checks}
    lost = [name for name, outcome in outcomes.items() if outcome is Outcome.ERROR]
    assert len(lost) == lanes.LANES and all(name.startswith("fuzz.apart_") for name in lost), outcomes
    assert ran and set(ran) == set(outcomes) - set(lost) - {home.name}, (ran, outcomes)
    assert all(outcomes[name] is Outcome.PASS for name in [*ran, home.name]), outcomes


def test_the_queue_hands_each_check_out_once_from_either_end() -> None:
    from conformance.lanes import Queue

    checks = all_checks()[:5]
    queue = Queue(checks)
    assert queue.back(lambda item: False) is None  # refused: it stays for the front
    taken = [queue.front(), queue.back(), queue.front(), queue.back(), queue.back(), queue.front(), queue.back()]
    assert taken == [checks[0], checks[4], checks[1], checks[3], checks[2], None, None]


def test_only_registered_checks_are_shared_and_none_while_the_run_receives_spans() -> None:
    from conformance.lanes import shareable

    registered = next(c for c in all_checks() if c.name == "capabilities.discovery_document")
    stranger = Check("capabilities.only_here", "A check the second process cannot import", "capabilities", (), (), lambda ctx: None)
    config = load(overrides={"target": "http://127.0.0.1:9", "tokens": list(TOKENS)}, environ={})
    assert shareable(registered, config) and not shareable(stranger, config)
    traced = load(overrides={"target": "http://127.0.0.1:9", "tokens": list(TOKENS), "otlp_receiver": "127.0.0.1:0"}, environ={})
    assert not shareable(registered, traced)  # the receiver lives in this process: span counts are taken here


def test_the_lane_takes_more_checks_once_its_own_are_done(tmp_path: Any) -> None:
    """What `more` hands out runs in the lane after its own checks, is judged as at home, and comes
    back in the order sent with the sessions it created; `done` hears of each as it ends."""
    from conformance.lanes import Lane
    from conformance.target import Target

    by_name = {c.name: c for c in all_checks()}
    own = [by_name["capabilities.discovery_document"]]
    extra = [by_name["sessions.create_root_session"], by_name["capabilities.discovery_document"]]
    heard: list[tuple[str, int]] = []
    with serve_app(reference_app(_settings(tmp_path, "more.db"))) as server:
        config = load(overrides={"target": server.url, "tokens": list(TOKENS), "seed": 31}, environ={})
        target = Target(config)
        try:
            lane = Lane(config, target.discover(), {}, own, target.catalogue,
                        lambda item, result, created: heard.append((item.name, len(created))), iter([*extra, None]).__next__)
            results = lane.results()
            lane.close()
        finally:
            target.close()
    assert [item.name for item, _, _ in results] == [c.name for c in [*own, *extra]]
    assert all(result.outcome is Outcome.PASS for _, result, _ in results), [(r.name, r.message[:300]) for _, r, _ in results]
    assert [created != [] for _, _, created in results] == [False, True, False]
    assert [name for name, _ in heard] == [c.name for c in [*own, *extra]] and heard[1][1] > 0


def test_lanes_take_the_processes_started_early_and_an_unused_one_ends(tmp_path: Any) -> None:
    """`start_early` (the CLI calls it before the embedded server starts) gives the run's lanes
    processes that loaded the checks meanwhile; one no lane took ends with `stop_early`, and a
    process whose input closes before any settings arrive exits quietly."""
    from conformance import lanes

    lanes.start_early()
    early = list(lanes._early)
    assert len(early) == lanes.LANES
    strangers = [Check(f"fuzz.only_here_{n}", "A check the lanes cannot import", "fuzz", ("ERR-NO-5XX-001",), (),
                       lambda ctx: None, apart=True) for n in range(lanes.LANES)]
    home = next(c for c in all_checks() if c.name == "capabilities.discovery_document")
    result = _run(reference_app(_settings(tmp_path, "early.db")), parallel=True, checks=[*strangers, home],
                  select=["capabilities.discovery_document", "fuzz.only_here_"])
    assert lanes._early == [] and all(p.poll() is not None for p in early)  # the run's lanes used them, and they ended with it
    answered = [c for c in result.checks if c.name.startswith("fuzz.only_here_")]
    # the lanes read the run's settings and answered for the checks they could not find
    assert len(answered) == lanes.LANES and all("gave no result: LookupError" in c.message for c in answered), answered

    lanes.start_early(1)
    unused = list(lanes._early)
    lanes.stop_early()
    assert lanes._early == [] and len(unused) == 1 and unused[0].poll() is not None

    quiet = lanes._spawn()
    _out, _ = quiet.communicate(b"", timeout=60)
    assert quiet.returncode == 0
