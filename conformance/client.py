"""A thin HTTP client that checks every response against the spec before a check sees it.

Each response is validated against the schema the OpenAPI document declares for its operation,
status and content type; errors must be problem+json whose `status` equals the HTTP status; a
5xx is always a violation. Every exchange is recorded so a failure can be replayed with curl.
"""

from __future__ import annotations

import json as jsonlib
import re
import threading
import time
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import httpx
from jsonschema import Draft202012Validator, FormatChecker

import spec
from conformance.errors import CheckFailed, TargetUnreachable
from conformance.results import Exchange

_MISSING: Any = object()


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


def _text(value: str | bytes) -> str:
    """A header value as text: bytes (obs-text a check sends on purpose) decoded as Latin-1."""
    return value.decode("latin-1") if isinstance(value, bytes) else value


def describe(exchange: Exchange) -> str:
    """`METHOD url answered STATUS (problem kind)`: the start of every message about a response."""
    text = f"{exchange.method} {exchange.url} answered {exchange.status}"
    try:
        body = jsonlib.loads(exchange.response_body) if exchange.response_body else None
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("type"), str):
        text += f" ({body['type'].rsplit(':', 1)[-1]})"
    return text


class MissingField(CheckFailed, KeyError):
    """A check read a field (or item) the response does not have: the target broke the rule the
    check relies on. A KeyError too, so code that tolerates absent keys keeps working."""

    def __str__(self) -> str:
        return self.message


class NotJson(CheckFailed, ValueError):
    """The response body a check reads is not JSON."""


class JsonObject(dict):  # type: ignore[type-arg]
    """A JSON object of a response. Reading a missing field fails the check with a message that
    names the field and the request, instead of crashing the suite with a KeyError."""

    __slots__ = ("_where", "_exchange")

    def __init__(self, items: dict[str, Any], where: str, exchange: Exchange | None) -> None:
        super().__init__(items)
        self._where = where
        self._exchange = exchange

    def __getitem__(self, key: Any) -> Any:
        try:
            return dict.__getitem__(self, key)
        except KeyError:
            raise _missing(self._exchange, f"{self._where}[{key!r}]", f"no field {key!r}") from None
        except TypeError:
            raise _missing(self._exchange, self._where, f"an object where a list was expected") from None


class JsonArray(list):  # type: ignore[type-arg]
    """A JSON array of a response: an index past its end, or a field name, fails the check."""

    __slots__ = ("_where", "_exchange")

    def __init__(self, items: list[Any], where: str, exchange: Exchange | None) -> None:
        super().__init__(items)
        self._where = where
        self._exchange = exchange

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, str):
            raise _missing(self._exchange, self._where, f"a list where an object with {index!r} was expected")
        try:
            return list.__getitem__(self, index)
        except IndexError:
            raise _missing(self._exchange, f"{self._where}[{index}]", f"only {len(self)} item(s)") from None


def _missing(exchange: Exchange | None, where: str, what: str) -> MissingField:
    head = describe(exchange) if exchange is not None else "a response"
    return MissingField(f"{head}: {where} is not there ({what}), but the check needs it", [], exchange)


def wrap_json(value: Any, where: str = "body", exchange: Exchange | None = None) -> Any:
    """JSON values with objects and arrays replaced by their failing-not-crashing twins."""
    if isinstance(value, dict):
        return JsonObject({k: wrap_json(v, f"{where}[{k!r}]", exchange) for k, v in value.items()}, where, exchange)
    if isinstance(value, list):
        return JsonArray([wrap_json(v, f"{where}[{n}]", exchange) for n, v in enumerate(value)], where, exchange)
    return value


class Response:
    """A validated response: status, headers, raw body and parsed JSON."""

    def __init__(self, exchange: Exchange) -> None:
        self.exchange = exchange
        self.status = exchange.status or 0
        self.headers = {key.lower(): value for key, value in exchange.response_headers.items()}
        self.content = exchange.response_body
        self._json: Any = _MISSING

    def json(self) -> Any:
        """The body as JSON (None when empty); a body that is not JSON fails the check."""
        if self._json is _MISSING:
            try:
                parsed = jsonlib.loads(self.content) if self.content else None
            except ValueError:
                raise NotJson(
                    f"{describe(self.exchange)} with a body that is not JSON: {self.content[:120]!r}",
                    [],
                    self.exchange,
                ) from None
            self._json = wrap_json(parsed, "body", self.exchange)
        return self._json

    @property
    def problem_type(self) -> str | None:
        try:
            body = self.json()
        except NotJson:
            return None
        value = body.get("type") if isinstance(body, dict) else None
        return value if isinstance(value, str) else None

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


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


READ_RETRIES = 3
MAX_RETRY_WAIT = 2.0


def _retry_after(answer: httpx.Response) -> float | None:
    """Seconds to wait before asking again, when the target says so on a 503."""
    if answer.status_code != 503:
        return None
    value = answer.headers.get("retry-after", "")
    return min(float(value), MAX_RETRY_WAIT) if value.isdigit() else None


class Recorder:
    """Collects the exchanges of the running check (thread-safe: concurrency checks share it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.exchanges: list[Exchange] = []

    def add(self, exchange: Exchange) -> None:
        with self._lock:
            self.exchanges.append(exchange)

    def clear(self) -> None:
        with self._lock:
            self.exchanges = []

    @property
    def last(self) -> Exchange | None:
        with self._lock:
            return self.exchanges[-1] if self.exchanges else None


class ApiClient:
    """Requests as one principal (or none), validated and recorded."""

    def __init__(
        self,
        base_url: str,
        token: str | None,
        principal: str | None,
        recorder: Recorder,
        timeout: float = 30.0,
        max_connections: int = 64,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.principal = principal
        self.recorder = recorder
        self._http = httpx.Client(
            timeout=timeout,
            # Idle connections are dropped after 1 s, before any common server keep-alive timeout
            # (5 s in several servers): reusing one the server is closing just then resets it.
            limits=httpx.Limits(
                max_connections=max_connections, max_keepalive_connections=max_connections, keepalive_expiry=1.0
            ),
        )

    def close(self) -> None:
        self._http.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = _MISSING,
        content: bytes | None = None,
        headers: dict[str, str] | None = None,
        params: dict[str, Any] | None = None,
        validate_response: bool = True,
        repeated_headers: list[tuple[str, str]] | None = None,
    ) -> Response:
        """Send one request; `repeated_headers` are sent after the others, even when a name repeats."""
        request_headers: dict[str, str] = {"Accept": "application/json, application/problem+json"}
        if self.token is not None:
            request_headers["Authorization"] = f"Bearer {self.token}"
        if json is not _MISSING:
            content = jsonlib.dumps(json).encode()
            request_headers["Content-Type"] = "application/json"
        request_headers.update(headers or {})
        url = self.base_url + path
        if params:
            url = str(httpx.URL(url, params={k: v for k, v in params.items() if v is not None}))
        started = time.perf_counter()
        for attempt in range(READ_RETRIES + 1):
            try:
                answer = self._http.request(
                    method, url, content=content, headers=[*request_headers.items(), *(repeated_headers or [])]
                )
            except httpx.TransportError as exc:
                raise TargetUnreachable(f"{method} {url}: {exc.__class__.__name__}: {exc}") from exc
            wait = _retry_after(answer) if method.upper() == "GET" and attempt < READ_RETRIES else None
            if wait is None:
                break
            # A read answered 503 with Retry-After (a records store catching up) is asked again.
            threading.Event().wait(wait)
        exchange = Exchange(
            method=method.upper(),
            url=url,
            request_headers={k: _text(v) for k, v in {**request_headers, **dict(repeated_headers or [])}.items()},
            request_body=content,
            status=answer.status_code,
            response_headers=dict(answer.headers),
            response_body=answer.content,
            principal=self.principal,
            elapsed_ms=(time.perf_counter() - started) * 1000,
        )
        self.recorder.add(exchange)
        if validate_response:
            validate(exchange, httpx.URL(url).path[len(httpx.URL(self.base_url).path.rstrip("/")):] or "/")
        return Response(exchange)

    def get(self, path: str, **kwargs: Any) -> Response:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, **kwargs: Any) -> Response:
        return self.request("POST", path, **kwargs)
