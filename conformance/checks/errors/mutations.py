"""Mutations of real values: every opaque value the server hands out, changed the way an attacker
or a broken client would change it, sent back where it came from.

Random strings rarely reach a decoder's inner branches; a real cursor with one part changed does.
Every mutation is enumerated, not drawn, so a server that breaks on one is caught on every run.
The rule checked is the one every input is held to: a 4xx problem or a success, never a 5xx.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote

from conformance.checks.errors.common import session_with_running_turn
from conformance.client import Response
from conformance.context import CheckContext
from conformance.registry import check

SEPARATORS = re.compile(r"([-._~:/+=])")
# What replaces a part: non-ASCII, right-to-left, NUL, a control, a lone surrogate, nothing, and a
# part far longer than any real one.
PART_REPLACEMENTS = ["\u00e9", "\u202e", "\u0000", "\u0001", "\ud800", "", "9" * 40]
# What replaces a decoded JSON member: numbers past every integer type, the wrong types, and text
# that no identifier holds.
MEMBER_REPLACEMENTS: list[Any] = [2**63, 2**64, -(2**63) - 1, 10**30, -2, 1.5, "\u00e9", "a\u0000b", "\ud800", "",
                                  None, True, [], {}]
MOST_POSITIONS = 12  # characters flipped per value, evenly spread (the decoded members are mutated all)
MOST_PARTS = 8  # parts replaced per value, evenly spread


def _parts(value: str) -> list[str]:
    return SEPARATORS.split(value)


def _part_mutations(value: str) -> Iterator[str]:
    """Each part between separators replaced, one at a time."""
    parts = _parts(value)
    between = [index for index, part in enumerate(parts) if not SEPARATORS.fullmatch(part)]
    for index in between[:: max(1, len(between) // MOST_PARTS)]:
        for replacement in PART_REPLACEMENTS:
            yield "".join(parts[:index] + [replacement] + parts[index + 1:])


def _flips(value: str) -> Iterator[str]:
    """One character changed to another of its kind (so the value keeps its alphabet)."""
    step = max(1, len(value) // MOST_POSITIONS)
    for position in range(0, len(value), step):
        char = value[position]
        other = ("0" if char != "0" else "1") if char.isdigit() else ("a" if char != "a" else "b") if char.isalpha() else "_"
        yield value[:position] + other + value[position + 1:]


def _decoded_json(value: str) -> dict[str, Any] | None:
    """The JSON object inside a base64url value, when there is one."""
    try:
        decoded = json.loads(base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        return None
    return decoded if isinstance(decoded, dict) else None


def _encode_json(payload: dict[str, Any]) -> str:
    raw = json.dumps(payload, separators=(",", ":")).encode("utf-8", "surrogatepass")
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _member_mutations(value: str) -> Iterator[str]:
    """Each member of a base64url JSON value replaced, or removed, then encoded again."""
    payload = _decoded_json(value)
    for name in payload or {}:
        for replacement in MEMBER_REPLACEMENTS:
            yield _encode_json({**payload, name: replacement})  # type: ignore[dict-item]
        yield _encode_json({key: item for key, item in payload.items() if key != name})  # type: ignore[union-attr]


def mutations(value: str, other: str | None = None) -> list[str]:
    """Every mutation of `value`: parts, characters, decoded members, truncated, padded, another's."""
    found = [*_part_mutations(value), *_flips(value), *_member_mutations(value),
             value[:-1], value[: len(value) // 2], value + "A", value + "=", value * 2, value + "\u0000"]
    if other is not None:
        found.append(other)
    return list(dict.fromkeys(item for item in found if item != value))


def encoded(value: str) -> str:
    """Percent-encoded for a path, a query or a header (visible ASCII only), lone surrogates as
    their raw UTF-8 bytes."""
    return quote(value.encode("utf-8", "surrogatepass"), safe="")


def _send_each(values: list[str], send: Callable[[str], Response]) -> int:
    """Send every mutation. The client fails the check on a 5xx or an error that is not a problem."""
    for value in values:
        send(encoded(value))
    return len(values)


@check("ERR-NO-5XX-001", "ERR-PROBLEM-001",
       title="Real cursors, ids, ETags and lease ids, each mutated part by part, get a 4xx problem or a success")
def mutated_values(ctx: CheckContext) -> None:
    sid, turn_id, turn_path = session_with_running_turn(ctx)
    other_sid, other_turn, _ = session_with_running_turn(ctx)
    client = ctx.alice
    one = {"limit": 1}
    for kind in ("transcript", "records"):
        cursor = ctx.ok(client.get(f"/sessions/{sid}/{kind}", params=one), 200)["next_cursor"]
        other = ctx.ok(client.get(f"/sessions/{other_sid}/{kind}", params=one), 200)["next_cursor"]
        if not isinstance(cursor, str):
            continue  # a one-record page of a two-record transcript has a next page: XS rules say so elsewhere
        _send_each(mutations(cursor, other if isinstance(other, str) else None),
                   lambda value, kind=kind: client.get(f"/sessions/{sid}/{kind}?cursor={value}&limit=1"))
    _send_each(mutations(sid, other_sid), lambda value: client.get(f"/sessions/{value}"))
    _send_each(mutations(turn_id, other_turn),
               lambda value: client.post(f"/sessions/{sid}/turns/{value}/records",
                                         json={"records": [{"type": "m", "content": {}}]}))
    if ctx.has("sharing"):
        listed = ctx.ok(client.get("/sessions", params=one), 200).get("next_cursor")
        if isinstance(listed, str):
            _send_each(mutations(listed), lambda value: client.get(f"/sessions?cursor={value}&limit=1"))
    etag = client.get(f"/sessions/{sid}").header("ETag")
    if etag and ctx.has("session-patch"):
        _send_each(mutations(etag), lambda value: client.request(
            "PATCH", f"/sessions/{sid}", json={"name": "n"}, headers={"If-Match": value}))
    if ctx.has("writer-lease"):
        from conformance.checks.leases import held_lease  # the leases chapter owns how a lease is taken

        lease_sid = ctx.create_session()["session_id"]
        lease = held_lease(ctx, lease_sid)["lease_id"]
        _send_each(mutations(lease), lambda value: client.post(
            f"/sessions/{lease_sid}/turns", json={"role": "user"}, headers={"Writer-Lease": value}))
    ctx.finish(sid, turn_id)
    ctx.finish(other_sid, other_turn)
