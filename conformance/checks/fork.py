"""Chapter: fork (cut points, snapshots, headers, targets, depth, idempotency)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from conformance.checks.contention import rounds
from conformance.client import Response
from conformance.context import CheckContext
from conformance.errors import Unsupported
from conformance.registry import check

LIFETIME_VERIFIABLE = 3  # seconds: a key lifetime the suite waits out; longer ones are not verified
EXPIRY_MARGIN = 0.15


def _absent(ctx: CheckContext, session_id: str, why: str) -> None:
    response = ctx.alice.get(f"/sessions/{session_id}")
    ctx.expect(response.status == 404, f"{why}: session {session_id} exists (HTTP {response.status})", "FORK-ATOMIC-001")


@check("FORK-CREATE-001", "FORK-NO-COPY-001", title="A fork creates a child that inherits without copying")
def fork_creates_child(ctx: CheckContext) -> None:
    source, _, records = ctx.conversation(3)
    result = ctx.fork_ok(source["session_id"], {"mode": "latest"})
    child, lineage = result["session"], result["lineage"]
    expected = {
        "root_session_id": source["session_id"],
        "parent_session_id": source["session_id"],
        "inherited_turn_count": 3,
        "depth": 1,
    }
    ctx.expect(ctx.known(lineage, expected) == expected, f"lineage {lineage}, expected {expected}", "FORK-CREATE-001")
    ctx.expect(child["lineage"] == lineage, "the child session must carry its lineage", "FORK-CREATE-001")
    ctx.expect(ctx.walk(child["session_id"], "records") == [], "a fork wrote records into the child", "FORK-NO-COPY-001")
    inherited = ctx.walk(child["session_id"])
    ctx.expect(inherited == records, "the child's transcript is not the parent's records, ids unchanged", "FORK-NO-COPY-001")
    grandchild = ctx.fork_ok(child["session_id"], {"mode": "latest"})["lineage"]
    ctx.expect(
        grandchild["root_session_id"] == source["session_id"] and grandchild["depth"] == 2,
        f"grandchild lineage {grandchild}",
        "FORK-CREATE-001",
    )


def _cut_case(ctx: CheckContext, source_id: str, cut: dict[str, Any], expected_records: list[dict[str, Any]], turns: int, requirement: str) -> None:
    response = ctx.fork(source_id, cut)
    ctx.expect_status(response, 201, None, requirement)
    result = response.json()
    got = result["lineage"]["inherited_turn_count"]
    ctx.expect(got == turns, f"cut {cut}: inherited_turn_count {got}, expected {turns}", requirement)
    transcript = ctx.walk(result["session"]["session_id"])
    ctx.expect(
        ctx.keys(transcript) == ctx.keys(expected_records),
        f"cut {cut}: transcript {ctx.keys(transcript)}, expected {ctx.keys(expected_records)}",
        requirement,
    )


def _four_turns(ctx: CheckContext) -> tuple[str, list[dict[str, Any]], list[list[dict[str, Any]]]]:
    session = ctx.create_session()
    sid = session["session_id"]
    turns, per_turn = [], []
    for n, role in enumerate(["user", "assistant", "user", "assistant"]):
        turn, records = ctx.run_turn(sid, role, n + 1)
        turns.append(turn)
        per_turn.append(records)
    return sid, turns, per_turn


@check("FORK-CUT-THROUGH-001", title="Cut through a user or assistant turn, first or last, own or inherited")
def cut_through(ctx: CheckContext) -> None:
    sid, turns, per_turn = _four_turns(ctx)
    for position in (0, 1, 2, 3):  # first (user), assistant, user, last (assistant)
        prefix = [r for records in per_turn[: position + 1] for r in records]
        _cut_case(ctx, sid, {"mode": "through", "turn_id": turns[position]["turn_id"]}, prefix, position + 1, "FORK-CUT-THROUGH-001")
    # through a turn the source inherited: the cut lands in an ancestor
    child = ctx.fork_ok(sid, {"mode": "latest"})["session"]["session_id"]
    ctx.run_turn(child, "user", 1)
    prefix = [r for records in per_turn[:2] for r in records]
    _cut_case(ctx, child, {"mode": "through", "turn_id": turns[1]["turn_id"]}, prefix, 2, "FORK-CUT-THROUGH-001")


@check("FORK-CUT-BEFORE-001", title="Cut before a user or assistant turn, first or last, own or inherited")
def cut_before(ctx: CheckContext) -> None:
    sid, turns, per_turn = _four_turns(ctx)
    for position in (0, 1, 2, 3):
        prefix = [r for records in per_turn[:position] for r in records]
        _cut_case(ctx, sid, {"mode": "before", "turn_id": turns[position]["turn_id"]}, prefix, position, "FORK-CUT-BEFORE-001")
    child = ctx.fork_ok(sid, {"mode": "latest"})["session"]["session_id"]
    own, own_records = ctx.run_turn(child, "user", 1)
    everything = [r for records in per_turn for r in records]
    _cut_case(ctx, child, {"mode": "before", "turn_id": own["turn_id"]}, everything, 4, "FORK-CUT-BEFORE-001")
    _cut_case(ctx, child, {"mode": "before", "turn_id": turns[2]["turn_id"]}, everything[:3], 2, "FORK-CUT-BEFORE-001")


@check("FORK-CUT-LATEST-001", title="Cut at the latest finished turn leaves a running turn out")
def cut_latest(ctx: CheckContext) -> None:
    source, _, records = ctx.conversation(2)
    sid = source["session_id"]
    running = ctx.start_turn(sid, "user")
    ctx.append(sid, running["turn_id"], 2, label="in-flight")
    result = ctx.fork_ok(sid, {"mode": "latest"})
    ctx.expect(result["lineage"]["inherited_turn_count"] == 2, f"inherited {result['lineage']['inherited_turn_count']} turns, expected 2")
    child = result["session"]["session_id"]
    ctx.expect(ctx.walk(child) == records, "the running turn's records leaked into the fork")
    ctx.append(sid, running["turn_id"], 1, label="late")
    ctx.finish(sid, running["turn_id"])
    ctx.expect(ctx.walk(child) == records, "records of the turn running at fork time appeared later")


@check("FORK-CUT-UNKNOWN-001", title="A cut outside the source's effective transcript is refused")
def cut_unknown_turn(ctx: CheckContext) -> None:
    sid, turns, _ = _four_turns(ctx)
    other, other_turns, _ = ctx.conversation(1)
    early = ctx.fork_ok(sid, {"mode": "through", "turn_id": turns[0]["turn_id"]})["session"]["session_id"]
    sibling = ctx.fork_ok(sid, {"mode": "latest"})["session"]["session_id"]
    sibling_turn, _ = ctx.run_turn(sibling, "user", 1)
    cases = [
        (sid, ctx.new_id("no-such-turn"), "an unknown turn"),
        (sid, other_turns[0]["turn_id"], "a turn of another session"),
        (sid, sibling_turn["turn_id"], "a turn of a child session"),
        (early, turns[2]["turn_id"], "a turn of the parent after the cut"),
    ]
    for source_id, turn_id, what in cases:
        for mode in ("through", "before"):
            target = ctx.new_id("never")
            response = ctx.fork(source_id, {"mode": mode, "turn_id": turn_id}, target=target)
            ctx.expect_status(response, 422, "unknown-turn")
            _absent(ctx, target, f"cut {mode} {what} was refused")


@check("FORK-INCOMPLETE-001", "FORK-ATOMIC-001", title="No fork through a running turn")
def fork_through_running_turn(ctx: CheckContext) -> None:
    source, _, _ = ctx.conversation(1)
    sid = source["session_id"]
    running = ctx.start_turn(sid, "assistant")
    ctx.append(sid, running["turn_id"], 2)
    target = ctx.new_id("never")
    response = ctx.fork(sid, {"mode": "through", "turn_id": running["turn_id"]}, target=target, key=ctx.new_id("key"))
    ctx.expect_status(response, 409, "turn-incomplete", "FORK-INCOMPLETE-001")
    _absent(ctx, target, "a fork through a running turn was refused")
    before = ctx.fork(sid, {"mode": "before", "turn_id": running["turn_id"]})
    ctx.expect_status(before, 201, None, "FORK-INCOMPLETE-001")  # a cut before a running turn is allowed
    ctx.expect(before.json()["lineage"]["inherited_turn_count"] == 1, "a cut before the running turn inherits the finished turns", "FORK-INCOMPLETE-001")


@check("FORK-SNAPSHOT-001", title="Later writes to parent or child never cross the fork")
def snapshot_isolation(ctx: CheckContext) -> None:
    source, _, records = ctx.conversation(2)
    sid = source["session_id"]
    child = ctx.fork_ok(sid, {"mode": "latest"})["session"]["session_id"]
    _, parent_late = ctx.run_turn(sid, "user", 3)
    _, child_own = ctx.run_turn(child, "user", 2)
    ctx.expect(ctx.walk(child) == records + child_own, "the child's transcript changed after writes to the parent")
    ctx.expect(ctx.walk(sid) == records + parent_late, "the parent's transcript shows the child's records")
    grandchild = ctx.fork_ok(child, {"mode": "latest"})["session"]["session_id"]
    ctx.run_turn(child, "assistant", 1)
    ctx.run_turn(sid, "assistant", 1)
    ctx.expect(ctx.walk(grandchild) == records + child_own, "a grandchild saw writes made after its fork")


@check("FORK-HEADER-001", title="Header fields: absent copies, null clears, a value sets")
def header_three_state(ctx: CheckContext) -> None:
    source, _, _ = ctx.conversation(1, name="Source name", description="Source description")
    sid = source["session_id"]
    cases = [
        (None, ("Source name", "Source description")),
        ({}, ("Source name", "Source description")),
        ({"name": None}, (None, "Source description")),
        ({"name": "Renamed"}, ("Renamed", "Source description")),
        ({"name": "Both", "description": None}, ("Both", None)),
        ({"description": "New description"}, ("Source name", "New description")),
    ]
    for header, (name, description) in cases:
        kwargs = {} if header is None else {"header": header}
        child = ctx.fork_ok(sid, {"mode": "latest"}, **kwargs)["session"]
        got = (child["name"], child["description"])
        ctx.expect(got == (name, description), f"header {header}: got {got}, expected {(name, description)}")
        stored = ctx.alice.get(f"/sessions/{child['session_id']}").json()
        ctx.expect((stored["name"], stored["description"]) == got, f"header {header}: GET shows {stored}")


@check("FORK-TARGET-001", title="A client-chosen child id: same fork replays, anything else conflicts")
def target_session_id(ctx: CheckContext) -> None:
    source, turns, _ = ctx.conversation(2)
    sid = source["session_id"]
    target = ctx.new_id("child")
    cut = {"mode": "through", "turn_id": turns[0]["turn_id"]}
    first = ctx.fork(sid, cut, target=target)
    ctx.expect_status(first, 201)
    ctx.expect(first.json()["session"]["session_id"] == target, f"asked for child id {target}")
    again = ctx.fork(sid, cut, target=target)
    ctx.expect_status(again, 201)
    ctx.expect(again.json() == first.json(), "a repeated fork to the same target returned a different child")
    ctx.expect(again.header("Idempotency-Replayed") == "true", "a repeated fork must say Idempotency-Replayed: true")
    different = ctx.fork(sid, {"mode": "latest"}, target=target)
    ctx.expect_status(different, 409, "target-conflict")
    unrelated = ctx.create_session()["session_id"]
    taken = ctx.fork(sid, cut, target=unrelated)
    ctx.expect_status(taken, 409, "target-conflict")
    ctx.expect(ctx.alice.get(f"/sessions/{unrelated}").json()["lineage"] is None, "a refused fork changed the unrelated session")


@check("FORK-CYCLE-001", title="A session can never become its own ancestor")
def no_cycles(ctx: CheckContext) -> None:
    ids = ctx.chain(2)
    for source, target in ((ids[0], ids[0]), (ids[2], ids[2]), (ids[2], ids[0]), (ids[2], ids[1])):
        response = ctx.fork(source, {"mode": "latest"}, target=target)
        ctx.expect_status(response, 409, "target-conflict")
    lineage = ctx.alice.get(f"/sessions/{ids[0]}/lineage").json()
    ctx.expect(lineage["ancestors"] == [] and lineage["depth"] == 0, f"the root gained ancestors: {lineage}")


@check("FORK-DEPTH-001", "FORK-ATOMIC-001", title="Forks up to the maximum depth succeed; one more is refused")
def depth_limit(ctx: CheckContext) -> None:
    maximum = ctx.limits["max_lineage_depth"]
    ids = ctx.chain(maximum, records_per_turn=1)
    deepest = ctx.alice.get(f"/sessions/{ids[-1]}").json()
    ctx.expect(deepest["lineage"]["depth"] == maximum, f"expected depth {maximum}: {deepest['lineage']}", "FORK-DEPTH-001")
    target = ctx.new_id("too-deep")
    response = ctx.fork(ids[-1], {"mode": "latest"}, target=target)
    ctx.expect_status(response, 422, "depth-exceeded", "FORK-DEPTH-001")
    _absent(ctx, target, "a fork beyond the maximum depth was refused")


@check("FORK-SOURCE-MISSING-001", title="Forking a session that does not exist is not found")
def unknown_source(ctx: CheckContext) -> None:
    target = ctx.new_id("never")
    response = ctx.fork(ctx.new_id("missing"), {"mode": "latest"}, target=target)
    ctx.expect_status(response, 404, "not-found")
    _absent(ctx, target, "a fork of a missing source was refused")


@check("FORK-ATOMIC-001", "FORK-IDEMPOTENT-001", title="A refused fork consumes nothing: its key and target stay free")
def refused_fork_leaves_no_trace(ctx: CheckContext) -> None:
    source, turns, _ = ctx.conversation(1)
    sid = source["session_id"]
    key, target = ctx.new_id("key"), ctx.new_id("child")
    refused = ctx.fork(sid, {"mode": "through", "turn_id": ctx.new_id("nope")}, key=key, target=target)
    ctx.expect_status(refused, 422, "unknown-turn")
    _absent(ctx, target, "a refused fork")
    fixed = ctx.fork(sid, {"mode": "through", "turn_id": turns[0]["turn_id"]}, key=key, target=target)
    ctx.expect_status(fixed, 201, None, "FORK-ATOMIC-001")
    ctx.expect(fixed.header("Idempotency-Replayed") != "true", "a first successful fork is not a replay", "FORK-IDEMPOTENT-001")


@check("FORK-IDEMPOTENT-001", title="An identical retry with the same key replays the first answer")
def idempotent_retry(ctx: CheckContext) -> None:
    source, _, _ = ctx.conversation(2)
    sid = source["session_id"]
    key = ctx.new_id("key")
    first = ctx.fork(sid, {"mode": "latest"}, key=key)
    ctx.expect_status(first, 201)
    ctx.expect(first.header("Idempotency-Replayed") in (None, "false"), "the first answer is marked as a replay")
    ctx.run_turn(sid, "user", 1)  # the source moves on; the retry must still return the first child
    for _ in range(2):
        retry = ctx.fork(sid, {"mode": "latest"}, key=key)
        ctx.expect_status(retry, first.status)
        ctx.expect(
            retry.json() == first.json(),
            f"the retry answered child {retry.json()['session']['session_id']}, "
            f"the first answer child {first.json()['session']['session_id']}",
        )
        ctx.expect(retry.header("Idempotency-Replayed") == "true", "a replay must say Idempotency-Replayed: true")
    fresh = ctx.fork_ok(sid, {"mode": "latest"}, key=ctx.new_id("key"))
    ctx.expect(
        fresh["session"]["session_id"] != first.json()["session"]["session_id"],
        "a different key must create a different child",
    )


@check(
    "FORK-IDEMPOTENT-001",
    "FORK-IDEMPOTENT-MISMATCH-001",
    title="A key replays until just before its advertised lifetime ends, and is free just after",
)
def key_lifetime(ctx: CheckContext) -> None:
    lifetime = ctx.limits["idempotency_key_lifetime_seconds"]
    if lifetime > LIFETIME_VERIFIABLE:
        raise Unsupported(f"idempotency_key_lifetime_seconds is {lifetime}, longer than the {LIFETIME_VERIFIABLE} s the suite waits out")
    source, turns, _ = ctx.conversation(2)
    sid, key = source["session_id"], ctx.new_id("key")
    sent = time.monotonic()
    first = ctx.fork(sid, {"mode": "latest"}, key=key)
    answered = time.monotonic()
    ctx.expect_status(first, 201, None, "FORK-CREATE-001")
    # The key was stored between `sent` and `answered`: a retry arriving before sent + lifetime is
    # within its lifetime; one sent after answered + lifetime is past it.
    probe_at = sent + lifetime - (answered - sent) - EXPIRY_MARGIN
    if probe_at < answered:
        raise Unsupported(
            f"a fork took {answered - sent:.2f} s, too long to probe a "
            f"{lifetime}-second key lifetime"
        )
    ctx.wait_until(probe_at)
    retry = ctx.fork(sid, {"mode": "latest"}, key=key)
    ctx.expect(
        retry.status == 201 and retry.json() == first.json() and retry.header("Idempotency-Replayed") == "true",
        f"{time.monotonic() - sent:.2f} s after a fork with a {lifetime}-second key lifetime was sent, its identical "
        f"retry answered {retry.status} with Idempotency-Replayed {retry.header('Idempotency-Replayed')!r}; "
        "expected the first answer replayed",
        "FORK-IDEMPOTENT-001",
    )
    ctx.wait_until(answered + lifetime + EXPIRY_MARGIN)
    other = ctx.fork(sid, {"mode": "through", "turn_id": turns[0]["turn_id"]}, key=key)
    ctx.expect(
        other.status == 201 and other.header("Idempotency-Replayed") != "true",
        f"{time.monotonic() - answered:.2f} s after a fork with a {lifetime}-second key lifetime was answered, the "
        f"same key with a different cut answered {other.status} {other.problem_type or ''} with "
        f"Idempotency-Replayed {other.header('Idempotency-Replayed')!r}; past its lifetime the key is free and "
        "the request is a new fork",
        "FORK-IDEMPOTENT-MISMATCH-001",
    )
    ctx.expect(
        other.json()["session"]["session_id"] != first.json()["session"]["session_id"],
        "the fork past the key's lifetime answered the first child",
        "FORK-IDEMPOTENT-MISMATCH-001",
    )


@check("FORK-IDEMPOTENT-MISMATCH-001", title="A key reused with a different request is refused")
def key_reused_differently(ctx: CheckContext) -> None:
    source, turns, _ = ctx.conversation(2)
    other, _, _ = ctx.conversation(1)
    sid = source["session_id"]
    key = ctx.new_id("key")
    ctx.fork_ok(sid, {"mode": "latest"}, key=key)
    variants: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
        (sid, {"mode": "through", "turn_id": turns[0]["turn_id"]}, {}),
        (sid, {"mode": "latest"}, {"header": {"name": "different"}}),
        (sid, {"mode": "latest"}, {"target": ctx.new_id("child")}),
        (other["session_id"], {"mode": "latest"}, {}),
    ]
    for source_id, cut, extra in variants:
        target = extra.get("target")
        response = ctx.fork(source_id, cut, key=key, **extra)
        ctx.expect_status(response, 422, "idempotency-key-reused")
        if target:
            _absent(ctx, target, "a reused key was refused")


@check("FORK-IDEMPOTENT-CONCURRENT-001", title="Concurrent identical forks create exactly one child")
def concurrent_identical_forks(ctx: CheckContext) -> None:
    def prepare() -> tuple[str, str]:
        source, _, _ = ctx.conversation(2)
        return source["session_id"], ctx.new_id("key")

    def attempt(state: tuple[str, str], n: int, client: Any) -> Response:
        sid, key = state
        return ctx.fork(sid, {"mode": "latest"}, key=key, client=client)

    def judge(state: tuple[str, str], answers: list[Response]) -> None:
        sid, key = state
        for answer in answers:
            ctx.expect_status(answer, (201, 409))
            if answer.status == 409:
                ctx.expect_status(answer, 409, "idempotency-in-flight")
        created = [a for a in answers if a.status == 201]
        ctx.expect(bool(created), f"none of {len(answers)} concurrent forks of {sid} with key {key} created the child")
        children = sorted({a.json()["session"]["session_id"] for a in created})
        ctx.expect(
            len(children) == 1,
            f"{len(answers)} concurrent identical forks of {sid} with one key created {len(children)} children, "
            f"e.g. {children[:3]}",
        )
        bodies = {repr(a.json()) for a in created}
        ctx.expect(len(bodies) == 1, f"{len(bodies)} different 201 bodies for one key")
        fresh = sum(1 for a in created if a.header("Idempotency-Replayed") != "true")
        ctx.expect(fresh == 1, f"{fresh} answers claim to have created the child (no Idempotency-Replayed: true); exactly one did")
        retry = ctx.fork(sid, {"mode": "latest"}, key=key)
        ctx.expect_status(retry, 201)
        ctx.expect(retry.json() == created[0].json(), "a later retry returned a different child")

    rounds(ctx, prepare, attempt, judge)


@check("FORK-IDEMPOTENT-KEY-001", title="Malformed Idempotency-Key headers are refused")
def key_syntax(ctx: CheckContext) -> None:
    source, _, _ = ctx.conversation(1)
    sid = source["session_id"]
    for raw in ['""', '"' + "k" * 256 + '"', '"unterminated', "bare key", "k" * 256]:
        target = ctx.new_id("never")
        response = ctx.alice.post(
            f"/sessions/{sid}/fork",
            json={"cut": {"mode": "latest"}, "target_session_id": target},
            headers={"Idempotency-Key": raw},
        )
        ctx.expect_status(response, 400, "invalid-idempotency-key")
        _absent(ctx, target, f"key {raw[:20]!r} was refused")
    longest = ctx.new_id("k")
    longest += "k" * (255 - len(longest))
    for good in ['"a-valid key"'.replace("key", ctx.new_id("k")), "bare-" + ctx.new_id("k"), f'"{longest}"', longest[::-1]]:
        response = ctx.alice.post(
            f"/sessions/{sid}/fork", json={"cut": {"mode": "latest"}}, headers={"Idempotency-Key": good}
        )
        ctx.expect_status(response, 201)
    for first, retry in (("quoted", "bare"), ("bare", "quoted")):  # `"k"` and `k` are one key
        key = ctx.new_id(f"same-{first}")
        forms = {"quoted": f'"{key}"', "bare": key}
        answers = [
            ctx.alice.post(f"/sessions/{sid}/fork", json={"cut": {"mode": "latest"}}, headers={"Idempotency-Key": forms[form]})
            for form in (first, retry)
        ]
        for answer in answers:
            ctx.expect_status(answer, 201)
        ctx.expect(
            answers[1].json() == answers[0].json() and answers[1].header("Idempotency-Replayed") == "true",
            f"the {first} key {forms[first]} and the {retry} key {forms[retry]} are the same key: the retry must "
            f"replay the first child, got Idempotency-Replayed {answers[1].header('Idempotency-Replayed')!r}",
        )


@check("FORK-IDEMPOTENT-SCOPE-001", title="Idempotency keys of different principals never collide")
def key_scope(ctx: CheckContext) -> None:
    key = ctx.new_id("shared-key")
    alice_source, _, _ = ctx.conversation(1)
    bob_source, _, _ = ctx.conversation(1, client=ctx.bob)
    alice_child = ctx.fork_ok(alice_source["session_id"], {"mode": "latest"}, key=key)
    response = ctx.fork(bob_source["session_id"], {"mode": "latest"}, key=key, client=ctx.bob)
    ctx.expect_status(response, 201)
    ctx.expect(response.header("Idempotency-Replayed") != "true", "bob's first use of a key was answered as a replay")
    ctx.expect(
        response.json()["session"]["session_id"] != alice_child["session"]["session_id"],
        "bob received alice's child",
    )


@check("FORK-TARGET-CONCURRENT-001", title="Concurrent different forks to one target: one child, the rest conflict")
def concurrent_forks_to_one_target(ctx: CheckContext) -> None:
    source, turns, _ = ctx.conversation(4)
    sid = source["session_id"]
    cuts = [{"mode": "through", "turn_id": t["turn_id"]} for t in turns] + [{"mode": "before", "turn_id": t["turn_id"]} for t in turns]

    def attempt(target: str, n: int, client: Any) -> Response:
        return ctx.fork(sid, cuts[n % len(cuts)], target=target, key=ctx.new_id("key"), client=client)

    def judge(target: str, answers: list[Response]) -> None:
        for answer in answers:
            if answer.status != 201:
                ctx.expect_status(answer, 409, "target-conflict")
        won = [a for a in answers if a.status == 201 and a.header("Idempotency-Replayed") != "true"]
        ctx.expect(len(won) == 1, f"{len(won)} of {len(answers)} concurrent forks claim to have created {target}")
        replays = [a for a in answers if a.status == 201 and a not in won]
        ctx.expect(all(a.json() == won[0].json() for a in replays), f"answers for {target} describe different children")
        stored = ctx.ok(ctx.alice.get(f"/sessions/{target}"), 200, "FORK-CREATE-001")
        ctx.expect(stored["lineage"] == won[0].json()["lineage"], f"the stored child {stored} is not the one answered")

    rounds(ctx, lambda: ctx.new_id("contested"), attempt, judge)


@check("FORK-SNAPSHOT-CONCURRENT-001", title="Forks of a source being written inherit whole finished turns only")
def forks_while_source_is_written(ctx: CheckContext) -> None:
    source = ctx.create_session()
    sid = source["session_id"]
    ctx.run_turn(sid, "user", 2)
    stop = threading.Event()
    progress = threading.Condition()
    writes = [0]  # write requests the writer has completed: start, appends, finish
    writer_error: list[BaseException] = []

    def wrote() -> None:
        with progress:
            writes[0] += 1
            progress.notify_all()

    def keep_writing() -> None:
        try:
            n = 0
            while not stop.is_set() and n < 400:
                turn = ctx.start_turn(sid, "user" if n % 2 else "assistant")
                wrote()
                for _ in range(3):
                    ctx.append(sid, turn["turn_id"], 1)
                    wrote()
                ctx.finish(sid, turn["turn_id"])
                wrote()
                n += 1
        except BaseException as exc:  # surfaced after the forks
            writer_error.append(exc)
        finally:
            with progress:
                writes[0] = 10**9  # release every waiting fork
                progress.notify_all()

    def fork_after(n: int) -> Response:
        """Fork number n waits for the writer's n-th write, so forks land mid-turn and between turns."""
        with progress:
            progress.wait_for(lambda: writes[0] >= n, timeout=60)
        return ctx.fork(sid, {"mode": "latest"}, client=clients[n % len(clients)])

    clients = ctx.spread()
    writer = threading.Thread(target=keep_writing, name="source-writer")
    writer.start()
    try:
        with ThreadPoolExecutor(max_workers=8) as pool:
            forks = list(pool.map(fork_after, range(50)))
    finally:
        stop.set()
        writer.join(timeout=120)
    if writer_error:
        raise writer_error[0]
    parent_records = ctx.walk(sid, limit=ctx.limits["max_page_size"])
    by_turn: dict[str, list] = {}
    order: list[str] = []
    for record in parent_records:
        if record["turn_id"] not in by_turn:
            order.append(record["turn_id"])
        by_turn.setdefault(record["turn_id"], []).append(record)
    for response in forks:
        ctx.expect_status(response, 201, None, "FORK-CREATE-001")
        body = response.json()
        inherited = body["lineage"]["inherited_turn_count"]
        expected = [r for turn_id in order[:inherited] for r in by_turn[turn_id]]
        got = ctx.walk(body["session"]["session_id"], limit=ctx.limits["max_page_size"])
        ctx.expect(
            got == expected,
            f"child {body['session']['session_id']} inherited {inherited} turns but its transcript holds "
            f"{len(got)} records; the source's first {inherited} turns hold {len(expected)}",
        )
