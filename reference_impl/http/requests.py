"""Reading a request: credentials, path ids, query parameters, JSON bodies checked by schema."""

from __future__ import annotations

import json
import math
import re
from array import array
from functools import lru_cache
from itertools import accumulate
from typing import Any

from starlette.requests import Request

import spec
from reference_impl.errors import DomainError, InvalidCursor, InvalidRequest, NotFound, PayloadTooLarge
from reference_impl.principals import DEFAULT_PROJECT, PRINCIPAL_PATTERN, Caller

ID_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,128}")  # used with fullmatch: `$` would let a trailing newline through
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
    if not ID_PATTERN.fullmatch(value):
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
    if not re.fullmatch(r"[0-9]+", raw):
        raise InvalidRequest(f"query parameter {name} must be a decimal integer of at least 1, got {raw[:40]!r}")
    digits = raw.lstrip("0") or "0"
    # an integer of any length matches the schema; past 100 digits (above every limit, and past
    # what int() parses quickly) 10**100 stands for it
    return int(digits) if len(digits) <= 100 else 10**100


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
        text = raw.decode("utf-8")
        body = json.loads(
            text, parse_constant=_reject_constant, parse_float=_finite_float, parse_int=_double_sized_int
        )
    except RecursionError as exc:  # valid JSON nested deeper than the parser goes: too deep...
        if _has_lone_surrogate_escape(text):  # ...unless it is not text at all (400 comes first)
            raise MalformedJson(LONE_SURROGATE) from exc
        raise InvalidRequest(f"the body is nested deeper than {MAX_NESTING} levels") from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise MalformedJson(f"the body is not valid JSON: {exc}") from exc
    _check_text_and_depth(body, text)
    validate_body(schema_file, body)
    return body


def validate_body(schema_file: str, body: Any) -> None:
    """Raise InvalidRequest unless `body` matches the schema.

    The compiled validator decides; the reference validator (jsonschema) only words the error,
    so a valid body costs microseconds, not milliseconds.
    """
    if _compiled_validator(schema_file).is_valid(body):
        return
    try:
        errors = sorted(spec.validator(schema_file).iter_errors(body), key=lambda e: [str(p) for p in e.path])
    except RecursionError as exc:
        raise InvalidRequest("the body is nested too deeply") from exc
    if errors:
        raise InvalidRequest(describe_schema_error(errors[0])[:500])
    compiled = next(iter(_compiled_validator(schema_file).iter_errors(body)), None)
    where = "/" + "/".join(str(part) for part in compiled.instance_path) if compiled is not None else "/"
    raise InvalidRequest(f"{where}: does not match the schema"[:500])


@lru_cache(maxsize=None)
def _compiled_validator(schema_file: str) -> Any:
    import jsonschema_rs

    def retrieve(uri: str) -> Any:
        path = spec.SCHEMAS_DIR / uri.rsplit("/", 1)[-1].split("#", 1)[0]
        return json.loads(path.read_text(encoding="utf-8"))

    root = {"$ref": (spec.SCHEMAS_DIR / schema_file).as_uri()}
    return jsonschema_rs.validator_for(root, retriever=retrieve, validate_formats=True)


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
    if rule == "not" and isinstance(error.schema, dict) and error.schema.get("description"):
        return f"{where}: {str(error.schema['description']).replace('`', '')}"  # the rule in words
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
LONE_SURROGATE = "the body holds a string that is not valid Unicode (a lone surrogate)"
_STRINGS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')  # unrolled: linear and fast
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")
_BRACKET_STEP = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")  # +1 opening, -1 closing


def _check_text_and_depth(value: Any, text: str) -> None:
    """Refuse what parses but cannot be stored and read back safely, in that order.

    JSON may escape half of a surrogate pair: such a string is not text (400). Very deep nesting
    parses, but serialising it again could exhaust the interpreter's recursion limit (422).
    Both tests run at C speed: encoding finds lone surrogates, the brackets outside strings give
    the depth.
    """
    if "\\u" in text:  # surrogates can only come from escapes: the body is valid UTF-8
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise MalformedJson(LONE_SURROGATE) from None
        except RecursionError:
            if _has_lone_surrogate_escape(text):
                raise MalformedJson(LONE_SURROGATE) from None
    if text.count("[") + text.count("{") <= MAX_NESTING:
        return  # fewer brackets than the limit: cannot be too deep
    brackets = _NOT_BRACKETS.sub("", _STRINGS.sub("", text)).encode("ascii")
    if max(accumulate(array("b", brackets.translate(_BRACKET_STEP))), default=0) > MAX_NESTING:
        raise InvalidRequest(f"the body is nested deeper than {MAX_NESTING} levels")


def _has_lone_surrogate_escape(text: str) -> bool:
    """Whether the JSON text escapes half a surrogate pair (for bodies too deep to parse)."""
    pending_high = None  # where a high surrogate escape ended, waiting for its low half
    for escape in re.finditer(r"\\(u[0-9a-fA-F]{4}|.)", text):
        token = escape.group(1)
        code = int(token[1:], 16) if len(token) == 5 else None
        is_low = code is not None and 0xDC00 <= code <= 0xDFFF
        if pending_high is not None:
            if is_low and escape.start() == pending_high:
                pending_high = None
                continue
            return True
        if code is not None and 0xD800 <= code <= 0xDBFF:
            pending_high = escape.end()
        elif is_low:
            return True
    return pending_high is not None


def _finite_float(text: str) -> float:
    """A number too large for a double would come back as Infinity, which is not JSON."""
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"the number {text[:40]} is out of range")
    return value


def _double_sized_int(text: str) -> int:
    """An integer beyond the largest double (about 1.8e308) is a number too large for a double."""
    value = int(text)
    try:
        float(value)
    except OverflowError:
        raise ValueError(f"the number {text[:40]}... is out of range") from None
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
