"""Mutations of real values (conformance/checks/errors/mutations.py): what they are, and that a
decoder breaking on one mutated part is caught on every run."""

from __future__ import annotations

import base64
import json

import pytest

from conformance.checks.errors.mutations import MEMBER_REPLACEMENTS, mutations
from conformance.results import Outcome
from tests.mutants import MUTANTS, all_mutants
from tests.test_mutants import run_against

all_mutants()
VALUE_MUTANTS = ("cursor_position_overflows", "lease_parts_parsed_as_hex")


def test_a_base64_json_value_has_every_member_replaced_and_removed() -> None:
    payload = {"v": 1, "k": "transcript", "i": 0}
    value = base64.urlsafe_b64encode(json.dumps(payload).encode()).decode().rstrip("=")
    decoded = []
    for mutated in mutations(value):
        try:
            decoded.append(json.loads(base64.urlsafe_b64decode(mutated + "=" * (-len(mutated) % 4))))
        except ValueError:
            continue
    for name in payload:
        for replacement in MEMBER_REPLACEMENTS:
            assert {**payload, name: replacement} in decoded, (name, replacement)
        assert {key: item for key, item in payload.items() if key != name} in decoded


def test_every_part_of_an_id_is_replaced_and_the_value_itself_is_never_sent() -> None:
    value = "3f2b8c1e-0000-4a5b-9c8d-112233445566"
    found = mutations(value, other="another-session")
    assert value not in found and "another-session" in found
    for part in value.split("-"):
        assert any(part not in mutated.split("-") and "\u0000" in mutated for mutated in found), part
    assert value[:-1] in found and value + "A" in found and value[: len(value) // 2] in found


@pytest.mark.deep
@pytest.mark.parametrize("name", VALUE_MUTANTS)
def test_a_decoder_that_breaks_on_a_mutated_part_is_caught_every_run(name: str, tmp_path) -> None:
    caught = 0
    for run in range(10):
        result = run_against(MUTANTS[name], f"sqlite:///{tmp_path / f'run-{run}.db'}", seed=2000 + run)
        caught += "ERR-NO-5XX-001" in {v.id for v in result.requirements if v.outcome is Outcome.FAIL}
    assert caught == 10, f"{name} caught {caught}/10"
