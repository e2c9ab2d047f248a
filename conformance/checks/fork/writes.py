"""What a fork writes, in stored items and bytes, by the size of its source: the evidence of
FORK-NO-COPY-001 and DIAG-FORK-WRITES-001/002 on a server that advertises `diagnostics.write-count`.
No checks here (the fork and diagnostics chapters register them)."""

from __future__ import annotations

from typing import Any

from conformance.client import Response
from conformance.context import CheckContext
from conformance.errors import CheckFailed
from conformance.registry import setup_step

WRITES_CAPABILITY = "diagnostics.write-count"
WRITES_HEADER = "Storage-Items-Written"
BYTES_HEADER = "Storage-Bytes-Written"  # with WRITES_CAPABILITY, since 1.3.0 (DIAG-BYTES-001)
# DIAG-FORK-WRITES-002: forks of a 1-record source and of a large one write bytes at most this far apart.
FORK_BYTES_ALLOWANCE = 1024
# The large source holds records of close to `max_record_bytes` each, this many bytes in all: a copy
# of it cannot hide in FORK_BYTES_ALLOWANCE.
SIZED_SOURCE_BYTES = 64 * FORK_BYTES_ALLOWANCE
SIZED_RECORD_OVERHEAD = 64  # bytes of a record's content around its padding, kept below max_record_bytes


def header_count(response: Response, header: str, requirement: str) -> int:
    """A diagnostics header's count: a non-negative integer, or the check fails `requirement`."""
    value = response.header(header)
    if value is None or not (value.strip().isascii() and value.strip().isdigit()):  # '²' is a digit to isdigit()
        raise CheckFailed(
            f"{response.exchange.method} {response.exchange.url} answered {response.status} with header "
            f"{header} {'missing' if value is None else repr(value)}; expected a non-negative integer",
            [requirement],
            response.exchange,
        )
    return int(value)


@setup_step("SESS-RECORD-APPEND-001")
def sized_source(ctx: CheckContext) -> tuple[dict[str, Any], int, int]:
    """A root whose records are each close to `max_record_bytes`, SIZED_SOURCE_BYTES in all, in
    appends as large as the limits allow: (session, records, bytes of their contents)."""
    limits = ctx.limits
    pad = max(limits["max_record_bytes"] - SIZED_RECORD_OVERHEAD, 1)
    per_append = max(1, min(limits["max_records_per_append"], (limits["max_request_bytes"] - 1024) // (pad + SIZED_RECORD_OVERHEAD)))
    total = -(-SIZED_SOURCE_BYTES // pad)  # records needed
    session = ctx.create_session()
    sid, written, stored = session["session_id"], 0, 0
    while written < total:
        turn = ctx.start_turn(sid)
        batch = [{"type": "message", "content": {"n": written + n, "pad": "x" * pad}} for n in range(min(per_append, total - written))]
        response = ctx.alice.post(f"/sessions/{sid}/turns/{turn['turn_id']}/records", json={"records": batch})
        ctx.ok(response, 201, "SESS-RECORD-APPEND-001")
        ctx.finish(sid, turn["turn_id"])
        written += len(batch)
        stored += len(batch) * pad
    return session, written, stored


def fork_writes(ctx: CheckContext, requirement: str) -> list[tuple[bool, dict[str, tuple[int, int | None]]]]:
    """Forks of a 1-record source and of a sized one (`sized_source`), without and with an
    Idempotency-Key: for each, the items and bytes written by source (bytes None when the answer
    carries no Storage-Bytes-Written)."""
    small, _, _ = ctx.conversation(1, records_per_turn=1)
    large, size, stored = sized_source(ctx)
    found = []
    for keyed in (False, True):
        written: dict[str, tuple[int, int | None]] = {}
        for name, source in (("a 1-record source", small), (f"a {size}-record source of {stored} bytes", large)):
            key = ctx.new_id("key") if keyed else None
            response = ctx.fork(source["session_id"], {"mode": "latest"}, key=key)
            ctx.forked(response)
            items = header_count(response, WRITES_HEADER, requirement)
            raw = response.header(BYTES_HEADER)
            written[name] = (items, int(raw) if raw is not None and raw.strip().isdigit() else None)
        found.append((keyed, written))
    return found


def judge_fork_writes(ctx: CheckContext, found: list[tuple[bool, dict[str, tuple[int, int | None]]]], items_rule: str, bytes_rule: str) -> None:
    """The same items, and bytes within FORK_BYTES_ALLOWANCE, whatever the source."""
    ctx.details["fork_writes"] = {
        ("keyed" if keyed else "unkeyed"): {name: {"items": pair[0], "bytes": pair[1]} for name, pair in written.items()}
        for keyed, written in found
    }
    for keyed, written in found:  # the items first, everywhere: a copy into as many items shows there
        items = {name: pair[0] for name, pair in written.items()}
        ctx.expect(
            len(set(items.values())) == 1,
            f"a fork {'with' if keyed else 'without'} an Idempotency-Key wrote {items} stored items: the count grows "
            "with the source, so the fork copies what the child inherits",
            items_rule,
        )
    for keyed, written in found:  # then the bytes: a copy into one item shows only there
        how = "with" if keyed else "without"
        sizes = {name: pair[1] for name, pair in written.items()}
        ctx.expect(None not in sizes.values(), f"a fork {how} an Idempotency-Key answered without {BYTES_HEADER}", bytes_rule)
        spread = max(sizes.values()) - min(sizes.values())  # type: ignore[type-var, operator]
        ctx.expect(
            spread <= FORK_BYTES_ALLOWANCE,
            f"a fork {how} an Idempotency-Key wrote {sizes} bytes: {spread} apart, more than the "
            f"{FORK_BYTES_ALLOWANCE} allowed, so the fork stores a copy of what the child inherits",
            bytes_rule,
        )
