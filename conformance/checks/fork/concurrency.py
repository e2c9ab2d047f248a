"""Concurrent forks: to one target id, and of a source that is being written."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from conformance.checks.contention import rounds
from conformance.client import Response
from conformance.context import CheckContext
from conformance.registry import check


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
        stored = ctx.ok(ctx.alice.get(f"/sessions/{target}"), 200)
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
        body = ctx.forked(response)
        inherited = body["lineage"]["inherited_turn_count"]
        expected = [r for turn_id in order[:inherited] for r in by_turn[turn_id]]
        got = ctx.walk(body["session"]["session_id"], limit=ctx.limits["max_page_size"])
        ctx.expect(
            got == expected,
            f"child {body['session']['session_id']} inherited {inherited} turns but its transcript holds "
            f"{len(got)} records; the source's first {inherited} turns hold {len(expected)}",
        )
