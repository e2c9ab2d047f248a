"""The state-machine tables (fixtures/states): valid against their schema, complete in their own
terms, citing only rules of the capabilities they need, and each run by one check."""

from __future__ import annotations

import json
from typing import Any

import pytest
from jsonschema import Draft202012Validator

import spec
from conformance import registry
from conformance.checks import state_matrix
from conformance.timing import Stamp

SCHEMA_PATH = state_matrix.STATES_DIR / "table.schema.json"
TABLES = sorted(path.stem for path in state_matrix.STATES_DIR.glob("*.json") if path != SCHEMA_PATH)
BUILT_IN = {"short_ttl", "hold_ttl"}
QUALIFIED = {"new", "principal", "limit"}


def strings(item: Any) -> list[str]:
    """Every string in a JSON value, keys too."""
    if isinstance(item, str):
        return [item]
    if isinstance(item, list):
        return [s for x in item for s in strings(x)]
    if isinstance(item, dict):
        return [s for k, v in item.items() for s in (k, *strings(v))]
    return []


def bare_placeholders(item: Any) -> set[str]:
    """The placeholders that name a value an earlier step saved (not `{new:...}` and the like)."""
    found = {m.group(1) for s in strings(item) for m in state_matrix.PLACEHOLDER.finditer(s) if m.group(2) is None}
    return found - BUILT_IN


def test_schema_passes_its_metaschema() -> None:
    Draft202012Validator.check_schema(json.loads(SCHEMA_PATH.read_text(encoding="utf-8")))


def test_every_table_has_its_check_and_no_check_lacks_a_table() -> None:
    checks = [item for item in registry.all_checks() if item.chapter == "state_matrix"]
    assert sorted(item.requirements for item in checks) == sorted(state_matrix.requirements_of(name) for name in TABLES)
    assert len(checks) == len(TABLES) >= 7


@pytest.mark.parametrize("name", TABLES)
def test_table_matches_the_schema(name: str) -> None:
    validator = Draft202012Validator(json.loads(SCHEMA_PATH.read_text(encoding="utf-8")))
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(state_matrix.load_table(name))]
    assert not errors, "\n".join(errors)


@pytest.mark.parametrize("name", TABLES)
def test_rows_name_states_and_operations_of_the_table_once_each(name: str) -> None:
    table = state_matrix.load_table(name)
    for state in table["states"].values():  # `from` names a state, and never loops
        seen, at = set(), state
        while "from" in at:
            assert at["from"] in table["states"] and at["from"] not in seen, at
            seen.add(at["from"])
            at = table["states"][at["from"]]
    keys = [(row["state"], row["operation"], row.get("as", "owner")) for row in table["rows"]]
    assert len(keys) == len(set(keys)), "a (state, operation, principal) has two rows"
    unknown = [key for key in keys if key[0] not in table["states"] or key[1] not in table["operations"]]
    assert not unknown


@pytest.mark.parametrize("name", TABLES)
def test_every_value_a_row_uses_is_saved_before_it(name: str) -> None:
    table = state_matrix.load_table(name)
    for row in table["rows"]:
        saved: set[str] = set()
        clocks: set[str] = set()
        for step in state_matrix.state_steps(table, row["state"]):
            if "wait" in step:
                assert step["wait"] in clocks, f"{row['state']}: waits for a clock no step started"
                continue
            missing = bare_placeholders(step["request"]) - saved
            assert not missing, f"{row['state']}: a step uses {missing} before a step saves it"
            saved |= set(step.get("save", {}))
            clocks |= {step["clock"]["name"]} if "clock" in step else set()
        missing = bare_placeholders([table["operations"][row["operation"]], row["expect"]]) - saved
        assert not missing, f"{row['state']} / {row['operation']} uses {missing}, which state {row['state']} never saves"


@pytest.mark.parametrize("name", TABLES)
def test_a_table_declares_only_rules_of_the_capabilities_it_needs(name: str) -> None:
    """A check that needs a capability and declares a core rule would be judged untestable on that
    core rule by a server without the capability; one that cites a rule of a capability it can run
    without would pass that rule on a server that lacks it."""
    catalogue = {req["id"]: req for req in spec.requirements()}
    table = state_matrix.load_table(name)
    steps = [step for state in table["states"].values() for step in state["steps"]]
    cited = {r for item in [*table["rows"], *steps] for r in item.get("requirements", [])}
    assert cited <= set(catalogue), sorted(cited - set(catalogue))
    allowed = set(table["needs"]) if table["needs"] else {None}
    rows = {r for row in table["rows"] for r in row["requirements"]}
    assert not [r for r in rows if catalogue[r].get("capability") not in allowed], f"{name}: a row cites a rule of another capability"
    assert {catalogue[r].get("capability") for r in state_matrix.requirements_of(name)} <= allowed


def test_qualified_placeholders_are_the_ones_the_runner_binds() -> None:
    qualified = {m.group(1) for name in TABLES for s in strings(state_matrix.load_table(name))
                 for m in state_matrix.PLACEHOLDER.finditer(s) if m.group(2) is not None}
    assert qualified <= QUALIFIED


def test_a_wrong_answer_after_a_window_the_state_did_not_wait_out_is_not_verified() -> None:
    """A held lease's row judged after the lease may have ended proves nothing either way."""
    run = state_matrix.RowRun(None, "leases", {"state": "held", "operation": "renew", "requirements": ["LEASE-ACQUIRE-001"]}, {})  # type: ignore[arg-type]
    run.clocks["lease"] = state_matrix.Clock(Stamp(10.0, 10.1), 2.0)
    assert run.clock_ran_out(Stamp(11.0, 11.9)) is None  # answered before the earliest end: it held
    assert "may have ended" in str(run.clock_ran_out(Stamp(11.5, 12.0)))
    run.clocks["lease"].waited = True  # a window waited out on purpose is the state itself
    assert run.clock_ran_out(Stamp(20.0, 21.0)) is None
