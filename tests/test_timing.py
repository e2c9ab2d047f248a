"""Timing never fails a correct server (issue: verdicts, item 5).

The expiry checks (leases.lease_expires, fork.key_lifetime) judge from what the suite can know:
when it sent and when answers came back. Behind a proxy that delays every request and every
answer, a correct server is never failed (the rule is verified or not verified), and a server that
expires too early or never is never passed. Without the proxy the timing mutants are caught every
run. All of this waits out real expiries: the deep set.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import replace
from typing import Any

import pytest
from starlette.types import ASGIApp

from conformance.config import load
from conformance.embedded import serve_app
from conformance.results import Outcome, RunResult
from conformance.runner import run
from reference_impl.settings import Settings
from tests.mutants import MUTANTS, all_mutants, reference_app
from tests.servers import PROJECTS, TOKENS

all_mutants()
TIMING_CHECKS = ("leases.lease_expires", "fork.key_lifetime")
TIMING_MUTANTS = {  # mutant -> the requirement its timing check must fail
    "leases_never_expire": "LEASE-EXPIRY-001",
    "leases_expire_early": "LEASE-EXPIRY-001",
    "idempotency_keys_expire_early": "FORK-IDEMPOTENT-001",
}
RUNS = 10
PROXY_RUNS = 20


def behind_a_slow_proxy(app: ASGIApp, seed: int) -> ASGIApp:
    """Each request reaches the server 0.15-0.75 s late and its answer leaves 0.15-0.75 s late:
    0.3-1.5 s added to every round trip, like a proxy on a slow link."""
    rng = random.Random(seed)

    async def delayed(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        await asyncio.sleep(rng.uniform(0.15, 0.75))
        back = rng.uniform(0.15, 0.75)

        async def send_late(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                await asyncio.sleep(back)
            await send(message)

        await app(scope, receive, send_late)

    return delayed


def short_key_lifetime(settings: Settings) -> Settings:
    """A 2-second key lifetime, so that fork.key_lifetime has an expiry to wait out."""
    return replace(settings, limits=replace(settings.limits, idempotency_key_lifetime_seconds=2))


def timing_run(app: ASGIApp, seed: int, select: tuple[str, ...] = TIMING_CHECKS) -> RunResult:
    with serve_app(app) as server:
        config = load(overrides={"target": server.url, "tokens": list(TOKENS), "seed": seed, "select": list(select),
                                 "timeout": 30}, environ={})
        return run(config)


def settings_for(tmp_path: Any, name: str) -> Settings:
    return Settings(database_url=f"sqlite:///{tmp_path / f'{name}.db'}", tokens=TOKENS, projects=PROJECTS)


@pytest.mark.deep
@pytest.mark.parametrize("batch", range(4))
def test_a_correct_server_behind_a_slow_proxy_is_never_failed(batch: int, tmp_path: Any) -> None:
    """20 runs (4 batches of 5) of the timing checks against the reference behind the proxy:
    every check passes or is not verified; none fails, none errs."""
    outcomes = []
    for run_number in range(PROXY_RUNS // 4):
        seed = 100 * batch + run_number
        app = behind_a_slow_proxy(reference_app(short_key_lifetime(settings_for(tmp_path, f"run-{seed}"))), seed)
        result = timing_run(app, seed)
        outcomes.extend((seed, c.name, c.outcome, c.message) for c in result.checks)
    wrong = [item for item in outcomes if item[2] not in (Outcome.PASS, Outcome.NOT_VERIFIED)]
    assert not wrong, wrong
    assert len(outcomes) == 2 * PROXY_RUNS // 4


@pytest.mark.deep
@pytest.mark.parametrize("name", sorted(TIMING_MUTANTS))
def test_timing_mutants_are_caught_every_run_and_never_passed_behind_the_proxy(name: str, tmp_path: Any) -> None:
    mutant, requirement = MUTANTS[name], TIMING_MUTANTS[name]
    direct = [timing_run(mutant.build(settings_for(tmp_path, f"direct-{n}")), 3000 + n, mutant.select) for n in range(RUNS)]
    caught = sum(requirement in {v.id for v in r.requirements if v.outcome is Outcome.FAIL} for r in direct)
    assert caught == RUNS, f"{name}: caught {caught}/{RUNS} without the proxy"
    for n in range(3):
        result = timing_run(behind_a_slow_proxy(mutant.build(settings_for(tmp_path, f"proxy-{n}")), n), 4000 + n, mutant.select)
        verdict = {v.id: v.outcome for v in result.requirements}.get(requirement)
        assert verdict in (Outcome.FAIL, Outcome.NOT_VERIFIED), f"{name} behind the proxy: {requirement} {verdict}"


def release_arrives_late(app: ASGIApp, seconds: float) -> ASGIApp:
    """Every lease release reaches the server `seconds` late, as a request does on a loaded machine."""

    async def delayed(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "DELETE" and scope["path"].endswith("/lease"):
            await asyncio.sleep(seconds)
        await app(scope, receive, send)

    return delayed


def test_a_lease_a_check_takes_and_releases_outlasts_a_slow_release(tmp_path: Any) -> None:
    """revert.etag_follows_changes takes a lease and releases it at once: a release that arrives 2.5 s
    later (a loaded machine) still finds it held. With the 2-second lease it once took, the release
    answered 409 and the check failed LEASE-RELEASE-001 against a correct server."""
    app = release_arrives_late(reference_app(settings_for(tmp_path, "late-release")), 2.5)
    result = timing_run(app, 7, ("revert.etag_follows_changes",))
    assert [(c.name, c.outcome, c.message) for c in result.checks] == [("revert.etag_follows_changes", Outcome.PASS, "")]
