"""A response as checks read it: a missing field or a body that is not JSON fails the check,
naming the request, instead of crashing the suite.
"""

from __future__ import annotations

import json as jsonlib
from typing import Any

from conformance.errors import CheckFailed
from conformance.results import Exchange

_MISSING: Any = object()


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

    @property
    def trace(self) -> tuple[str, str] | None:
        """(trace id, span id) of the W3C `traceparent` the request carried, if one was sent."""
        return trace_of(self.exchange)


def trace_of(exchange: Exchange) -> tuple[str, str] | None:
    """(trace id, span id) of the W3C `traceparent` an exchange's request carried."""
    value = next((v for k, v in exchange.request_headers.items() if k.lower() == "traceparent"), None)
    parts = value.strip().split("-") if isinstance(value, str) else []
    if len(parts) != 4 or len(parts[1]) != 32 or len(parts[2]) != 16:
        return None
    return parts[1].lower(), parts[2].lower()
