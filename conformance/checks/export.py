"""Chapter: whole-transcript export (`transcript-export`) and turns by position (`turn-by-position`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fixtures

from conformance.checks.authorization.common import grant
from conformance.checks.diagnostics import DEPTHS, records_examined
from conformance.counts import counted, round_trips
from conformance.checks.vectors import CaseRun
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


@check("EXPORT-READ-001", title="An export holds every effective turn and exactly the paged transcript's records", needs=(EXPORT,))
def whole_transcript(ctx: CheckContext) -> None:
    fam = family(ctx)
    for name, sid in fam.ids.items():
        response, body = export(ctx, sid)
        paged = ctx.walk(sid)
        records, turns = body["records"], body["turns"]
        ctx.expect(body.get("session_id") == sid, f"export of {name} names session {body.get('session_id')!s}")
        ctx.expect(
            [key(r) for r in records] == [key(r) for r in paged],
            f"export of {name}: {len(records)} records, the paged transcript {len(paged)}; first difference at "
            f"{next((i for i, (x, y) in enumerate(zip(records, paged)) if key(x) != key(y)), min(len(records), len(paged)))}",
        )
        ctx.expect(records == paged, f"export of {name}: the records' contents differ from the paged transcript")
        expected = fam.turns[name]
        got = [(t.get("turn_id"), t.get("session_id"), t.get("index")) if isinstance(t, dict) else t for t in turns]
        want = [(t["turn_id"], t["session_id"], t["index"]) for t in expected]
        ctx.expect(got == want, f"export of {name}: effective turns {got}, expected {want} (effective turn p is turns[p - 1])")
        if name == "C":
            ctx.expect(
                isinstance(turns[-1], dict) and turns[-1].get("status") == "running",
                f"export of C: its last turn is running, the export says {turns[-1]}",
            )
        ctx.expect(
            body["turn_count"] == len(turns) and body["record_count"] == len(records),
            f"export of {name}: turn_count {body['turn_count']} and record_count {body['record_count']} for "
            f"{len(turns)} turns and {len(records)} records",
        )
    stranger = ctx.bob.get(f"/sessions/{fam.ids['C']}/export")
    ctx.expect_status(stranger, 404, "not-found")
    missing = ctx.alice.get(f"/sessions/{ctx.new_id('missing')}/export")
    ctx.expect_status(missing, 404, "not-found")


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
def turn_at(ctx: CheckContext, sid: str, position: int | str, client: Any = None) -> Response:
    return (client or ctx.alice).get(f"/sessions/{sid}/effective-turns/{position}")


@setup_step("TURN-POS-RANGE-001")
def beyond_end(ctx: CheckContext, sid: str, position: int) -> Response:
    """A read of a position above E(S), which must answer 404 (a set-up step of the cost check)."""
    beyond = turn_at(ctx, sid, position)
    ctx.expect_status(beyond, 404, "not-found", "TURN-POS-RANGE-001")
    return beyond


@setup_step("TURN-POS-READ-001")
def turn_body(ctx: CheckContext, response: Response) -> dict[str, Any]:
    ctx.expect_status(response, 200, None, "TURN-POS-READ-001")
    body = response.json()
    field(ctx, response, body, "turn", dict)
    field(ctx, response, body, "records", list)
    field(ctx, response, body, "has_more", bool)
    field(ctx, response, body, "turn_count", int)
    return body


@check("TURN-POS-READ-001", title="The effective turn at every position, with its records and a cursor to read on", needs=(POSITIONS,))
def turn_at_every_position(ctx: CheckContext) -> None:
    fam = family(ctx)
    for name, sid in fam.ids.items():
        paged = ctx.walk(sid)
        expected = fam.turns[name]
        for position, want in enumerate(expected, start=1):
            response = turn_at(ctx, sid, position)
            body = turn_body(ctx, response)
            turn = body["turn"]
            got = (turn.get("turn_id"), turn.get("session_id"), turn.get("index"))
            ctx.expect(
                got == (want["turn_id"], want["session_id"], want["index"]),
                f"{name} position {position}: got turn {got}, expected {(want['turn_id'], want['session_id'], want['index'])}",
            )
            ctx.expect(body.get("position") == position and body["turn_count"] == len(expected),
                       f"{name} position {position}: position {body.get('position')}, turn_count {body['turn_count']} "
                       f"(expected {len(expected)})")
            own = [r for r in paged if r["turn_id"] == want["turn_id"]]
            ctx.expect(body["records"] == own and body["has_more"] is False,
                       f"{name} position {position}: {len(body['records'])} records (has_more {body['has_more']}), "
                       f"the transcript holds {len(own)} for that turn")
            if own:
                cursor = body.get("next_cursor")
                ctx.expect(isinstance(cursor, str), f"{name} position {position}: next_cursor {cursor!s} with records given")
                rest = ctx.alice.get(f"/sessions/{sid}/transcript", params={"cursor": cursor})
                ctx.expect_status(rest, 200, None, "TURN-POS-READ-001")
                after = paged[paged.index(own[-1]) + 1:]
                got_rest = rest.json().get("records", [])
                ctx.expect(got_rest == after[: len(got_rest)] and (len(got_rest) > 0) == (len(after) > 0),
                           f"{name} position {position}: the transcript read from next_cursor does not continue "
                           "right after the turn's last record")
            else:
                ctx.expect(body.get("next_cursor") is None, f"{name} position {position}: no records, yet next_cursor "
                           f"{body.get('next_cursor')!s}")
    # A turn longer than a page: the first max_page_size records, has_more, and the cursor reads on.
    size = ctx.limits["max_page_size"]
    long_session = ctx.create_session()["session_id"]
    ctx.run_turn(long_session, "user", 1)
    long_turn, written = ctx.run_turn(long_session, "assistant", size + 2)
    body = turn_body(ctx, turn_at(ctx, long_session, 2))
    ctx.expect(body["turn"].get("turn_id") == long_turn["turn_id"], "position 2 is not the second turn")
    ctx.expect(
        ctx.keys(body["records"]) == ctx.keys(written[:size]) and body["has_more"] is True,
        f"a turn of {size + 2} records gave {len(body['records'])} (has_more {body['has_more']}); expected the first "
        f"{size} (max_page_size) and has_more true",
    )
    # `limit`: a page without one holds `default_page_size` records, which may be 1 (CAP-LIMITS-001)
    rest = ctx.alice.get(f"/sessions/{long_session}/transcript", params={"cursor": body.get("next_cursor"), "limit": size})
    ctx.expect_status(rest, 200, None, "TURN-POS-READ-001")
    ctx.expect(ctx.keys(rest.json().get("records", [])) == ctx.keys(written[size:]),
               "the transcript read from next_cursor does not give the rest of the turn")
    for client, status, kind in ((ctx.bob, 404, "not-found"),):
        ctx.expect_status(turn_at(ctx, fam.ids["C"], 1, client=client), status, kind)
    ctx.expect_status(turn_at(ctx, ctx.new_id("missing"), 1), 404, "not-found")


@check("TURN-POS-READ-001", title="A turn by position needs every ancestor: 403 ancestor-not-readable with a role on the session only",
       needs=(POSITIONS, "sharing"))
def turn_at_needs_every_ancestor(ctx: CheckContext) -> None:
    alice, carol = ctx.principals("owner", "reader")
    fam = family(ctx)
    grant(ctx, alice, fam.ids["C"], carol, "reader")
    for position in (1, 6):  # an inherited turn and an own turn: both need the ancestors
        ctx.expect_status(turn_at(ctx, fam.ids["C"], position, client=carol), 403, "ancestor-not-readable")


@check("TURN-POS-RANGE-001", title="Positions: malformed ones answer 422 before the session is looked up, beyond the end 404",
       needs=(POSITIONS,))
def positions_out_of_range(ctx: CheckContext) -> None:
    fam = family(ctx)
    sid = fam.ids["C"]
    total = len(fam.turns["C"])
    for position, kind, status in ((total + 1, "not-found", 404), ("999999999999999", "not-found", 404)):
        ctx.expect_status(turn_at(ctx, sid, position), status, kind)
    for position in BAD_POSITIONS:
        for client, session in ((ctx.alice, sid), (ctx.bob, sid), (ctx.alice, ctx.new_id("missing"))):
            ctx.expect_status(turn_at(ctx, session, position, client=client), 422, "invalid-request")
    body = turn_body(ctx, turn_at(ctx, sid, total))
    ctx.expect(body["turn_count"] == total, "the refused requests changed the session")


@check("TURN-POS-COST-001", title="A turn by position costs at most 3 round trips at depths 0, 1, 5 and the maximum, on both sides of every segment boundary",
       needs=(POSITIONS, QUERY_COUNT))
def turn_at_cost(ctx: CheckContext) -> None:
    maximum = ctx.limits["max_lineage_depth"]
    if maximum < max(DEPTHS):
        raise CheckFailed(f"max_lineage_depth is {maximum}, below the minimum of {max(DEPTHS)} (CAP-LIMITS-001)", ["CAP-LIMITS-001"])
    ids = ctx.chain(maximum, turns_per_session=2, records_per_turn=2)
    over: list[str] = []
    examined: list[str] = []
    for depth in sorted({*DEPTHS, maximum}):
        sid = ids[depth]
        total = 2 * (depth + 1)
        # Each segment holds two turns: its first and its last, so every boundary from both sides.
        for position in range(1, total + 1):
            response = turn_at(ctx, sid, position)
            body = turn_body(ctx, response)
            cost = round_trips(ctx, response, f"depth {depth} position {position}")
            if cost > TURN_ROUND_TRIPS:
                over.append(f"depth {depth} position {position}: {cost}")
            if ctx.has(RECORDS_EXAMINED):
                count = records_examined(response)
                if count > len(body["records"]) + EXAMINED_ALLOWANCE:
                    examined.append(f"depth {depth} position {position}: {count} examined for {len(body['records'])}")
        beyond = beyond_end(ctx, sid, total + 1)
        if round_trips(ctx, beyond, f"depth {depth} position {total + 1} (404)") > TURN_ROUND_TRIPS:
            over.append(f"depth {depth} position {total + 1} (404): {round_trips(ctx, beyond)}")
    ctx.expect(not over, f"reads of a turn by position cost more than {TURN_ROUND_TRIPS} round trips: {over[:6]}")
    ctx.expect(not examined, f"reads of a turn by position examined more than the records returned + "
               f"{EXAMINED_ALLOWANCE}: {examined[:6]}")


# ---------------------------------------------------------------- vectors
VECTORS = Path(fixtures.__file__).resolve().parent / "export" / "positions.json"


class PositionCase(CaseRun):
    """A case of fixtures/export: a lineage built as set-up (`build`), then read whole and by position."""

    def run(self) -> None:
        self.build()
        for name, want in self.case["expect"].items():
            sid = self.sessions[name]
            turns = [self.turns[turn] for turn in want["turns"]]
            records = [(self.sessions[owner], index) for owner, index in want["records"]]
            if self.ctx.has(EXPORT):
                _, body = export(self.ctx, sid)
                got_turns = [turn.get("turn_id") if isinstance(turn, dict) else turn for turn in body["turns"]]
                self.ctx.expect(got_turns == turns, f"export of {name}: turns {self.names(got_turns)}, expected {want['turns']}",
                                "EXPORT-READ-001")
                got = self.ctx.keys(body["records"])
                self.ctx.expect(got == records, f"export of {name}: records {self.symbolic(got)}, expected "
                                f"{self.symbolic(records)}", "EXPORT-READ-001")
            if self.ctx.has(POSITIONS):
                for position, turn_id in enumerate(turns, start=1):
                    body = turn_body(self.ctx, turn_at(self.ctx, sid, position))
                    got_id = body["turn"].get("turn_id")
                    self.ctx.expect(got_id == turn_id, f"{name} position {position}: turn {self.names([got_id])}, expected "
                                    f"{want['turns'][position - 1]}", "TURN-POS-READ-001")
                self.ctx.expect_status(turn_at(self.ctx, sid, len(turns) + 1), 404, "not-found", "TURN-POS-RANGE-001")

    @setup_step("FORK-CREATE-001", "FORK-CUT-BEFORE-001", "FORK-CUT-LATEST-001", "FORK-CUT-THROUGH-001", "FORK-TARGET-001")
    def build(self) -> None:
        for step in self.case["steps"]:
            getattr(self, f"op_{step['op']}")(step)

    def names(self, turn_ids: list[Any]) -> list[str]:
        back = {tid: name for name, tid in self.turns.items()}
        return [back.get(tid, str(tid)) for tid in turn_ids]


@check("EXPORT-READ-001", "TURN-POS-READ-001", title="The vectors of fixtures/export: effective turns by position and in the export",
       needs=(EXPORT, POSITIONS))
def position_vectors(ctx: CheckContext) -> None:
    for case in json.loads(VECTORS.read_text(encoding="utf-8")):
        try:
            PositionCase(ctx, case).run()
        except CheckFailed as failure:
            raise failure.retold(case["description"]) from None
