"""Chapter export (`turn-by-position`): effective turns by position, and the vectors of fixtures/export."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import fixtures

from conformance.checks.authorization.common import grant
from conformance.checks.diagnostics import DEPTHS, records_examined
from conformance.counts import round_trips
from conformance.checks.vectors import CaseRun
from conformance.client import Response
from conformance.context import CheckContext
from conformance.errors import CheckFailed
from conformance.registry import check, setup_step
from conformance.checks.export.document import (
    BAD_POSITIONS, EXAMINED_ALLOWANCE, EXPORT, POSITIONS, QUERY_COUNT, RECORDS_EXAMINED, TURN_ROUND_TRIPS, export, family, field,
)


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
