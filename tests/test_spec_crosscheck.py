"""The prose and the OpenAPI document agree.

Every requirement lists the operations it applies to. Whatever its text names - a status such as
409, a problem kind such as `writer-conflict`, a header such as `Writer-Lease` - is declared on
each of those operations; and every status an operation declares is explained by one of its
requirements or by the error precedence table (ERR-PRECEDENCE-001).
"""

from __future__ import annotations

import re
from http import HTTPStatus
from typing import Any

import pytest

import spec

METHODS = {"get", "put", "post", "delete", "patch", "head", "options", "trace"}
HTTP_STATUSES = {int(status) for status in HTTPStatus if 200 <= status <= 599}
# A three-digit number standing alone: not part of 1024, 1,200 or 2.500.
STATUS_PATTERN = re.compile(r"(?<![\d,.])([2-5]\d\d)(?![\d,])")
BACKTICKED = re.compile(r"`([^`]+)`")
# Headers a rule can name. `Authorization` is declared by the security scheme, `Allow` belongs to
# routing (405 answers, which no operation declares).
ROUTING_HEADERS = {"Allow"}


def _operations() -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    document = spec.openapi()
    for template, item in document["paths"].items():
        shared = item.get("parameters", [])
        for method, operation in item.items():
            if method in METHODS:
                found[operation["operationId"]] = {
                    "operation": operation,
                    "parameters": [*shared, *operation.get("parameters", [])],
                    "path": template,
                }
    return found


OPERATIONS = _operations()


def _resolve(node: dict[str, Any]) -> dict[str, Any]:
    """Follow a local `#/components/...` reference."""
    while "$ref" in node and node["$ref"].startswith("#/"):
        target: Any = spec.openapi()
        for part in node["$ref"][2:].split("/"):
            target = target[part]
        node = target
    return node


def declared_statuses(operation_id: str) -> set[int]:
    return {int(code) for code in OPERATIONS[operation_id]["operation"]["responses"] if code.isdigit()}


def declared_headers(operation_id: str) -> set[str]:
    """Header parameters, headers of any response, and `Authorization` when credentials apply."""
    entry = OPERATIONS[operation_id]
    names = {
        _resolve(parameter)["name"]
        for parameter in entry["parameters"]
        if _resolve(parameter)["in"] == "header"
    }
    for response in entry["operation"]["responses"].values():
        names |= set(_resolve(response).get("headers", {}))
    security = entry["operation"].get("security", spec.openapi().get("security", []))
    if any(requirement for requirement in security):
        names.add("Authorization")
    return names


def problem_kinds() -> dict[str, int]:
    return {entry["kind"]: entry["status"] for entry in spec.problem_types().values()}


def known_headers() -> set[str]:
    names = set(ROUTING_HEADERS) | {"Authorization"}
    for operation_id in OPERATIONS:
        names |= declared_headers(operation_id)
    return names


def named_statuses(text: str) -> set[int]:
    return {int(number) for number in STATUS_PATTERN.findall(text) if int(number) in HTTP_STATUSES}


def named_problem_kinds(text: str) -> set[str]:
    kinds = problem_kinds()
    return {name for name in BACKTICKED.findall(text) if name in kinds}


def named_headers(text: str) -> set[str]:
    return {name for name in known_headers() if re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text)}


def operations_of(entry: dict[str, Any]) -> list[str]:
    operations = entry["operations"]
    return list(OPERATIONS) if operations == "all" else list(operations)


def precedence_rows() -> list[dict[str, Any]]:
    rows = [row for req in spec.requirements() for row in req.get("precedence", [])]
    assert rows, "ERR-PRECEDENCE-001 holds the error precedence table"
    return rows


REQUIREMENTS = spec.requirements()


def test_every_requirement_names_its_operations() -> None:
    for req in REQUIREMENTS:
        assert "operations" in req, f"{req['id']}: add `operations` (a list, `all`, or [] for none)"
        operations = req["operations"]
        assert operations == "all" or isinstance(operations, list), req["id"]
        unknown = set(operations_of(req)) - set(OPERATIONS)
        assert not unknown, f"{req['id']} names unknown operationIds {sorted(unknown)}"


@pytest.mark.parametrize("req", REQUIREMENTS, ids=lambda r: r["id"])
def test_what_a_requirement_names_is_declared_on_its_operations(req: dict[str, Any]) -> None:
    statuses = named_statuses(req["text"])
    kinds = named_problem_kinds(req["text"])
    headers = named_headers(req["text"])
    missing = []
    for operation_id in operations_of(req):
        declared = declared_statuses(operation_id)
        missing += [f"{operation_id}: status {status}" for status in sorted(statuses - declared)]
        missing += [
            f"{operation_id}: problem `{kind}` (status {problem_kinds()[kind]})"
            for kind in sorted(kinds)
            if problem_kinds()[kind] not in declared
        ]
        missing += [f"{operation_id}: header {name}" for name in sorted(headers - declared_headers(operation_id))]
    assert not missing, f"{req['id']} names what its operations do not declare: {missing}"


def test_precedence_rows_are_declared_on_their_operations() -> None:
    kinds = problem_kinds()
    for number, row in enumerate(precedence_rows(), start=1):
        assert row["problem"] in kinds, f"row {number}: unknown problem kind {row['problem']}"
        assert kinds[row["problem"]] == row["status"], f"row {number}: {row['problem']} is not {row['status']}"
        for operation_id in operations_of(row):
            assert operation_id in OPERATIONS, f"row {number}: unknown operation {operation_id}"
            assert row["status"] in declared_statuses(operation_id), (
                f"precedence row {number} ({row['problem']}) applies to {operation_id}, which does not declare {row['status']}"
            )
            missing = named_headers(row["condition"]) - declared_headers(operation_id) - ROUTING_HEADERS
            assert not missing, f"precedence row {number} names {sorted(missing)}, not declared on {operation_id}"


@pytest.mark.parametrize("operation_id", sorted(OPERATIONS))
def test_every_declared_status_is_explained(operation_id: str) -> None:
    explained: set[int] = set()
    for req in REQUIREMENTS:
        if operation_id in operations_of(req):
            explained |= named_statuses(req["text"])
    for row in precedence_rows():
        if operation_id in operations_of(row):
            explained.add(row["status"])
    unexplained = declared_statuses(operation_id) - explained
    assert not unexplained, (
        f"{operation_id} declares {sorted(unexplained)}, which no requirement of it and no precedence row explains"
    )


def test_every_operation_has_a_requirement() -> None:
    covered = {operation_id for req in REQUIREMENTS if req["operations"] != "all" for operation_id in req["operations"]}
    assert covered == set(OPERATIONS), f"operations no requirement names: {sorted(set(OPERATIONS) - covered)}"


def test_every_response_carries_the_diagnostic_headers() -> None:
    """DIAG-HEADER-001 and DIAG-WRITES-001 speak of every response, errors included."""
    for operation_id, entry in OPERATIONS.items():
        for status, response in entry["operation"]["responses"].items():
            headers = set(_resolve(response).get("headers", {}))
            missing = {"Storage-Round-Trips", "Storage-Items-Written", "Storage-Bytes-Written", "Storage-Records-Examined"} - headers
            assert not missing, f"{operation_id} {status} lacks {sorted(missing)}"


def test_every_503_carries_retry_after() -> None:
    for operation_id, entry in OPERATIONS.items():
        response = entry["operation"]["responses"].get("503")
        assert response is not None, f"{operation_id}: storage can be unavailable on any operation"
        assert "Retry-After" in _resolve(response).get("headers", {}), operation_id


def test_capabilities_are_named_and_conditional_rules_say_so() -> None:
    doc = spec.load_yaml(spec.REQUIREMENTS_PATH)
    optional = {item["name"] for item in doc["capabilities"] if not item["core"]}
    names_rule = next(req for req in REQUIREMENTS if req["id"] == "CAP-NAMES-001")
    for item in doc["capabilities"]:
        assert f"`{item['name']}`" in names_rule["text"], f"CAP-NAMES-001 does not name `{item['name']}`"
    for req in REQUIREMENTS:
        names = spec.requirement_capabilities(req)
        if not names:
            continue
        assert set(names) <= optional, f"{req['id']}: `{names}` are not all optional capabilities"
        condition = " or ".join(f"`{name}`" for name in names)  # a list: any one of them binds
        assert f"advertises {condition}" in req["text"], f"{req['id']}: write the rule as a condition on {condition}"
    expected = {
        "LEASE-": "writer-lease",
        "DIAG-HEADER-": "diagnostics.query-count",
        "DIAG-DEPTH-": ["diagnostics.query-count", "diagnostics.trace-context"],
        "DIAG-PAGE-COST-": ["diagnostics.query-count", "diagnostics.trace-context"],
        "DIAG-FORK-COST-": ["diagnostics.query-count", "diagnostics.trace-context"],
        "DIAG-LIST-COST-": ["diagnostics.query-count", "diagnostics.trace-context"],
        "DIAG-SPANS-": "diagnostics.trace-context",
        "DIAG-COUNTS-AGREE-": "diagnostics.trace-context",
        "DIAG-WRITES-": "diagnostics.write-count",
        "DIAG-FORK-WRITES-": "diagnostics.write-count",
        "DIAG-RECORDS-": "diagnostics.records-examined",
    }
    for req in REQUIREMENTS:
        for prefix, capability in expected.items():
            if req["id"].startswith(prefix):
                assert req.get("capability") == capability, f"{req['id']} is conditional on `{capability}`"


@pytest.mark.parametrize(
    ("text", "statuses", "kinds", "headers"),
    [
        ("answers 409 `writer-conflict` without `Writer-Lease`", {409}, {"writer-conflict"}, {"Writer-Lease"}),
        ("nested deeper than 256 levels, at most 1024 bytes, 1,200 records", set(), set(), set()),
        ("503 `unavailable` with `Retry-After`; see `fork`", {503}, {"unavailable"}, {"Retry-After"}),
        ("`records-unavailable` and `Storage-Round-Trips`", set(), {"records-unavailable"}, {"Storage-Round-Trips"}),
    ],
)
def test_extraction(text: str, statuses: set[int], kinds: set[str], headers: set[str]) -> None:
    """The extraction itself: it must find what is named and nothing that only looks like it."""
    assert named_statuses(text) == statuses
    assert named_problem_kinds(text) == kinds
    assert named_headers(text) == headers


# Phrases a rule uses for "every operation", and the operations each one means, derived from the
# OpenAPI document: a rule whose text uses one lists exactly those (or `all`).
EVERY_OPERATION = {
    "Every operation but `GET /capabilities`": lambda op, path: op != "getCapabilities",
    "every operation the server offers whose path names a session": lambda op, path: "{session_id}" in path,
    "on every operation": lambda op, path: True,
}


def test_rules_about_every_operation_list_every_operation() -> None:
    paths = {
        operation["operationId"]: path
        for path, item in spec.openapi()["paths"].items()
        for operation in item.values()
        if isinstance(operation, dict) and "operationId" in operation
    }
    for req in REQUIREMENTS:
        text = " ".join(req["text"].split())
        if "every operation" not in text.lower():
            continue
        phrases = [phrase for phrase in EVERY_OPERATION if phrase in text]
        assert phrases, f"{req['id']} speaks of every operation in words EVERY_OPERATION does not know: derive them"
        if req["operations"] == "all":
            continue
        expected = {op for op, path in paths.items() if EVERY_OPERATION[phrases[0]](op, path)}
        assert set(req["operations"]) == expected, (
            f"{req['id']} says {phrases[0]!r}: missing {sorted(expected - set(req['operations']))}, "
            f"extra {sorted(set(req['operations']) - expected)}"
        )
