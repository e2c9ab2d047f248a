"""Opaque pagination cursors: a position (session, record index) bound to the session read."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass

from reference_impl.errors import InvalidCursor


LARGEST_STORED = 2**63 - 1  # no index or revision is larger: a cursor claiming one was not issued here


@dataclass(frozen=True)
class Position:
    """Just after record `index` of `session_id`, in a read of `read_session_id` of `kind`."""

    kind: str
    read_session_id: str
    session_id: str
    index: int
    revision: int = 0  # reverts of the read session when the cursor was issued


def encode(position: Position) -> str:
    payload = {
        "v": 1,
        "k": position.kind,
        "r": position.read_session_id,
        "s": position.session_id,
        "i": position.index,
    }
    if position.revision:
        payload["g"] = position.revision
    raw = json.dumps(payload, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _storable(value: object) -> bool:
    """Text a store can compare: a string of UTF-8 without NUL (JSON escapes allow lone surrogates)."""
    if not isinstance(value, str) or "\x00" in value:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def decode(cursor: str, kind: str, read_session_id: str) -> Position:
    """Decode a cursor issued for this kind of read of this session, or raise InvalidCursor."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        payload = json.loads(raw)
    except (binascii.Error, ValueError, UnicodeDecodeError) as exc:
        raise InvalidCursor("the cursor is not one this server issued") from exc
    if (
        not isinstance(payload, dict)
        or payload.get("v") != 1
        or payload.get("k") != kind
        or payload.get("r") != read_session_id
        or not _storable(payload.get("s"))
        or not isinstance(payload.get("i"), int)
        or isinstance(payload.get("i"), bool)
        or not -1 <= payload["i"] <= LARGEST_STORED
        or not isinstance(payload.get("g", 0), int)
        or isinstance(payload.get("g", 0), bool)
        or not 0 <= payload.get("g", 0) <= LARGEST_STORED
    ):
        raise InvalidCursor("the cursor was not issued for this read of this session")
    return Position(kind, read_session_id, payload["s"], payload["i"], payload.get("g", 0))
