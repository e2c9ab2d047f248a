"""Deep proofs of reliability: every concurrency mutant is caught 10 runs out of 10, and 20 seeded
runs per engine against a served reference pass.

Races are won by chance; a check that catches a racy server only sometimes lets it through a gate
now and then. Each mutant here runs its concurrency checks ten times, with ten seeds, on a fresh
database each time. The deep set: `pytest --deep`.
"""

from __future__ import annotations

import json


import pytest

from conformance.results import Outcome
from tests.mutants import MUTANTS, all_mutants
from tests.seeded_runs import SEEDS, one_run
from tests.test_mutants import run_against

all_mutants()
RUNS = 10
# mutant -> the concurrency check that must catch it
CONCURRENCY_MUTANTS = {
    "second_acquisition_granted": ("leases.concurrent_acquisitions", "LEASE-EXCLUSIVE-001"),
    "lease_checked_then_taken": ("leases.concurrent_acquisitions", "LEASE-EXCLUSIVE-001"),
    "lost_target_race_reported_as_created": ("fork.concurrent_forks_to_one_target", "FORK-TARGET-CONCURRENT-001"),
    "snapshot_outside_transaction": ("fork.forks_while_source_is_written", "FORK-SNAPSHOT-CONCURRENT-001"),
    "fork_not_idempotent": ("fork.concurrent_identical_forks", "FORK-IDEMPOTENT-CONCURRENT-001"),
    "session_created_twice": ("sessions.concurrent_creates", "SESS-ID-CONFLICT-001"),
    "turn_slot_checked_then_taken": ("sessions.concurrent_turn_starts", "SESS-TURN-SINGLE-001"),
    "turn_finished_twice": ("sessions.concurrent_finishes", "SESS-TURN-FINISH-001"),
    "one_request_slot_checked_then_taken": ("turn_writes.concurrent_one_request_turns", "TURN-WRITE-001"),
    "turn_key_checked_then_written": ("turn_writes.concurrent_identical_turn_writes", "TURN-IDEM-CONCURRENT-001"),
    "revert_checked_then_swapped": ("revert.concurrent_reverts", "REVERT-CONCURRENT-001"),
    "recover_checked_then_resumed": ("suspend.concurrent_recovers", "SUSPEND-RECOVER-CONCURRENT-001"),
    "import_claim_checked_then_taken": ("legacy_import.concurrent_imports", "IMPORT-CONCURRENT-001"),
}
counts: dict[str, int] = {}


@pytest.mark.deep
@pytest.mark.parametrize("name", sorted(CONCURRENCY_MUTANTS))
def test_concurrency_mutant_is_caught_every_time(name: str, tmp_path) -> None:
    select, requirement = CONCURRENCY_MUTANTS[name]
    mutant = MUTANTS[name]
    missed = []
    for run in range(RUNS):
        result = run_against(mutant, f"sqlite:///{tmp_path / f'run-{run}.db'}", seed=1000 + run, select=(select,))
        failed = {v.id for v in result.requirements if v.outcome is Outcome.FAIL}
        if requirement not in failed:
            missed.append((run, [f"{c.name}: {c.outcome.value} {c.message[:200]}" for c in result.checks]))
    counts[name] = RUNS - len(missed)
    print(f"{name}: caught {counts[name]}/{RUNS} by {select}")
    assert not missed, f"{name} missed in {len(missed)} of {RUNS} runs: {missed[:2]}"


@pytest.mark.deep
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
def test_seeded_run_against_served_replicas(engine: str, seed: int, request: pytest.FixtureRequest) -> None:
    """One of 20 `check --target` runs per engine (seed 4242 among them) against two served
    replicas: 0 failures and 0 errors. One test per run, so the workers share them out."""
    database_url = request.getfixturevalue("postgres_server") if engine == "postgresql" else None
    outcome = one_run(engine, seed, database_url)
    # A string, not the dict: pytest shortens a dict's repr, and the failing checks' names were lost
    assert not outcome["fail"] and not outcome["error"], json.dumps(outcome, indent=1)
