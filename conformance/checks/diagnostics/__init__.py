"""Chapter: diagnostics (storage round trips, stored items written and stored records examined,
observed through the advertised headers, and round trips through the exported spans)."""

from __future__ import annotations

from typing import Any

from conformance.checks.fork.writes import fork_writes, header_count, judge_fork_writes
from conformance.checks.leases import acquire, release_held
from conformance.client import Response, describe
from conformance.context import CheckContext
from conformance.counts import HEADER, QUERY_COUNT, header_round_trips, require_counts, round_trips
from conformance.errors import CheckFailed, NotVerified
from conformance.registry import check, setup_step

from .spans import _ANONYMOUS, _CONSULT_STORAGE, _storage_requests  # first: the span checks run right after discovery's

CAPABILITY = QUERY_COUNT
WRITES_CAPABILITY = "diagnostics.write-count"
WRITES_HEADER = "Storage-Items-Written"
BYTES_HEADER = "Storage-Bytes-Written"  # with WRITES_CAPABILITY, since 1.3.0 (DIAG-BYTES-001)
RECORDS_CAPABILITY = "diagnostics.records-examined"
RECORDS_HEADER = "Storage-Records-Examined"
# DIAG-RECORDS-PAGE-001: a page of size L examines at most L + 1 + PAGE_ALLOWANCE records.
PAGE_ALLOWANCE = 2
# DIAG-DEPTH-001: the depths every target is read at, and the most each read may cost.
DEPTHS = (0, 1, 5)
TRANSCRIPT_PAGE_BOUND = 2
LINEAGE_READ_BOUND = 1
SESSION_READ_BOUND = 1
LARGE_SOURCE_TURNS = 6
LARGE_SOURCE_RECORDS_PER_TURN = 100  # at most; fewer when max_records_per_append is lower


def items_written(response: Response) -> int:
    return header_count(response, WRITES_HEADER, "DIAG-WRITES-001")


def bytes_written(response: Response) -> int:
    return header_count(response, BYTES_HEADER, "DIAG-BYTES-001")


def records_examined(response: Response) -> int:
    return header_count(response, RECORDS_HEADER, "DIAG-RECORDS-001")


@check("DIAG-HEADER-001", title="Every response carries the round-trip count", needs=(CAPABILITY,))
def header_on_every_response(ctx: CheckContext) -> None:
    responses = _storage_requests(ctx)
    counts = [(f"{r.exchange.method} {r.exchange.url} -> {r.status}", header_round_trips(r)) for r in responses]
    # Counted, not estimated: a request that reads or stores session data makes at least one round
    # trip, and one refused for missing credentials makes none (there is nothing to look up).
    uncounted = [f"{what}: {count}" for number, (what, count) in enumerate(counts) if number in _CONSULT_STORAGE and count < 1]
    ctx.expect(not uncounted, f"requests that read or store session data reported no round trip ({'; '.join(uncounted)})")
    what, count = counts[_ANONYMOUS]
    ctx.expect(count == 0, f"{what} reported {HEADER}: {count} for a request refused for missing credentials, "
                           "which has nothing to look up: an estimate, not a count")


def deepest(ctx: CheckContext, what: str) -> int:
    """The advertised maximum depth, failing CAP-LIMITS-001 when it is below depth 5: depth 5 is part
    of the depth rules, and measuring at the maximum instead would hide what they ask."""
    maximum = ctx.limits["max_lineage_depth"]
    if maximum < max(DEPTHS):
        raise CheckFailed(
            f"max_lineage_depth is {maximum}, below the minimum of {max(DEPTHS)} (CAP-LIMITS-001), so the "
            f"{what} at depth {max(DEPTHS)} cannot be measured",
            ["CAP-LIMITS-001"],
        )
    return maximum


@check(
    "DIAG-DEPTH-001",
    title="Reads cost at most 2 (a transcript page) or 1 (lineage, session) round trips at depths 0, 1, 5 and the maximum",
    needs=(CAPABILITY,),
)
def transcript_cost_by_depth(ctx: CheckContext) -> None:
    require_counts(ctx)  # before any set-up: a run without a source of counts cannot verify it
    maximum = deepest(ctx, "read cost")
    ids = ctx.chain(maximum, records_per_turn=1)
    depths = sorted({*DEPTHS, maximum})
    pages, lineages, sessions = {}, {}, {}
    for depth in depths:
        sid = ids[depth]
        pages[depth] = round_trips(ctx, _read(ctx, f"/sessions/{sid}/transcript"), f"depth {depth} transcript page")
        lineages[depth] = round_trips(ctx, _read(ctx, f"/sessions/{sid}/lineage"), f"depth {depth} lineage")
        sessions[depth] = round_trips(ctx, _read(ctx, f"/sessions/{sid}"), f"depth {depth} session")
    over = {depth: cost for depth, cost in pages.items() if cost > TRANSCRIPT_PAGE_BOUND}
    ctx.expect(not over, f"a transcript page cost more than {TRANSCRIPT_PAGE_BOUND} round trips; by depth: {pages}")
    ctx.expect(len(set(pages.values())) == 1, f"a transcript page costs different round trips by depth: {pages}")
    over = {depth: cost for depth, cost in lineages.items() if cost > LINEAGE_READ_BOUND}
    ctx.expect(not over, f"GET /sessions/{{id}}/lineage cost more than {LINEAGE_READ_BOUND} round trip; by depth: {lineages}")
    over = {depth: cost for depth, cost in sessions.items() if cost > SESSION_READ_BOUND}
    ctx.expect(not over, f"GET /sessions/{{id}} cost more than {SESSION_READ_BOUND} round trip; by depth: {sessions}")


def _read(ctx: CheckContext, path: str) -> Response:
    response = ctx.alice.get(path)
    ctx.expect_status(response, 200)
    return response


@check("DIAG-PAGE-COST-001", title="The last page of a long history costs the same as the first", needs=(CAPABILITY,))
def page_cost_by_position(ctx: CheckContext) -> None:
    require_counts(ctx)  # before any set-up: a run without a source of counts cannot verify it
    limit = min(7, ctx.limits["max_page_size"])
    ids = ctx.chain(2, turns_per_session=4, records_per_turn=10)
    pages: list[Response] = []
    ctx.walk(ids[-1], limit=limit, on_page=pages.append)
    # The rule compares two positions: the first page and a page at the end (the last that holds records;
    # an empty page after it is at no position of the history). Pages in between are not named.
    holding = [page for page in pages if _records_in(ctx, page)]
    if len(holding) < 2:
        raise NotVerified(f"the 120 records came in {len(holding)} page(s) of limit {limit}: no page at the end to compare")
    first = round_trips(ctx, holding[0], "first page")
    last = round_trips(ctx, holding[-1], f"last page ({len(holding)} of {len(holding)})")
    ctx.expect(
        first == last,
        f"the first page of {limit} records cost {first} round trips, the last of {len(holding)} pages {last}",
    )


def large_source(ctx: CheckContext) -> tuple[dict[str, Any], int]:
    """A root with several turns of as many records as one append may carry: (session, records)."""
    per_turn = min(ctx.limits["max_records_per_append"], LARGE_SOURCE_RECORDS_PER_TURN)
    session, _, records = ctx.conversation(LARGE_SOURCE_TURNS, records_per_turn=per_turn)
    return session, len(records)


@check("DIAG-FORK-COST-001", title="A fork costs the same whatever the size of its source", needs=(CAPABILITY,))
def fork_cost_by_source_size(ctx: CheckContext) -> None:
    require_counts(ctx)  # before any set-up: a run without a source of counts cannot verify it
    small, _, _ = ctx.conversation(1, records_per_turn=1)
    large, size = large_source(ctx)
    costs = {}
    for name, source in (("1 record", small), (f"{size} records", large)):
        response = ctx.fork(source["session_id"], {"mode": "latest"}, key=ctx.new_id("key"))
        ctx.expect_status(response, 201)
        costs[name] = round_trips(ctx, response, f"fork of {name}")
    ctx.expect(len(set(costs.values())) == 1, f"fork round trips by source size: {costs}")


# Set-up steps of the diagnostics checks that need the answer itself (its headers), not only its body.
@setup_step("SESS-CREATE-001")
def _created(ctx: CheckContext, response: Response) -> dict[str, Any]:
    return ctx.ok(response, 201, "SESS-CREATE-001")  # type: ignore[no-any-return]


@setup_step("SESS-TURN-001")
def _started(ctx: CheckContext, response: Response) -> dict[str, Any]:
    return ctx.ok(response, 201, "SESS-TURN-001")  # type: ignore[no-any-return]


@setup_step("LEASE-ACQUIRE-001")
def _leased(ctx: CheckContext, response: Response) -> dict[str, Any]:
    return ctx.ok(response, 201, "LEASE-ACQUIRE-001")  # type: ignore[no-any-return]


@setup_step("SESS-RECORD-APPEND-001", "SESS-TURN-FINISH-001", "FORK-CREATE-001")
def _wrote(ctx: CheckContext, response: Response, step: str) -> None:
    status, rule = {"append": (201, "SESS-RECORD-APPEND-001"), "finish": (200, "SESS-TURN-FINISH-001"), "fork": (201, "FORK-CREATE-001")}[step]
    ctx.expect_status(response, status, None, rule)


@setup_step("AUTH-REQUIRED-001")
def _refused_without_credentials(ctx: CheckContext, response: Response) -> None:
    ctx.expect(response.status == 401, f"{describe(response.exchange)}; expected 401 without credentials", "AUTH-REQUIRED-001")


@check("DIAG-WRITES-001", "DIAG-BYTES-001",
       title="Every response carries the stored items and bytes it wrote: 0 for reads and refusals", needs=(WRITES_CAPABILITY,))
def items_written_on_every_response(ctx: CheckContext) -> None:
    created = ctx.alice.post("/sessions", json={"session_id": ctx.new_id("s")})
    sid = _created(ctx, created)["session_id"]
    started = ctx.alice.post(f"/sessions/{sid}/turns", json={"role": "user"})
    turn = _started(ctx, started)
    writes: list[Response] = [created, started]
    appended = ctx.alice.post(f"/sessions/{sid}/turns/{turn['turn_id']}/records",
                              json={"records": [{"type": "message", "content": {"n": 1}}]})
    finished = ctx.alice.post(f"/sessions/{sid}/turns/{turn['turn_id']}/finish", json={"status": "completed"})
    forked = ctx.fork(sid, {"mode": "latest"})
    for response, step in ((appended, "append"), (finished, "finish"), (forked, "fork")):
        _wrote(ctx, response, step)
        writes.append(response)
    reads = [
        ctx.alice.get("/capabilities"),
        ctx.alice.get(f"/sessions/{sid}"),
        ctx.alice.get(f"/sessions/{sid}/transcript"),
        ctx.alice.get(f"/sessions/{sid}/records"),
        ctx.alice.get(f"/sessions/{sid}/lineage"),
    ]
    refused = [
        ctx.alice.get(f"/sessions/{ctx.new_id('missing')}"),
        ctx.alice.get("/no/such/route"),
        ctx.alice.request("PATCH", f"/sessions/{sid}/transcript", json={}),
        ctx.anonymous.post("/sessions", json={}),
        ctx.alice.post("/sessions", json={"session_id": sid}),
        ctx.alice.post(f"/sessions/{sid}/turns", content=b"{", headers={"Content-Type": "application/json"}),
        ctx.fork(sid, {"mode": "through", "turn_id": ctx.new_id("missing")}, target=ctx.new_id("never")),
        ctx.alice.post(f"/sessions/{sid}/turns/{turn['turn_id']}/records",
                       json={"records": [{"type": "message", "content": {"late": True}}]}),
    ]
    if ctx.has("writer-lease"):
        lease = acquire(ctx, sid)
        lease_id = _leased(ctx, lease)["lease_id"]
        writes.append(lease)
        refused.append(acquire(ctx, sid))
        writes.append(release_held(ctx, sid, lease_id))
    # Every read, whatever it answered, and every request answered 4xx writes nothing (a request
    # meant to be refused that succeeded is left to the rule it broke).
    judged = reads + [response for response in refused if 400 <= response.status < 500]
    for header, counted, requirement in ((WRITES_HEADER, items_written, "DIAG-WRITES-001"), (BYTES_HEADER, bytes_written, "DIAG-BYTES-001")):
        for response in judged:
            count = counted(response)
            what = "a read" if response in reads else f"a request refused with {response.status}"
            ctx.expect(
                count == 0,
                f"{response.exchange.method} {response.exchange.url} is {what} and reported {header}: {count}; "
                "reads and 4xx answers write nothing and report 0",
                requirement,
            )
        # a release deletes, and a deletion stores no bytes: every other write stored something
        for response in writes if header == WRITES_HEADER else [w for w in writes if w.exchange.method != "DELETE"]:
            count = counted(response)
            ctx.expect(
                count >= 1,
                f"{response.exchange.method} {response.exchange.url} answered {response.status}, so it stored "
                f"something, yet reported {header}: {count}",
                requirement,
            )


@check("DIAG-FORK-WRITES-001", "DIAG-FORK-WRITES-002",
       title="A fork writes the same items, and the same bytes within 1024, whatever the size of its source (no copying)",
       needs=(WRITES_CAPABILITY,))
def fork_writes_by_source_size(ctx: CheckContext) -> None:
    judge_fork_writes(ctx, fork_writes(ctx, "DIAG-WRITES-001"), "DIAG-FORK-WRITES-001", "DIAG-FORK-WRITES-002")


@setup_step("LIST-SESSIONS-001", "LIST-DESCENDANTS-001")
def _listed(ctx: CheckContext, response: Response) -> tuple[list[str], str | None]:
    """The session ids of a listing page that must answer 200, and its next cursor (None on the last
    page), failing the listing's own rule, not the cost rule, when it does not answer."""
    descendants = response.exchange.url.split("?", 1)[0].endswith("/descendants")
    ctx.expect_status(response, 200, None, "LIST-DESCENDANTS-001" if descendants else "LIST-SESSIONS-001")
    page = response.json()
    ids = [item["session"]["session_id"] for item in page["sessions"]]
    return ids, (page["next_cursor"] if page["has_more"] else None)


@check("DIAG-LIST-COST-001", title="A listing page costs the same whatever the depth and the branches", needs=(CAPABILITY, "sharing"))
def listing_cost_by_depth(ctx: CheckContext) -> None:
    require_counts(ctx)  # before any set-up: a run without a source of counts cannot verify it
    maximum = ctx.limits["max_lineage_depth"]
    ids = ctx.chain(maximum, records_per_turn=1)
    depths = sorted({0, 1, min(5, maximum), maximum})

    def descendant_pages() -> dict[int, int]:
        """The cost of the first page of each named depth's descendants; an empty page lists no session
        of any depth (the deepest has no descendant), so it is held to the bound only."""
        costs = {}
        for depth in depths:
            response = ctx.alice.get(f"/sessions/{ids[depth]}/descendants", params={"limit": 2})
            listed, _ = _listed(ctx, response)
            cost = round_trips(ctx, response, f"depth {depth} descendants page")
            ctx.expect(cost <= 2, f"a descendants page (of the depth {depth} session) cost {cost} round trips; at most 2")
            if listed:
                costs[depth] = cost
        return costs

    one_branch = descendant_pages()
    for sid in ids[:-1]:  # a second branch at every level
        ctx.fork_ok(sid, {"mode": "latest"})
    many_branches = descendant_pages()
    ctx.expect(
        len(set(one_branch.values()) | set(many_branches.values())) <= 1,
        f"descendants page round trips by depth of the session: one branch {one_branch}, "
        f"a branch at every level {many_branches}",
    )
    # The caller's listing: every page at most 2; the pages that list the chain's sessions of the named
    # depths cost the same (the last page excepted: the rule names depth and branches, not position).
    page_costs: list[int] = []
    by_depth: dict[int, int] = {}
    cursor = None
    wanted = {ids[depth]: depth for depth in depths}
    for _ in range(10_000):
        response = ctx.alice.get("/sessions", params={"cursor": cursor, "limit": ctx.limits["max_page_size"]})
        listed, cursor = _listed(ctx, response)
        cost = round_trips(ctx, response, f"sessions page {len(page_costs) + 1}")
        page_costs.append(cost)
        for sid in listed:
            if sid in wanted and cursor is not None:
                by_depth[wanted[sid]] = cost
        if cursor is None:
            break
    ctx.expect(
        max(page_costs) <= 2 and len(set(by_depth.values())) <= 1,
        f"session listing round trips per page: {page_costs}, at most 2 each; by depth of the sessions listed "
        f"(pages before the last): {by_depth}",
    )


@setup_step("XS-PAGE-001")
def _records_in(ctx: CheckContext, response: Response) -> int:
    """How many records a 200 page holds (failing the check, not crashing, on a malformed body)."""
    body = response.json()
    records = body.get("records") if isinstance(body, dict) else None
    ctx.expect(isinstance(records, list), f"{describe(response.exchange)}: the page has no `records` list", "XS-PAGE-001")
    return len(records)


@check("DIAG-RECORDS-001", title="Every response carries the stored records it examined: 0 without reading any, at least what it returns",
       needs=(RECORDS_CAPABILITY,))
def records_examined_on_every_response(ctx: CheckContext) -> None:
    source, turns, records = ctx.conversation(2, records_per_turn=3)
    sid = source["session_id"]
    child = ctx.fork_ok(sid, {"mode": "latest"})["session"]["session_id"]
    ctx.run_turn(child, "user", 2)
    pages = [
        ctx.alice.get(f"/sessions/{sid}/transcript"),
        ctx.alice.get(f"/sessions/{child}/transcript"),
        ctx.alice.get(f"/sessions/{child}/transcript", params={"limit": 2}),
        ctx.alice.get(f"/sessions/{sid}/records"),
        ctx.alice.get(f"/sessions/{child}/records", params={"limit": 1}),
    ]
    for page in pages:
        ctx.expect_status(page, 200)
    without_records = [ctx.alice.get("/capabilities"), ctx.anonymous.get(f"/sessions/{sid}/transcript")]
    others = [
        ctx.alice.get(f"/sessions/{sid}"),
        ctx.alice.get(f"/sessions/{child}/lineage"),
        ctx.alice.get(f"/sessions/{ctx.new_id('missing')}/transcript"),
        ctx.alice.get("/no/such/route"),
        ctx.alice.request("PATCH", f"/sessions/{sid}/transcript", json={}),
        ctx.alice.post(f"/sessions/{sid}/turns", content=b"{", headers={"Content-Type": "application/json"}),
        ctx.fork(child, {"mode": "latest"}),
        ctx.alice.post(f"/sessions/{sid}/turns/{turns[0]['turn_id']}/records",
                       json={"records": [{"type": "message", "content": {"late": True}}]}),
    ]
    _refused_without_credentials(ctx, without_records[1])
    for response in without_records:
        count = records_examined(response)
        ctx.expect(
            count == 0,
            f"{response.exchange.method} {response.exchange.url} answered {response.status} and reported "
            f"{RECORDS_HEADER}: {count}; discovery and a 401 read no record and report 0",
        )
    for response in others:
        records_examined(response)  # present and a count, whatever it is
    for page in pages:
        held, count = _records_in(ctx, page), records_examined(page)
        ctx.expect(
            count >= held,
            f"{page.exchange.method} {page.exchange.url} returned {held} records and reported {RECORDS_HEADER}: "
            f"{count}; every record returned was examined, so the count is not counted",
        )


@check("DIAG-RECORDS-PAGE-001", title="A page examines at most its size + 3 records at depths 0, 1, 5 and the maximum, at every position",
       needs=(RECORDS_CAPABILITY,))
def records_examined_by_depth(ctx: CheckContext) -> None:
    maximum = deepest(ctx, "records a page examines")
    small = min(3, ctx.limits["max_page_size"])
    default = ctx.limits["default_page_size"]
    # Every session holds more records than a small page, so a page that reads up to its size from
    # each ancestor shows at once.
    ids = ctx.chain(maximum, records_per_turn=small + 2)
    over: list[str] = []
    under: list[str] = []
    seen: dict[str, int] = {}

    def measure(what: str, response: Response, size: int) -> None:
        ctx.expect_status(response, 200)
        count, held = records_examined(response), _records_in(ctx, response)
        seen[what] = count
        if count > size + 1 + PAGE_ALLOWANCE:
            over.append(f"{what} (page size {size}, {held} returned): {count} examined")
        if count < held:
            under.append(f"{what}: {held} returned, {count} examined")

    for depth in sorted({*DEPTHS, maximum}):
        sid = ids[depth]
        measure(f"depth {depth} first transcript page, default size", ctx.alice.get(f"/sessions/{sid}/transcript"), default)
        measure(f"depth {depth} own records page", ctx.alice.get(f"/sessions/{sid}/records", params={"limit": small}), small)
        pages: list[Response] = []
        ctx.walk(sid, limit=small, on_page=pages.append)
        for number, page in enumerate(pages):
            measure(f"depth {depth} transcript page {number + 1} of {len(pages)}", page, small)
    ctx.expect(not under, f"pages reported fewer records examined than they returned: {under[:5]}", "DIAG-RECORDS-001")
    ctx.expect(
        not over,
        f"{len(over)} pages examined more than their size + {1 + PAGE_ALLOWANCE} records, e.g. {over[:4]}",
    )
