"""Every conformance check can fail: each mutant is caught by the requirements it breaks."""

from __future__ import annotations

import pytest

import spec
from conformance.config import load
from conformance.embedded import serve_app
from conformance.results import Outcome, Verdict
from conformance.runner import run
from reference_impl.settings import Settings
from tests.mutants import Mutant, all_mutants
from tests.mutants.otel import OTEL_CATCHES

MUTANTS = all_mutants()
# One token per suite role, in order (owner, stranger, reader, writer, outsider): the outsider is in
# another project.
TOKENS = {
    "mutant-alice-token": "alice",
    "mutant-bob-token": "bob",
    "mutant-carol-token": "carol",
    "mutant-dave-token": "dave",
    "mutant-erin-token": "erin",
}
PROJECTS = {"erin": "elsewhere"}


def run_against(mutant: Mutant, database_url: str, seed: int = 20261202, select: tuple[str, ...] | None = None):
    settings = Settings(database_url=database_url, tokens=TOKENS, projects=PROJECTS)
    with serve_app(mutant.build(settings)) as server:
        config = load(
            overrides={"target": server.url, "tokens": list(TOKENS), "select": list(select or mutant.select), "seed": seed,
                       "strict": True},
            environ={},
        )
        return run(config)


@pytest.mark.mutant
@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_suite_catches_mutant(mutant: Mutant, tmp_path) -> None:
    result = run_against(mutant, f"sqlite:///{tmp_path / 'mutant.db'}")
    failed = {v.id for v in result.requirements if v.outcome is Outcome.FAIL}
    missed = set(mutant.catches) - failed
    details = [f"{c.name}: {c.outcome.value} {c.message[:200]}" for c in result.checks]
    assert not missed, f"{mutant.name} ({mutant.description}) not caught by {sorted(missed)}; checks: {details}"
    assert result.verdict is Verdict.NOT_CONFORMANT
    assert result.exit_code == 1


def test_every_requirement_has_a_mutant() -> None:
    # The traced mutants need the suite's OTLP receiver, so they are registered apart
    # (tests/mutants/otel.py, proven by tests/test_otel_mutants.py).
    covered = {req for m in MUTANTS for req in m.catches} | {req for reqs in OTEL_CATCHES.values() for req in reqs}
    suite_level = [r for r in spec.requirements() if r.get("verification", "suite") == "suite"]
    missing = sorted(req["id"] for req in suite_level if req["id"] not in covered)
    assert not missing, f"requirements no mutant proves checkable: {missing}"


# ---------------------------------------------------------------- states and orders (issue 17 item 7)
STATE_AND_ORDER_MUTANTS = [m for m in MUTANTS if m.build.__module__ in ("tests.mutants.state_matrix", "tests.mutants.access_orders")]


@pytest.mark.deep
@pytest.mark.parametrize("mutant", STATE_AND_ORDER_MUTANTS, ids=[m.name for m in STATE_AND_ORDER_MUTANTS])
def test_state_and_order_mutants_are_caught_every_run(mutant: Mutant, tmp_path) -> None:
    """Caught by the rule each breaks in 10 runs of 10 seeds: the tables and the orders are fixed,
    so a seed may change the ids, never whether the broken state is reached."""
    caught = 0
    for run in range(10):
        result = run_against(mutant, f"sqlite:///{tmp_path / f'run-{run}.db'}", seed=3000 + run)
        caught += set(mutant.catches) <= {v.id for v in result.requirements if v.outcome is Outcome.FAIL}
    assert caught == 10, f"{mutant.name} caught {caught}/10"
