"""The spec's contract for every response: the operations of the OpenAPI document, the schemas
they declare (read as open, VERSION-OPEN-RESPONSE-001), problem+json for errors, never a 5xx.
"""

from __future__ import annotations

import json as jsonlib
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker

import spec
from conformance.errors import CheckFailed
from conformance.results import Exchange


@dataclass(frozen=True)
class Operation:
    operation_id: str
    method: str
    template: str
    pattern: re.Pattern[str]
    responses: dict[str, Any]


@lru_cache(maxsize=1)
def operations() -> tuple[Operation, ...]:
    found = []
    for template, item in spec.openapi()["paths"].items():
        regex = "^" + re.sub(r"\{[^/]+\}", "[^/]+", re.escape(template).replace(r"\{", "{").replace(r"\}", "}")) + "$"
        for method, operation in item.items():
            if method == "parameters":
                continue
            found.append(
                Operation(
                    operation["operationId"],
                    method.upper(),
                    template,
                    re.compile(regex),
                    operation["responses"],
                )
            )
    return tuple(found)


def find_operation(method: str, path: str) -> Operation | None:
    for operation in operations():
        if operation.method == method.upper() and operation.pattern.match(path):
            return operation
    return None


@lru_cache(maxsize=None)
def _validator_for_ref(ref: str) -> Draft202012Validator:
    uri = (spec.SPEC_DIR / ref).as_uri()
    return Draft202012Validator({"$ref": uri}, registry=open_registry(), format_checker=FormatChecker())


def open_schema(node: Any) -> Any:
    """A schema as a client of a later minor version must read a response (VERSION-OPEN-RESPONSE-001):
    members it does not know are allowed, and an enumeration of strings accepts any string (an
    unknown value is opaque, not an error)."""
    if isinstance(node, list):
        return [open_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    opened = {key: open_schema(value) for key, value in node.items() if not (key == "additionalProperties" and value is False)}
    values = node.get("enum")
    if isinstance(values, list) and values and all(isinstance(value, str) for value in values):
        del opened["enum"]
        opened["type"] = "string"
    return opened


@lru_cache(maxsize=1)
def open_registry() -> Any:
    """Every schema of spec/schemas/, opened (`open_schema`): what responses are validated against."""
    from referencing import Registry, Resource

    resources = []
    for path in sorted(spec.SCHEMAS_DIR.glob("*.json")):
        contents = open_schema(jsonlib.loads(path.read_text(encoding="utf-8")))
        resources.append((path.as_uri(), Resource.from_contents(contents)))
    return Registry().with_resources(resources)


@lru_cache(maxsize=None)
def _compiled_for_ref(ref: str) -> Any:
    """The same schema compiled by jsonschema-rs: it decides, jsonschema only words a violation."""
    import jsonschema_rs

    def retrieve(uri: str) -> Any:
        # Responses are read as open (VERSION-OPEN-RESPONSE-001), by both validators.
        return open_schema(jsonlib.loads((spec.SCHEMAS_DIR / uri.rsplit("/", 1)[-1].split("#", 1)[0]).read_text(encoding="utf-8")))

    return jsonschema_rs.validator_for({"$ref": (spec.SPEC_DIR / ref).as_uri()}, retriever=retrieve, validate_formats=True)


def schema_errors(ref: str, body: Any) -> list[str]:
    """Violations of one spec schema, worded: none when the compiled validator accepts the body,
    else jsonschema's first error (or the compiled validator's, should jsonschema find none)."""
    try:
        if _compiled_for_ref(ref).is_valid(body):
            return []
    except (ValueError, OverflowError):  # a number jsonschema-rs cannot hold: jsonschema decides
        pass
    errors = sorted(_validator_for_ref(ref).iter_errors(body), key=lambda e: str(list(e.path)))
    if errors:
        where = "/" + "/".join(str(part) for part in errors[0].absolute_path)
        return [f"at {where}: {errors[0].message}"]
    try:
        compiled = next(iter(_compiled_for_ref(ref).iter_errors(body)), None)
    except (ValueError, OverflowError):
        compiled = None
    if compiled is None:
        return []
    return [f"at /{'/'.join(str(p) for p in compiled.instance_path)}: {compiled.message}"]


def _declared_response(operation: Operation, status: int) -> dict[str, Any] | None:
    document = spec.openapi()
    response = operation.responses.get(str(status)) or operation.responses.get("default")
    if response and "$ref" in response:
        name = response["$ref"].rsplit("/", 1)[-1]
        response = document["components"]["responses"][name]
    return response


def validate(exchange: Exchange, path: str) -> None:
    """Raise CheckFailed when the response breaks the spec's contract for its operation."""
    status = exchange.status or 0
    headers = {key.lower(): value for key, value in exchange.response_headers.items()}
    media_type = headers.get("content-type", "").split(";")[0].strip().lower()
    if status >= 500:
        raise CheckFailed(
            f"{exchange.method} {path} answered {status}: input must never cause a 5xx",
            ["ERR-NO-5XX-001"],
            exchange,
            also_check=True,
        )
    if status >= 400:
        if media_type != "application/problem+json":
            raise CheckFailed(
                f"{exchange.method} {path} answered {status} with content type "
                f"{media_type or 'none'!r}, not application/problem+json",
                ["ERR-PROBLEM-001"],
                exchange,
            )
        body = _parse(exchange, path, "ERR-PROBLEM-001")
        errors = schema_errors("schemas/problem.json", body)
        if errors:
            raise CheckFailed(
                f"{exchange.method} {path}: problem body invalid {errors[0]}",
                ["ERR-PROBLEM-001"],
                exchange,
            )
        if body.get("status") != status:
            raise CheckFailed(
                f"{exchange.method} {path}: problem status {body.get('status')!r} != HTTP {status}",
                ["ERR-PROBLEM-001"],
                exchange,
            )
        known = spec.problem_types()
        if body["type"] in known and known[body["type"]]["status"] != status:
            raise CheckFailed(
                f"{exchange.method} {path}: problem type {body['type']} must have status "
                f"{known[body['type']]['status']}, got {status}",
                ["ERR-TYPE-001"],
                exchange,
            )
    operation = find_operation(exchange.method, path)
    if operation is None:
        return
    if status == 405 and body_type(exchange) == "urn:session-lineage:problem:method-not-allowed":
        # A server without the operation's capability may answer 405 (CAP-UNADVERTISED-001); the
        # problem document was validated above, and ERR-ROUTE-001 checks when 405 is right.
        return
    if status == 412 and body_type(exchange) == "urn:session-lineage:problem:capability-missing":
        # Any operation answers 412 when the request's Requires-Capabilities names a capability the
        # server lacks (NEGOTIATE-HEADER-001); the rollout checks verify when it is right.
        return
    declared = _declared_response(operation, status)
    if declared is None:
        raise CheckFailed(
            f"{exchange.method} {operation.template} answered {status}, a status the spec does "
            f"not declare for {operation.operation_id}",
            ["ERR-SCHEMA-001"],
            exchange,
            also_check=True,
        )
    content = declared.get("content")
    if not content or any(entry.get("x-any-media-type") for entry in content.values()):
        return  # no body, or bytes of any media type (an attachment): nothing to parse
    if media_type not in content:
        raise CheckFailed(
            f"{exchange.method} {operation.template} answered {status} with content type "
            f"{media_type or 'none'!r}; the spec declares {', '.join(content)}",
            ["ERR-SCHEMA-001"],
            exchange,
        )
    body = _parse(exchange, path, "ERR-SCHEMA-001")
    ref = content[media_type]["schema"]["$ref"]
    errors = schema_errors(ref, body)
    if errors:
        raise CheckFailed(
            f"{exchange.method} {operation.template} {status}: body does not match {ref} {errors[0]}",
            ["ERR-SCHEMA-001"],
            exchange,
        )


def body_type(exchange: Exchange) -> str | None:
    """The `type` of a problem body, or None."""
    try:
        body = jsonlib.loads(exchange.response_body)
    except ValueError:
        return None
    return body.get("type") if isinstance(body, dict) else None


def _parse(exchange: Exchange, path: str, requirement: str) -> Any:
    try:
        return jsonlib.loads(exchange.response_body)
    except ValueError:
        raise CheckFailed(
            f"{exchange.method} {path} answered {exchange.status} with a body that is not JSON",
            [requirement],
            exchange,
        ) from None
