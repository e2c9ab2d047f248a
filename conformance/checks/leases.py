"""Chapter: writer leases (one writer per session across processes, with expiry)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

from conformance.client import Response
from conformance.context import CheckContext
from conformance.registry import check

CAPABILITY = "writer-lease"


def acquire(ctx: CheckContext, sid: str, ttl: int = 60, lease_id: str | None = None, client=None) -> Response:
    body: dict = {"ttl_seconds": ttl}
    if lease_id is not None:
        body["lease_id"] = lease_id
    return (client or ctx.alice).post(f"/sessions/{sid}/lease", json=body)


def writes(ctx: CheckContext, sid: str, turn_id: str, lease: str | None) -> list[Response]:
    headers = {"Writer-Lease": lease} if lease else None
    return [
        ctx.alice.post(f"/sessions/{sid}/turns", json={"role": "user"}, headers=headers),
        ctx.alice.post(
            f"/sessions/{sid}/turns/{turn_id}/records",
            json={"records": [{"type": "message", "content": {"n": 1}}]},
            headers=headers,
        ),
        ctx.alice.post(f"/sessions/{sid}/turns/{turn_id}/finish", json={"status": "completed"}, headers=headers),
    ]


@check("LEASE-ACQUIRE-001", title="A lease is acquired once, renewed by its holder, refused to others", needs=(CAPABILITY,))
def acquire_and_renew(ctx: CheckContext) -> None:
    sid = ctx.create_session()["session_id"]
    first = acquire(ctx, sid)
    ctx.expect_status(first, 201)
    lease = first.json()
    ctx.expect(lease["session_id"] == sid and lease["lease_id"], f"lease {lease}")
    ctx.expect_status(acquire(ctx, sid), 409, "writer-conflict")
    renewed = acquire(ctx, sid, ttl=120, lease_id=lease["lease_id"])
    ctx.expect_status(renewed, 200)
    ctx.expect(renewed.json()["expires_at"] >= lease["expires_at"], "a renewal moved the expiry backwards")
    ctx.expect_status(acquire(ctx, sid, lease_id="not-" + lease["lease_id"][:40]), 409, "writer-conflict")
    too_long = acquire(ctx, sid, ttl=ctx.limits.get("max_lease_seconds", 300) + 1, lease_id=lease["lease_id"])
    ctx.expect_status(too_long, 422, "invalid-request")


@check("LEASE-EXCLUSIVE-001", title="Concurrent acquisitions through every replica: exactly one wins", needs=(CAPABILITY,))
def concurrent_acquisitions(ctx: CheckContext) -> None:
    sid = ctx.create_session()["session_id"]
    count = min(ctx.config.concurrency, 16)
    barrier = threading.Barrier(count)
    clients = ctx.spread()

    def one(n: int) -> Response:
        barrier.wait(timeout=30)
        return acquire(ctx, sid, client=clients[n % len(clients)])

    with ThreadPoolExecutor(max_workers=count) as pool:
        answers = list(pool.map(one, range(count)))
    won = [a for a in answers if a.status == 201]
    for answer in answers:
        if answer.status != 201:
            ctx.expect_status(answer, 409, "writer-conflict")
    ctx.expect(len(won) == 1, f"{len(won)} writers acquired the same lease")


@check("LEASE-ENFORCE-001", title="Only the lease holder writes; others change nothing", needs=(CAPABILITY,))
def holder_only_writes(ctx: CheckContext) -> None:
    sid = ctx.create_session()["session_id"]
    turn = ctx.start_turn(sid)  # no lease held: writes need no header
    lease = acquire(ctx, sid).json()["lease_id"]
    for answer in writes(ctx, sid, turn["turn_id"], None) + writes(ctx, sid, turn["turn_id"], "someone-else"):
        ctx.expect_status(answer, 409, "writer-conflict")
    ctx.expect(ctx.walk(sid, "records") == [], "a write without the lease changed the session")
    headers = {"Writer-Lease": lease}
    appended = ctx.alice.post(
        f"/sessions/{sid}/turns/{turn['turn_id']}/records",
        json={"records": [{"type": "message", "content": {"by": "holder"}}]},
        headers=headers,
    )
    ctx.expect_status(appended, 201)
    ctx.expect_status(
        ctx.alice.post(f"/sessions/{sid}/turns/{turn['turn_id']}/finish", json={"status": "completed"}, headers=headers), 200
    )
    ctx.expect(len(ctx.walk(sid, "records")) == 1, "the holder's write was not stored")


@check("LEASE-RELEASE-001", title="Releasing a lease frees the session at once", needs=(CAPABILITY,))
def release(ctx: CheckContext) -> None:
    sid = ctx.create_session()["session_id"]
    lease = acquire(ctx, sid).json()["lease_id"]
    ctx.expect_status(ctx.alice.request("DELETE", f"/sessions/{sid}/lease", headers={"Writer-Lease": "other"}), 409, "writer-conflict")
    ctx.expect_status(ctx.alice.request("DELETE", f"/sessions/{sid}/lease", headers={"Writer-Lease": lease}), 204)
    ctx.expect_status(ctx.alice.post(f"/sessions/{sid}/turns", json={"role": "user"}), 201)  # free: no header needed
    ctx.expect_status(acquire(ctx, sid), 201)


@check("LEASE-EXPIRY-001", title="An unrenewed lease expires and its token stops working", needs=(CAPABILITY,))
def lease_expires(ctx: CheckContext) -> None:
    sid = ctx.create_session()["session_id"]
    first = acquire(ctx, sid, ttl=1).json()
    expires = datetime.fromisoformat(first["expires_at"].replace("Z", "+00:00")).timestamp()
    # Expiry is a matter of time: wait until the server's own expires_at has passed.
    deadline = time.time() + 10
    while time.time() <= expires + 0.05 and time.time() < deadline:
        threading.Event().wait(min(0.1, max(expires + 0.06 - time.time(), 0.01)))
    second = acquire(ctx, sid, ttl=60)
    ctx.expect_status(second, 201)
    turn = ctx.alice.post(f"/sessions/{sid}/turns", json={"role": "user"}, headers={"Writer-Lease": first["lease_id"]})
    ctx.expect_status(turn, 409, "writer-conflict")
