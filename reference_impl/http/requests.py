"""Reading a request: credentials, path ids, query parameters, JSON bodies checked by schema."""

from __future__ import annotations

import json
import math
import re
from typing import Any

from starlette.requests import Request

import spec
from reference_impl.errors import DomainError, InvalidCursor, InvalidRequest, NotFound, PayloadTooLarge
from reference_impl.principals import DEFAULT_PROJECT, PRINCIPAL_PATTERN, Caller

ID_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
TOKEN_PATTERN = re.compile(r"^[A-Za-z0-9._~+/=-]{1,256}$")


class Unauthenticated(DomainError):
    kind = "unauthenticated"


class MalformedJson(DomainError):
    kind = "malformed-json"


class UnsupportedMediaType(DomainError):
    kind = "unsupported-media-type"


class InvalidIdempotencyKey(DomainError):
    kind = "invalid-idempotency-key"


def principal_of(request: Request, tokens: dict[str, str], projects: dict[str, str] | None = None) -> Caller:
    """The principal a bearer token names, with its project; any well-formed token in development mode.

    A request carrying more than one Authorization header is refused: which one would count? The
    caller is kept on the request, so that path ids can be read as keys of its project.
    """
    values = request.headers.getlist("authorization")
    if len(values) > 1:
        raise Unauthenticated("send one Authorization header")
    scheme, _, token = (values[0] if values else "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not TOKEN_PATTERN.match(token):
        raise Unauthenticated("a bearer token is required")
    if not tokens:
        caller = Caller(token)
    elif token not in tokens:
        raise Unauthenticated("unknown bearer token")
    else:
        principal = tokens[token]
        caller = Caller(principal, (projects or {}).get(principal, DEFAULT_PROJECT))
    request.state.caller = caller
    return caller


# Path ids that name something of the caller's project: read as store keys (principals.py).
PROJECT_SCOPED = ("session_id", "turn_id")


def path_id(request: Request, name: str) -> str:
    """A path id (a store key for sessions and turns); one that cannot exist is simply not found."""
    value = request.path_params[name]
    if not ID_PATTERN.match(value):
        raise NotFound(f"no {name.replace('_', ' ')} {value}")
    if name not in PROJECT_SCOPED:
        return value
    caller = getattr(request.state, "caller", None)
    if caller is None:
        raise RuntimeError("authenticate the request before reading its path ids")
    return caller.key(value)


def path_principal(request: Request) -> str:
    """The principal id of a grant path; one that cannot exist is not found."""
    value = request.path_params["principal_id"]
    if not PRINCIPAL_PATTERN.match(value):
        raise NotFound(f"no principal {value}")
    return value


def scope_ids(caller: Caller, body: dict[str, Any], *paths: tuple[str, ...]) -> dict[str, Any]:
    """The body with the client-chosen session and turn ids it holds made keys of the caller's project."""
    scoped = dict(body)
    for path in paths:
        holder = scoped
        for part in path[:-1]:
            if not isinstance(holder.get(part), dict):
                break
            holder[part] = dict(holder[part])
            holder = holder[part]
        else:
            if isinstance(holder.get(path[-1]), str):
                holder[path[-1]] = caller.key(holder[path[-1]])
    return scoped


def query_int(request: Request, name: str) -> int | None:
    raw = request.query_params.get(name)
    if raw is None:
        return None
    if not re.fullmatch(r"[0-9]{1,9}", raw):
        raise InvalidRequest(f"query parameter {name} must be a positive integer")
    return int(raw)


def query_cursor(request: Request, max_length: int = 2048) -> str | None:
    """The opaque cursor; one that cannot have been issued here is an invalid cursor."""
    raw = request.query_params.get("cursor")
    if raw is not None and not (1 <= len(raw) <= max_length):
        raise InvalidCursor("the cursor is not one this server issued")
    return raw


QUOTED_KEY = re.compile(r'"((?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\["\\]){1,255})"')
BARE_KEY = re.compile(r'[\x21\x23-\x7e][\x21-\x7e]{0,254}')


def idempotency_key(request: Request) -> str | None:
    """The key: a Structured Field string (`"..."`, escapes `\\"` and `\\\\`) or a bare visible token."""
    values = request.headers.getlist("idempotency-key")
    if not values:
        return None
    if len(values) > 1:
        raise InvalidIdempotencyKey("send one Idempotency-Key header")
    raw = values[0].strip()
    quoted = QUOTED_KEY.fullmatch(raw)
    if quoted:
        return re.sub(r'\\(["\\])', r"\1", quoted.group(1))
    if BARE_KEY.fullmatch(raw):
        return raw
    raise InvalidIdempotencyKey(
        "the key must be a Structured Field string of 1 to 255 printable ASCII characters, "
        "or 1 to 255 visible ASCII characters"
    )


MEDIA_TYPE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*(\s*;.*)?$")


def attachment_media_type(request: Request) -> str:
    """The media type an attachment is stored with: its request's one `Content-Type`."""
    values = request.headers.getlist("content-type")
    value = values[0].strip() if len(values) == 1 else ""
    if not MEDIA_TYPE.match(value) or len(value) > 255:
        raise UnsupportedMediaType("an attachment needs one Content-Type that is a media type (type/subtype)")
    return value


async def raw_body(request: Request, max_bytes: int, limit_name: str) -> bytes:
    """The body's bytes, refused as soon as it is known to exceed `max_bytes`."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise PayloadTooLarge(f"the body exceeds {limit_name} ({max_bytes})")
    raw = bytearray()
    async for chunk in request.stream():
        raw.extend(chunk)
        if len(raw) > max_bytes:
            raise PayloadTooLarge(f"the body exceeds {limit_name} ({max_bytes})")
    return bytes(raw)


async def json_body(request: Request, schema_file: str, max_bytes: int) -> dict[str, Any]:
    """The body as JSON, after media type, size and schema checks."""
    media_type = request.headers.get("content-type", "application/json").split(";")[0].strip()
    if media_type.lower() != "application/json" and not media_type.lower().endswith("+json"):
        raise UnsupportedMediaType(f"expected application/json, got {media_type or 'no media type'}")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise PayloadTooLarge(f"the body exceeds max_request_bytes ({max_bytes})")
    raw = bytearray()
    async for chunk in request.stream():
        raw.extend(chunk)
        if len(raw) > max_bytes:
            raise PayloadTooLarge(f"the body exceeds max_request_bytes ({max_bytes})")
    try:
        body = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant, parse_float=_finite_float)
    except RecursionError as exc:  # valid JSON, nested deeper than the parser goes: too deep
        raise InvalidRequest(f"the body is nested deeper than {MAX_NESTING} levels") from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise MalformedJson(f"the body is not valid JSON: {exc}") from exc
    _check_text_and_depth(body)
    try:
        errors = sorted(
            spec.validator(schema_file).iter_errors(body), key=lambda e: [str(p) for p in e.path]
        )
    except RecursionError as exc:
        raise InvalidRequest("the body is nested too deeply") from exc
    if errors:
        raise InvalidRequest(describe_schema_error(errors[0])[:500])
    return body


def describe_schema_error(error: Any) -> str:
    """A schema violation in words, values written as JSON (jsonschema's messages use Python reprs)."""
    where = "/" + "/".join(str(part) for part in error.absolute_path)
    rule, expected, value = error.validator, error.validator_value, error.instance
    if rule == "required" and isinstance(value, dict):
        missing = [name for name in expected if name not in value]
        return f"{where}: missing required field {', '.join(missing)}"
    if rule == "additionalProperties" and isinstance(value, dict):
        known = set(error.schema.get("properties", {}))
        extra = [str(name) for name in value if name not in known]
        return f"{where}: unknown field {', '.join(extra)}"
    if rule == "type":
        return f"{where}: expected {' or '.join(expected) if isinstance(expected, list) else expected}, got {_json_type(value)}"
    if rule == "enum":
        return f"{where}: must be one of {', '.join(json.dumps(item) for item in expected)}"
    return f"{where}: does not satisfy {rule} {json.dumps(expected, default=str)[:200]}"


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return {str: "string", list: "array", dict: "object"}.get(type(value), type(value).__name__)


MAX_NESTING = 256


def _check_text_and_depth(value: Any) -> None:
    """Refuse what parses but cannot be stored and read back safely.

    JSON may escape half of a surrogate pair: such a string is not text. Very deep nesting parses,
    but serialising it again could exhaust the interpreter's recursion limit on the way out.
    """
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if any("\ud800" <= char <= "\udfff" for char in item):
                raise MalformedJson("the body holds a string that is not valid Unicode (a lone surrogate)")
        elif isinstance(item, (dict, list)):
            if depth > MAX_NESTING:
                raise InvalidRequest(f"the body is nested deeper than {MAX_NESTING} levels")
            children = [*item.keys(), *item.values()] if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)


def _finite_float(text: str) -> float:
    """A number too large for a double would come back as Infinity, which is not JSON."""
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"the number {text[:40]} is out of range")
    return value


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def writer_lease(request: Request) -> str | None:
    """The `Writer-Lease` header: the lease id a writer holds, if it sends one."""
    value = request.headers.get("writer-lease")
    if value is None:
        return None
    value = value.strip()
    if not re.fullmatch(r"[\x21-\x7e]{1,64}", value):
        raise InvalidRequest("the Writer-Lease header must be 1 to 64 visible ASCII characters")
    return value
