"""Chapter: rollout - unknown request fields, `Requires-Capabilities`, replay history on legacy and
lineage servers (the server side of every compatibility-matrix cell), and the pending rewind action."""

from __future__ import annotations

import re
from email.utils import parsedate_to_datetime
from typing import Any

import spec
from conformance.context import CheckContext
from conformance.counts import require_counts, round_trips
from conformance.errors import CheckFailed, Unsupported
from conformance.registry import check, setup_step

_DEPRECATION = re.compile(r"^@(-?[0-9]{1,15})$")
_LINK_DEPRECATION = re.compile(r'<([^>]*)>[^,]*;\s*rel="?([^";,]*\s)*deprecation(\s[^";,]*)*"?', re.IGNORECASE)


def _replay(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Replay history as a pre-lineage client sends it: the records it believes precede the turn."""
    return [{"record_id": r["record_id"], "type": r["type"], "content": r["content"]} for r in records]


def _field(ctx: CheckContext) -> str:
    return f"x_future_{ctx.rng.randrange(16**6):06x}"


def _expect_unknown_field(ctx: CheckContext, response: Any, field: str, what: str) -> None:
    ctx.expect_status(response, 422, "invalid-request")
    detail = str((response.json() or {}).get("detail", ""))
    ctx.expect(field in detail, f"{what}: the 422 problem's detail does not name the unknown member {field!r}: {detail!r}")


@check("VERSION-UNKNOWN-FIELD-001", title="A request member the spec does not define answers 422 naming it")
def unknown_request_fields(ctx: CheckContext) -> None:
    field = _field(ctx)
    session_id = ctx.new_id("s")
    response = ctx.alice.post("/sessions", json={"session_id": session_id, field: True})
    _expect_unknown_field(ctx, response, field, "createSession")
    ctx.expect_status(ctx.alice.get(f"/sessions/{session_id}"), 404)  # nothing was created
    session = ctx.create_session()["session_id"]
    response = ctx.alice.post(f"/sessions/{session}/turns", json={"role": "user", field: "later-version intent"})
    _expect_unknown_field(ctx, response, field, "startTurn")
    turn = ctx.start_turn(session)  # no turn was left running by the refused start
    response = ctx.alice.post(
        f"/sessions/{session}/turns/{turn['turn_id']}/records",
        json={"records": [{"type": "message", "content": {"text": "x"}, field: 1}]},
    )
    _expect_unknown_field(ctx, response, field, "appendRecords (a member of a record)")
    response = ctx.alice.post(f"/sessions/{session}/turns/{turn['turn_id']}/finish", json={"status": "completed", field: 1})
    _expect_unknown_field(ctx, response, field, "finishTurn")
    ctx.expect(ctx.walk(session, "records") == [], "a refused append stored records")
    ctx.finish(session, turn["turn_id"])
    if ctx.has("fork"):
        response = ctx.alice.post(f"/sessions/{session}/fork", json={"cut": {"mode": "latest", field: 1}})
        _expect_unknown_field(ctx, response, field, "forkSession (a member of `cut`)")


@check("NEGOTIATE-HEADER-001", title="Requires-Capabilities: 412 capability-missing for what the server lacks")
def requires_capabilities(ctx: CheckContext) -> None:
    known = set(spec.capability_names())
    # Only names this suite knows: a server of a later minor version may list more (opaque here).
    advertised = [n for n in ctx.capabilities["capabilities"] if n in known]
    unknown = f"x-unknown-{ctx.rng.randrange(16**6):06x}"
    session_id = ctx.new_id("s")
    header = ", ".join([*advertised[:2], unknown])
    response = ctx.alice.post("/sessions", json={"session_id": session_id}, headers={"Requires-Capabilities": header})
    ctx.expect_status(response, 412, "capability-missing")
    missing = (response.json() or {}).get("missing_capabilities")
    ctx.expect(missing == [unknown], f"missing_capabilities is {missing!r}, expected [{unknown!r}]")
    ctx.expect_status(ctx.alice.get(f"/sessions/{session_id}"), 404)  # the server did not guess: nothing created
    response = ctx.alice.post(
        "/sessions", json={"session_id": session_id}, headers={"Requires-Capabilities": ",".join(advertised)}
    )
    ctx.expect_status(response, 201)  # every named capability is listed: answered as without the header
    response = ctx.alice.post("/sessions", json={"session_id": ctx.new_id("s")}, headers={"Requires-Capabilities": ""})
    ctx.expect_status(response, 201)  # empty: relies on nothing beyond the operation (the default)
    for lacking in ("fork", "lineage", "rewind", "replay-history"):
        if lacking not in advertised:
            response = ctx.alice.get(f"/sessions/{session_id}", headers={"Requires-Capabilities": lacking})
            ctx.expect_status(response, 412, "capability-missing")
            break
    response = ctx.anonymous.get("/capabilities", headers={"Requires-Capabilities": unknown})
    if response.status != 401:  # CAP-PUBLIC-001 allows credentials for the document
        ctx.expect_status(response, 412, "capability-missing")
    response = ctx.alice.get(f"/sessions/{session_id}", headers={"Requires-Capabilities": "fork, Not A Name!"})
    ctx.expect_status(response, 412, "capability-missing")


def _preceded_session(ctx: CheckContext) -> tuple[str, list[dict[str, Any]]]:
    """A session with records before its next turn: a forked child when the server forks (the cell
    "legacy client, lineage server"), else a root session with turns of its own."""
    source, _, records = ctx.conversation(2)
    if not ctx.has("fork"):
        return source["session_id"], records
    child = ctx.fork_ok(source["session_id"], {"mode": "latest"})["session"]["session_id"]
    return child, records


@check("REPLAY-MATCH-001", title="Replay history that agrees with the lineage: the context holds it exactly once", needs=("replay-history",))
def replay_history_exactly_once(ctx: CheckContext) -> None:
    session, preceding = _preceded_session(ctx)
    response = ctx.alice.post(f"/sessions/{session}/turns", json={"role": "user", "replay_history": _replay(preceding)})
    ctx.expect_status(response, 201)
    turn = response.json()
    own = ctx.append(session, turn["turn_id"], 1, label="after-replay")
    ctx.finish(session, turn["turn_id"])
    transcript = ctx.walk(session)
    ids = [record["record_id"] for record in transcript]
    duplicated = sorted({rid for rid in ids if ids.count(rid) > 1})
    ctx.expect(not duplicated, f"the effective transcript holds records twice: {duplicated[:3]}")
    expected = [r["record_id"] for r in preceding] + [r["record_id"] for r in own]
    ctx.expect(
        ids == expected,
        f"after a matching replay history the transcript has {len(ids)} records, expected the {len(preceding)} "
        f"before the turn then the turn's own {len(own)} (replay history must not be stored again)",
    )
    contents = [(r["type"], r["content"]) for r in transcript]
    ctx.expect(
        contents.count((preceding[0]["type"], preceding[0]["content"])) == 1,
        "the inherited context appears more than once (the replay history was stored as new records)",
    )
    if ctx.has("model-context"):  # the bounded model context: what the model is given for the next turn
        from conformance.checks.context import context_of

        context = context_of(ctx, session)
        in_context = [r["record_id"] for t in context["turns"] for r in t["records"]]
        twice = sorted({rid for rid in in_context if in_context.count(rid) > 1})
        ctx.expect(not twice, f"the model context holds records twice: {twice[:3]}")
        if not context.get("omitted_turns"):
            ctx.expect(
                in_context == expected,
                f"the model context holds {len(in_context)} records, expected the {len(preceding)} inherited ones "
                f"exactly once then the turn's own {len(own)}",
            )


@check("REPLAY-CONFLICT-001", title="Replay history that contradicts the lineage: 409 replay-history-mismatch", needs=("replay-history",))
def replay_history_contradiction(ctx: CheckContext) -> None:
    session, preceding = _preceded_session(ctx)
    before = [r["record_id"] for r in ctx.walk(session)]
    replay = _replay(preceding)
    variants = {
        "a record missing": replay[:-1],
        "a record added": replay + [{"record_id": f"{ctx.config.id_prefix}no-such-record", "type": "message", "content": {}}],
        "two records swapped": [replay[1], replay[0], *replay[2:]],
    }
    for what, history in variants.items():
        response = ctx.alice.post(f"/sessions/{session}/turns", json={"role": "user", "replay_history": history})
        ctx.expect_status(response, 409, "replay-history-mismatch")
        ctx.expect(
            [r["record_id"] for r in ctx.walk(session)] == before,
            f"a replay history with {what} was refused but changed the transcript",
        )
    turn = ctx.start_turn(session)  # no turn was started by the refused requests
    ctx.finish(session, turn["turn_id"])


@check("REPLAY-REBUILD-001", title="Replay history rebuilds the context of a new session", needs=("replay-history",))
def replay_history_rebuilds(ctx: CheckContext) -> None:
    _, _, source_records = ctx.conversation(2)
    session = ctx.create_session()["session_id"]
    response = ctx.alice.post(f"/sessions/{session}/turns", json={"role": "user", "replay_history": _replay(source_records)})
    ctx.expect_status(response, 201)
    turn = response.json()
    own = ctx.append(session, turn["turn_id"], 1, label="after-rebuild")
    ctx.finish(session, turn["turn_id"])
    transcript = ctx.walk(session)
    expected = [(r["type"], r["content"]) for r in source_records] + [(r["type"], r["content"]) for r in own]
    got = [(r["type"], r["content"]) for r in transcript]
    ctx.expect(
        got == expected,
        f"the new session's transcript has {len(got)} records, expected the {len(source_records)} replayed "
        f"records (in order) then its own {len(own)}",
    )
    ctx.expect(all(r["session_id"] == session for r in transcript), "rebuilt records belong to the new session")
    ctx.expect(
        not {r["record_id"] for r in transcript} & {r["record_id"] for r in source_records},
        "rebuilt records got new record ids",
    )
    ctx.expect(
        [r["index"] for r in transcript[: len(source_records)]] == list(range(len(source_records))),
        "the replayed records are the session's first records",
    )


@check(
    "REPLAY-COST-001",
    title="Comparing replay history costs the same round trips at depths 0, 1, 5 and the maximum",
    needs=("replay-history",),
)
def replay_history_cost_by_depth(ctx: CheckContext) -> None:
    require_counts(ctx)
    maximum = ctx.limits["max_lineage_depth"] if ctx.has("fork") else 0  # a legacy server: depth 0 only
    ids = ctx.chain(maximum, records_per_turn=1)
    with_replay, without = {}, {}
    for depth in sorted({0, 1, 5, maximum} & set(range(maximum + 1))):
        session = ids[depth]
        preceding = ctx.walk(session)
        response = ctx.alice.post(f"/sessions/{session}/turns", json={"role": "user", "replay_history": _replay(preceding)})
        _matched(ctx, response)
        with_replay[depth] = round_trips(ctx, response, f"depth {depth} with replay history")
        ctx.finish(session, response.json()["turn_id"])
        response = ctx.alice.post(f"/sessions/{session}/turns", json={"role": "user"})
        ctx.started(response)
        without[depth] = round_trips(ctx, response, f"depth {depth} without")
        ctx.finish(session, response.json()["turn_id"])
    ctx.expect(
        len(set(with_replay.values())) == 1,
        f"a turn start with replay history costs different round trips by depth: {with_replay}",
    )
    over = {d: (with_replay[d], without[d]) for d in with_replay if with_replay[d] > without[d] + 3}
    ctx.expect(not over, f"replay history costs more than 3 extra round trips (with, without) by depth: {over}")
    ctx.details["replay_round_trips"] = {"with_replay_history": with_replay, "without": without}


@setup_step("REPLAY-MATCH-001")
def _matched(ctx: CheckContext, response: Any) -> None:
    """A turn start with a replay history that matches, which must answer 201 (a set-up step)."""
    ctx.expect_status(response, 201, None, "REPLAY-MATCH-001")


@setup_step("REPLAY-CONFLICT-001")
def _mismatched(ctx: CheckContext, response: Any) -> None:
    """A turn start with a replay history that contradicts, which must answer 409 (a set-up step)."""
    ctx.expect_status(response, 409, "replay-history-mismatch", "REPLAY-CONFLICT-001")


def _deprecation(ctx: CheckContext, response: Any, what: str) -> None:
    deprecation, sunset, link = response.header("Deprecation"), response.header("Sunset"), response.header("Link")
    ctx.expect(deprecation is not None, f"{what}: no Deprecation header (RFC 9745) on an answer to replay history")
    match = _DEPRECATION.match(deprecation.strip())
    ctx.expect(match is not None, f"{what}: Deprecation {deprecation!r} is not an RFC 9745 date (@ and Unix seconds)")
    ctx.expect(sunset is not None, f"{what}: no Sunset header (RFC 8594)")
    try:
        sunset_at = parsedate_to_datetime(sunset).timestamp()
    except (TypeError, ValueError, IndexError):
        raise CheckFailed(f"{what}: Sunset {sunset!r} is not an HTTP date", []) from None
    ctx.expect(
        sunset_at >= int(match.group(1)),
        f"{what}: Sunset {sunset!r} is earlier than Deprecation {deprecation!r}",
    )
    found = _LINK_DEPRECATION.search(link or "")
    ctx.expect(
        found is not None and bool(found.group(1)),
        f"{what}: no Link with rel=\"deprecation\" to a migration note (got {link!r})",
    )


@check(
    "COMPAT-DEPRECATION-001",
    title="Replay history on a lineage server: Deprecation, Sunset no earlier, and a migration link",
    needs=("replay-history",),
)
def replay_history_deprecated(ctx: CheckContext) -> None:
    if not (ctx.has("lineage") and ctx.has("fork")):
        raise Unsupported("the rule binds servers that list lineage; this one is a legacy server")
    session, preceding = _preceded_session(ctx)
    response = ctx.alice.post(f"/sessions/{session}/turns", json={"role": "user", "replay_history": _replay(preceding)[:-1]})
    _mismatched(ctx, response)
    _deprecation(ctx, response, "409 replay-history-mismatch")
    response = ctx.alice.post(f"/sessions/{session}/turns", json={"role": "user", "replay_history": _replay(preceding)})
    _matched(ctx, response)
    _deprecation(ctx, response, "201 with a matching replay history")
    ctx.finish(session, response.json()["turn_id"])
    response = ctx.alice.post(f"/sessions/{session}/turns", json={"role": "user"})
    ctx.started(response)
    ctx.expect(response.header("Deprecation") is None, "a turn start without replay_history carries Deprecation")
    ctx.finish(session, response.json()["turn_id"])


@check(
    "COMPAT-LINEAGE-001",
    title="A lineage client's first turn on a forked child needs no replay history",
    needs=("replay-history",),
)
def lineage_client_sends_only_the_new_turn(ctx: CheckContext) -> None:
    if not (ctx.has("lineage") and ctx.has("fork")):
        raise Unsupported("the rule binds servers that list lineage; this one is a legacy server")
    source, _, inherited = ctx.conversation(2)
    child = ctx.fork_ok(source["session_id"], {"mode": "latest"})["session"]["session_id"]
    response = ctx.alice.post(f"/sessions/{child}/turns", json={"role": "user"})
    ctx.expect_status(response, 201)
    own = ctx.append(child, response.json()["turn_id"], 1, label="lineage-client")
    ctx.finish(child, response.json()["turn_id"])
    ids = [r["record_id"] for r in ctx.walk(child)]
    ctx.expect(
        ids == [r["record_id"] for r in inherited] + [r["record_id"] for r in own],
        "the forked child's context is not its lineage then its own turn",
    )


# ---------------------------------------------------------------- pending rewind action
@setup_step("REWIND-CREATE-001")
def _rewound_child(ctx: CheckContext, rewind: dict[str, Any], target: str | None = None) -> str:
    source, _, _ = ctx.conversation(2)
    body: dict[str, Any] = {"cut": {"mode": "latest"}, "rewind": rewind}
    if target is not None:
        body["target_session_id"] = target
    response = ctx.alice.post(f"/sessions/{source['session_id']}/fork", json=body)
    ctx.expect_status(response, 201, None, "REWIND-CREATE-001")
    return response.json()["session"]["session_id"]


@setup_step("REWIND-CREATE-001")
def _action(ctx: CheckContext, session: str, stored: bool = False) -> dict[str, Any] | None:
    """The session's pending action (with `stored`, one the rewind must have stored)."""
    response = ctx.alice.get(f"/sessions/{session}/pending-action")
    ctx.expect_status(response, 200, None, "REWIND-CREATE-001")
    action = (response.json() or {}).get("pending_action")
    ctx.expect(action is not None or not stored, f"the rewind that made {session} stored no pending action", "REWIND-CREATE-001")
    return action  # type: ignore[no-any-return]


@check("REWIND-CREATE-001", title="A rewind stores its pending action: mode, restored draft, pending", needs=("rewind", "fork"))
def rewind_stores_pending_action(ctx: CheckContext) -> None:
    draft = f"edited prompt {ctx.rng.randrange(10**6)} ✓"
    child = _rewound_child(ctx, {"mode": "edit", "draft": draft})
    action = _action(ctx, child)
    ctx.expect(
        action == {"mode": "edit", "draft": draft, "state": "pending"} or (
            isinstance(action, dict) and {k: action.get(k) for k in ("mode", "draft", "state")} == {"mode": "edit", "draft": draft, "state": "pending"}
        ),
        f"an edit rewind reads back as {action!r}",
    )
    child = _rewound_child(ctx, {"mode": "rerun"})
    action = _action(ctx, child)
    ctx.expect(
        isinstance(action, dict) and {k: action.get(k) for k in ("mode", "draft", "state")} == {"mode": "rerun", "draft": None, "state": "pending"},
        f"a rerun rewind reads back as {action!r}",
    )
    source, _, _ = ctx.conversation(1)
    plain = ctx.fork_ok(source["session_id"])["session"]["session_id"]
    ctx.expect(_action(ctx, plain) is None, "a fork without rewind has a pending action")
    ctx.expect(_action(ctx, source["session_id"]) is None, "a root session has a pending action")
    response = ctx.bob.get(f"/sessions/{child}/pending-action")
    ctx.expect_status(response, 404, "not-found", "REWIND-CREATE-001")
    for broken in ({"mode": "edit"}, {"mode": "rerun", "draft": "x"}, {"mode": "undo"}):
        response = ctx.alice.post(f"/sessions/{source['session_id']}/fork", json={"cut": {"mode": "latest"}, "rewind": broken})
        ctx.expect_status(response, 422, "invalid-request")


@check("REWIND-STATE-001", title="In flight only while a turn runs; pending after it stops and on reload", needs=("rewind", "fork"))
def rewind_state_follows_the_turn(ctx: CheckContext) -> None:
    child = _rewound_child(ctx, {"mode": "rerun"})
    turn = ctx.start_turn(child)
    action = _action(ctx, child)
    ctx.expect(action is not None and action.get("state") == "in-flight", f"while the first turn runs the action reads {action!r}")
    reloaded = _action(ctx, child)
    ctx.expect(reloaded is not None and reloaded.get("state") == "in-flight",
               f"a second read (a reload) while the turn runs reads {reloaded!r}, not in-flight")
    ctx.finish(child, turn["turn_id"], "failed")
    action = _action(ctx, child)
    ctx.expect(
        action is not None and action.get("state") == "pending",
        f"after the turn stopped (failed) the action reads {action!r}, not pending",
    )
    turn = ctx.start_turn(child)
    action = _action(ctx, child)
    ctx.expect(action is not None and action.get("state") == "in-flight", f"the retried turn runs, the action reads {action!r}")
    ctx.finish(child, turn["turn_id"], "failed")
    action = _action(ctx, child)
    ctx.expect(action is not None and action.get("state") == "pending", f"after the retry failed the action reads {action!r}")


@check("REWIND-CLEAR-001", title="Failure keeps the pending action, success clears it", needs=("rewind", "fork"))
def rewind_cleared_by_success_only(ctx: CheckContext) -> None:
    draft = "try again"
    child = _rewound_child(ctx, {"mode": "edit", "draft": draft})
    turn = ctx.start_turn(child)
    ctx.expect(_action(ctx, child) is not None, "starting the first turn cleared the pending action")
    ctx.append(child, turn["turn_id"], 1)
    ctx.finish(child, turn["turn_id"], "failed")
    action = _action(ctx, child)
    ctx.expect(
        action is not None and action.get("mode") == "edit" and action.get("draft") == draft,
        f"a failed first turn cleared or changed the pending action: {action!r}",
    )
    turn = ctx.start_turn(child)
    ctx.finish(child, turn["turn_id"], "completed")
    ctx.expect(_action(ctx, child) is None, "a completed turn did not clear the pending action")
    turn = ctx.start_turn(child)
    ctx.finish(child, turn["turn_id"], "failed")
    ctx.expect(_action(ctx, child) is None, "a cleared pending action came back")


@check("REWIND-PURGE-001", title="Purging the child removes its pending action", needs=("rewind", "fork", "sharing"))
def rewind_gone_with_purge(ctx: CheckContext) -> None:
    target = ctx.new_id("rewound")
    child = _rewound_child(ctx, {"mode": "edit", "draft": "to be purged"}, target=target)
    _action(ctx, child, stored=True)
    from conformance.checks.authorization.common import purge_session

    purge_session(ctx, ctx.alice, child)
    ctx.create_session(session_id=child)
    action = _action(ctx, child)
    ctx.expect(action is None, f"a session created under a purged child's id has its pending action: {action!r}")
