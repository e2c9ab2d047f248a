"""The capability-removal matrix: the reference server with any capability outside `core` taken out
(`Settings.disabled_capabilities`), one at a time and all at once, passes `--profile core`; the
`full` verdict names exactly the removed capabilities as missing; rules that lose their evidence
(`verifiable_with` a removed capability) are not verified, never failed; nothing else changes.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import spec
from conformance.results import Outcome, RunResult, Verdict
from conformance.target import verifiable_with
from tests import variants
from tests.test_variants import run_variant

OPTIONAL = variants.optional_capabilities()
CATALOGUE = {req["id"]: req for req in spec.requirements()}
# Checks with nothing to apply to on some servers: a key lifetime too long to wait out, and the
# unadvertised-operations rule on a server lacking only capabilities without operations of their own.
SKIPPABLE = {"fork.key_lifetime", "capabilities.unadvertised_operations",
             # precedence rows of a capability the server lacks do not apply (ERR-PRECEDENCE-001)
             "errors.replay_history_rows", "errors.suspended_turn_rows", "errors.legacy_import_rows", "errors.import_in_progress_row"}
_LACKS = re.compile(r"target lacks '([^']+)'")


def judge(result: RunResult, removed: set[str], claim: str) -> None:
    """What every case must show, under a `core` or a `full` claim."""
    full = next(p for p in result.profiles if p.name == "full")
    assert set(full.missing_capabilities) == removed, full.missing_capabilities
    problems = []
    for check in result.checks:
        if check.outcome is Outcome.FAIL:
            lacked = _LACKS.search(check.message)
            if not (claim == "full" and check.untestable and lacked and lacked.group(1) in removed):
                problems.append(f"{check.name}: fail: {check.message[:300]}")
        elif check.outcome is Outcome.SKIPPED and check.name not in SKIPPABLE:
            problems.append(f"{check.name}: skipped: {check.reason}")
        elif check.outcome in (Outcome.ERROR, Outcome.XFAIL, Outcome.XPASS):
            problems.append(f"{check.name}: {check.outcome.value}: {check.message[:300]}")
    assert not problems, "\n".join(problems)
    for verdict in result.requirements:
        entry = CATALOGUE[verdict.id]
        lost = set(verifiable_with(entry)) & removed
        if lost and entry.get("capability") not in removed:  # evidence lost, the rule still applies
            assert verdict.outcome is Outcome.NOT_VERIFIED, (verdict.id, verdict.outcome, lost)
        if verdict.outcome is Outcome.FAIL:  # only as untestable, for lacking what was removed
            assert claim == "full", verdict.id
    if claim == "core":
        assert result.verdict is Verdict.CONFORMANT and result.exit_code == 0, result.summary
        core = next(p for p in result.profiles if p.name == "core")
        assert core.reached and not core.failed_requirements
        assert full.failed_requirements == [], full.failed_requirements  # missing, never failed
        clause = re.search(r"full not reached: ([^;]*)", result.summary)
        alternatives = {other: name for name, other in spec.stand_ins("full", spec.spec_version()).items()}
        expected = [f"{name} (or {alternatives[name]}) missing" if name in alternatives else f"{name} missing"
                    for name in OPTIONAL if name in removed]
        assert clause and clause.group(1).split(", ") == expected, result.summary
        unverified = [v.id for v in result.requirements if v.in_scope and v.level == "MUST" and v.outcome is Outcome.NOT_VERIFIED]
        if unverified:
            assert f"not verified: {', '.join(unverified)}" in result.summary, result.summary
    else:
        assert result.verdict is Verdict.NOT_CONFORMANT and result.exit_code == 1


CASES = [pytest.param({name}, id=name) for name in OPTIONAL] + [pytest.param(set(OPTIONAL), id="all-at-once")]


@pytest.mark.deep
@pytest.mark.parametrize("removed", CASES)
def test_removing_optional_capabilities_keeps_core(removed: set[str], tmp_path: Path) -> None:
    """The whole suite, claim `core` (not strict): conformant; `full` misses exactly what was removed."""
    result = run_variant(variants.without(removed), tmp_path, profile="core", strict=False)
    judge(result, removed, "core")


@pytest.mark.deep
def test_removing_every_optional_capability_under_the_full_claim(tmp_path: Path) -> None:
    """Claim `full`: every failure is "not testable" for lacking a removed capability."""
    result = run_variant(variants.without(set(OPTIONAL)), tmp_path, profile="full", strict=False)
    judge(result, set(OPTIONAL), "full")


def test_a_core_only_server_passes_the_fuzz_and_the_capability_rules(tmp_path: Path) -> None:
    """Quick: every optional capability removed, the checks a core-only server used to fail on (the
    fuzz over operations it does not offer) and the no-copy rule that loses its evidence."""
    select = ["capabilities.unadvertised_operations", "fuzz.generated_valid_requests", "fuzz.generated_invalid_requests",
              "fork.fork_stores_no_copy"]
    result = run_variant(variants.without(set(OPTIONAL)), tmp_path, profile="core", strict=False, select=select)
    judge(result, set(OPTIONAL), "core")
    checks = {c.name: c.outcome for c in result.checks}
    assert checks["capabilities.unadvertised_operations"] is Outcome.PASS
    assert checks["fuzz.generated_valid_requests"] is checks["fuzz.generated_invalid_requests"] is Outcome.PASS
    assert checks["fork.fork_stores_no_copy"] is Outcome.NOT_VERIFIED
    assert "1 MUST not verified: FORK-NO-COPY-001" in result.summary, result.summary


def test_every_optional_capability_can_be_removed() -> None:
    """Each capability outside `core` is one the reference server can run without."""
    assert OPTIONAL and not set(OPTIONAL) & set(spec.profile_capabilities("core", spec.spec_version()))
    for name in OPTIONAL:
        variants.without({name})  # raises for a name that is not optional
    with pytest.raises(ValueError):
        variants.without({"fork"})


def _advertised(build: Any, tmp_path: Path) -> list[str]:
    import httpx

    from conformance.embedded import serve_app
    from reference_impl.settings import Settings
    from tests.servers import PROJECTS, TOKENS

    settings = Settings(database_url=f"sqlite:///{tmp_path / 'advertised.db'}", tokens=TOKENS, projects=PROJECTS)
    with serve_app(build(settings)) as server:
        return list(httpx.get(f"{server.url}/capabilities").json()["capabilities"])


@pytest.mark.parametrize("removed", ["turn-write", "idempotent-turns", "diagnostics.write-count"])
def test_a_removed_capability_is_not_advertised_and_the_rest_are(removed: str, tmp_path: Path) -> None:
    """Capabilities of one chapter come off one by one (turn-write without idempotent-turns)."""
    advertised = _advertised(variants.without({removed}), tmp_path)
    assert removed not in advertised
    assert set(OPTIONAL) - {removed} <= set(advertised)


def _two_broken_operations(settings: Any) -> Any:
    """The reference, but every lineage read and own-records read answers 500."""
    from tests.mutants import reference_app, rewrite_responses

    def rewrite(scope: dict[str, Any], status: int, headers: Any, body: bytes) -> Any:
        if scope["method"] == "GET" and re.search(r"^/sessions/[^/]+/(lineage|records)$", scope["path"]):
            return 500, [(b"content-type", b"application/problem+json")], b'{"type":"about:blank","title":"boom","status":500}'
        return status, headers, body

    return rewrite_responses(reference_app(settings), rewrite)


def test_the_fuzz_judges_each_operation_and_reports_every_failing_one(tmp_path: Path) -> None:
    result = run_variant(_two_broken_operations, tmp_path, profile="core", strict=False,
                         select=["fuzz.generated_valid_requests"], fuzz_examples=10)
    check = next(c for c in result.checks if c.name == "fuzz.generated_valid_requests")
    assert check.outcome is Outcome.FAIL
    assert "GET /sessions/{session_id}/lineage" in check.message and "GET /sessions/{session_id}/records" in check.message, check.message[:3000]
    assert "found violations in 2 operations" in check.message
    assert check.failed_requirements == ["ERR-NO-5XX-001"]  # the 500 is ERR-NO-5XX-001's; its problem body is well-formed
