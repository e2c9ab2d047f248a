"""Chapter export (`transcript-export`): the export document, its limit and its cost."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from conformance.checks.authorization.common import grant
from conformance.checks.diagnostics import DEPTHS, records_examined
from conformance.checks.revert import REVERT, revert_ok
from conformance.counts import counted, round_trips
from conformance.client import Response, describe
from conformance.context import CheckContext
from conformance.errors import CheckFailed
from conformance.registry import check, setup_step

EXPORT = "transcript-export"
POSITIONS = "turn-by-position"
QUERY_COUNT = "diagnostics.query-count"
RECORDS_EXAMINED = "diagnostics.records-examined"
EXPORT_ROUND_TRIPS = 3  # EXPORT-COST-001
TURN_ROUND_TRIPS = 3  # TURN-POS-COST-001
EXAMINED_ALLOWANCE = 3  # records examined beyond those returned (EXPORT-COST-001, TURN-POS-COST-001)
MINIMUM_EXPORT_RECORDS = 1000  # EXPORT-LIMIT-001
BAD_POSITIONS = ("0", "00", "01", "-1", "+1", "1.0", "1e1", "abc", "%20", "1234567890123456", "9" * 40)


@setup_step("EXPORT-LIMIT-001")
def export_limit(ctx: CheckContext) -> int:
    value = ctx.limits.get("max_export_records")
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise CheckFailed(f"the capability document's limits state max_export_records {value!r}", ["EXPORT-LIMIT-001"])
    return value


def field(ctx: CheckContext, response: Response, body: Any, name: str, kind: type | tuple[type, ...]) -> Any:
    """A member of a response body, failing the check (never crashing) when it is missing or mistyped."""
    value = body.get(name) if isinstance(body, dict) else None
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise CheckFailed(f"{describe(response.exchange)}: `{name}` is missing or not a {kind}", [], response.exchange)
    return value


@setup_step("EXPORT-READ-001")
def export(
    ctx: CheckContext, sid: str, client: Any = None, requirement: str = "EXPORT-READ-001", records: int | None = None
) -> tuple[Response, dict[str, Any]]:
    """An export that must answer 200 with its lists (and, given `records`, that many records)."""
    response = (client or ctx.alice).get(f"/sessions/{sid}/export")
    ctx.expect_status(response, 200, None, requirement)
    body = response.json()
    for name in ("turns", "records"):
        field(ctx, response, body, name, list)
    for name in ("turn_count", "record_count"):
        field(ctx, response, body, name, int)
    ctx.expect(records is None or len(body["records"]) == records,
               f"the export of {sid} returned {len(body['records'])} records, expected {records}", "EXPORT-READ-001")
    return response, body


def key(record: dict[str, Any]) -> tuple[Any, ...]:
    return (record.get("record_id"), record.get("session_id"), record.get("index"), record.get("turn_id"))


@dataclass
class Family:
    """root: A1 (2 records), A2 (none), A3 (3), A4 (2); B: fork of root through A3, then B1 (2),
    B2 (1); C: fork of B before B2, then C1 (1) and C2 (2 records, still running)."""

    ids: dict[str, str]
    turns: dict[str, list[dict[str, Any]]]  # session name -> its effective turns, in order


def family(ctx: CheckContext) -> Family:
    root = ctx.create_session()["session_id"]
    a = [ctx.run_turn(root, role, n)[0] for role, n in (("user", 2), ("assistant", 0), ("user", 3), ("assistant", 2))]
    b_id = ctx.fork_ok(root, {"mode": "through", "turn_id": a[2]["turn_id"]})["session"]["session_id"]
    b = [ctx.run_turn(b_id, role, n)[0] for role, n in (("user", 2), ("assistant", 1))]
    c_id = ctx.fork_ok(b_id, {"mode": "before", "turn_id": b[1]["turn_id"]})["session"]["session_id"]
    c1, _ = ctx.run_turn(c_id, "user", 1)
    c2, _ = ctx.run_turn(c_id, "assistant", 2, status="running")
    return Family(
        {"root": root, "B": b_id, "C": c_id},
        {"root": a, "B": a[:3] + b, "C": a[:3] + [b[0], c1, c2]},
    )


# ---------------------------------------------------------------- export
@check("EXPORT-LIMIT-001", title="max_export_records is advertised, at least 1000 and max_page_size", needs=(EXPORT,))
def limit_advertised(ctx: CheckContext) -> None:
    limit = export_limit(ctx)
    page = ctx.limits["max_page_size"]
    ctx.expect(
        limit >= MINIMUM_EXPORT_RECORDS and limit >= page,
        f"max_export_records is {limit}; it must be at least {MINIMUM_EXPORT_RECORDS} and at least max_page_size ({page})",
    )


def expect_effective(ctx: CheckContext, name: str, sid: str, effective: list[dict[str, Any]]) -> list[Any]:
    """Export `sid` and expect its `effective` turns (turn_id, session_id, index) and exactly the
    paged transcript's records, with the counts of both; the exported turns."""
    _, body = export(ctx, sid)
    paged = ctx.walk(sid)
    records, turns = body["records"], body["turns"]
    ctx.expect(body.get("session_id") == sid, f"export of {name} names session {body.get('session_id')!s}")
    ctx.expect(
        [key(r) for r in records] == [key(r) for r in paged],
        f"export of {name}: {len(records)} records, the paged transcript {len(paged)}; first difference at "
        f"{next((i for i, (x, y) in enumerate(zip(records, paged)) if key(x) != key(y)), min(len(records), len(paged)))}",
    )
    ctx.expect(records == paged, f"export of {name}: the records' contents differ from the paged transcript")
    got = [(t.get("turn_id"), t.get("session_id"), t.get("index")) if isinstance(t, dict) else t for t in turns]
    want = [(t["turn_id"], t["session_id"], t["index"]) for t in effective]
    ctx.expect(got == want, f"export of {name}: effective turns {got}, expected {want} (effective turn p is turns[p - 1])")
    ctx.expect(
        body["turn_count"] == len(turns) and body["record_count"] == len(records),
        f"export of {name}: turn_count {body['turn_count']} and record_count {body['record_count']} for "
        f"{len(turns)} turns and {len(records)} records",
    )
    return turns


@check("EXPORT-READ-001", title="An export holds every effective turn and exactly the paged transcript's records", needs=(EXPORT,))
def whole_transcript(ctx: CheckContext) -> None:
    fam = family(ctx)
    for name, sid in fam.ids.items():
        turns = expect_effective(ctx, name, sid, fam.turns[name])
        if name == "C":
            ctx.expect(
                isinstance(turns[-1], dict) and turns[-1].get("status") == "running",
                f"export of C: its last turn is running, the export says {turns[-1]}",
            )
    stranger = ctx.bob.get(f"/sessions/{fam.ids['C']}/export")
    ctx.expect_status(stranger, 404, "not-found")
    missing = ctx.alice.get(f"/sessions/{ctx.new_id('missing')}/export")
    ctx.expect_status(missing, 404, "not-found")


@check("EXPORT-READ-001", title="An export of a reverted session, and of forks on either side of the revert, is its effective transcript",
       needs=(EXPORT, REVERT))
def export_after_revert(ctx: CheckContext) -> None:
    """A server may build an export along a faster path than its pages; a revert is where such a
    path can serve the records it took out (REVERT-EFFECTIVE-001) or lose a fork's view of them."""
    session, turns, _ = ctx.conversation(4)
    sid = session["session_id"]
    before = ctx.fork_ok(sid, {"mode": "latest"})["session"]["session_id"]
    revert_ok(ctx, sid, turns[2]["turn_id"])
    new, _ = ctx.run_turn(sid, "user", 1)
    after = ctx.fork_ok(sid, {"mode": "latest"})["session"]["session_id"]
    own, _ = ctx.run_turn(after, "assistant", 2)
    expect_effective(ctx, "the reverted session", sid, [*turns[:2], new])
    expect_effective(ctx, "a fork taken before the revert", before, turns)
    expect_effective(ctx, "a fork taken after the revert and a new turn", after, [*turns[:2], new, own])


@check("EXPORT-READ-001", title="An export needs every ancestor: 403 ancestor-not-readable with a role on the session only",
       needs=(EXPORT, "sharing"))
def export_needs_every_ancestor(ctx: CheckContext) -> None:
    alice, carol = ctx.principals("owner", "reader")
    fam = family(ctx)
    grant(ctx, alice, fam.ids["C"], carol, "reader")
    response = carol.get(f"/sessions/{fam.ids['C']}/export")
    ctx.expect_status(response, 403, "ancestor-not-readable")
    grant(ctx, alice, fam.ids["root"], carol, "reader")
    grant(ctx, alice, fam.ids["B"], carol, "reader")
    export(ctx, fam.ids["C"], client=carol)


@check("EXPORT-TOO-LARGE-001", "EXPORT-COST-001",
       title="Exports of max_export_records - 1 and max_export_records records succeed; one more answers 409; with counts, each costs at most 3",
       needs=(EXPORT,))
def limit_edges(ctx: CheckContext) -> None:
    limit = export_limit(ctx)
    root = ctx.create_session()["session_id"]
    turn = ctx.start_turn(root)
    ctx.append(root, turn["turn_id"], limit - 1)
    ctx.finish(root, turn["turn_id"])
    child = ctx.fork_ok(root)["session"]["session_id"]
    ctx.run_turn(child, "user", 1)
    grandchild = ctx.fork_ok(child)["session"]["session_id"]
    ctx.run_turn(grandchild, "user", 1)
    costs: dict[str, int] = {}
    examined: dict[str, tuple[int, int]] = {}
    for label, sid, size in (("limit - 1", root, limit - 1), ("limit", child, limit)):
        response, body = export(ctx, sid, requirement="EXPORT-TOO-LARGE-001")
        ctx.expect(
            len(body["records"]) == size and body["record_count"] == size,
            f"the export of {size} records (max_export_records {label}) returned {len(body['records'])}", "EXPORT-TOO-LARGE-001",
        )
        if counted(ctx):
            costs[label] = round_trips(ctx, response, f"export of {label}")
        if ctx.has(RECORDS_EXAMINED):
            examined[label] = (records_examined(response), size)
    refused = ctx.alice.get(f"/sessions/{grandchild}/export")
    ctx.expect_status(refused, 409, "export-too-large", "EXPORT-TOO-LARGE-001")
    if counted(ctx):
        costs["limit + 1 (refused)"] = round_trips(ctx, refused, "export of limit + 1 (refused)")
    if ctx.has(RECORDS_EXAMINED):
        examined["limit + 1 (refused)"] = (records_examined(refused), 0)
    page = ctx.alice.get(f"/sessions/{grandchild}/transcript")
    ctx.expect_status(page, 200, None, "EXPORT-TOO-LARGE-001")
    ctx.expect(
        all(cost <= EXPORT_ROUND_TRIPS for cost in costs.values()),
        f"exports near max_export_records ({limit}) cost {costs} round trips; at most {EXPORT_ROUND_TRIPS}",
        "EXPORT-COST-001",
    )
    over = {label: count for label, (count, size) in examined.items() if count > size + EXAMINED_ALLOWANCE}
    ctx.expect(not over, f"exports near max_export_records examined {over} records; at most N + {EXAMINED_ALLOWANCE}",
               "EXPORT-COST-001")


@check("EXPORT-COST-001", title="An export costs at most 3 round trips at depths 0, 1, 5 and the maximum, and reads no record past a cut",
       needs=(EXPORT, QUERY_COUNT))
def export_cost_by_depth(ctx: CheckContext) -> None:
    maximum = ctx.limits["max_lineage_depth"]
    if maximum < max(DEPTHS):
        raise CheckFailed(f"max_lineage_depth is {maximum}, below the minimum of {max(DEPTHS)} (CAP-LIMITS-001)", ["CAP-LIMITS-001"])
    ids = ctx.chain(maximum, records_per_turn=3)
    for sid in ids[:-1]:  # records past every cut: no descendant inherits them
        ctx.run_turn(sid, "assistant", 3)
    costs: dict[int, int] = {}
    over_examined: dict[int, tuple[int, int]] = {}
    for depth in sorted({*DEPTHS, maximum}):
        response, body = export(ctx, ids[depth], records=3 * (depth + 1) + (3 if depth < maximum else 0))
        costs[depth] = round_trips(ctx, response, f"depth {depth} export")
        if ctx.has(RECORDS_EXAMINED):
            count = records_examined(response)
            if count > len(body["records"]) + EXAMINED_ALLOWANCE:
                over_examined[depth] = (count, len(body["records"]))
    ctx.expect(all(cost <= EXPORT_ROUND_TRIPS for cost in costs.values()),
               f"export round trips by depth: {costs}; at most {EXPORT_ROUND_TRIPS}")
    ctx.expect(not over_examined, f"exports examined more records than they returned + {EXAMINED_ALLOWANCE}, by depth "
               f"(examined, returned): {over_examined}")


# ---------------------------------------------------------------- turn by position
