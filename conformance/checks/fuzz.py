"""API fuzzing from the OpenAPI document with Schemathesis: valid and invalid generated requests.

Every generated request must get a documented status, a documented content type and a body that
matches its schema, and never a 5xx. Only the operations the target advertises are generated (an
operation of a capability it lacks is CAP-UNADVERTISED-001's business), each operation is judged
on its own, and every failing operation is reported.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import hypothesis
import hypothesis.errors
from hypothesis import HealthCheck, Phase, given, settings

import re

import spec
from conformance.checks import wire
from conformance.curl import exchange_from_schemathesis, token_variables
from conformance.context import CheckContext
from conformance.errors import CheckFailed
from conformance.registry import check


CLIENT_CHOSEN_IDS = ("session_id", "turn_id", "target_session_id", "lease_id")
# Headers whose generated values send a sequence down another path than its links describe: keys
# and leases collide on replay, and random capability names in Requires-Capabilities turn most
# steps into 412s, so a sequence seldom reaches the state its links lead to.
CLIENT_CHOSEN_HEADERS = ("Idempotency-Key", "Writer-Lease", "Requires-Capabilities")
# Operations whose summary does not say "(capability `X`)": the capability they belong to.
OPERATION_CAPABILITIES = {"acquireLease": "writer-lease", "releaseLease": "writer-lease"}
_CAPABILITY_IN_SUMMARY = re.compile(r"\(capability `([a-z0-9.-]+)`\)")


def operation_capabilities() -> dict[str, str]:
    """operationId -> the optional capability that brings the operation (core operations absent)."""
    found = dict(OPERATION_CAPABILITIES)
    for item in spec.openapi()["paths"].values():
        for operation in item.values():
            if isinstance(operation, dict) and "operationId" in operation:
                named = _CAPABILITY_IN_SUMMARY.search(operation.get("summary") or "")
                if named:
                    found[operation["operationId"]] = named.group(1)
    return found


def unadvertised_operations(ctx: CheckContext) -> list[str]:
    """operationIds of capabilities the target does not advertise: not generated."""
    return sorted(op for op, capability in operation_capabilities().items() if not ctx.has(capability))


def _advertised_schema(ctx: CheckContext, dropped_headers: tuple[str, ...] = ()) -> Any:
    absent = unadvertised_operations(ctx)
    schema = _schema(dropped_headers)
    return schema.exclude(operation_id=absent) if absent else schema


def _violated(text: str, declared: tuple[str, ...], protocol: str | None) -> list[str]:
    """The requirements one operation's Schemathesis failure violates, among those the check declares
    (`protocol`: the rule an error answer without problem+json breaks, for the check that verifies it)."""
    found = ["ERR-SCHEMA-001"]
    if "Server error" in text or (" 5" in text and "Status code" in text):
        found.insert(0, "ERR-NO-5XX-001")
    if protocol and ("Undocumented Content-Type" in text or "text/plain" in text or "text/html" in text):
        found.append(protocol)
    return [req for req in found if req in declared]


@lru_cache(maxsize=4)
def _schema(dropped_headers: tuple[str, ...] = ()) -> Any:
    """The OpenAPI document as Schemathesis reads it. `dropped_headers`: header parameters whose
    generated values the caller drops from every request; they stay declared (a sequence takes the
    same paths through the operations) but take the cheapest schema to generate, `{"const": ""}`,
    since their values are never sent."""
    import schemathesis

    schema = schemathesis.openapi.from_path(spec.OPENAPI_PATH)
    for parameter in schema.raw_schema.get("components", {}).get("parameters", {}).values():
        if parameter.get("in") == "header" and parameter.get("name") in dropped_headers:
            parameter["schema"] = {"type": "string", "const": ""}
    return schema


def _checks() -> list[Any]:
    from schemathesis.checks import not_a_server_error
    from schemathesis.specs.openapi.checks import (
        content_type_conformance,
        response_schema_conformance,
        status_code_conformance,
    )

    return [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


def _prepared(response: Any) -> tuple[str, str, list[tuple[Any, Any]], bytes | None]:
    """Method, request-target, headers and body of the request a Schemathesis response answers."""
    request = response.request
    body = request.body.encode("utf-8", "surrogateescape") if isinstance(request.body, str) else request.body
    return request.method or "GET", request.path_url or "/", list(request.headers.items()), body


def _protocol_rejection(response: Any) -> str | None:
    """Why an answer is an allowed protocol-level rejection of a request that is not valid HTTP
    (ERR-PROTOCOL-001), or None when the answer must be judged as an API answer."""
    content_type = (response.headers.get("content-type") or [""])[0]
    if not wire.protocol_rejection(response.status_code, content_type):
        return None
    return wire.not_valid_http(*_prepared(response))


def _fuzz(ctx: CheckContext, mode_name: str, declared: tuple[str, ...], protocol: str | None = None) -> None:
    from schemathesis import GenerationMode
    from schemathesis.core.failures import FailureGroup

    mode = GenerationMode.POSITIVE if mode_name == "positive" else GenerationMode.NEGATIVE
    headers = {"Authorization": f"Bearer {ctx.config.tokens[0]}"}
    checks = _checks()
    failures: list[str] = []
    violated: list[str] = []
    rejected: list[str] = []
    failing: list[Any] = []  # per failing operation, the response Hypothesis replayed last: the first is reproduced
    seen: dict[str, Any] = {}
    transport = {"base_url": ctx.config.target, "headers": headers, "timeout": ctx.config.timeout}
    for result in _advertised_schema(ctx).get_all_operations():
        operation = result.ok()

        @settings(
            max_examples=ctx.config.fuzz_examples,
            deadline=None,
            database=None,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
            derandomize=False,
        )
        @given(case=operation.as_strategy(generation_mode=mode))
        def exercise(case: Any) -> None:
            response = case.call(base_url=ctx.config.target, headers=headers, timeout=ctx.config.timeout)
            reason = _protocol_rejection(response)
            if reason is not None:  # refused before the API, as ERR-PROTOCOL-001 allows
                rejected.append(f"{operation.label}: {reason}")
                return
            try:
                case.validate_response(response, checks=checks, headers=headers, transport_kwargs=transport)
            except FailureGroup:  # a BaseExceptionGroup
                seen[operation.label] = response  # Hypothesis replays the failing example last
                raise

        hypothesis.seed(ctx.seed)(exercise)
        try:
            exercise()
        except FailureGroup as group:  # judged on its own; the next operation is fuzzed all the same
            text = f"{operation.label}: {group}"
            failures.append(text[:2000])
            violated += [req for req in _violated(text, declared, protocol) if req not in violated]
            if operation.label in seen:
                failing.append(seen[operation.label])
        except hypothesis.errors.Unsatisfiable:
            continue  # nothing about this operation can be made invalid (no parameters, no body)
    if failures:
        raise CheckFailed(
            f"Schemathesis ({mode_name} mode, seed {ctx.seed}) found violations in {len(failures)} "
            f"operation{'s' if len(failures) != 1 else ''}:\n" + "\n".join(failures),
            violated,
            exchange_from_schemathesis(failing[0], token_variables(ctx.config.tokens)) if failing else None,
        )


@check("ERR-SCHEMA-001", "ERR-NO-5XX-001", title="Generated valid requests get documented, schema-valid answers")
def generated_valid_requests(ctx: CheckContext) -> None:
    _fuzz(ctx, "positive", ("ERR-SCHEMA-001", "ERR-NO-5XX-001"))


@check(
    "ERR-NO-5XX-001",
    "ERR-SCHEMA-001",
    "ERR-PROTOCOL-001",
    title="Generated invalid requests get documented 4xx answers (or, when not valid HTTP, a protocol-level rejection), never a 5xx",
)
def generated_invalid_requests(ctx: CheckContext) -> None:
    _fuzz(ctx, "negative", ("ERR-NO-5XX-001", "ERR-SCHEMA-001", "ERR-PROTOCOL-001"), protocol="ERR-PROTOCOL-001")


@check(
    "ERR-SCHEMA-001",
    "ERR-NO-5XX-001",
    title="Generated request sequences that follow the spec's links get documented answers",
)
def generated_stateful_sequences(ctx: CheckContext) -> None:
    from hypothesis.stateful import run_state_machine_as_test
    from schemathesis.core.failures import FailureGroup

    headers = {"Authorization": f"Bearer {ctx.config.tokens[0]}"}
    checks = _checks()
    base = _advertised_schema(ctx, CLIENT_CHOSEN_HEADERS).as_state_machine()
    lease_ttl = ctx.limits.get("max_lease_seconds", 300)

    class Linked(base):  # type: ignore[misc, valid-type]
        def before_call(self, case: Any) -> None:
            # Client-chosen ids collide when Hypothesis replays a sequence against a live server,
            # which makes the same steps answer differently; let the server choose them instead.
            if isinstance(case.body, dict):
                for field in CLIENT_CHOSEN_IDS:
                    case.body.pop(field, None)
                if "ttl_seconds" in case.body:  # a lease expiring mid-sequence would change later answers
                    case.body["ttl_seconds"] = lease_ttl
            if case.headers:
                for header in CLIENT_CHOSEN_HEADERS:
                    case.headers.pop(header, None)

        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            return {"base_url": ctx.config.target, "headers": headers, "timeout": ctx.config.timeout}

        def validate_response(self, response: Any, case: Any, additional_checks: Any = None, **kwargs: Any) -> None:
            if _protocol_rejection(response) is not None:
                return  # refused before the API, as ERR-PROTOCOL-001 allows
            case.validate_response(response, checks=checks, transport_kwargs=kwargs or None)

    hypothesis.seed(ctx.seed)(Linked)
    try:
        run_state_machine_as_test(
            Linked,
            settings=settings(
                max_examples=ctx.config.stateful_examples * 3,
                stateful_step_count=12,
                deadline=None,
                database=None,
                phases=[Phase.explicit, Phase.generate],
                suppress_health_check=list(HealthCheck),
            ),
        )
    except (FailureGroup, hypothesis.errors.FlakyFailure) as raised:
        group = raised if isinstance(raised, FailureGroup) else _inner_group(raised, FailureGroup)
        if group is None:
            raise
        text = str(group)[:3000]
        requirements = ["ERR-NO-5XX-001", "ERR-SCHEMA-001"] if "Server error" in text else ["ERR-SCHEMA-001"]
        raise CheckFailed(
            f"Schemathesis (stateful links, seed {ctx.seed}) found a violation:\n{text}", requirements
        ) from None


def _inner_group(group: BaseException, kind: type) -> Any:
    """The first exception of `kind` inside a (nested) exception group."""
    for inner in getattr(group, "exceptions", ()):
        if isinstance(inner, kind):
            return inner
        found = _inner_group(inner, kind)
        if found is not None:
            return found
    return None
