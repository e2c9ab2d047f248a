"""OTLP/HTTP trace receiver: lets the suite count a request's database round trips from the spans a
server exports (DIAG-SPANS-001), instead of believing the server's own header.

Every request the suite sends carries a fresh W3C `traceparent` (client.py), so each trace id is one
request. The receiver keeps the spans of every trace; `Receiver.trace` waits, bounded, until the
server span of the suite's request has arrived (or, from a target that exports no server span, until
its spans have stopped arriving for a moment).
"""

from __future__ import annotations

import gzip
import socket
import threading
import time
import zlib
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest, ExportTraceServiceResponse
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as ProtoSpan

TRACE_CAPABILITY = "diagnostics.trace-context"

DEFAULT_HOST = "127.0.0.1"
PATH = "/v1/traces"
WAIT_S = 10.0  # the most a count waits for a request's spans: more than the SDK's default 5 s batch delay
QUIET_S = 0.5  # without a server span: spans are complete after this long without a new one
MAX_BODY = 64 * 1024 * 1024
# DIAG-SPANS-001: statements that begin, end or mark a transaction are not round trips (as in the header).
TRANSACTION_CONTROL = frozenset({"BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE", "START", "END"})
DB_SYSTEM_KEYS = ("db.system.name", "db.system")
OPERATION_KEYS = ("db.operation.name", "db.operation")
STATEMENT_KEYS = ("db.query.text", "db.statement")


@dataclass(frozen=True)
class Span:
    """One received span, reduced to what counting needs."""

    span_id: str
    parent_span_id: str
    kind: int
    name: str
    attributes: dict[str, Any]

    @property
    def statement(self) -> str | None:
        return next((str(self.attributes[key]) for key in STATEMENT_KEYS if key in self.attributes), None)

    @property
    def is_database_client(self) -> bool:
        return self.kind == ProtoSpan.SPAN_KIND_CLIENT and any(key in self.attributes for key in DB_SYSTEM_KEYS)

    @property
    def is_transaction_control(self) -> bool:
        """Judged from the operation name, else the statement's first keyword, else the span name's."""
        text = next((str(self.attributes[key]) for key in OPERATION_KEYS if key in self.attributes), None)
        words = _first_word(text or self.statement or self.name)
        return words in TRANSACTION_CONTROL

    @property
    def is_round_trip(self) -> bool:
        """DIAG-SPANS-001: a database client span that is not transaction control."""
        return self.is_database_client and not self.is_transaction_control

    def label(self, width: int = 80) -> str:
        """The span's name and statement, shortened for reports."""
        text = self.name if not self.statement or self.statement == self.name else f"{self.name}: {self.statement}"
        text = " ".join(text.split())
        return text if len(text) <= width else text[: width - 1] + "…"


def _first_word(text: str) -> str:
    """The first keyword of a statement, past leading comments (a sqlcommenter may prefix one)."""
    text = text.strip()
    while text.startswith(("/*", "--")):
        end = text.find("*/") + 2 if text.startswith("/*") else text.find("\n") + 1
        text = text[end:].strip() if end > 1 else ""
    word = text.split(None, 1)[0] if text else ""
    return word.strip("(;").upper()


@dataclass
class Trace:
    """The spans of one trace (one request of the suite) received so far."""

    spans: list[Span] = field(default_factory=list)
    last_arrival: float = 0.0

    def server_span(self, parent: str) -> Span | None:
        """The target's server span for the suite's request (a child of the suite's span id)."""
        return next(
            (s for s in self.spans if s.kind == ProtoSpan.SPAN_KIND_SERVER and s.parent_span_id == parent), None
        )

    @property
    def round_trips(self) -> list[Span]:
        return [span for span in self.spans if span.is_round_trip]


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind in ("string_value", "bool_value", "int_value", "double_value"):
        return getattr(value, kind)
    if kind == "array_value":
        return [_value(item) for item in value.array_value.values]
    return None if kind is None else str(getattr(value, kind))


def decode(body: bytes, encoding: str | None = None) -> list[tuple[str, Span]]:
    """(trace id, span) for every span of an OTLP/HTTP protobuf export; ValueError when unreadable."""
    encoding = (encoding or "identity").strip().lower()
    try:
        if encoding == "gzip":
            body = gzip.decompress(body)
        elif encoding == "deflate":
            body = zlib.decompress(body)
        elif encoding != "identity":
            raise ValueError(f"unsupported Content-Encoding {encoding!r}")
        request = ExportTraceServiceRequest.FromString(body)
    except (OSError, EOFError, zlib.error, DecodeError) as exc:
        raise ValueError(f"not an OTLP ExportTraceServiceRequest: {exc}") from None
    found = []
    for resource in request.resource_spans:
        for scope in resource.scope_spans:
            for span in scope.spans:
                attributes = {item.key: _value(item.value) for item in span.attributes}
                found.append((span.trace_id.hex(), Span(span.span_id.hex(), span.parent_span_id.hex(), span.kind, span.name, attributes)))
    return found


class _IPv6Server(ThreadingHTTPServer):
    address_family = socket.AF_INET6


class Receiver:
    """An OTLP/HTTP receiver (`POST /v1/traces`, protobuf, gzip accepted) for one run."""

    def __init__(self, host: str, port: int) -> None:
        self._traces: dict[str, Trace] = {}
        self._changed = threading.Condition()
        server = _IPv6Server if ":" in host else ThreadingHTTPServer
        self._server = server((host, port), _handler(self))  # OSError when the port cannot be bound
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), name="otlp-receiver", daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{_url_host(str(self._server.server_address[0]))}:{self.port}{PATH}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def add(self, spans: list[tuple[str, Span]]) -> None:
        now = time.monotonic()
        with self._changed:
            for trace_id, span in spans:
                trace = self._traces.setdefault(trace_id, Trace())
                trace.spans.append(span)
                trace.last_arrival = now
            self._changed.notify_all()

    def trace(self, trace_id: str, span_id: str, wait_s: float = WAIT_S, quiet_s: float = QUIET_S) -> Trace | None:
        """The spans of the suite's request (trace id, its span id) once complete: its server span has
        arrived, or none is coming and no span arrived for `quiet_s`; at most `wait_s` later, whatever
        arrived by then. None when nothing of the trace arrived."""
        deadline = time.monotonic() + wait_s
        with self._changed:
            while True:
                trace = self._traces.get(trace_id)
                now = time.monotonic()
                if trace is not None and trace.server_span(span_id) is not None:
                    return trace
                if now >= deadline:
                    return trace
                if trace is not None and now - trace.last_arrival >= quiet_s:
                    return trace
                wake = deadline if trace is None else min(deadline, trace.last_arrival + quiet_s)
                self._changed.wait(max(0.0, wake - now))


def _handler(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
            if self.path.split("?", 1)[0] != PATH:
                return self._answer(404, b"", "text/plain")
            content_type = (self.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()
            if content_type != "application/x-protobuf":
                return self._answer(415, b"only application/x-protobuf is accepted", "text/plain")
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                return self._answer(413, b"", "text/plain")
            try:
                receiver.add(decode(self.rfile.read(length), self.headers.get("Content-Encoding")))
            except ValueError as exc:
                return self._answer(400, str(exc).encode(), "text/plain")
            self._answer(200, ExportTraceServiceResponse().SerializeToString(), "application/x-protobuf")

        def _answer(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the stdlib's name)
            """Quiet: the run's console is the suite's."""

    return Handler


def address(setting: str) -> tuple[str, int]:
    """`[HOST:]PORT` as (host, port); ValueError when it is not one."""
    host, _, port = setting.strip().rpartition(":")
    host = host.strip("[]") or DEFAULT_HOST
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError("expected [HOST:]PORT, e.g. 4318 or 127.0.0.1:4318")
    return host, int(port)


_RUNNING: dict[tuple[str, int], Receiver] = {}
_LOCK = threading.Lock()


def start(config: Any) -> Receiver | None:
    """The run's receiver (started once per address and kept for the process); None without
    `otlp_receiver`. OSError when its port cannot be bound."""
    setting = getattr(config, "otlp_receiver", None)
    if not setting:
        return None
    where = address(setting)
    with _LOCK:
        if where not in _RUNNING:
            receiver = Receiver(*where)
            _RUNNING[where] = _RUNNING[(where[0], receiver.port)] = receiver  # port 0: found by its real port too
        return _RUNNING[where]


def running(config: Any) -> Receiver | None:
    """The receiver already started for this configuration, if any."""
    setting = getattr(config, "otlp_receiver", None)
    with _LOCK:
        return _RUNNING.get(address(setting)) if setting else None


def stop(config: Any) -> None:
    """Close the configuration's receiver (tests start many)."""
    setting = getattr(config, "otlp_receiver", None)
    with _LOCK:
        receiver = _RUNNING.pop(address(setting), None) if setting else None
        for where in [where for where, running in _RUNNING.items() if running is receiver]:
            del _RUNNING[where]
    if receiver is not None:
        receiver.close()


def receiver_url(config: Any) -> str | None:
    """The URL a server under test exports its spans to, e.g. `http://127.0.0.1:4318/v1/traces`."""
    setting = getattr(config, "otlp_receiver", None)
    if not setting:
        return None
    started = running(config)
    if started is not None:  # its real port, when the setting asked for any free one (0)
        return started.url
    host, port = address(setting)
    return f"http://{_url_host(host)}:{port}{PATH}"


def _url_host(host: str) -> str:
    """A listening host as a server can reach it: any-address as the loopback, IPv6 in brackets."""
    host = DEFAULT_HOST if host in ("0.0.0.0", "") else "::1" if host == "::" else host
    return f"[{host}]" if ":" in host else host


__all__ = ["TRACE_CAPABILITY", "Receiver", "Span", "Trace", "decode", "receiver_url", "running", "start", "stop"]
