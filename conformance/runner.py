"""Runs the checks against a target and turns their outcomes into a verdict.

Verdict rules: a failing MUST requirement (or SHOULD, with `strict`) makes the target
not conformant; otherwise an error, a missing expected capability or a cited requirement left
without a verdict makes the run incomplete; only then is the target conformant. A skipped check is
reported as skipped, never as a pass.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import spec
from conformance import SUITE_VERSION
from conformance.client import ApiClient, Recorder
from conformance.config import Config, load_expected_failures
from conformance.context import CheckContext
from conformance.errors import CheckFailed, TargetUnreachable, Unsupported
from conformance.registry import Check, all_checks, select
from conformance.results import (
    CheckResult,
    Outcome,
    RequirementVerdict,
    RunResult,
    Verdict,
)

LEVEL_RANK = {"MUST": 3, "SHOULD": 2, "MAY": 1}
Progress = Callable[[str, Check, CheckResult | None], None]


def check_seed(run_seed: int, name: str) -> int:
    """A per-check seed: stable for a run seed, independent of which other checks run."""
    value = run_seed
    for char in name:
        value = (value * 1_000_003 + ord(char)) % (2**32)
    return value


def _catalogue() -> dict[str, dict[str, Any]]:
    return {req["id"]: req for req in spec.requirements()}


class Target:
    """Open connections to the server under test: one client per principal and an anonymous one."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.catalogue = _catalogue()
        self.expected = load_expected_failures(config.expected_failures)
        self.recorder = Recorder()
        self.clients = [
            ApiClient(config.target, token, f"principal-{n + 1}", self.recorder, config.timeout, config.concurrency * 2)
            for n, token in enumerate(config.tokens)
        ]
        self.anonymous = ApiClient(config.target, None, None, self.recorder, config.timeout)
        self.replicas = [
            [client]
            + [
                ApiClient(url, client.token, client.principal, self.recorder, config.timeout, config.concurrency * 2)
                for url in config.replicas
            ]
            for client in self.clients
        ]
        self.capabilities: dict[str, Any] | None = None

    def discover(self) -> dict[str, Any]:
        """Read the capability document once; every check is then planned from it."""
        if self.capabilities is None:
            self.capabilities = _discover(self.clients[0])
        return self.capabilities

    def missing_expected_capabilities(self) -> list[str]:
        advertised = (self.capabilities or {}).get("capabilities", [])
        return [name for name in self.config.expect_capabilities if name not in advertised]

    def run_check(self, item: Check) -> CheckResult:
        result = _run_one(
            item, self.config, self.discover(), self.replicas, self.anonymous, self.recorder, self.catalogue
        )
        return _apply_expected(result, self.expected)

    def close(self) -> None:
        for client in [c for group in self.replicas for c in group] + [self.anonymous]:
            client.close()


def run(config: Config, progress: Progress | None = None, checks: list[Check] | None = None) -> RunResult:
    started = time.perf_counter()
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    selected = select(checks if checks is not None else all_checks(), config.select)
    target = Target(config)
    catalogue = target.catalogue
    notes: list[str] = []
    results: list[CheckResult] = []
    try:
        try:
            target.discover()
        except Exception as exc:  # the run cannot start: every check errors
            notes.append(f"capability discovery failed: {exc}")
            for item in selected:
                results.append(_result(item, catalogue, Outcome.ERROR, f"not run: {exc}"))
        else:
            for name in target.missing_expected_capabilities():
                notes.append(f"expected capability '{name}' is not advertised by the target")
            for item in selected:
                if progress:
                    progress("start", item, None)
                result = target.run_check(item)
                results.append(result)
                if progress:
                    progress("done", item, result)
    finally:
        target.close()

    capabilities = target.capabilities
    expected = target.expected
    verdicts = requirement_verdicts(results, catalogue, expected, notes)
    verdict = _verdict(results, verdicts, config.strict, notes, catalogue)
    return RunResult(
        suite_version=SUITE_VERSION,
        spec_version=spec.spec_version(),
        target=config.target,
        seed=config.seed,
        started_at=started_at,
        duration_s=round(time.perf_counter() - started, 3),
        strict=config.strict,
        config=config.redacted(),
        capabilities=capabilities,
        checks=results,
        requirements=verdicts,
        verdict=verdict,
        notes=notes,
    )


def _discover(client: ApiClient) -> dict[str, Any]:
    """The capability document, unvalidated: `capabilities.discovery_document` judges its shape."""
    response = client.get("/capabilities", validate_response=False)
    if response.status != 200:
        raise TargetUnreachable(f"GET /capabilities answered {response.status}")
    try:
        document = response.json()
    except ValueError as exc:
        raise TargetUnreachable("GET /capabilities did not answer JSON") from exc
    if not isinstance(document, dict):
        raise TargetUnreachable("GET /capabilities did not answer a JSON object")
    document.setdefault("capabilities", [])
    document.setdefault("limits", {})
    document.setdefault("diagnostics", {"query_count": False})
    return document


def _result(item: Check, catalogue: dict[str, dict[str, Any]], outcome: Outcome, message: str, **extra: Any) -> CheckResult:
    levels = [catalogue[r]["level"] for r in item.requirements if r in catalogue]
    level = max(levels, key=LEVEL_RANK.__getitem__) if levels else "MUST"
    return CheckResult(
        name=item.name,
        title=item.title,
        chapter=item.chapter,
        requirements=list(item.requirements),
        outcome=outcome,
        message=message,
        level=level,
        **extra,
    )


def _run_one(
    item: Check,
    config: Config,
    capabilities: dict[str, Any],
    replicas: list[list[ApiClient]],
    anonymous: ApiClient,
    recorder: Recorder,
    catalogue: dict[str, dict[str, Any]],
) -> CheckResult:
    missing = [need for need in item.needs if need not in capabilities.get("capabilities", [])]
    if missing:
        return _result(item, catalogue, Outcome.SKIPPED, "", reason=f"unsupported: target lacks {', '.join(missing)}")
    seed = check_seed(config.seed, item.name)
    recorder.clear()
    context = CheckContext(config, capabilities, replicas, anonymous, seed)
    started = time.perf_counter()
    extra: dict[str, Any] = {"seed": seed}
    try:
        item.func(context)
    except CheckFailed as failure:
        violated = failure.requirements or list(item.requirements)
        if failure.also_check:
            violated = list(dict.fromkeys([*violated, *item.requirements]))
        exchange = failure.exchange or recorder.last
        result = _result(item, catalogue, Outcome.FAIL, f"{failure.message} (seed {seed})", **extra)
        result.failed_requirements = violated
        levels = [catalogue[r]["level"] for r in violated if r in catalogue]
        result.level = max(levels, key=LEVEL_RANK.__getitem__) if levels else result.level
        result.exchange = exchange
        result.reproducer = _reproducer(exchange)
    except Unsupported as skip:
        result = _result(item, catalogue, Outcome.SKIPPED, "", reason=f"unsupported: {skip}", **extra)
    except TargetUnreachable as exc:
        result = _result(item, catalogue, Outcome.ERROR, f"target unreachable: {exc}", **extra)
    except Exception as exc:  # the suite itself broke
        tail = "".join(traceback.format_exception(exc)[-3:]).strip()
        result = _result(item, catalogue, Outcome.ERROR, f"{exc.__class__.__name__}: {exc}\n{tail}", **extra)
        result.exchange = recorder.last
    else:
        result = _result(item, catalogue, Outcome.PASS, "", **extra)
    result.duration_ms = round((time.perf_counter() - started) * 1000, 1)
    return result


def _reproducer(exchange: Any) -> str | None:
    if exchange is None:
        return None
    from conformance.curl import to_curl

    suffix = (exchange.principal or "").upper().replace("-", "_")
    return to_curl(exchange, f"SESSION_LINEAGE_TOKEN_{suffix}" if suffix else "SESSION_LINEAGE_TOKEN")


def _apply_expected(result: CheckResult, expected: dict[str, str]) -> CheckResult:
    if not expected:
        return result
    if result.outcome is Outcome.FAIL:
        for key in [result.name, *result.failed_requirements]:
            if key in expected:
                result.outcome = Outcome.XFAIL
                result.reason = expected[key]
                return result
    if result.outcome is Outcome.PASS and result.name in expected:
        result.outcome = Outcome.XPASS
        result.reason = expected[result.name]
    return result


def requirement_verdicts(
    results: list[CheckResult],
    catalogue: dict[str, dict[str, Any]],
    expected: dict[str, str],
    notes: list[str],
) -> list[RequirementVerdict]:
    """One verdict per requirement cited by the run: fail > expected failure > error > pass > skipped."""
    cited: dict[str, list[CheckResult]] = {}
    for result in results:
        for req in dict.fromkeys([*result.requirements, *result.failed_requirements]):
            cited.setdefault(req, []).append(result)
    verdicts = []
    for req_id, items in cited.items():
        violated = [r for r in items if req_id in r.failed_requirements]
        if any(r.outcome is Outcome.FAIL for r in violated):
            outcome = Outcome.FAIL
        elif any(r.outcome is Outcome.XFAIL for r in violated):
            outcome = Outcome.XFAIL
        elif any(r.outcome is Outcome.ERROR for r in items):
            outcome = Outcome.ERROR
        elif any(r.outcome in (Outcome.PASS, Outcome.XPASS) for r in items):
            outcome = Outcome.PASS
        elif all(r.outcome is Outcome.SKIPPED for r in items):
            outcome = Outcome.SKIPPED
        else:  # its checks failed on other requirements before reaching this one
            outcome = Outcome.ERROR
        if outcome is Outcome.PASS and req_id in expected:
            notes.append(f"{req_id} is listed as an expected failure but passed")
        entry = catalogue.get(req_id, {"level": "MUST", "chapter": "unknown", "title": req_id})
        verdicts.append(
            RequirementVerdict(
                id=req_id,
                level=entry["level"],
                chapter=entry["chapter"],
                title=entry["title"],
                outcome=outcome,
                checks=[r.name for r in items],
            )
        )
    order = list(catalogue)
    verdicts.sort(key=lambda v: order.index(v.id) if v.id in order else len(order))
    return verdicts


def _verdict(
    results: list[CheckResult],
    verdicts: list[RequirementVerdict],
    strict: bool,
    notes: list[str],
    catalogue: dict[str, dict[str, Any]],
) -> Verdict:
    gating = {"MUST", "SHOULD"} if strict else {"MUST"}
    if any(v.outcome is Outcome.FAIL and v.level in gating for v in verdicts):
        return Verdict.NOT_CONFORMANT
    unverified = [v.id for v in verdicts if v.outcome is Outcome.ERROR]
    if unverified:
        notes.append("requirements without a verdict: " + ", ".join(unverified))
    if any(r.outcome is Outcome.ERROR for r in results) or unverified or any(
        "expected capability" in note for note in notes
    ):
        return Verdict.INCOMPLETE
    return Verdict.CONFORMANT
