"""Every answer the server can give is declared on its operation.

Statically: each operation accepts `Requires-Capabilities` and declares 412; it lists in
`x-problem-types` the problem kinds it can answer, each of a status it declares, and every error
status it declares has a kind; a header without which it answers 428 is required; operations of
optional capabilities declare 404 and 405 (CAP-UNADVERTISED-001); links lead from every operation
that creates an id to every operation that takes it.

From a run (deep set, about a minute): the whole suite against the embedded reference server
(`check --embedded`), every exchange recorded; each status and problem type answered is declared
on the operation that answered it. Only the reference in its normal configuration is run: mutants,
fault servers and the legacy server answer wrongly on purpose.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import spec
from tests.test_spec_crosscheck import OPERATIONS, _resolve, declared_statuses, operations_of, precedence_rows

KIND_STATUS = {entry["kind"]: entry["status"] for entry in spec.problem_types().values()}
REQUIREMENTS = {req["id"]: req for req in spec.requirements()}
SUCCESS = {200, 201, 204}


def problem_kinds_of(operation_id: str) -> list[str]:
    return list(OPERATIONS[operation_id]["operation"].get("x-problem-types", []))


def parameters_of(operation_id: str) -> dict[str, dict[str, Any]]:
    return {_resolve(p)["name"]: _resolve(p) for p in OPERATIONS[operation_id]["parameters"]}


def test_the_extension_is_named_in_the_document() -> None:
    assert "`x-problem-types`" in spec.openapi()["info"]["description"]


@pytest.mark.parametrize("operation_id", sorted(OPERATIONS))
def test_problem_types_are_listed_and_their_statuses_declared(operation_id: str) -> None:
    kinds = problem_kinds_of(operation_id)
    assert kinds, f"{operation_id} lists no x-problem-types"
    assert len(kinds) == len(set(kinds)), f"{operation_id} lists a kind twice"
    unknown = [kind for kind in kinds if kind not in KIND_STATUS]
    assert not unknown, f"{operation_id}: {unknown} are not in problem-types.yaml"
    declared = declared_statuses(operation_id)
    undeclared = sorted({KIND_STATUS[kind] for kind in kinds} - declared)
    assert not undeclared, f"{operation_id} lists kinds of statuses it does not declare: {undeclared}"
    without_kind = sorted(declared - SUCCESS - {KIND_STATUS[kind] for kind in kinds})
    assert not without_kind, f"{operation_id} declares {without_kind} but lists no problem kind of that status"


def test_precedence_rows_are_listed_on_their_operations() -> None:
    missing = [
        f"{operation_id}: {row['problem']}"
        for row in precedence_rows()
        for operation_id in operations_of(row)
        if row["problem"] not in problem_kinds_of(operation_id)
    ]
    assert not missing, f"precedence rows whose kind the operation does not list: {missing}"


@pytest.mark.parametrize("operation_id", sorted(OPERATIONS))
def test_requires_capabilities_and_412_on_every_operation(operation_id: str) -> None:
    """NEGOTIATE-HEADER-001: any request may carry the header; a server lacking a capability answers 412."""
    assert "Requires-Capabilities" in parameters_of(operation_id)
    assert 412 in declared_statuses(operation_id)
    assert "capability-missing" in problem_kinds_of(operation_id)


@pytest.mark.parametrize("operation_id", sorted(OPERATIONS))
def test_a_header_the_operation_cannot_do_without_is_required(operation_id: str) -> None:
    """428 `precondition-required` is the answer without `If-Match`: the header is required."""
    if 428 in declared_statuses(operation_id):
        assert parameters_of(operation_id)["If-Match"].get("required") is True, operation_id
    elif "If-Match" in parameters_of(operation_id):
        pytest.fail(f"{operation_id} takes If-Match but never answers 428 without it")


def test_operations_of_optional_capabilities_declare_404_and_405() -> None:
    listed = operations_of(REQUIREMENTS["CAP-UNADVERTISED-001"])
    summaries = {
        operation_id
        for operation_id, entry in OPERATIONS.items()
        if re.search(r"capabilit(y|ies) `", str(entry["operation"].get("summary", "")))
    }
    assert summaries <= set(listed), f"operations of a capability CAP-UNADVERTISED-001 does not list: {sorted(summaries - set(listed))}"
    for operation_id in listed:
        assert {404, 405} <= declared_statuses(operation_id), operation_id
        assert {"not-found", "method-not-allowed"} <= set(problem_kinds_of(operation_id)), operation_id
        assert _resolve(OPERATIONS[operation_id]["operation"]["responses"]["405"]).get("headers", {}).get("Allow"), operation_id


# Operations that create an id, where in their success answer it is, and which ids they give.
CREATORS = {
    "createSession": ("201", {"session_id"}),
    "forkSession": ("201", {"session_id"}),
    "importLegacy": ("201", {"session_id"}),
    # not a position: a turn's `index` is 0-based among its session's own turns, a position 1-based
    # among the effective ones (inherited first), and no member of the answer gives it (CHANGELOG 1.3.0)
    "startTurn": ("201", {"session_id", "turn_id"}),
    "uploadAttachment": ("201", {"session_id", "attachment_id"}),
    "acquireLease": ("201", {"session_id", "Writer-Lease"}),
}
# The id a creator exists for: a link is owed to every operation that takes it.
CREATED = {
    "createSession": "session_id",
    "forkSession": "session_id",
    "importLegacy": "session_id",
    "startTurn": "turn_id",
    "uploadAttachment": "attachment_id",
    "acquireLease": "Writer-Lease",
}


def _path_parameters(operation_id: str) -> set[str]:
    return set(re.findall(r"\{(\w+)\}", OPERATIONS[operation_id]["path"]))


def _owed_links() -> Iterator[tuple[str, str]]:
    for creator, (_, gives) in CREATORS.items():
        created = CREATED[creator]
        for operation_id in OPERATIONS:
            if operation_id == creator:
                continue
            if created == "Writer-Lease":
                if operation_id == "releaseLease":
                    yield creator, operation_id
                continue
            needs = _path_parameters(operation_id)
            if created == "turn_id":
                owed = "turn_id" in needs and needs <= gives
            else:
                owed = created in needs and needs <= gives
            if owed:
                yield creator, operation_id


def test_links_lead_from_every_creator_to_every_operation_taking_its_id() -> None:
    missing = []
    for creator, target in _owed_links():
        status = CREATORS[creator][0]
        links = OPERATIONS[creator]["operation"]["responses"][status].get("links", {})
        if not any(link["operationId"] == target for link in links.values()):
            missing.append(f"{creator} -> {target}")
    assert not missing, f"links missing: {missing}"


def test_the_links_named_by_the_issue_exist() -> None:
    """Suspend, recover, abandon, inputs, deliver and lease release had none (the effective-turn
    link the issue also named was dropped in 1.3.0: no answer gives a turn's position)."""
    targets = {
        link["operationId"]
        for entry in OPERATIONS.values()
        for response in entry["operation"]["responses"].values()
        for link in _resolve(response).get("links", {}).values()
    }
    named = {"suspendTurn", "recoverTurn", "abandonTurn", "queueInput", "listInputs", "deliverInputs", "releaseLease"}
    assert named <= targets, sorted(named - targets)


def test_every_link_fills_every_path_parameter_of_its_target() -> None:
    for operation_id, entry in OPERATIONS.items():
        for status, response in entry["operation"]["responses"].items():
            for name, link in _resolve(response).get("links", {}).items():
                target = link["operationId"]
                assert target in OPERATIONS, f"{operation_id} {status} link {name}: unknown {target}"
                given = {key.split(".", 1)[-1] if key.startswith("path.") else key for key in link.get("parameters", {})}
                missing = _path_parameters(target) - given
                assert not missing, f"{operation_id} {status} link {name} leaves {sorted(missing)} of {target} unset"


@pytest.mark.parametrize(
    ("body", "valid"),
    [
        ({"role": "user", "replay_history": []}, True),
        ({"role": "user", "records": [{"type": "message", "content": {}}], "status": "completed"}, True),
        ({"role": "user", "replay_history": [], "records": [{"type": "message", "content": {}}]}, False),
        ({"role": "user", "replay_history": [], "status": "completed"}, False),
    ],
)
def test_replay_history_excludes_a_turn_write_in_the_schema(body: dict[str, Any], valid: bool) -> None:
    """REPLAY-MATCH-001: `replay_history` with `records` or `status` is refused; the schema says so."""
    errors = list(spec.validator("turn-create.json").iter_errors(body))
    assert (not errors) is valid, [error.message for error in errors]


# ------------------------------------------------------------------------------ from a run


@pytest.fixture(scope="module")
def recorded() -> list[Any]:
    from tests.recorded_answers import answers, record_run

    result, exchanges = record_run()
    assert result.exit_code == 0, "the reference must be conformant for its answers to stand for the spec's"
    found = answers(exchanges)
    assert len(found) > 1000, f"only {len(found)} answers recorded"
    return found


def protocol_rejection(answer: Any) -> bool:
    """ERR-PROTOCOL-001: a request that is not valid HTTP (a header name with a space, say) is
    refused by the HTTP layer before any operation sees it; no operation declares that answer."""
    return answer.status == 400 and answer.problem_type is None


@pytest.mark.deep
def test_every_answer_of_an_embedded_run_is_declared_on_its_operation(recorded: list[Any]) -> None:
    assert_declared(recorded)
    statuses = {(answer.operation_id, answer.status) for answer in recorded}
    assert len({op for op, _ in statuses}) == len(OPERATIONS), "the run reached every operation"


def test_every_answer_of_the_errors_chapter_is_declared_on_its_operation() -> None:
    """The quick set's share (about 10 s): the errors chapter and the negotiation checks, which
    give most kinds of error answer (some 1,000 answers, 50 kinds)."""
    from tests.recorded_answers import answers, record_run

    result, exchanges = record_run(select=["errors", "NEGOTIATE-"])
    assert result.exit_code == 0, [f"{c.name}: {c.message}" for c in result.checks if c.outcome.value != "pass"]
    found = answers(exchanges)
    assert len({(a.operation_id, a.status, a.problem_type) for a in found}) > 30, "too few kinds of answer recorded"
    assert_declared(found)


def assert_declared(recorded: list[Any]) -> None:
    undeclared: dict[tuple[str, int, str | None], int] = {}
    prefix = "urn:session-lineage:problem:"
    for answer in recorded:
        if protocol_rejection(answer):
            continue
        declared = declared_statuses(answer.operation_id)
        kinds = problem_kinds_of(answer.operation_id)
        ok = answer.status in declared
        if answer.status >= 400:
            ok = ok and answer.problem_type is not None and answer.problem_type.removeprefix(prefix) in kinds
        if not ok:
            key = (answer.operation_id, answer.status, answer.problem_type)
            undeclared[key] = undeclared.get(key, 0) + 1
    assert not undeclared, "answers the document does not declare (operation, status, type: count): " + "; ".join(
        f"{op} {status} {kind}: {count}" for (op, status, kind), count in sorted(undeclared.items(), key=str)
    )


# openapi-core: every request and answer of the run against the document ---------------------------
# Media types a body may have beyond the one the document declares for it: attachments are bytes of
# any media type (`x-any-media-type`), a legacy history may also come as NDJSON or JSONL
# (IMPORT-FORMAT-001); openapi-core reads them as the declared application/octet-stream.
ANY_MEDIA_TYPE_OPERATIONS = {"uploadAttachment", "putAttachment", "getAttachment"}
LEGACY_HISTORY_TYPES = {"application/x-ndjson", "application/jsonl"}
JSON_BODY_OPERATIONS = set(operations_of(REQUIREMENTS["ERR-MEDIA-001"]))


def _openapi_core() -> Any:
    import json as jsonlib

    openapi_core = pytest.importorskip("openapi_core", reason="openapi-core is in the test extra: pip install -e '.[test]'")
    config = openapi_core.Config(
        extra_media_type_deserializers={
            "application/problem+json": jsonlib.loads,  # RFC 9457 problems are JSON
            "application/merge-patch+json": jsonlib.loads,  # RFC 7396 patches are JSON
        }
    )
    return openapi_core.OpenAPI.from_file_path(str(spec.SPEC_DIR / "openapi.yaml"), config=config)


def _media(value: str | None) -> str:
    return (value or "").split(";")[0].strip()


def _as_openapi_core(answer: Any) -> tuple[Any, Any]:
    from urllib.parse import parse_qsl, urlsplit

    from openapi_core.testing import MockRequest, MockResponse

    exchange = answer.exchange
    url = urlsplit(exchange.url)
    headers = dict(exchange.request_headers)
    request_type = _media(headers.get("Content-Type") or headers.get("content-type"))
    response_type = _media(exchange.response_headers.get("content-type"))
    if answer.operation_id in ANY_MEDIA_TYPE_OPERATIONS:
        if exchange.method in ("POST", "PUT"):
            request_type = "application/octet-stream"
        if answer.operation_id == "getAttachment" and 200 <= exchange.status < 300:
            response_type = "application/octet-stream"
    if answer.operation_id == "importLegacy" and request_type in LEGACY_HISTORY_TYPES:
        request_type = "application/octet-stream"
    if answer.operation_id in JSON_BODY_OPERATIONS and (request_type == "" or request_type.endswith("+json")):
        request_type = "application/json"  # ERR-MEDIA-001: any +json type is JSON; none MAY be read as JSON
    request = MockRequest(
        "http://127.0.0.1:8080",  # the document's server: paths are matched below it
        exchange.method.lower(),
        url.path,
        args=dict(parse_qsl(url.query, keep_blank_values=True)),
        headers=headers,
        data=exchange.request_body or b"",
        content_type=request_type,
    )
    response = MockResponse(exchange.response_body, exchange.status, headers=exchange.response_headers, content_type=response_type)
    return request, response


def _reason(error: BaseException) -> str:
    try:
        text = str(error)
    except Exception:  # openapi-core's message of an undecodable body cannot be printed
        text = repr(error.__cause__)
    return f"{type(error).__name__}: {text[:160]}"


@pytest.mark.deep
def test_openapi_core_accepts_every_answer_and_the_requests_answered_2xx(recorded: list[Any]) -> None:
    """openapi-core (an independent validator) on every exchange of the run: each answer matches
    the document; a request the document calls invalid was never answered 2xx. Requests to no
    documented path (hostile ids such as `..%2F..`, a trailing slash) are routing answers: those
    must be 404 or 405 problems (ERR-ROUTE-001), which openapi-core cannot place on an operation."""
    from openapi_core.templating.paths.exceptions import OperationNotFound, PathNotFound

    api = _openapi_core()
    undeclared: dict[str, int] = {}
    accepted_invalid: dict[str, int] = {}
    routing: list[str] = []
    checked = 0
    for answer in recorded:
        if protocol_rejection(answer):
            continue
        exchange = answer.exchange
        # An empty attachment is an attachment; openapi-core reads an empty body as a missing one.
        empty_attachment = answer.operation_id in ANY_MEDIA_TYPE_OPERATIONS and not (
            exchange.response_body if exchange.method == "GET" else exchange.request_body
        )
        if empty_attachment and exchange.method == "GET" and 200 <= exchange.status < 300:
            continue
        request, response = _as_openapi_core(answer)
        try:
            api.validate_response(request, response)
        except (PathNotFound, OperationNotFound):
            if exchange.status not in (404, 405) or answer.problem_type is None:
                routing.append(f"{exchange.method} {exchange.url} answered {exchange.status}")
            continue
        except Exception as error:  # noqa: BLE001 - every kind of disagreement is a finding
            key = f"{answer.operation_id} {exchange.status}: {_reason(error)}"
            undeclared[key] = undeclared.get(key, 0) + 1
        checked += 1
        if 200 <= exchange.status < 300 and not empty_attachment:
            try:
                api.validate_request(request)
            except Exception as error:  # noqa: BLE001
                key = f"{answer.operation_id} {exchange.status}: {_reason(error)}"
                accepted_invalid[key] = accepted_invalid.get(key, 0) + 1
    assert checked > 1000, f"only {checked} exchanges validated"
    assert not routing, f"answers to undocumented paths that are not 404/405 problems: {routing[:10]}"
    assert not undeclared, "answers openapi-core finds undeclared or invalid (count): " + "; ".join(
        f"{key} ({count})" for key, count in sorted(undeclared.items())
    )
    assert not accepted_invalid, "requests the document calls invalid, answered 2xx (count): " + "; ".join(
        f"{key} ({count})" for key, count in sorted(accepted_invalid.items())
    )
