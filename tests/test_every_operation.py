"""Rules about every operation are checked on every operation: the operations a rule's words mean
are derived from the OpenAPI document (the phrases of tests/test_spec_crosscheck.py), and the
requests its check sends to a server that advertises everything (the reference) reach exactly those."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

import spec
from conformance.contract import find_operation
from conformance.registry import all_checks
from conformance.results import Exchange
from tests.recorded_answers import record_run
from tests.test_spec_crosscheck import EVERY_OPERATION

# The check of each such rule, and how the exchanges it probes an operation with are told apart.
PROBE: dict[str, tuple[str, Callable[[Exchange], bool]]] = {
    "AUTH-REQUIRED-001": ("authorization.credentials_required", lambda e: e.principal is None and e.status == 401),
    "AUTH-HIDE-001": ("authorization.invisible_sessions", lambda e: e.principal != "principal-1" and e.status == 404),
    "NEGOTIATE-HEADER-001": ("errors.capability_missing_row", lambda e: e.status == 412),
}


def _paths() -> dict[str, str]:
    return {
        operation["operationId"]: path
        for path, item in spec.openapi()["paths"].items()
        for operation in item.values()
        if isinstance(operation, dict) and "operationId" in operation
    }


def _rules_about_every_operation() -> dict[str, set[str]]:
    """Each rule whose text says "every operation", with the operations its phrase means."""
    found = {}
    for req in spec.requirements():
        text = " ".join(req["text"].split())
        phrases = [phrase for phrase in EVERY_OPERATION if phrase in text]
        if phrases:
            found[req["id"]] = {op for op, path in _paths().items() if EVERY_OPERATION[phrases[0]](op, path)}
    return found


RULES = _rules_about_every_operation()


def test_every_rule_about_every_operation_has_a_probe() -> None:
    unprobed = sorted(set(RULES) - set(PROBE))
    assert not unprobed, f"rules about every operation without a probe here: {unprobed}"


@pytest.fixture(scope="module")
def probed() -> dict[str, set[str]]:
    """The operations the checks of each rule reached with their probes, in one embedded run."""
    cited = {item.name: item.requirements for item in all_checks()}
    assert all(rule in cited[name] for rule, (name, _) in PROBE.items()), "each check verifies its rule"
    result, exchanges = record_run(select=sorted(name for name, _ in PROBE.values()))
    assert result.exit_code == 0, result.summary
    reached: dict[str, set[str]] = {rule: set() for rule in PROBE}
    for exchange in exchanges:
        operation = find_operation(exchange.method, httpx.URL(exchange.url).path)
        for rule, (_, probe) in PROBE.items():
            if operation is not None and probe(exchange):
                reached[rule].add(operation.operation_id)
    return reached


@pytest.mark.parametrize("rule", sorted(PROBE))
def test_the_check_of_a_rule_about_every_operation_reaches_exactly_its_operations(
    rule: str, probed: dict[str, set[str]]
) -> None:
    expected = RULES[rule]
    assert probed[rule] == expected, f"{rule}: missing {sorted(expected - probed[rule])}, extra {sorted(probed[rule] - expected)}"
