"""pytest plugin: `pytest --sl-target URL --sl-token A --sl-token B` runs every check as a test.

Each conformance check becomes one pytest item named after the check, with its requirement IDs as
keywords (`-k FORK_IDEMPOTENT_001`). Unsupported checks are skipped, listed expected failures are
xfailed, and failures show the violated requirement IDs and a curl reproducer. Without `--sl-target`
or `--sl-embedded` the plugin adds nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest

from conformance.config import load
from conformance.registry import Check, all_checks, select
from conformance.results import Outcome


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("session-lineage", "Session Lineage conformance")
    group.addoption("--sl-target", help="base URL of the server under test")
    group.addoption("--sl-embedded", action="store_true", help="run against the embedded reference server")
    group.addoption("--sl-token", action="append", help="bearer token of a principal (two or more)")
    group.addoption("--sl-config", help="YAML configuration file")
    group.addoption("--sl-seed", type=int, help="seed for the run")
    group.addoption("--sl-select", action="append", help="check name or requirement ID prefix")


def _enabled(config: pytest.Config) -> bool:
    return bool(config.getoption("--sl-target") or config.getoption("--sl-embedded"))


class ConformanceCollector(pytest.Collector):
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
        target = self.config.stash[_STATE]["target"]
        result = target.run_check(self.check)
        if result.outcome is Outcome.SKIPPED:
            pytest.skip(result.reason or "unsupported")
        if result.outcome is Outcome.XFAIL:
            pytest.xfail(result.reason or "expected failure")
        if result.outcome in (Outcome.FAIL, Outcome.ERROR):
            ids = ", ".join(result.failed_requirements or result.requirements)
            message = f"[{ids}] {result.message}"
            if result.reproducer:
                message += f"\nreproduce:\n{result.reproducer}"
            pytest.fail(message, pytrace=False)

    def reportinfo(self) -> tuple[str, int, str]:
        return f"conformance/checks/{self.check.chapter}.py", 0, f"{self.check.name} [{', '.join(self.check.requirements)}]"


_STATE = pytest.StashKey[dict]()


def pytest_configure(config: pytest.Config) -> None:
    if not _enabled(config):
        return
    from conformance.runner import Target

    stack = ExitStack()
    overrides: dict[str, Any] = {
        "target": config.getoption("--sl-target"),
        "tokens": config.getoption("--sl-token"),
        "seed": config.getoption("--sl-seed"),
        "select": config.getoption("--sl-select"),
    }
    if config.getoption("--sl-embedded"):
        from conformance.embedded import reference_server

        server = stack.enter_context(reference_server())
        overrides.update(target=server.url, tokens=list(server.tokens))
    suite_config = load(config.getoption("--sl-config"), overrides)
    target = Target(suite_config)
    stack.callback(target.close)
    config.stash[_STATE] = {"config": suite_config, "target": target, "stack": stack}


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


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    if _enabled(config):
        items.extend(ConformanceCollector.from_parent(session, name="session-lineage-conformance").collect())
