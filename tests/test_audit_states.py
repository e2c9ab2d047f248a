"""The states audit (issue 17 item 4): the state-machine tables and the lineage state machine charge
the rule whose text gives each answer, and a server the spec permits passes them."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import Any

import pytest

import spec

from conformance.checks import lineage_machine, state_matrix
from conformance.errors import CheckFailed
from conformance.registry import all_checks
from conformance.results import Outcome
from tests import variants
from tests.mutants import MUTANTS
from tests.mutants import audit_states
from tests.test_mutants import run_against
from tests.test_variants import not_passing, run_variant

SEED = 4  # a seed whose programs fork too deep through an unknown turn (seeds 1 to 8: only this one does)
TABLES = sorted(path.stem for path in state_matrix.STATES_DIR.glob("*.json") if path.stem != "table.schema")


@pytest.mark.parametrize("name", TABLES)
def test_every_step_cites_a_rule_its_check_may_cite(name: str) -> None:
    """A step that fails cites its own rule (declared, or a core rule through the set-up step), never a row's."""
    assert state_matrix.step_rules(name) == []


def test_the_set_up_step_rules_are_the_core_rules_the_steps_rely_on() -> None:
    used = {r for name in TABLES for state in state_matrix.load_table(name)["states"].values()
            for step in state["steps"] for r in step.get("requirements", [])
            if r not in state_matrix.requirements_of(name)}
    assert used == set(state_matrix.STEP_RULES)


@pytest.mark.parametrize(("table", "state", "operation", "rules"), [
    ("deleted", "live", "delete", ["AUTH-ROLES-001"]),  # only the owner deletes: AUTH-ROLES-001's 403
    ("deleted", "live", "purge", ["AUTH-ROLES-001"]),
])
def test_a_reader_refused_an_owner_only_operation_is_charged_to_the_roles(table: str, state: str, operation: str, rules: list[str]) -> None:
    rows = [row for row in state_matrix.load_table(table)["rows"]
            if (row["state"], row["operation"], row.get("as")) == (state, operation, "reader")]
    assert [row["requirements"] for row in rows] == [rules]


@pytest.mark.parametrize(("table", "state", "operation", "rule"), [
    ("suspend", "recovered", "start another turn", "SUSPEND-RECOVER-001"),  # stated there since 1.3.0
    ("suspend", "recovered", "finish completed", "SUSPEND-RECOVER-001"),
    ("suspend", "abandoned", "append", "SUSPEND-ABANDON-001"),
    ("suspend", "abandoned", "finish completed", "SUSPEND-ABANDON-001"),
    ("turn_writes", "written running", "start another turn", "TURN-WRITE-001"),
    ("turn_writes", "written completed", "append", "TURN-WRITE-001"),
    ("turn_writes", "written completed", "finish completed", "TURN-WRITE-001"),
    ("turn_writes", "written failed", "append", "TURN-WRITE-001"),
    ("turn_writes", "written failed", "finish completed", "TURN-WRITE-001"),
])
def test_a_turn_after_recover_abandon_or_a_one_request_write_is_charged_to_the_rule_that_states_it(
        table: str, state: str, operation: str, rule: str) -> None:
    """These answers were only implied by the core turn rules, which a table of an optional
    capability cannot cite; since 1.3.0 the capability's own rule states each of them."""
    rows = [row for row in state_matrix.load_table(table)["rows"] if (row["state"], row["operation"]) == (state, operation)]
    assert [row["requirements"] for row in rows] == [[rule]]
    text = " ".join(next(r for r in spec.requirements() if r["id"] == rule)["text"].split())
    assert rows[0]["expect"].get("problem", "a finish") in text


# ---------------------------------------------------------------- the lineage state machine
@dataclass
class Answer:
    status: int
    kind: str | None

    @property
    def problem_type(self) -> str | None:
        return f"urn:session-lineage:problem:{self.kind}" if self.kind else None

    exchange: Any = field(default_factory=lambda: SimpleNamespace(method="POST", url="/sessions/s/fork"))
    content: bytes = b""


FORK_TOO_DEEP_THROUGH_AN_UNKNOWN_TURN = [("depth-exceeded", "FORK-DEPTH-001"), ("unknown-turn", "FORK-CUT-UNKNOWN-001")]


def refusal_charges(answer: Answer, applicable: list[tuple[str, str]]) -> list[str] | None:
    try:
        lineage_machine.refused(None, answer, applicable, "a fork")  # type: ignore[arg-type]
    except CheckFailed as failure:
        return failure.requirements
    return None


@pytest.fixture(autouse=True)
def _plain_describe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lineage_machine, "describe", lambda exchange: "POST /sessions/s/fork")
    monkeypatch.setattr("conformance.context.describe", lambda exchange: "POST /sessions/s/fork")


def test_the_first_refusal_that_applies_passes() -> None:
    assert refusal_charges(Answer(422, "depth-exceeded"), FORK_TOO_DEEP_THROUGH_AN_UNKNOWN_TURN) is None


def test_a_later_refusal_that_applies_fails_the_precedence_only() -> None:
    assert refusal_charges(Answer(422, "unknown-turn"), FORK_TOO_DEEP_THROUGH_AN_UNKNOWN_TURN) == ["ERR-PRECEDENCE-001"]


def test_an_answer_no_condition_gives_fails_every_rule_that_applies() -> None:
    from conformance.checks.stateful import REQUIREMENTS
    assert {"FORK-DEPTH-001", "ERR-PRECEDENCE-001", "REVERT-ETAG-001", "AUTH-FORK-001"} <= set(REQUIREMENTS)
    with pytest.raises(CheckFailed) as caught:
        lineage_machine.refused(_Ctx(), Answer(201, None), FORK_TOO_DEEP_THROUGH_AN_UNKNOWN_TURN, "a fork")  # type: ignore[arg-type]
    assert caught.value.requirements == ["FORK-DEPTH-001", "FORK-CUT-UNKNOWN-001"]


class _Ctx:
    from conformance.context import CheckContext
    expect_status = staticmethod(CheckContext.expect_status)


def test_the_stateful_check_declares_what_it_charges() -> None:
    item = next(item for item in all_checks() if item.name == "stateful.lineage_state_machine")
    assert {"FORK-DEPTH-001", "ERR-PRECEDENCE-001", "REVERT-ETAG-001", "AUTH-FORK-001"} <= set(item.requirements)


@pytest.mark.parametrize(("build", "profile"), [(variants.minimum_limits, "full"), (variants.no_optional_capability, "core"),
                                                (variants.other_permitted_answers, "core")],
                         ids=["minimum_limits", "no_optional_capability", "other_permitted_answers"])
def test_servers_the_spec_permits_pass_the_state_machine_and_the_tables(build: Any, profile: str, tmp_path: Any) -> None:
    result = run_variant(build, tmp_path, select=["stateful", "state_matrix"], stateful_examples=15, profile=profile)
    assert not not_passing(result, allowed={c.name for c in result.checks if c.outcome in (Outcome.SKIPPED, Outcome.OUT_OF_SCOPE)})


def test_a_shallow_lineage_reaches_the_depth_and_passes(tmp_path: Any) -> None:
    """max_lineage_depth 2: random programs fork past the depth, often through a cut that is also refused."""
    shallow = lambda settings: variants.reference_app(replace(settings, limits=replace(settings.limits, max_lineage_depth=2)))  # noqa: E731
    result = run_variant(shallow, tmp_path, select=["stateful"], stateful_examples=15)
    assert not not_passing(result)


@pytest.mark.deep  # 40 s: the state machine needs its pinned seed's 30 runs to reach the refusal
def test_a_fork_that_resolves_its_cut_before_the_depth_fails_the_precedence_only(tmp_path: Any) -> None:
    result = run_variant(audit_states.cut_before_depth, tmp_path, seed=SEED, select=["stateful"], stateful_examples=30)
    assert all(c.outcome is not Outcome.ERROR for c in result.checks), [c.message for c in result.checks]
    assert {v.id for v in result.requirements if v.outcome is Outcome.FAIL} == {"ERR-PRECEDENCE-001"}


def test_a_reader_that_deletes_fails_the_roles_in_the_deletion_table(tmp_path: Any) -> None:
    result = run_against(MUTANTS["reader_deletes_and_purges"], f"sqlite:///{tmp_path / 'reader.db'}")
    assert {v.id for v in result.requirements if v.outcome is Outcome.FAIL} == {"AUTH-ROLES-001"}
