"""Each automated layer catches faults on its own: the state machine and the two fuzzing modes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from conformance.config import load
from conformance.embedded import serve_app
from conformance.results import Outcome
from conformance.runner import run
from reference_impl.settings import Settings
from tests.mutants import MUTANTS, all_mutants, reference_app, rewrite_responses

all_mutants()
TOKENS = {"layer-alice": "alice", "layer-bob": "bob"}


def failed_requirements(app: Any, select: str, seed: int = 11, stateful_examples: int = 20) -> set[str]:
    with serve_app(app) as server:
        # Each layer alone, at the generated-case counts of a deeper run than the quick default:
        # these tests show what a layer can catch, not what one quick run samples.
        config = load(overrides={"target": server.url, "tokens": list(TOKENS), "select": [select], "seed": seed,
                                 "fuzz_examples": 25, "stateful_examples": stateful_examples}, environ={})
        result = run(config)
    assert all(c.outcome is not Outcome.ERROR for c in result.checks), [c.message for c in result.checks]
    return {v.id for v in result.requirements if v.outcome is Outcome.FAIL}


def settings(tmp_path) -> Settings:
    return Settings(database_url=f"sqlite:///{tmp_path / 'layer.db'}", tokens=TOKENS)


@pytest.mark.deep
def test_state_machine_alone_catches_leaking_cutoffs(tmp_path) -> None:
    app = MUTANTS["cutoff_ignored"].build(settings(tmp_path))
    assert "XS-EFFECTIVE-001" in failed_requirements(app, "stateful")


@pytest.mark.deep
def test_state_machine_alone_catches_revocations_that_do_not_cascade(tmp_path) -> None:
    """Grants, revocations and deletions are part of the programs: access kept from fork time shows."""
    app = MUTANTS["access_kept_from_fork_time"].build(settings(tmp_path))
    assert failed_requirements(app, "stateful") & {"AUTH-REVOKE-CASCADE-001", "AUTH-LINEAGE-READ-001"}


@pytest.mark.deep
def test_state_machine_alone_catches_deleted_ancestors_breaking_descendants(tmp_path) -> None:
    app = MUTANTS["deleted_ancestor_breaks_descendants"].build(settings(tmp_path))
    assert "DEL-DESCENDANTS-001" in failed_requirements(app, "stateful")


def test_state_machine_passes_on_the_reference(tmp_path) -> None:
    assert failed_requirements(reference_app(settings(tmp_path)), "stateful") == set()


@pytest.mark.deep  # the whole fuzz at 25 cases per operation: tests/test_capability_removal.py proves the fuzz quickly
def test_positive_fuzzing_alone_catches_a_schema_violation(tmp_path) -> None:
    def drop_created_at(scope: dict[str, Any], status: int, headers: Any, body: bytes) -> Any:
        if scope["method"] == "POST" and scope["path"] == "/sessions" and status == 201:
            data = json.loads(body)
            data.pop("created_at", None)
            body = json.dumps(data).encode()
        return status, headers, body

    app = rewrite_responses(reference_app(settings(tmp_path)), drop_created_at)
    assert "ERR-SCHEMA-001" in failed_requirements(app, "fuzz.generated_valid")


@pytest.mark.deep
def test_fuzzing_alone_catches_a_5xx_on_odd_input(tmp_path) -> None:
    def crash_on_large_limits(scope: dict[str, Any], status: int, headers: Any, body: bytes) -> Any:
        query = scope.get("query_string", b"").decode()
        if "limit=" in query and status in (200, 422):
            value = query.split("limit=")[1].split("&")[0]
            if not value.isdigit() or int(value) > 500:
                return 500, [(b"content-type", b"text/plain")], b"boom"
        return status, headers, body

    app = rewrite_responses(reference_app(settings(tmp_path)), crash_on_large_limits)
    assert "ERR-NO-5XX-001" in failed_requirements(app, "fuzz")


@pytest.mark.deep
def test_linked_fuzzing_alone_catches_a_fault_behind_a_sequence(tmp_path) -> None:
    """Only an existing session triggers this fault; random ids never do, the spec's links do.

    With 77 links to choose from, a sequence reaches this one by chance: 60 sequences caught it for
    5 of seeds 11-16, 6 sequences for none, and seed 13 not even in 150. So this is a proof of what
    the layer can do (deep, 150 sequences, seed 11), not of what one quick run samples."""

    def crash_on_existing_sessions(scope: dict[str, Any], status: int, headers: Any, body: bytes) -> Any:
        if scope["method"] == "GET" and scope["path"].count("/") == 2 and status == 200:
            return 500, [(b"content-type", b"text/plain")], b"boom"
        return status, headers, body

    app = rewrite_responses(reference_app(settings(tmp_path)), crash_on_existing_sessions)
    assert "ERR-NO-5XX-001" in failed_requirements(app, "fuzz.generated_stateful", stateful_examples=50)


def test_vector_checks_alone_catch_leaking_cutoffs(tmp_path) -> None:
    """The JSON vectors of fixtures/lineage are checks too: a leaking cutoff fails them."""
    app = MUTANTS["cutoff_ignored"].build(settings(tmp_path))
    assert {"XS-EFFECTIVE-001", "FORK-SNAPSHOT-001"} & failed_requirements(app, "vectors")
