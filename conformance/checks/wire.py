"""HTTP/1.1 at the byte level: which requests are not valid HTTP (ERR-PROTOCOL-001), and a raw
socket client to send exactly the bytes a check means, valid or not.

A request that is not valid HTTP/1.1 may be refused before it reaches the API, with status 400,
408, 413, 414 or 431 and any content type; every other error answer is problem+json.
"""

from __future__ import annotations

import re
import socket
import ssl
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from conformance.results import Exchange

PROTOCOL_REJECTIONS = frozenset({400, 408, 413, 414, 431})
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")  # RFC 9110 token (field names, methods)
_TARGET = re.compile(r"^[\x21-\x7e]+$")  # a request-target: visible ASCII, no spaces or controls
_CONTENT_LENGTH = re.compile(r"^[0-9]+$")
# Fields whose value frames the message or routes it: a bad value is a bad message, not a bad
# API request (RFC 9112 sections 3.2, 6).
_FRAMING = {"content-length", "transfer-encoding", "host"}


def _text(value: str | bytes) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else str(value)


def _bad_value(value: str) -> bool:
    """A field value with a control character other than HTAB (obs-text, 0x80-0xFF, is allowed)."""
    return any((ord(char) < 0x20 and char != "\t") or ord(char) == 0x7F or ord(char) > 0xFF for char in value)


def not_valid_http(
    method: str, target: str, headers: Iterable[tuple[str | bytes, str | bytes]], body: bytes | None = None
) -> str | None:
    """Why a request is not valid HTTP/1.1 (a malformed request line, field or framing), or None."""
    if not _TOKEN.match(method):
        return f"the method {method!r} is not a token"
    if not _TARGET.match(target):
        return f"the request-target {target[:60]!r} holds spaces, controls or non-ASCII bytes"
    lengths: list[str] = []
    hosts = 0
    for raw_name, raw_value in headers:
        name, value = _text(raw_name), _text(raw_value)
        if not _TOKEN.match(name):
            return f"the header name {name[:40]!r} is not a token"
        if _bad_value(value):
            return f"the value of header {name!r} holds a control character"
        lowered = name.lower()
        if lowered == "content-length":
            lengths.append(value.strip())
        elif lowered == "host":
            hosts += 1
            if not value.strip() or any(char in value for char in " /?#@"):
                return f"the Host header {value[:40]!r} is not a host"
        elif lowered == "transfer-encoding":
            return "the request carries a generated Transfer-Encoding header"
    if hosts > 1:
        return "the request carries more than one Host header"
    if lengths:
        if len(set(lengths)) > 1 or not _CONTENT_LENGTH.match(lengths[0]):
            return f"the Content-Length {lengths!r} does not frame the body"
        if body is not None and int(lengths[0]) != len(body):
            return f"the Content-Length {lengths[0]} is not the body's {len(body)} bytes"
    return None


def protocol_rejection(status: int, content_type: str | None) -> bool:
    """True for an answer ERR-PROTOCOL-001 allows only for a request that is not valid HTTP."""
    media = (content_type or "").split(";")[0].strip().lower()
    return status in PROTOCOL_REJECTIONS and media != "application/problem+json"


def acceptable_for_malformed(answer: "RawAnswer") -> bool:
    """What a request that is not valid HTTP may get: a protocol-level rejection, a problem+json
    error, a success (a tolerant server), or no answer at all; never a 5xx."""
    if answer.closed_without_answer:
        return True
    status = answer.status or 0
    if status >= 500:
        return False
    return status < 400 or status in PROTOCOL_REJECTIONS or answer.content_type == "application/problem+json"


@dataclass
class RawAnswer:
    """What came back on the socket: a parsed status line, headers and body, or nothing."""

    status: int | None
    headers: dict[str, str]
    body: bytes
    closed_without_answer: bool = False

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "").split(";")[0].strip().lower()


def request_bytes(method: str, target: str, host: str, headers: Iterable[tuple[bytes, bytes]], body: bytes = b"") -> bytes:
    """A request as bytes, headers exactly as given (names, values and order), then the body."""
    lines = [f"{method} {target} HTTP/1.1".encode("latin-1"), b"Host: " + host.encode()]
    lines += [name + b": " + value for name, value in headers]
    lines += [b"Connection: close"]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def send_raw(base_url: str, data: bytes, timeout: float = 10.0) -> RawAnswer:
    """Send `data` on a fresh connection and read the answer until the server closes it."""
    parts = urlsplit(base_url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    sock = socket.create_connection((parts.hostname or "localhost", port), timeout=timeout)
    if parts.scheme == "https":
        sock = ssl.create_default_context().wrap_socket(sock, server_hostname=parts.hostname)
    received = b""
    try:
        sock.sendall(data)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not chunk:
                break
            received += chunk
            if _complete(received):
                break
    finally:
        sock.close()
    return _parse(received)


def _complete(data: bytes) -> bool:
    head, separator, body = data.partition(b"\r\n\r\n")
    if not separator:
        return False
    match = re.search(rb"(?im)^content-length:\s*([0-9]+)\s*$", head)
    return bool(match) and len(body) >= int(match.group(1))


def _parse(data: bytes) -> RawAnswer:
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    match = re.match(rb"^HTTP/1\.[01] ([0-9]{3})", lines[0]) if lines and lines[0] else None
    if match is None:
        return RawAnswer(None, {}, data, closed_without_answer=True)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers[name.decode("latin-1").strip().lower()] = value.decode("latin-1").strip()
    return RawAnswer(int(match.group(1)), headers, body)


def exchange_of(base_url: str, data: bytes, answer: RawAnswer, principal: str | None) -> Exchange:
    """The raw request and its answer as a report exchange (the request line's target in `url`)."""
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    method, _, rest = lines[0].decode("latin-1").partition(" ")
    target = rest.rsplit(" ", 1)[0]
    fields: Mapping[str, str] = dict(
        (name.decode("latin-1"), value.decode("latin-1").lstrip())
        for name, _, value in (line.partition(b":") for line in lines[1:])
    )
    return Exchange(
        method=method,
        url=base_url.rstrip("/") + target,
        request_headers=dict(fields),
        request_body=body or None,
        status=answer.status,
        response_headers=answer.headers,
        response_body=answer.body,
        principal=principal,
    )
