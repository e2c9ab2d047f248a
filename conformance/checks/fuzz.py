"""API fuzzing from the OpenAPI document with Schemathesis: valid and invalid generated requests.

Every generated request must get a documented status, a documented content type and a body that
matches its schema (ERR-SCHEMA-001), an error answer in problem+json (ERR-PROBLEM-001; without it, a
request that is valid HTTP refused as if it were not breaks ERR-PROTOCOL-001 too), and no 5xx but the
503 ERR-NO-5XX-001 allows (`unavailable` with `Retry-After`, `records-unavailable` on reads). Only
the operations the target advertises are generated (an operation of a capability it lacks is
CAP-UNADVERTISED-001's business), each operation is judged on its own, and every failing operation
is reported.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

import hypothesis
import hypothesis.errors
from hypothesis import HealthCheck, Phase, given, settings

import spec
from conformance.checks import wire
from conformance.curl import exchange_from_schemathesis, to_curl, token_variables
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


PROBLEM_JSON = "application/problem+json"
PROBLEM_BASE = "urn:session-lineage:problem:"
# ERR-NO-5XX-001: the only 5xx allowed, a 503 with Retry-After of these types (None: on any operation).
ALLOWED_503 = {PROBLEM_BASE + "unavailable": None, PROBLEM_BASE + "records-unavailable": "GET"}
# Answers the suite's response validator (contract.py) leaves to other rules whatever the operation
# declares: 405 `method-not-allowed` (CAP-UNADVERTISED-001, ERR-ROUTE-001), 412 `capability-missing`
# (NEGOTIATE-HEADER-001).
NOT_JUDGED = {405: PROBLEM_BASE + "method-not-allowed", 412: PROBLEM_BASE + "capability-missing"}
SCHEMA = ("ERR-SCHEMA-001",)  # what a failure of Schemathesis's status, content-type and schema checks breaks


class _Violation(AssertionError):
    """An answer that breaks a rule the fuzz judges itself (a 5xx, an error answer that is not
    problem+json), with the rules it breaks."""

    def __init__(self, message: str, requirements: tuple[str, ...]) -> None:
        super().__init__(message)
        self.requirements = requirements


def _media_type(response: Any) -> str:
    return str((response.headers.get("content-type") or [""])[0]).split(";")[0].strip().lower()


def _problem_type(response: Any) -> str | None:
    try:
        body = json.loads(response.content or b"")
    except (ValueError, TypeError):
        return None
    value = body.get("type") if isinstance(body, dict) else None
    return value if isinstance(value, str) else None


def _judge(response: Any, protocol: str | None) -> bool:
    """Raise _Violation for what the rules place outside the schema: a 5xx ERR-NO-5XX-001 does not
    allow, an error answer that is not problem+json (ERR-PROBLEM-001; with `protocol`, the check of
    ERR-PROTOCOL-001, also that rule when a valid HTTP request got a protocol-level rejection). False
    when the answer is one the schema checks leave alone (NOT_JUDGED), True when they judge it."""
    status, media, kind = response.status_code, _media_type(response), _problem_type(response)
    method = (response.request.method or "GET").upper()
    head = f"{method} {response.request.path_url} answered {status} {media or 'without a content type'}"
    broken: list[str] = []
    if status >= 500:
        retry = bool((response.headers.get("retry-after") or [""])[0].strip())
        allowed = status == 503 and retry and kind in ALLOWED_503 and ALLOWED_503[kind] in (None, method)
        if not allowed:
            broken.append("ERR-NO-5XX-001")
    if status >= 400 and media != PROBLEM_JSON:
        broken.append("ERR-PROBLEM-001")
        if protocol and wire.protocol_rejection(status, media):
            broken.append(protocol)  # valid HTTP (else _protocol_rejection let it pass) refused before the API
    if broken:
        raise _Violation(f"{head} (problem type {kind}), which breaks {', '.join(broken)}", tuple(broken))
    return NOT_JUDGED.get(status) != kind if kind is not None else True


def _leaves(raised: BaseException) -> tuple[list[_Violation], list[BaseException], list[BaseException]]:
    """The violations, the Schemathesis failure groups and anything else inside a (nested) group."""
    from schemathesis.core.failures import FailureGroup

    if isinstance(raised, _Violation):
        return [raised], [], []
    if isinstance(raised, FailureGroup):
        return [], [raised], []
    if isinstance(raised, BaseExceptionGroup):
        found: tuple[list[_Violation], list[BaseException], list[BaseException]] = ([], [], [])
        for inner in raised.exceptions:
            for mine, theirs in zip(found, _leaves(inner)):
                mine.extend(theirs)  # type: ignore[arg-type]
        return found
    return [], [], [raised]


def _violated(
    raised: BaseException, declared: tuple[str, ...], observed: list[BaseException] | None = None
) -> tuple[str, list[str]] | None:
    """What one operation's failure says and the requirements it breaks among those the check may
    cite (its own and the cross-cutting ERR-PROBLEM-001); None when it is no failure of the target.
    When Hypothesis gives up on a failure it could not replay against the live target (a Flaky error
    with no failure inside), the first failure `observed` while it ran is the one reported."""
    violations, groups, _ = _leaves(raised)
    if not violations and not groups and observed and isinstance(raised, hypothesis.errors.HypothesisException):
        violations, groups, _ = _leaves(observed[0])
    if not violations and not groups:
        return None
    rules: list[str] = []
    for rule in [r for v in violations for r in v.requirements] + (list(SCHEMA) if groups else []):
        if (rule in declared or rule == "ERR-PROBLEM-001") and rule not in rules:
            rules.append(rule)
    text = "\n".join([str(v) for v in violations] + [str(g) for g in groups])
    return text, rules


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


def warm_up() -> None:
    """Load Schemathesis and read the OpenAPI document as it does, before the first fuzz check
    (the second process does this while the suite starts)."""
    _schema()
    _schema(CLIENT_CHOSEN_HEADERS)
    _checks()


def _checks() -> list[Any]:
    from schemathesis.specs.openapi.checks import (
        content_type_conformance,
        response_schema_conformance,
        status_code_conformance,
    )

    # no `not_a_server_error`: _judge tells the 503 ERR-NO-5XX-001 allows from a 5xx
    return [status_code_conformance, content_type_conformance, response_schema_conformance]


def _prepared(response: Any) -> tuple[str, str, list[tuple[Any, Any]], bytes | None]:
    """Method, request-target, headers and body of the request a Schemathesis response answers."""
    request = response.request
    body = request.body.encode("utf-8", "surrogateescape") if isinstance(request.body, str) else request.body
    return request.method or "GET", request.path_url or "/", list(request.headers.items()), body


def _protocol_rejection(response: Any) -> str | None:
    """Why an answer is an allowed protocol-level rejection of a request that is not valid HTTP
    (ERR-PROTOCOL-001: status 400, 408, 413, 414 or 431 "with any content type", problem+json too), or
    None when the answer must be judged as an API answer."""
    if response.status_code not in wire.PROTOCOL_REJECTIONS:
        return None
    return wire.not_valid_http(*_prepared(response))


def _fuzz(ctx: CheckContext, mode_name: str, declared: tuple[str, ...], protocol: str | None = None) -> None:
    from schemathesis import GenerationMode

    mode = GenerationMode.POSITIVE if mode_name == "positive" else GenerationMode.NEGATIVE
    headers = {"Authorization": f"Bearer {ctx.config.tokens[0]}"}
    checks = _checks()
    failures: list[str] = []
    violated: list[str] = []
    rejected: list[str] = []
    failing: list[Any] = []  # per failing operation, the response Hypothesis replayed last: the first is reproduced
    seen: dict[str, Any] = {}
    observed: dict[str, list[BaseException]] = {}  # per operation, every failure Hypothesis was shown
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
            seen[operation.label] = response  # Hypothesis replays the failing example last
            try:
                if _judge(response, protocol):
                    case.validate_response(response, checks=checks, headers=headers, transport_kwargs=transport)
            except (AssertionError, BaseExceptionGroup) as raised:
                observed.setdefault(operation.label, []).append(raised)
                raise

        hypothesis.seed(ctx.seed)(exercise)
        try:
            exercise()
        except hypothesis.errors.Unsatisfiable:
            continue  # nothing about this operation can be made invalid (no parameters, no body)
        except (Exception, BaseExceptionGroup) as raised:  # judged on its own; the next operation is fuzzed all the same
            found = _violated(raised, declared, observed.get(operation.label))
            if found is None:
                raise
            text, rules = found
            if "Reproduce with" not in text and operation.label in seen:  # Schemathesis's own failures carry one
                principal = token_variables(ctx.config.tokens)[ctx.config.tokens[0]]
                text += "\n\nReproduce with:\n\n    " + to_curl(exchange_from_schemathesis(seen[operation.label]), principal)
            failures.append(f"{operation.label}: {text}"[:2000])
            violated += [req for req in rules if req not in violated]
            if operation.label in seen:
                failing.append(seen[operation.label])
    if failures:
        raise CheckFailed(
            f"Schemathesis ({mode_name} mode, seed {ctx.seed}) found violations in {len(failures)} "
            f"operation{'s' if len(failures) != 1 else ''}:\n" + "\n".join(failures),
            violated,
            exchange_from_schemathesis(failing[0], token_variables(ctx.config.tokens)) if failing else None,
        )


@check("ERR-SCHEMA-001", "ERR-NO-5XX-001", title="Generated valid requests get documented, schema-valid answers", apart=True)
def generated_valid_requests(ctx: CheckContext) -> None:
    _fuzz(ctx, "positive", ("ERR-SCHEMA-001", "ERR-NO-5XX-001"))


@check(
    "ERR-NO-5XX-001",
    "ERR-SCHEMA-001",
    "ERR-PROTOCOL-001",
    title="Generated invalid requests get documented 4xx answers (or, when not valid HTTP, a protocol-level rejection), never a 5xx",
    apart=True,
)
def generated_invalid_requests(ctx: CheckContext) -> None:
    _fuzz(ctx, "negative", ("ERR-NO-5XX-001", "ERR-SCHEMA-001", "ERR-PROTOCOL-001"), protocol="ERR-PROTOCOL-001")


@check(
    "ERR-SCHEMA-001",
    "ERR-NO-5XX-001",
    title="Generated request sequences that follow the spec's links get documented answers",
    apart=True,
)
def generated_stateful_sequences(ctx: CheckContext) -> None:
    from hypothesis.stateful import run_state_machine_as_test

    headers = {"Authorization": f"Bearer {ctx.config.tokens[0]}"}
    checks = _checks()
    base = _advertised_schema(ctx, CLIENT_CHOSEN_HEADERS).as_state_machine()
    lease_ttl = ctx.limits.get("max_lease_seconds", 300)
    observed: list[BaseException] = []

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
            try:
                if _judge(response, None):
                    case.validate_response(response, checks=checks, transport_kwargs=kwargs or None)
            except (AssertionError, BaseExceptionGroup) as raised:
                observed.append(raised)  # a replay against the live target may not fail the same way
                raise

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
    except (Exception, BaseExceptionGroup) as raised:  # FlakyFailure is a group too
        found = _violated(raised, ("ERR-SCHEMA-001", "ERR-NO-5XX-001"), observed)
        if found is None:
            raise
        text, requirements = found
        raise CheckFailed(
            f"Schemathesis (stateful links, seed {ctx.seed}) found a violation:\n{text[:3000]}", requirements
        ) from None
