"""Chapter: bounded model context (capability `model-context`).

Sizes come from the advertised `max_context_bytes` (B) and `max_context_record_bytes` (C). A
record's size is its content in canonical JSON (RFC 8785), UTF-8 bytes; the suite writes contents
`{"t": "..."}` whose canonical form is `{"t":"` + the string + `"}`, 8 bytes around the string, so
it can put every edge exactly where it wants: a sum of exactly B and one byte more, a record of
exactly C and one byte more, a multi-byte character straddling C.
"""

from __future__ import annotations

import json
from typing import Any

from conformance.client import ApiClient, Response
from conformance.context import CheckContext
from conformance.errors import CheckFailed
from conformance.registry import check, setup_step

CAPABILITY = "model-context"
NEEDS = (CAPABILITY,)
WRAP = len('{"t":""}')  # bytes around the string of a {"t": ...} content
DEPTHS = (0, 1, 5)
COST_BOUND = 2


def canonical(value: Any) -> bytes:
    """RFC 8785 for the contents the suite writes (objects, strings, integers)."""
    if isinstance(value, dict):
        items = sorted(value.items(), key=lambda item: item[0].encode("utf-16-be"))
        inner = ",".join(json.dumps(k, ensure_ascii=False) + ":" + canonical(v).decode() for k, v in items)
        return ("{" + inner + "}").encode()
    if isinstance(value, list):
        return ("[" + ",".join(canonical(v).decode() for v in value) + "]").encode()
    return json.dumps(value, ensure_ascii=False).encode()


def sized(size: int, fill: str = "x") -> dict[str, Any]:
    """A content whose canonical size is exactly `size` bytes (at least WRAP)."""
    if size < WRAP:
        raise ValueError(size)
    return {"t": fill * (size - WRAP)}


def split(total: int, cap: int) -> list[int]:
    """Record sizes, each from WRAP to `cap`, summing to `total` (at least WRAP)."""
    sizes: list[int] = []
    left = total
    while left > cap:
        take = cap if left - cap >= WRAP else left - WRAP
        sizes.append(take)
        left -= take
    sizes.append(left)
    return sizes


def limits(ctx: CheckContext) -> tuple[int, int]:
    return ctx.limits["max_context_bytes"], ctx.limits["max_context_record_bytes"]


@setup_step("SESS-RECORD-APPEND-001")
def write_turn(
    ctx: CheckContext, sid: str, contents: list[dict[str, Any]], finish: bool = True, client: ApiClient | None = None
) -> dict[str, Any]:
    """A turn holding exactly `contents`, in as many appends as the batch limit needs."""
    client = client or ctx.alice
    turn = ctx.start_turn(sid, client=client)
    batch = max(ctx.limits["max_records_per_append"], 1)
    for start in range(0, len(contents), batch):
        records = [{"type": "message", "content": c} for c in contents[start : start + batch]]
        response = client.post(f"/sessions/{sid}/turns/{turn['turn_id']}/records", json={"records": records})
        ctx.ok(response, 201, "SESS-RECORD-APPEND-001")
    if finish:
        ctx.finish(sid, turn["turn_id"], client=client)
    return turn


def read(ctx: CheckContext, sid: str, client: ApiClient | None = None) -> Response:
    return (client or ctx.alice).get(f"/sessions/{sid}/context")


@setup_step("CONTEXT-READ-001")
def read_ok(ctx: CheckContext, sid: str) -> Response:
    """A context read that must answer 200 (a set-up step of the checks that measure it)."""
    response = read(ctx, sid)
    ctx.expect_status(response, 200, None, "CONTEXT-READ-001")
    return response


@setup_step("CONTEXT-READ-001")
def context_of(ctx: CheckContext, sid: str, *requirements: str) -> dict[str, Any]:
    response = read(ctx, sid)
    body = ctx.ok(response, 200, "CONTEXT-READ-001", *requirements)
    if not isinstance(body, dict) or not isinstance(body.get("turns"), list):
        raise CheckFailed(f"GET /sessions/{sid}/context answered {str(body)[:200]}", ["CONTEXT-READ-001"])
    return body


def turn_ids(body: dict[str, Any]) -> list[str]:
    return [turn.get("turn_id") for turn in body["turns"]]


def describe_turns(body: dict[str, Any]) -> str:
    return ", ".join(f"{t.get('turn_id')} ({t.get('bytes')} bytes, {len(t.get('records', []))} records)" for t in body["turns"]) or "none"


@check("CONTEXT-LIMITS-001", title="The context budget and record cap are advertised within their bounds", needs=NEEDS)
def limits_advertised(ctx: CheckContext) -> None:
    budget, cap = limits(ctx)
    record = ctx.limits["max_record_bytes"]
    ctx.expect(cap >= 64, f"max_context_record_bytes is {cap}, below 64")
    ctx.expect(cap * 8 <= record, f"max_context_record_bytes is {cap}, above max_record_bytes / 8 ({record} / 8)")
    ctx.expect(
        4 * cap <= budget <= 256 * cap,
        f"max_context_bytes is {budget}; it must be from 4 to 256 times max_context_record_bytes ({cap})",
    )


@check("CONTEXT-READ-001", title="A small transcript is given whole: turns, records, provenance and sizes", needs=NEEDS)
def whole_when_small(ctx: CheckContext) -> None:
    budget, cap = limits(ctx)
    root = ctx.create_session()["session_id"]
    t0 = write_turn(ctx, root, [{"n": 0, "t": "ab"}, {"n": 1, "t": "é"}])
    empty = write_turn(ctx, root, [])  # a turn without records is not a turn of the context
    t1 = write_turn(ctx, root, [{"n": 2, "t": "c"}])
    write_turn(ctx, root, [{"n": 99}])  # after the cut: never inherited
    child = ctx.fork_ok(root, {"mode": "through", "turn_id": t1["turn_id"]})["session"]["session_id"]
    running = write_turn(ctx, child, [{"n": 3, "t": "d"}, {"n": 4, "t": "€"}], finish=False)
    transcript = ctx.walk(child)
    body = context_of(ctx, child)
    expected_turns = [t0["turn_id"], t1["turn_id"], running["turn_id"]]
    ctx.expect(
        turn_ids(body) == expected_turns,
        f"the context of {child} holds turns {turn_ids(body)}; expected {expected_turns} (the turn without records, "
        f"{empty['turn_id']}, does not appear; the running turn's records do)",
    )
    given = [record for turn in body["turns"] for record in turn.get("records", [])]
    keys = ["record_id", "session_id", "turn_id", "index", "type", "content", "created_at"]
    ctx.expect(
        [{k: r.get(k) for k in keys} for r in given] == [{k: r.get(k) for k in keys} for r in transcript],
        f"the context's records differ from the effective transcript's: {[r.get('record_id') for r in given]} vs "
        f"{[r['record_id'] for r in transcript]}",
    )
    for record in given:
        size = len(canonical(record.get("content")))
        ctx.expect(
            record.get("content_bytes") == size and record.get("truncated") is False,
            f"record {record.get('record_id')}: content_bytes {record.get('content_bytes')}, truncated "
            f"{record.get('truncated')}; expected {size} and false",
        )
    for turn, sid, index in zip(body["turns"], (root, root, child), (0, 2, 0)):
        ctx.expect(
            (turn.get("session_id"), turn.get("index")) == (sid, index),
            f"turn {turn.get('turn_id')} is given as held by {turn.get('session_id')} at index {turn.get('index')}; "
            f"expected {sid} at index {index}",
        )
        own = sum(len(canonical(r.get("content"))) for r in turn.get("records", []))
        ctx.expect(turn.get("bytes") == own, f"turn {turn.get('turn_id')} has bytes {turn.get('bytes')}; its records count {own}")
    total = sum(turn.get("bytes", 0) for turn in body["turns"])
    ctx.expect(
        (body.get("bytes"), body.get("omitted_turns"), body.get("skipped_records")) == (total, 0, 0),
        f"bytes {body.get('bytes')}, omitted_turns {body.get('omitted_turns')}, skipped_records "
        f"{body.get('skipped_records')}; expected {total}, 0 and 0",
    )
    ctx.expect(
        (body.get("max_context_bytes"), body.get("max_context_record_bytes")) == (budget, cap),
        f"the context gives the limits {body.get('max_context_bytes')}/{body.get('max_context_record_bytes')}; "
        f"the capability document {budget}/{cap}",
    )
    nothing = ctx.create_session()["session_id"]
    write_turn(ctx, nothing, [])
    body = context_of(ctx, nothing)
    ctx.expect(
        (body["turns"], body.get("bytes"), body.get("omitted_turns")) == ([], 0, 0),
        f"a session without records has the context {describe_turns(body)}, bytes {body.get('bytes')}",
    )
    for client, sid, what in ((ctx.bob, child, "a stranger's read"), (ctx.alice, ctx.new_id("missing"), "an unknown session")):
        response = read(ctx, sid, client)
        ctx.expect_status(response, 404, "not-found")
        ctx.expect(b"n\\\"" not in response.content and b'"turns"' not in response.content, f"{what} revealed content")


@check("CONTEXT-BUDGET-001", title="Whole turns from the end: a sum of exactly the budget fits, one byte more does not", needs=NEEDS)
def budget_edges(ctx: CheckContext) -> None:
    budget, cap = limits(ctx)
    last_size = WRAP + 5
    for extra in (0, 1):
        root = ctx.create_session()["session_id"]
        early = write_turn(ctx, root, [sized(WRAP + 1)])  # would fit on its own, after the turn that does not
        fill = write_turn(ctx, root, [sized(size) for size in split(budget - last_size + extra, cap)])
        child = ctx.fork_ok(root, {"mode": "latest"})["session"]["session_id"]
        last = write_turn(ctx, child, [sized(last_size, "z")])
        body = context_of(ctx, child)
        if extra == 0:
            expected, omitted, total = [fill["turn_id"], last["turn_id"]], 1, budget
            why = f"the last two turns sum to exactly max_context_bytes ({budget}) and both fit; the one before them does not"
        else:
            expected, omitted, total = [last["turn_id"]], 2, last_size
            why = (
                f"the last two turns sum to max_context_bytes + 1 ({budget + 1}), so only the last fits, and the small "
                f"turn {early['turn_id']} before the one that does not fit is left out too"
            )
        ctx.expect(
            turn_ids(body) == expected,
            f"the context of {child} holds {describe_turns(body)}; expected turns {expected}: {why}",
        )
        ctx.expect(
            (body.get("bytes"), body.get("omitted_turns")) == (total, omitted),
            f"bytes {body.get('bytes')}, omitted_turns {body.get('omitted_turns')}; expected {total} and {omitted} ({why})",
        )
        if extra == 0:
            written = ctx.walk(root, "records")
            fill_records = [r["record_id"] for r in written if r["turn_id"] == fill["turn_id"]]
            given = [r.get("record_id") for r in body["turns"][0].get("records", [])]
            ctx.expect(given == fill_records, f"turn {fill['turn_id']} is not given whole: {len(given)} of {len(fill_records)} records")


@check("CONTEXT-RECORD-CAP-001", title="Records capped at exactly max_context_record_bytes in UTF-8, never splitting a character", needs=NEEDS)
def record_cap_edges(ctx: CheckContext) -> None:
    _, cap = limits(ctx)
    cases: list[tuple[str, dict[str, Any], int | None]] = [
        ("ASCII, exactly the cap", sized(cap), None),
        ("ASCII, one byte over", sized(cap + 1), cap),
    ]
    for char in ("é", "€", "😀"):
        width = len(char.encode())
        cases.append((f"{width}-byte character ending exactly at the cap", {"t": "x" * (cap - WRAP - width) + char}, None))
        cases.append((f"{width}-byte character ending at the cap, one byte more after it", {"t": "x" * (cap - 6 - width) + char + "y"}, cap))
        for inside in range(1, width):  # the character starts `inside` bytes before the cap
            cases.append(
                (f"{width}-byte character with {inside} of its bytes within the cap", {"t": "x" * (cap - 6 - inside) + char + "y"}, cap - inside)
            )
    for what, content, kept in cases:
        sid = ctx.create_session()["session_id"]
        write_turn(ctx, sid, [content])
        body = context_of(ctx, sid)
        records = [r for t in body["turns"] for r in t.get("records", [])]
        ctx.expect(len(records) == 1, f"{what}: the context of a one-record session holds {len(records)} records")
        record = records[0]
        data = canonical(content)
        ctx.expect(record.get("content_bytes") == len(data), f"{what}: content_bytes {record.get('content_bytes')}, expected {len(data)}")
        if kept is None:
            ctx.expect(
                record.get("truncated") is False and record.get("content") == content and "text" not in record,
                f"{what} ({len(data)} bytes, cap {cap}): truncated {record.get('truncated')}, content "
                f"{'as written' if record.get('content') == content else 'changed or missing'}; expected it whole",
            )
            counted = len(data)
        else:
            text = record.get("text")
            expected = data[:kept].decode()
            got = text.encode() if isinstance(text, str) else b""
            ctx.expect(
                record.get("truncated") is True and "content" not in record and text == expected,
                f"{what} ({len(data)} bytes, cap {cap}): truncated {record.get('truncated')}, text of "
                f"{len(got)} bytes ending {got[-8:]!r}; expected truncated true, no content, and the first {kept} bytes "
                f"ending {data[:kept][-8:]!r}",
            )
            counted = kept
        ctx.expect(
            body["turns"][0].get("bytes") == counted and body.get("bytes") == counted,
            f"{what}: the turn counts {body['turns'][0].get('bytes')} and the context {body.get('bytes')} bytes; expected {counted}",
        )


@check("CONTEXT-LARGE-TURN-001", title="A last turn larger than the budget is given alone with every record capped", needs=NEEDS)
def large_last_turn(ctx: CheckContext) -> None:
    budget, cap = limits(ctx)
    root = ctx.create_session()["session_id"]
    write_turn(ctx, root, [sized(WRAP + 2)])
    count = budget // cap + 1
    big = write_turn(ctx, root, [sized(cap + 50, "w") for _ in range(count)])
    body = context_of(ctx, root)
    ctx.expect(
        turn_ids(body) == [big["turn_id"]],
        f"the last turn counts {count * cap} bytes after capping, above max_context_bytes {budget}; the context holds "
        f"{describe_turns(body)}, expected that turn alone",
    )
    records = body["turns"][0].get("records", [])
    ctx.expect(len(records) == count, f"the large turn is given with {len(records)} of its {count} records")
    ctx.expect(
        all(r.get("truncated") is True and isinstance(r.get("text"), str) and len(r["text"].encode()) == cap for r in records),
        f"the large turn's records are not each capped at {cap} bytes",
    )
    ctx.expect(
        body.get("bytes") == count * cap and body.get("omitted_turns") == 1,
        f"bytes {body.get('bytes')}, omitted_turns {body.get('omitted_turns')}; expected {count * cap} and 1",
    )


@check(
    "CONTEXT-COST-001",
    title="A context read costs at most 2 round trips, the same at depths 0, 1, 5 and the maximum",
    needs=(CAPABILITY, "diagnostics.query-count"),
)
def cost_by_depth(ctx: CheckContext) -> None:
    from conformance.counts import round_trips

    maximum = ctx.limits["max_lineage_depth"]
    ids = ctx.chain(maximum)
    costs: dict[int, int] = {}
    for depth in sorted({*DEPTHS, maximum}):
        if depth < len(ids):
            response = read_ok(ctx, ids[depth])
            costs[depth] = round_trips(ctx, response, f"depth {depth}")
    ctx.details["context_round_trips_by_depth"] = costs
    over = {depth: cost for depth, cost in costs.items() if cost > COST_BOUND}
    ctx.expect(not over, f"a context read cost more than {COST_BOUND} round trips; by depth: {costs}")
    ctx.expect(len(set(costs.values())) == 1, f"a context read costs different round trips by depth: {costs}")
