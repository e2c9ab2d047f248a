"""Runs the checks against a target and turns their outcomes into a verdict on the claimed profile
(the rules are in `verdicts.py`; one check's run is in `target.py`).
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import spec
from conformance import SUITE_VERSION
from conformance.config import Config, ExpectedFailure
from conformance.errors import TargetUnreachable
from conformance.lanes import Lane, Queue, start_lanes
from conformance.profiles import profile_results, summary_text
from conformance.registry import Check, all_checks, select
from conformance.results import CheckResult, Outcome, PreflightItem, RunResult
from conformance.target import Target, check_result, check_seed, with_defaults
from conformance.verdicts import deployment_only, requirement_verdicts, run_verdict

Progress = Callable[[str, Check, CheckResult | None], None]


def run(
    config: Config,
    progress: Progress | None = None,
    checks: list[Check] | None = None,
    capabilities: dict[str, Any] | None = None,
    preflight: list[PreflightItem] | None = None,
    created: list[str] | None = None,
    expected: dict[str, ExpectedFailure] | None = None,
) -> RunResult:
    """Run the selected checks. `capabilities`, `preflight`, `created` and `expected` come from a
    preflight that already read the capability document, created sessions and read the
    expected-failures file; without them the document and the file are read here."""
    started = time.perf_counter()
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    selected = select(checks if checks is not None else all_checks(), config.select)
    target = Target(config, capabilities, expected)
    for session in created or []:  # preflight's sessions: `<prefix>preflight-p<N>` was made by principal N
        made_by = re.search(r"preflight-p(\d+)$", session)
        target.created.add([session], f"principal-{made_by.group(1)}" if made_by else "principal-1")
    catalogue = target.catalogue
    notes: list[str] = []
    results: list[CheckResult] = []
    try:
        try:
            target.discover()
        except TargetUnreachable as exc:  # only when preflight was skipped: nothing can run
            notes.append(f"capability discovery failed: {exc}")
            target.capabilities = with_defaults({})
            results = [check_result(item, catalogue, Outcome.ERROR, f"not run: {exc}") for item in selected]
            selected = []
        claim = target.claim
        implemented = str(target.discover().get("spec_version", ""))
        try:
            older = spec.version_tuple(implemented) < spec.version_tuple(claim.version)
        except ValueError:
            older = False
        if older:
            notes.append(
                f"the target implements spec {implemented} but is held to {claim}: "
                f"claim {claim.profile}@{implemented} (--profile) to judge it against its own version"
            )
        for name in target.missing_expected_capabilities():
            notes.append(f"expected capability '{name}' is not advertised by the target")
        apart = [item for item in selected if item.apart] if config.parallel else []
        beside = bool(apart) and len(selected) > len(apart)  # alone, the checks run apart gain nothing from a second process
        queue = Queue([item for item in selected if item not in apart] if beside else selected)
        apart_queue = Queue(apart if beside else [])
        lanes: list[Lane] = []
        if beside:

            def done(item: Check, result: CheckResult, created: list[tuple[str, str | None]]) -> None:
                for session_id, creator in created:
                    target.created.add([session_id], creator)
                target.purge_soon(created)
                if progress:
                    progress("done", item, result)

            lanes = start_lanes(config, target.discover(), target.expected, apart_queue, queue, catalogue, done)
        try:
            # the suite runs at home any check meant to run apart that no lane took (the lanes broke)
            for item in itertools.chain(iter(queue.front, None), iter(apart_queue.front, None)):
                if progress:
                    progress("start", item, None)
                before = set(target.created.pairs)
                result = target.run_check(item)
                target.purge_soon([pair for pair in target.created.pairs if pair not in before])
                results.append(result)
                if progress:
                    progress("done", item, result)
            for lane in lanes:
                for item, result, created in lane.results():
                    results.append(result)
                    for session_id, creator in created:
                        target.created.add([session_id], creator)
        finally:
            for lane in lanes:
                lane.close()
        position = {item.name: n for n, item in enumerate(selected)}
        results.sort(key=lambda result: position.get(result.name, -1))
        cleanup = target.cleanup()
    finally:
        target.close()

    scope = target.scope
    verdicts = requirement_verdicts(results, catalogue, target.expected, scope)
    profiles = profile_results(scope, verdicts, target.advertised(), config.strict)
    verdict, extra = run_verdict(results, verdicts, profiles, config, target, notes)
    summary = summary_text(verdict.value, claim, profiles, extra)
    if config.select:
        notes.append(f"partial run (--select {', '.join(config.select)}): profiles are judged on the selected checks only")
        summary += " (partial run: selected checks only)"
    return RunResult(
        suite_version=SUITE_VERSION,
        spec_version=spec.spec_version(),
        target=config.target,
        seed=config.seed,
        started_at=started_at,
        duration_s=round(time.perf_counter() - started, 3),
        strict=config.strict,
        config=config.redacted(),
        capabilities=target.capabilities,
        checks=results,
        requirements=verdicts,
        verdict=verdict,
        notes=notes,
        claim=claim.as_dict(),
        profiles=profiles,
        summary=summary,
        preflight=list(preflight or []),
        deployment_only=deployment_only(catalogue),
        cleanup=cleanup,
    )


__all__ = ["Target", "run", "requirement_verdicts", "check_seed", "deployment_only"]
