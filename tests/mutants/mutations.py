"""Mutants: decoders of the server's own opaque values that break on a mutated part.

Each answers 500 where a naive decoder would raise: only a real value with one part changed gets
there, never a random string (which fails the first, outermost parse and is refused as it should).
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any
from urllib.parse import parse_qs

from starlette.types import ASGIApp

from reference_impl.settings import Settings
from tests.mutants import mutant, reference_app, rewrite_responses

CRASH = (500, [(b"content-type", b"application/problem+json")],
         b'{"type": "urn:session-lineage:problem:internal", "title": "Internal server error", "status": 500}')


def _decoded_cursor(scope: dict[str, Any]) -> dict[str, Any] | None:
    values = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("cursor")
    if not values:
        return None
    try:
        payload = json.loads(base64.urlsafe_b64decode(values[0] + "=" * (-len(values[0]) % 4)))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        return None  # the outer parse fails: refused as an invalid cursor, like the reference
    return payload if isinstance(payload, dict) else None


@mutant("ERR-NO-5XX-001", select=("errors.mutated_values",),
        description="The cursor decoder converts the decoded position to a 64-bit integer without checking it: 500 on a large one")
def cursor_position_overflows(settings: Settings) -> ASGIApp:
    def rewrite(scope: dict[str, Any], status: int, headers: Any, body: bytes) -> Any:
        payload = _decoded_cursor(scope)
        position = payload.get("i") if payload else None
        if isinstance(position, (int, float)) and not isinstance(position, bool) and abs(position) >= 2**63:
            return CRASH
        return status, headers, body

    return rewrite_responses(reference_app(settings), rewrite)


@mutant("ERR-NO-5XX-001", select=("errors.mutated_values",),
        description="The lease decoder parses each dash-separated part of a Writer-Lease as hex: 500 on a part that is not")
def lease_parts_parsed_as_hex(settings: Settings) -> ASGIApp:
    def rewrite(scope: dict[str, Any], status: int, headers: Any, body: bytes) -> Any:
        lease = dict(scope.get("headers", [])).get(b"writer-lease")
        if lease is not None and lease.count(b"-") == 4:  # shaped like the ids this server hands out
            try:
                [int(part, 16) for part in lease.split(b"-")]
            except ValueError:
                return CRASH
        return status, headers, body

    return rewrite_responses(reference_app(settings), rewrite)
