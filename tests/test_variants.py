"""The suite judges servers it did not write: permitted variants pass, lacking servers fail for
the right requirement.

Each variant (tests/variants) differs from the reference only where the spec allows, or lacks
one thing its claimed profile needs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from conformance.config import load
from conformance.embedded import serve_app
from conformance.registry import all_checks
from conformance.results import Outcome, RunResult, Verdict
from conformance.runner import run
from reference_impl.settings import Settings
from tests import variants
from tests.servers import PROJECTS, TOKENS
# Checks that have nothing to apply to on a server offering every optional capability.
NOT_APPLICABLE_WITH_EVERY_CAPABILITY = {"capabilities.unadvertised_operations"}


def run_variant(build: Callable[[Settings], Any], tmp_path: Any, seed: int = 5, **overrides: Any) -> RunResult:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'variant.db'}", tokens=TOKENS, projects=PROJECTS)
    with serve_app(build(settings)) as server:
        config = load(overrides={"target": server.url, "tokens": list(TOKENS), "seed": seed, "strict": True, **overrides},
                      environ={})
        return run(config)


def outcomes(result: RunResult) -> dict[str, Outcome]:
    return {v.id: v.outcome for v in result.requirements}


def not_passing(result: RunResult, allowed: set[str] = frozenset()) -> list[str]:  # type: ignore[assignment]
    return [
        f"{c.name}: {c.outcome.value}: {(c.message or c.reason or '')[:300]}"
        for c in result.checks
        if c.outcome is not Outcome.PASS and c.name not in allowed
    ]


# ---------------------------------------------------------------- permitted variants pass
@pytest.mark.deep  # a whole-suite run, too long for the quick set
def test_limits_at_the_spec_minimums_pass_the_whole_suite(tmp_path: Any) -> None:
    """Every minimum of CAP-LIMITS-001 at once: page 10 and default page 1, batch 3, record 1024,
    request 16384, depth 5, key lifetime 1 s, lease 2 s, attachments 64 KiB. Conformant to `full`;
    the two expiries are waited out (pass) or, on a machine too slow to establish the margin, not
    verified - never failed."""
    result = run_variant(variants.minimum_limits, tmp_path, strict=False)
    timing = {"fork.key_lifetime", "leases.lease_expires"}
    allowed = NOT_APPLICABLE_WITH_EVERY_CAPABILITY | {c.name for c in result.checks if c.name in timing and c.outcome is Outcome.NOT_VERIFIED}
    allowed |= {c.name for c in result.checks if c.name in variants.UNTRACED_OUT_OF_SCOPE and c.outcome is Outcome.OUT_OF_SCOPE}
    assert not not_passing(result, allowed), not_passing(result, allowed)
    assert len(result.checks) == len(all_checks())
    assert result.capabilities is not None and result.capabilities["limits"]["default_page_size"] == 1
    assert result.capabilities["limits"]["idempotency_key_lifetime_seconds"] == 1
    by_name = {c.name: c.outcome for c in result.checks}
    assert {by_name[name] for name in timing} <= {Outcome.PASS, Outcome.NOT_VERIFIED}
    assert result.verdict is Verdict.CONFORMANT and result.exit_code == 0


@pytest.mark.deep  # a whole-suite run, too long for the quick set
def test_no_optional_capability_passes_under_the_core_profile(tmp_path: Any) -> None:
    """No writer leases, no diagnostics headers: conformant to `core`, the rest out of scope; without
    write diagnostics, no-copy is not verified (named in the verdict; with strict it fails)."""
    result = run_variant(variants.no_optional_capability, tmp_path, profile="core", strict=False)
    checks = {c.name: c for c in result.checks}
    assert checks["capabilities.unadvertised_operations"].outcome is Outcome.PASS
    out_of_scope = {name for name, c in checks.items() if c.outcome is Outcome.OUT_OF_SCOPE}
    tables_of_removed = {"state_matrix.leases", "state_matrix.suspended_turns", "state_matrix.legacy_imports", "state_matrix.patch_three_state",
                         "state_matrix.leases_and_suspended_turns", "state_matrix.leases_and_imports", "state_matrix.one_request_turns",
                         "state_matrix.keyed_turn_writes"}
    assert out_of_scope == {c.name for c in all_checks() if c.chapter in ("leases", "diagnostics", "context", "suspend", "legacy_import", "export", "revert", "turn_writes", "session_patch")} | tables_of_removed
    # a day-long key lifetime is not waited out (skipped); round trips and bytes on a server that
    # counts none cannot be observed (not verified)
    not_verified = {"rollout.replay_history_cost_by_depth", "fork.fork_stores_no_copy", "fork.fork_stores_no_attachment_copy"}
    assert {name for name, c in checks.items() if c.outcome is Outcome.NOT_VERIFIED} == not_verified
    # precedence rows of capabilities it lacks do not apply (skipped)
    rows = {"errors.replay_history_rows", "errors.suspended_turn_rows", "errors.legacy_import_rows", "errors.import_in_progress_row"}
    assert {name for name, c in checks.items() if c.outcome is Outcome.SKIPPED} <= rows | {"fork.key_lifetime"}
    allowed = out_of_scope | not_verified | rows | {"fork.key_lifetime"}
    assert not not_passing(result, allowed), not_passing(result, allowed)
    assert result.verdict is Verdict.CONFORMANT and result.exit_code == 0
    assert result.summary.endswith("; 1 MUST not verified: FORK-NO-COPY-001"), result.summary  # of the claim; full has its reasons


def test_other_permitted_answers_pass(tmp_path: Any) -> None:
    """405 (not 404) for the lease operations it does not offer; 415 for a body without Content-Type."""
    select = ["capabilities", "errors", "sessions", "fork.fork_creates_child", "authorization"]
    result = run_variant(variants.other_permitted_answers, tmp_path, profile="core", select=select)
    by_name = {c.name: c.outcome for c in result.checks}
    assert by_name["capabilities.unadvertised_operations"] is Outcome.PASS
    assert by_name["errors.media_type"] is Outcome.PASS
    assert not not_passing(result), not_passing(result)
    assert result.verdict is Verdict.CONFORMANT


def test_an_in_flight_409_for_concurrent_identical_forks_passes(tmp_path: Any) -> None:
    in_flight: list[int] = []

    def counting(settings: Settings) -> Any:
        app = variants.idempotency_in_flight(settings)

        async def wrapped(scope: dict[str, Any], receive: Any, send: Any) -> None:
            async def watch(message: dict[str, Any]) -> None:
                if message["type"] == "http.response.start" and message["status"] == 409:
                    in_flight.append(1)
                await send(message)

            await app(scope, receive, watch)

        return wrapped

    result = run_variant(counting, tmp_path, select=["fork.concurrent_identical_forks", "FORK-IDEMPOTENT"])
    assert not not_passing(result, {"fork.key_lifetime"}), not_passing(result, {"fork.key_lifetime"})
    by_name = {c.name: c.outcome for c in result.checks}
    assert by_name["fork.concurrent_identical_forks"] is Outcome.PASS
    assert in_flight, "the variant never answered 409 idempotency-in-flight, so the test proved nothing"


# ---------------------------------------------------------------- lacking servers fail for the right reason
def test_a_fork_that_copies_what_the_child_inherits_fails_no_copy(tmp_path: Any) -> None:
    """Ids kept and one statement: the API (fork.fork_creates_child) and DIAG-FORK-COST-001 cannot
    see the copy; the items written can, so FORK-NO-COPY-001 fails through its storage check."""
    select = ["fork.fork_creates_child", "fork.fork_stores_no_copy", "diagnostics", "transcript.effective_order_depth_5"]
    result = run_variant(variants.copying_fork, tmp_path, select=select)
    found = outcomes(result)
    assert found["DIAG-FORK-WRITES-001"] is Outcome.FAIL and found["FORK-NO-COPY-001"] is Outcome.FAIL
    assert {c.name: c.outcome for c in result.checks}["fork.fork_creates_child"] is Outcome.PASS
    assert found["DIAG-FORK-COST-001"] is Outcome.PASS
    assert found["XS-EFFECTIVE-001"] is Outcome.PASS
    assert {k for k, v in found.items() if v is Outcome.FAIL} == {"DIAG-FORK-WRITES-001", "FORK-NO-COPY-001"}
    assert result.verdict is Verdict.NOT_CONFORMANT and result.exit_code == 1


def test_no_diagnostics_under_the_full_claim_is_not_testable(tmp_path: Any) -> None:
    """Without the headers no-copy cannot be shown: within `full` that is a failure, never a skip."""
    result = run_variant(variants.no_diagnostics, tmp_path, select=["diagnostics", "capabilities"])
    found = outcomes(result)
    for requirement in ("DIAG-HEADER-001", "DIAG-DEPTH-001", "DIAG-PAGE-COST-001", "DIAG-WRITES-001", "DIAG-FORK-WRITES-001"):
        assert found[requirement] is Outcome.FAIL, (requirement, found)
    untestable = [c for c in result.checks if c.chapter == "diagnostics" and c.name not in variants.UNTRACED_OUT_OF_SCOPE]
    assert untestable and all(c.outcome is Outcome.FAIL and "not testable" in c.message for c in untestable)
    # a server of neither source is judged once, on the header rules; the span rules are out of scope
    assert all(c.outcome is Outcome.OUT_OF_SCOPE for c in result.checks if c.name in variants.UNTRACED_OUT_OF_SCOPE)
    assert found["CAP-NAMES-001"] is Outcome.PASS  # not listing them is honest
    assert result.verdict is Verdict.NOT_CONFORMANT and result.exit_code == 1


def test_a_lineage_limit_below_the_minimum_fails_cap_limits(tmp_path: Any) -> None:
    """max_lineage_depth 3: the depth check fails citing CAP-LIMITS-001, never reading at 3 for 5."""
    result = run_variant(variants.shallow_lineage, tmp_path, select=["capabilities.minimum_limits", "diagnostics.transcript_cost_by_depth", "vectors.chains"])
    by_name = {c.name: c for c in result.checks}
    depth = by_name["diagnostics.transcript_cost_by_depth"]
    assert depth.outcome is Outcome.FAIL and depth.failed_requirements == ["CAP-LIMITS-001"], depth.message
    assert "max_lineage_depth is 3" in depth.message
    assert by_name["vectors.chains"].failed_requirements == ["CAP-LIMITS-001"]
    assert outcomes(result)["CAP-LIMITS-001"] is Outcome.FAIL
    assert result.verdict is Verdict.NOT_CONFORMANT


@pytest.mark.parametrize("name", ["minimum_limits", "no_optional_capability", "other_permitted_answers",
                                  "idempotency_in_flight", "shallow_lineage", "no_diagnostics", "copying_fork"])
def test_every_variant_is_a_server(name: str, tmp_path: Any) -> None:
    """Each variant serves the capability document (a quick smoke test of the builders)."""
    import httpx

    settings = Settings(database_url=f"sqlite:///{tmp_path / 'smoke.db'}", tokens=TOKENS, projects=PROJECTS)
    with serve_app(getattr(variants, name)(settings)) as server:
        assert httpx.get(f"{server.url}/capabilities").status_code == 200
