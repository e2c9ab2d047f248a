"""Lines of a legacy JSONL history, read from a byte stream with bounded memory.

A line longer than the limit is never held whole: once it passes the limit its bytes are only
counted (and hashed by the caller) until its terminator. LF ends a line; a CR just before it is
dropped (CRLF files). The last line may lack a terminator.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Line:
    number: int  # 1-based
    start: int  # byte offset of its first byte
    end: int  # byte offset just after its terminator (or the end of the stream)
    data: bytes | None  # None: longer than the limit (oversized)
    terminated: bool
    digest: str  # SHA-256 of the stream's bytes before `end`


class LineReader:
    """Feed chunks, take complete lines; `finish()` gives the unterminated last line, if any.

    The reader hashes the stream as it goes, so each line carries the digest of everything up to
    its end (where a re-upload is compared with what was imported before) and `digest()` is the
    whole stream's.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.number = 1
        self.offset = 0  # bytes consumed so far
        self.start = 0
        self.buffer = bytearray()
        self.oversized = False
        self.hasher = hashlib.sha256()

    def feed(self, chunk: bytes) -> list[Line]:
        lines: list[Line] = []
        position = 0
        while position < len(chunk):
            newline = chunk.find(b"\n", position)
            stop = len(chunk) if newline < 0 else newline + 1
            self.hasher.update(chunk[position:stop])
            piece = chunk[position:stop if newline < 0 else newline]
            if not self.oversized:
                if len(self.buffer) + len(piece) > self.limit + 1:  # +1: a CR before the LF
                    self.oversized = True
                    self.buffer.clear()
                else:
                    self.buffer += piece
            self.offset += stop - position
            position = stop
            if newline >= 0:
                lines.append(self._line(terminated=True))
        return lines

    def finish(self) -> Line | None:
        if self.offset == self.start:
            return None
        return self._line(terminated=False)

    def digest(self) -> str:
        return self.hasher.hexdigest()

    def _line(self, terminated: bool) -> Line:
        data: bytes | None = bytes(self.buffer)
        if terminated and data and data.endswith(b"\r"):
            data = data[:-1]
        if data is not None and len(data) > self.limit:
            self.oversized = True
        line = Line(self.number, self.start, self.offset, None if self.oversized else data, terminated, self.hasher.copy().hexdigest())
        self.number += 1
        self.start = self.offset
        self.buffer.clear()
        self.oversized = False
        return line


@dataclass(frozen=True)
class RecordLine:
    turn: str
    role: str
    type: str
    payload: dict[str, Any]


def parse_json(data: bytes) -> Any:
    return json.loads(data.decode("utf-8"))


def parse_meta(data: bytes | None) -> dict[str, Any] | None:
    """The meta line's payload, or None when the line is not a meta line."""
    if data is None:
        return None
    try:
        line = parse_json(data)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(line, dict) or line.get("type") != "session_meta" or not isinstance(line.get("payload"), dict):
        return None
    payload = line["payload"]
    legacy_id = payload.get("id")
    parent = payload.get("forked_from_id")
    if not isinstance(legacy_id, str) or not 1 <= len(legacy_id) <= 128:
        return None
    if parent is not None and (not isinstance(parent, str) or not 1 <= len(parent) <= 128 or parent == legacy_id):
        return None
    return payload


def parse_record(data: bytes) -> RecordLine | None:
    """A record line, or None when it is malformed."""
    try:
        line = parse_json(data)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(line, dict):
        return None
    kind, payload, turn, role = line.get("type"), line.get("payload"), line.get("turn_id"), line.get("role", "user")
    if not isinstance(kind, str) or not 1 <= len(kind) <= 64 or kind == "session_meta":
        return None
    if not isinstance(payload, dict) or not isinstance(turn, str) or not 1 <= len(turn) <= 128:
        return None
    if role not in ("user", "assistant"):
        return None
    return RecordLine(turn, role, kind, payload)


async def chunks_of(stream: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    async for chunk in stream:
        if chunk:
            yield chunk
