"""Chapter: diagnostics (storage round trips, observed through the advertised header)."""

from __future__ import annotations

from conformance.client import Response
from conformance.context import CheckContext
from conformance.errors import CheckFailed
from conformance.registry import check

CAPABILITY = "diagnostics.query-count"
HEADER = "Storage-Round-Trips"


def round_trips(response: Response) -> int:
    value = response.header(HEADER)
    if value is None or not value.isdigit():
        raise CheckFailed(
            f"{response.exchange.method} {response.exchange.url}: header {HEADER} is {value!r}",
            ["DIAG-HEADER-001"],
        )
    return int(value)


@check("DIAG-HEADER-001", title="Every response carries the round-trip count", needs=(CAPABILITY,))
def header_on_every_response(ctx: CheckContext) -> None:
    source, turns, _ = ctx.conversation(1)
    sid = source["session_id"]
    responses = [
        ctx.alice.get("/capabilities"),
        ctx.alice.get(f"/sessions/{sid}"),
        ctx.alice.get(f"/sessions/{sid}/transcript"),
        ctx.alice.get(f"/sessions/{sid}/lineage"),
        ctx.fork(sid, {"mode": "latest"}),
        ctx.alice.get(f"/sessions/{ctx.new_id('missing')}"),
        ctx.fork(sid, {"mode": "through", "turn_id": ctx.new_id("missing")}),
        ctx.anonymous.get(f"/sessions/{sid}"),
    ]
    counts = [round_trips(response) for response in responses]
    ctx.expect(counts[1] >= 1 and counts[2] >= 1, f"reads that touch storage reported {counts[1:3]} round trips")
    # Counted, not estimated: discovery and a refused request cost less than a transcript read.
    ctx.expect(
        counts[0] < counts[2] and counts[7] < counts[2],
        f"discovery reported {counts[0]}, an unauthenticated request {counts[7]}, a transcript read {counts[2]}",
    )


@check("DIAG-DEPTH-001", title="A transcript page costs the same at depths 0, 1, 5 and the maximum", needs=(CAPABILITY,))
def transcript_cost_by_depth(ctx: CheckContext) -> None:
    maximum = ctx.limits["max_lineage_depth"]
    ids = ctx.chain(maximum, records_per_turn=1)
    depths = sorted({0, 1, min(5, maximum), maximum})
    costs = {}
    for depth in depths:
        response = ctx.alice.get(f"/sessions/{ids[depth]}/transcript")
        ctx.expect_status(response, 200)
        costs[depth] = round_trips(response)
    ctx.expect(len(set(costs.values())) == 1, f"round trips by depth: {costs}")
    lineage_costs = {depth: round_trips(ctx.alice.get(f"/sessions/{ids[depth]}/lineage")) for depth in depths}
    ctx.expect(len(set(lineage_costs.values())) == 1, f"lineage read round trips by depth: {lineage_costs}")


@check("DIAG-PAGE-COST-001", title="The last page of a long history costs the same as the first", needs=(CAPABILITY,))
def page_cost_by_position(ctx: CheckContext) -> None:
    ids = ctx.chain(2, turns_per_session=4, records_per_turn=10)
    sid = ids[-1]
    costs: list[int] = []
    ctx.walk(sid, limit=7, on_page=lambda page: costs.append(round_trips(page)))
    ctx.expect(len(costs) > 5, f"expected many pages, got {len(costs)}")
    ctx.expect(len(set(costs)) == 1, f"round trips per page, first to last: {costs}")


@check("DIAG-FORK-COST-001", title="A fork costs the same whatever the size of its source", needs=(CAPABILITY,))
def fork_cost_by_source_size(ctx: CheckContext) -> None:
    small, _, _ = ctx.conversation(1, records_per_turn=1)
    large, _, _ = ctx.conversation(12, records_per_turn=8)
    costs = {}
    for name, source in (("1 turn", small), ("12 turns", large)):
        response = ctx.fork(source["session_id"], {"mode": "latest"}, key=ctx.new_id("key"))
        ctx.expect_status(response, 201)
        costs[name] = round_trips(response)
    ctx.expect(len(set(costs.values())) == 1, f"fork round trips by source size: {costs}")


@check("DIAG-LIST-COST-001", title="A listing page costs the same whatever the depth and the branches", needs=(CAPABILITY, "sharing"))
def listing_cost_by_depth(ctx: CheckContext) -> None:
    maximum = ctx.limits["max_lineage_depth"]
    ids = ctx.chain(maximum, records_per_turn=1)
    depths = sorted({0, 1, min(5, maximum), maximum})

    def descendant_pages() -> dict[int, int]:
        costs = {}
        for depth in depths:
            response = ctx.alice.get(f"/sessions/{ids[depth]}/descendants", params={"limit": 2})
            ctx.expect_status(response, 200)
            costs[depth] = round_trips(response)
        return costs

    one_branch = descendant_pages()
    for sid in ids[:-1]:  # a second branch at every level
        ctx.fork_ok(sid, {"mode": "latest"})
    many_branches = descendant_pages()
    ctx.expect(
        len(set(one_branch.values()) | set(many_branches.values())) == 1 and max(one_branch.values()) <= 2,
        f"descendants page round trips by depth of the session: one branch {one_branch}, "
        f"a branch at every level {many_branches}",
    )
    # The caller's listing: every page costs the same, whichever depths its sessions have.
    page_costs: list[int] = []
    by_depth: dict[int, int] = {}
    cursor = None
    wanted = {ids[depth]: depth for depth in depths}
    for _ in range(10_000):
        response = ctx.alice.get("/sessions", params={"cursor": cursor, "limit": ctx.limits["max_page_size"]})
        ctx.expect_status(response, 200)
        cost = round_trips(response)
        page_costs.append(cost)
        page = response.json()
        for item in page["sessions"]:
            if item["session"]["session_id"] in wanted:
                by_depth[wanted[item["session"]["session_id"]]] = cost
        if not page["has_more"]:
            break
        cursor = page["next_cursor"]
    ctx.expect(set(by_depth) == set(depths), f"the listing left out sessions of depths {set(depths) - set(by_depth)}")
    ctx.expect(
        len(set(page_costs)) == 1 and page_costs[0] <= 2,
        f"session listing round trips per page: {page_costs} (by depth of the sessions listed: {by_depth})",
    )
