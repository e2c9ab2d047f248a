"""Strong entity tags of sessions, and If-Match (RFC 9110, 13.1.1, strong comparison).

A session's ETag is its version, bumped by every change to its transcript or its metadata (the
statements that change the session row do it in the same UPDATE), salted with the session's id
and creation time, so a session purged and created again under its id never repeats a tag.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from reference_impl.errors import PreconditionFailed, PreconditionRequired
from reference_impl.store.rows import SessionRow

_TAG = re.compile(r'\s*(W/)?"([\x21\x23-\x7e\x80-\xff]*)"\s*')


def etag(session: SessionRow, version: int | None = None) -> str:
    salt = hashlib.sha256(f"{session.session_id}\0{session.created_at}".encode()).hexdigest()[:12]
    return f'"{session.version if version is None else version}-{salt}"'


class Tagged(dict):  # type: ignore[type-arg]
    """A session view with the ETag its response carries."""

    def __init__(self, view: dict[str, Any], tag: str) -> None:
        super().__init__(view)
        self.etag = tag


def tagged(view: dict[str, Any], session: SessionRow, version: int | None = None) -> Tagged:
    return Tagged(view, etag(session, version))


def parse_if_match(values: list[str]) -> list[str] | None:
    """The entity tags of the If-Match header lines (None: no header). `*` stays `*`; a weak tag
    stays `W/"..."`, which never matches strongly; a line that is not a list of tags matches nothing."""
    if not values:
        return None
    found: list[str] = []
    for value in values:
        if value.strip() == "*":
            found.append("*")
            continue
        position = 0
        while position < len(value):
            match = _TAG.match(value, position)
            if match is None:
                return found + ["<malformed>"]
            found.append(("W/" if match.group(1) else "") + f'"{match.group(2)}"')
            position = match.end()
            if position < len(value):
                if value[position] != ",":
                    return found + ["<malformed>"]
                position += 1
    return found


def require_match(if_match: list[str] | None, current: str) -> None:
    """428 without If-Match; 412 unless it names the current tag (strongly) or is `*`."""
    if if_match is None:
        raise PreconditionRequired("send If-Match with the session's current ETag (read it with GET /sessions/{id})")
    if "*" in if_match or current in if_match:
        return
    raise PreconditionFailed(f"the session's current ETag is {current}; If-Match names {', '.join(if_match)[:200]}")
