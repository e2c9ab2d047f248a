"""A thin HTTP client that checks every response against the spec before a check sees it.

Each response is validated against the schema the OpenAPI document declares for its operation,
status and content type; errors must be problem+json whose `status` equals the HTTP status; a
5xx is always a violation. Every exchange is recorded so a failure can be replayed with curl.
"""

from __future__ import annotations

import functools
import json as jsonlib
import secrets
import ssl
import threading
import time
from typing import Any

import httpx

from conformance import SUITE_VERSION
from conformance.contract import find_operation, validate
from conformance.errors import TargetUnreachable
from conformance.response import _MISSING, Response, describe
from conformance.results import Exchange

__all__ = ["ApiClient", "Recorder", "Response", "describe", "find_operation"]  # checks and tests import these from here

READ_RETRIES = 3
USUAL_HEADERS = (("User-Agent", f"session-lineage-conformance/{SUITE_VERSION}"), ("Accept-Encoding", "gzip, deflate"))
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


def new_traceparent() -> str:
    """A fresh W3C trace context (version 00, sampled): every request is its own trace, so the spans
    a target exports for it (otlp.py) are found by its trace id."""
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    while not int(trace_id, 16) or not int(span_id, 16):  # all zeros is invalid
        trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return f"00-{trace_id}-{span_id}-01"


def _text(value: str | bytes) -> str:
    """A header value as text: bytes (obs-text a check sends on purpose) decoded as Latin-1."""
    return value.decode("latin-1") if isinstance(value, bytes) else value


@functools.lru_cache(maxsize=1)
def tls() -> ssl.SSLContext:
    """One TLS context for every HTTP client of the process: building one loads the system's CA
    bundle (about 30 ms), and a run opens a client per principal and replica, a test run thousands."""
    return httpx.create_ssl_context()


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
        self._base_path = httpx.URL(self.base_url).path.rstrip("/")
        self.token = token
        self.principal = principal
        self.recorder = recorder
        # The transport itself, not an `httpx.Client` around it: the suite follows no redirect, keeps
        # no cookie and sets every header itself, and the client's layers for those cost about a
        # third of the suite's own time per request. Idle connections are dropped after 1 s, before
        # any common server keep-alive timeout (5 s in several servers): reusing one the server is
        # closing just then resets it.
        self._http: httpx.BaseTransport = httpx.HTTPTransport(
            verify=tls(),
            limits=httpx.Limits(
                max_connections=max_connections, max_keepalive_connections=max_connections, keepalive_expiry=1.0
            ),
        )
        self._timeout = httpx.Timeout(timeout).as_dict()

    def close(self) -> None:
        self._http.close()

    def _send(self, method: str, url: httpx.URL, content: bytes | None, headers: list[tuple[str, str]]) -> httpx.Response:
        """One request through the transport, its body read whole; the suite's User-Agent and
        Accept-Encoding unless the request names its own (as an `httpx.Client` would add its own)."""
        named = {name.lower() for name, _ in headers}
        headers = [*((name, value) for name, value in USUAL_HEADERS if name.lower() not in named), *headers]
        request = httpx.Request(method, url, content=content, headers=headers, extensions={"timeout": self._timeout})
        answer = self._http.handle_request(request)
        try:
            answer.read()
        finally:
            answer.close()
        return answer

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
        # Parsed once (httpx's parser walks every character): sent as it is and judged by its path.
        query = {k: v for k, v in params.items() if v is not None} if params else None
        target = httpx.URL(self.base_url + path, params=query) if query else httpx.URL(self.base_url + path)
        url = str(target)
        started = time.perf_counter()
        traced = not (headers and any(name.lower() == "traceparent" for name in headers))
        for attempt in range(READ_RETRIES + 1):
            if traced:  # a fresh trace per attempt: a retried read's spans are not counted twice
                request_headers["traceparent"] = new_traceparent()
            try:
                answer = self._send(method, target, content, [*request_headers.items(), *(repeated_headers or [])])
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
            validate(exchange, target.path[len(self._base_path):] or "/")
        return Response(exchange)

    def get(self, path: str, **kwargs: Any) -> Response:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, **kwargs: Any) -> Response:
        return self.request("POST", path, **kwargs)
