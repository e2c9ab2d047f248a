"""Idempotency keys of forks: refused forks consume none, retries replay, keys expire, clash or are malformed."""

from __future__ import annotations

from typing import Any

from conformance import timing
from conformance.checks.contention import rounds
from conformance.checks.fork.common import absent
from conformance.client import Response, describe
from conformance.context import CheckContext
from conformance.errors import Unsupported
from conformance.registry import check, setup_step

LIFETIME_VERIFIABLE = 3  # seconds: a key lifetime the suite waits out; longer ones are not verified
LIFETIME_ATTEMPTS = 3  # fresh keys tried when a round trip leaves no provable margin
REUSED = "urn:session-lineage:problem:idempotency-key-reused"
IN_FLIGHT = "urn:session-lineage:problem:idempotency-in-flight"


@setup_step("FORK-CUT-UNKNOWN-001")
def refused_for_an_unknown_turn(ctx: CheckContext, response: Response) -> None:
    """The premise of a refused-fork check: a cut through a turn the source never had is refused."""
    ctx.expect_status(response, 422, "unknown-turn", "FORK-CUT-UNKNOWN-001")


@check("FORK-ATOMIC-001", "FORK-IDEMPOTENT-001", title="A refused fork consumes nothing: its key and target stay free")
def refused_fork_leaves_no_trace(ctx: CheckContext) -> None:
    source, turns, _ = ctx.conversation(1)
    sid = source["session_id"]
    key, target = ctx.new_id("key"), ctx.new_id("child")
    refused = ctx.fork(sid, {"mode": "through", "turn_id": ctx.new_id("nope")}, key=key, target=target)
    refused_for_an_unknown_turn(ctx, refused)
    absent(ctx, target, "a refused fork")
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
    title="A key replays until just before its advertised lifetime ends; past it, another request is refused or forks anew",
)
def key_lifetime(ctx: CheckContext) -> None:
    lifetime = ctx.limits["idempotency_key_lifetime_seconds"]
    if lifetime > LIFETIME_VERIFIABLE:
        raise Unsupported(f"idempotency_key_lifetime_seconds is {lifetime}, longer than the {LIFETIME_VERIFIABLE} s the suite waits out")
    source, turns, _ = ctx.conversation(2)
    sid = source["session_id"]
    # The key was stored between the fork's send and answer: a retry answered before sent + lifetime
    # is within its lifetime; one sent after answered + lifetime is past it. A slow round trip that
    # leaves no provable margin gives way to a fresh key, a few times, then to "not verified".
    for _ in range(LIFETIME_ATTEMPTS):
        key = ctx.new_id("key")
        first, start = timing.timed(lambda: ctx.fork(sid, {"mode": "latest"}, key=key))
        ctx.forked(first)
        probed = timing.probe_before(start, lifetime, lambda: ctx.fork(sid, {"mode": "latest"}, key=key))
        if probed is not None:
            break
    else:
        raise timing.margin_not_established("idempotency key lifetime", lifetime, start)
    retry, stamp = probed
    ctx.expect(
        retry.status == 201 and retry.json() == first.json() and retry.header("Idempotency-Replayed") == "true",
        f"{stamp.answered - start.sent:.2f} s after a fork with a {lifetime}-second key lifetime was sent, its identical "
        f"retry answered {retry.status} with Idempotency-Replayed {retry.header('Idempotency-Replayed')!r}; "
        "expected the first answer replayed",
        "FORK-IDEMPOTENT-001",
    )
    # Past the lifetime no rule says the key is forgotten (FORK-IDEMPOTENT-001 binds only within it,
    # FORK-IDEMPOTENT-MISMATCH-001 states no end): the same key with another cut is refused as reused
    # (the key kept) or is a new fork (the key forgotten), never answered with the first child.
    other, stamp = timing.probe_after(
        start, lifetime, lambda: ctx.fork(sid, {"mode": "through", "turn_id": turns[0]["turn_id"]}, key=key)
    )
    if other.status == 422 and other.problem_type == REUSED:
        return
    child = other.json()["session"]["session_id"] if other.status == 201 else None
    ctx.expect(
        other.status == 201 and other.header("Idempotency-Replayed") != "true" and child != first.json()["session"]["session_id"],
        f"{stamp.sent - start.answered:.2f} s after a fork with a {lifetime}-second key lifetime was answered, the "
        f"same key with a different cut answered {other.status} {other.problem_type or ''} with "
        f"Idempotency-Replayed {other.header('Idempotency-Replayed')!r}{f' and child {child}' if child else ''}; a "
        "different request is refused as reused (422 idempotency-key-reused) or, the key forgotten, forks a new child",
        "FORK-IDEMPOTENT-MISMATCH-001",
    )


@check("FORK-IDEMPOTENT-MISMATCH-001", "FORK-ATOMIC-001", title="A key reused with a different request is refused, and creates nothing")
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
        ctx.expect_status(response, 422, "idempotency-key-reused", "FORK-IDEMPOTENT-MISMATCH-001")
        if target:
            absent(ctx, target, "a reused key was refused")


@check("FORK-IDEMPOTENT-CONCURRENT-001", title="Concurrent identical forks create exactly one child")
def concurrent_identical_forks(ctx: CheckContext) -> None:
    """FORK-IDEMPOTENT-CONCURRENT-001 says which answers are allowed (the child, 201, or 409
    idempotency-in-flight) and that their 201 bodies are one; it leaves open which 201 says
    `Idempotency-Replayed` (FORK-IDEMPOTENT-001's header, checked by fork.idempotent_retry) and a
    later retry may come after the key's lifetime, so neither is judged here."""

    def prepare() -> tuple[str, str]:
        source, _, _ = ctx.conversation(2)
        return source["session_id"], ctx.new_id("key")

    def attempt(state: tuple[str, str], n: int, client: Any) -> Response:
        sid, key = state
        return ctx.fork(sid, {"mode": "latest"}, key=key, client=client)

    def judge(state: tuple[str, str], answers: list[Response]) -> None:
        sid, key = state
        for answer in answers:
            ctx.expect(
                answer.status == 201 or (answer.status == 409 and answer.problem_type == IN_FLIGHT),
                f"{describe(answer.exchange)}: each of concurrent identical forks answers the child (201) or 409 "
                "idempotency-in-flight",
            )
        created = [a for a in answers if a.status == 201]
        # The one child the race must create is created by a request that was not refused.
        ctx.expect(
            bool(created),
            f"all {len(answers)} concurrent identical forks of {sid} with key {key} answered 409 idempotency-in-flight: "
            "none answered the one child they must create",
        )
        children = sorted({a.json()["session"]["session_id"] for a in created})
        ctx.expect(
            len(children) == 1,
            f"{len(answers)} concurrent identical forks of {sid} with one key created {len(children)} children, "
            f"e.g. {children[:3]}",
        )
        bodies = {repr(a.json()) for a in created}
        ctx.expect(len(bodies) == 1, f"{len(bodies)} different 201 bodies for one key")

    rounds(ctx, prepare, attempt, judge)


@check("FORK-IDEMPOTENT-KEY-001", "FORK-ATOMIC-001", title="Malformed Idempotency-Key headers are refused, and create nothing")
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
        ctx.expect_status(response, 400, "invalid-idempotency-key", "FORK-IDEMPOTENT-KEY-001")
        absent(ctx, target, f"key {raw[:20]!r} was refused")
    longest = ctx.new_id("k")
    longest += "k" * (255 - len(longest))
    for good in ['"a-valid key"'.replace("key", ctx.new_id("k")), "bare-" + ctx.new_id("k"), f'"{longest}"', longest[::-1]]:
        response = ctx.alice.post(
            f"/sessions/{sid}/fork", json={"cut": {"mode": "latest"}}, headers={"Idempotency-Key": good}
        )
        ctx.expect_status(response, 201, None, "FORK-IDEMPOTENT-KEY-001")
    for first, retry in (("quoted", "bare"), ("bare", "quoted")):  # `"k"` and `k` are one key
        key = ctx.new_id(f"same-{first}")
        forms = {"quoted": f'"{key}"', "bare": key}
        answers = [
            ctx.alice.post(f"/sessions/{sid}/fork", json={"cut": {"mode": "latest"}}, headers={"Idempotency-Key": forms[form]})
            for form in (first, retry)
        ]
        for answer in answers:
            ctx.expect_status(answer, 201, None, "FORK-IDEMPOTENT-KEY-001")
        ctx.expect(
            answers[1].json() == answers[0].json() and answers[1].header("Idempotency-Replayed") == "true",
            f"the {first} key {forms[first]} and the {retry} key {forms[retry]} are the same key: the retry must "
            f"replay the first child, got Idempotency-Replayed {answers[1].header('Idempotency-Replayed')!r}",
            "FORK-IDEMPOTENT-KEY-001",
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
