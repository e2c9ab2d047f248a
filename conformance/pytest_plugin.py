"""pytest plugin: `pytest --sl-target URL --sl-token A --sl-token B` runs every check as a test.

Each conformance check becomes one pytest item, `session-lineage::<check name>`, with its
requirement IDs as keywords (`-k FORK_IDEMPOTENT_001`). The items are collected like any other
tests, so counts and `-k` selection read as usual. Preflight runs first and stops the session on a
set-up mistake. Checks outside the claimed profile are skipped as out of scope, listed expected
failures are xfailed, and failures show the violated requirement IDs and a reproducer. Without
`--sl-target` or `--sl-embedded` the plugin adds nothing.
"""

from __future__ import annotations

import re
from collections.abc import Generator, Iterator
from contextlib import ExitStack
from typing import Any

import pytest

from conformance.config import ConfigError, load
from conformance.registry import Check, all_checks, select
from conformance.results import Outcome

ROOT_NODE = "session-lineage"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("session-lineage", "Session Lineage conformance")
    group.addoption("--sl-target", help="base URL of the server under test")
    group.addoption("--sl-embedded", action="store_true", help="run against the embedded reference server")
    group.addoption("--sl-token", action="append", help="bearer token of a principal (two or more)")
    group.addoption("--sl-config", help="YAML configuration file")
    group.addoption("--sl-seed", type=int, help="seed for the run")
    group.addoption("--sl-select", action="append", help="check name or requirement ID prefix")
    group.addoption("--sl-profile", help="the profile the target claims, NAME or NAME@VERSION")
    group.addoption("--sl-strict", action="store_true", default=None, help="SHOULD failures and unexpected passes fail")


def _enabled(config: pytest.Config) -> bool:
    return bool(config.getoption("--sl-target") or config.getoption("--sl-embedded"))


class ConformanceCollector(pytest.Collector):
    """The checks, as one collector beside the project's own test files."""

    def collect(self) -> Iterator[pytest.Item]:
        state = self.config.stash[_STATE]
        for item in select(all_checks(), state["config"].select):
            test = ConformanceItem.from_parent(self, name=item.name, check=item)
            for req in item.requirements:
                test.extra_keyword_matches.add(req.replace("-", "_"))  # -k FORK_IDEMPOTENT_001
            yield test


class ConformanceItem(pytest.Item):
    def __init__(self, *, check: Check, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.check = check

    def runtest(self) -> None:
        state = self.config.stash[_STATE]
        result = state["target"].run_check(self.check)
        if result.outcome is Outcome.OUT_OF_SCOPE:
            pytest.skip(f"out of scope: {result.reason}")
        if result.outcome is Outcome.SKIPPED:
            pytest.skip(result.reason or "not verifiable in this run")
        if result.outcome is Outcome.NOT_VERIFIED:  # never a pass; a failure only with strict
            if state["config"].strict:
                pytest.fail(f"not verified: {result.reason}", pytrace=False)
            pytest.skip(f"not verified: {result.reason}")
        if result.outcome is Outcome.XFAIL:
            pytest.xfail(result.reason or "expected failure")
        if result.outcome is Outcome.XPASS and state["config"].strict:
            pytest.fail(
                f"listed as an expected failure ({result.reason}) but passed: remove it from the expected-failures file",
                pytrace=False,
            )
        if result.outcome in (Outcome.FAIL, Outcome.ERROR):
            ids = ", ".join(result.failed_requirements or result.requirements)
            message = f"[{ids}] {result.message}"
            if result.reproducer:
                message += f"\nreproduce:\n{result.reproducer}"
            pytest.fail(message, pytrace=False)

    def reportinfo(self) -> tuple[str, int, str]:
        return self.check.func.__module__.replace(".", "/") + ".py", 0, f"{self.check.name} [{', '.join(self.check.requirements)}]"


_STATE = pytest.StashKey[dict]()


def pytest_configure(config: pytest.Config) -> None:
    if not _enabled(config):
        return
    stack = ExitStack()
    overrides: dict[str, Any] = {
        "target": config.getoption("--sl-target"),
        "tokens": config.getoption("--sl-token"),
        "seed": config.getoption("--sl-seed"),
        "select": config.getoption("--sl-select"),
        "profile": config.getoption("--sl-profile"),
        "strict": config.getoption("--sl-strict"),
    }
    if config.getoption("--sl-embedded"):
        from conformance.embedded import embedded_log, reference_server

        server = stack.enter_context(reference_server(log_file=embedded_log()))
        overrides.update(target=server.url, tokens=list(server.tokens))
    try:
        suite_config = load(config.getoption("--sl-config"), overrides)
    except ConfigError as exc:
        stack.close()
        raise pytest.UsageError(f"session-lineage: configuration error: {exc}") from None
    config.stash[_STATE] = {"config": suite_config, "stack": stack}


def pytest_sessionstart(session: pytest.Session) -> None:
    """Preflight before anything is collected: a set-up mistake stops the session with one message each."""
    state = session.config.stash.get(_STATE, None)
    if not state:
        return
    from conformance.preflight import run_preflight
    from conformance.runner import Target

    suite = state["config"]
    preflight = run_preflight(suite, (), [check.name for check in all_checks()], select(all_checks(), suite.select))
    if not preflight.ok:
        lines = [f"{item.name}: {item.message}" for item in preflight.failures]
        raise pytest.UsageError("session-lineage preflight failed, no check ran:\n  " + "\n  ".join(lines))
    target = Target(suite, preflight.capabilities, preflight.expected)
    for session in preflight.created:  # `<prefix>preflight-p<N>` was made by principal N
        made_by = re.search(r"preflight-p(\d+)$", session)
        target.created.add([session], f"principal-{made_by.group(1)}" if made_by else "principal-1")
    state["stack"].callback(target.close)
    state["target"] = target


def pytest_unconfigure(config: pytest.Config) -> None:
    state = config.stash.get(_STATE, None)
    if state:
        state["stack"].close()


def pytest_report_header(config: pytest.Config) -> str | None:
    state = config.stash.get(_STATE, None)
    if not state:
        return None
    suite = state["config"]
    return f"session-lineage conformance: target {suite.target}, seed {suite.seed}, ids {suite.id_prefix}*"


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, Any]:
    """Add the checks to the session's own collection, so pytest counts and selects them as usual."""
    report = yield
    if isinstance(collector, pytest.Session) and _enabled(collector.config) and report.passed:
        report.result.append(ConformanceCollector.from_parent(collector, name=ROOT_NODE, nodeid=ROOT_NODE))
    return report


def pytest_terminal_summary(terminalreporter: Any) -> None:
    state = terminalreporter.config.stash.get(_STATE, None)
    target = state.get("target") if state else None
    if target is not None:
        state["cleanup"] = cleanup = _cleanup(target, state["config"])
        terminalreporter.write_line(f"session-lineage: claim {target.claim}; {cleanup.note}")


def _cleanup(target: Any, suite: Any) -> Any:
    """Purge what the run created, as `check` does, and verify it by listing."""
    from conformance.cleanup import verify_by_listing

    cleanup = target.cleanup()
    return verify_by_listing(cleanup, suite.target, suite.tokens, target.advertised(), suite.timeout)
