"""Outcomes of checks turned into requirement verdicts and a run verdict.

Verdict rules: the target claims a profile at a spec version (see `profiles.py`). A MUST of that
profile that failed, or that the target cannot show because it lacks a capability the profile
includes, makes it not conformant (a SHOULD too with `strict`, and then also an expected failure
that now passes); so does a capability listed in `expect_capabilities` that is not advertised.
Otherwise an error within the claim makes the run incomplete; only then is the target conformant.
Requirements outside the claim count neither for nor against. A skip is never a pass. A MUST of
the claim that is not verified (the rule applies, but its evidence could not be observed) is named in
the verdict line; it fails the run only with `strict`.
"""

from __future__ import annotations

from typing import Any

from conformance.config import Config, ExpectedFailure
from conformance.profiles import Scope
from conformance.results import NOT_VERIFIABLE, CheckResult, Outcome, RequirementVerdict, Verdict
from conformance.target import Target


def deployment_only(catalogue: dict[str, dict[str, Any]]) -> list[dict[str, str]]:
    """Requirements only a deployment can observe: listed in every report as not verifiable."""
    return [
        {"id": req["id"], "level": req["level"], "chapter": req["chapter"], "title": req["title"], "note": NOT_VERIFIABLE}
        for req in catalogue.values()
        if req.get("verification", "suite") == "deployment"
    ]


def requirement_verdicts(
    results: list[CheckResult],
    catalogue: dict[str, dict[str, Any]],
    expected: dict[str, ExpectedFailure],
    scope: Scope,
) -> list[RequirementVerdict]:
    """One verdict per requirement cited by the run:
    fail > expected failure > error > not verified > pass > skipped > out of scope
    (a rule one check could not verify is not verified, whatever the others saw).
    A listed requirement that passed is an unexpected pass."""
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
        elif any(r.outcome is Outcome.NOT_VERIFIED for r in items):
            outcome = Outcome.NOT_VERIFIED
        elif any(r.outcome in (Outcome.PASS, Outcome.XPASS) for r in items):
            outcome = Outcome.PASS
        elif any(r.outcome is Outcome.SKIPPED for r in items):
            outcome = Outcome.SKIPPED
        elif all(r.outcome is Outcome.OUT_OF_SCOPE for r in items):
            outcome = Outcome.OUT_OF_SCOPE
        else:  # its checks failed on other requirements before reaching this one
            outcome = Outcome.ERROR
        entry = catalogue.get(req_id, {"level": "MUST", "chapter": "unknown", "title": req_id})
        in_scope = scope.in_profile(req_id)
        verdict = RequirementVerdict(
            id=req_id,
            level=entry["level"],
            chapter=entry["chapter"],
            title=entry["title"],
            outcome=outcome,
            checks=[r.name for r in items],
            in_scope=in_scope,
            reason=None if in_scope else scope.why_out(req_id),
        )
        if req_id in expected and outcome in (Outcome.PASS, Outcome.XFAIL):
            verdict.reason, verdict.link = expected[req_id].reason, expected[req_id].link
            if outcome is Outcome.PASS:
                verdict.outcome = Outcome.XPASS
        verdicts.append(verdict)
    order = list(catalogue)
    verdicts.sort(key=lambda v: order.index(v.id) if v.id in order else len(order))
    return verdicts


def run_verdict(
    results: list[CheckResult],
    verdicts: list[RequirementVerdict],
    profiles: list[Any],
    config: Config,
    target: Target,
    notes: list[str],
) -> tuple[Verdict, list[str]]:
    """The verdict on the claimed profile, and reasons beyond the profile's own (for the summary)."""
    scope = target.scope
    claimed = next(p for p in profiles if p.claimed)
    extra: list[str] = []
    missing_expected = target.missing_expected_capabilities()
    if missing_expected:
        extra.append(", ".join(f"expected capability {name} missing" for name in missing_expected))
    stale_checks = [r.name for r in results if r.outcome is Outcome.XPASS]
    stale_requirements = [v.id for v in verdicts if v.outcome is Outcome.XPASS]
    for name in stale_checks + stale_requirements:
        notes.append(f"{name} is listed as an expected failure but passed: remove it from the expected-failures file")
    if config.strict and stale_checks:
        extra.append(f"{', '.join(stale_checks)} passed but {'is' if len(stale_checks) == 1 else 'are'} listed as expected to fail")
    out_of_claim = [v.id for v in verdicts if v.outcome is Outcome.FAIL and not v.in_scope]
    if out_of_claim:
        notes.append(f"failed outside the claimed {scope.claim} (not counted): {', '.join(out_of_claim)}")
    if claimed.status == "not reached" or extra:
        return Verdict.NOT_CONFORMANT, extra
    errors = [r.name for r in results if r.outcome is Outcome.ERROR and any(scope.in_profile(q) for q in r.requirements)]
    outside = [r.name for r in results if r.outcome is Outcome.ERROR and r.name not in errors]
    if outside:
        notes.append(f"errors outside the claimed {scope.claim} (not counted): {', '.join(outside)}")
    if claimed.undetermined_requirements:
        notes.append("requirements without a verdict: " + ", ".join(claimed.undetermined_requirements))
    if errors or claimed.status == "undetermined":
        return Verdict.INCOMPLETE, extra
    return Verdict.CONFORMANT, extra
