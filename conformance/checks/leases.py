"""Chapter: writer leases (one writer per session across processes, with expiry).

Every ttl comes from the advertised `max_lease_seconds`; expiry is measured against the suite's
own clock, from when the acquisition was sent and answered, so clock skew does not matter.
"""

from __future__ import annotations

from typing import Any

from conformance.client import ApiClient, Response
from conformance import timing
from conformance.checks.contention import rounds
from conformance.checks.refusals import expect_refused
from conformance.context import CheckContext
from conformance.registry import check, setup_step

CAPABILITY = "writer-lease"
HOLD_SECONDS = 60  # long enough for any check that holds a lease; less when the target allows less
EXPIRY_TTLS = (1, 2, 4, 8)  # seconds: the expiry check tries the shortest its round trips allow


def max_ttl(ctx: CheckContext) -> int:
    return ctx.limits["max_lease_seconds"]


def hold_ttl(ctx: CheckContext) -> int:
    """A ttl within the advertised maximum that outlasts any check holding the lease: every
    chapter that takes a lease asks for this one."""
    return min(max_ttl(ctx), HOLD_SECONDS)


def acquire(
    ctx: CheckContext, sid: str, ttl: int | None = None, lease_id: str | None = None, client: ApiClient | None = None
) -> Response:
    body: dict[str, Any] = {"ttl_seconds": hold_ttl(ctx) if ttl is None else ttl}
    if lease_id is not None:
        body["lease_id"] = lease_id
    return (client or ctx.alice).post(f"/sessions/{sid}/lease", json=body)


@setup_step("LEASE-ACQUIRE-001")
def held_lease(ctx: CheckContext, sid: str, ttl: int | None = None, renew: str | None = None) -> dict[str, Any]:
    """Acquire a free session's lease, or renew the held lease `renew` (a set-up step: anything but
    201, or 200 for a renewal, fails LEASE-ACQUIRE-001)."""
    return ctx.ok(acquire(ctx, sid, ttl, renew), 200 if renew else 201, "LEASE-ACQUIRE-001")  # type: ignore[no-any-return]


@setup_step("LEASE-RELEASE-001")
def release_held(ctx: CheckContext, sid: str, lease_id: str) -> Response:
    """Release a held lease (a set-up step: anything but 204 fails LEASE-RELEASE-001)."""
    released = ctx.alice.request("DELETE", f"/sessions/{sid}/lease", headers={"Writer-Lease": lease_id})
    ctx.expect_status(released, 204, None, "LEASE-RELEASE-001")
    return released


def writes(ctx: CheckContext, sid: str, turn_id: str, lease: str | None) -> list[Response]:
    headers = {"Writer-Lease": lease} if lease is not None else None
    return [
        ctx.alice.post(f"/sessions/{sid}/turns", json={"role": "user"}, headers=headers),
        ctx.alice.post(
            f"/sessions/{sid}/turns/{turn_id}/records",
            json={"records": [{"type": "message", "content": {"n": 1}}]},
            headers=headers,
        ),
        ctx.alice.post(f"/sessions/{sid}/turns/{turn_id}/finish", json={"status": "completed"}, headers=headers),
    ]


@check("LEASE-ACQUIRE-001", title="ttl_seconds from 1 to max_lease_seconds; one holder; renewal by the holder only", needs=(CAPABILITY,))
def acquire_and_renew(ctx: CheckContext) -> None:
    longest = max_ttl(ctx)
    sid = ctx.create_session()["session_id"]
    ctx.expect_status(acquire(ctx, sid, 0), 422, "invalid-request")  # below 1: not the schema
    expect_refused(ctx, acquire(ctx, sid, longest + 1), "lease-too-long")  # refused, and nothing is held
    first = acquire(ctx, sid, longest)  # exactly the maximum is accepted
    lease = ctx.ok(first, 201)
    ctx.expect(
        isinstance(lease["lease_id"], str) and lease["lease_id"] and "expires_at" in lease,
        f"POST /sessions/{sid}/lease answered {lease}; expected a lease_id and expires_at",
    )
    ctx.expect_status(acquire(ctx, sid), 409, "writer-conflict")
    renewed = acquire(ctx, sid, ttl=longest, lease_id=lease["lease_id"])
    ctx.expect_status(renewed, 200)
    ctx.expect(
        renewed.json()["expires_at"] >= lease["expires_at"],
        f"a renewal moved expires_at from {lease['expires_at']} back to {renewed.json()['expires_at']}",
    )
    ctx.expect_status(acquire(ctx, sid, lease_id="not-" + lease["lease_id"][:40]), 409, "writer-conflict")
    expect_refused(ctx, acquire(ctx, sid, ttl=longest + 1, lease_id=lease["lease_id"]), "lease-too-long")


@check("LEASE-EXCLUSIVE-001", title="Concurrent acquisitions through every replica: exactly one wins", needs=(CAPABILITY,))
def concurrent_acquisitions(ctx: CheckContext) -> None:
    def judge(sid: str, answers: list[Response]) -> None:
        for answer in answers:
            if answer.status != 201:
                ctx.expect_status(answer, 409, "writer-conflict")
        won = [a for a in answers if a.status == 201]
        ctx.expect(
            len(won) == 1,
            f"{len(answers)} concurrent POST /sessions/{sid}/lease on a free session: {len(won)} answered 201 "
            f"(leases {[a.json()['lease_id'] for a in won][:4]}); exactly one may win, the others get 409",
        )

    rounds(
        ctx,
        prepare=lambda: ctx.create_session()["session_id"],
        attempt=lambda sid, n, client: acquire(ctx, sid, client=client),
        judge=judge,
    )


@check("LEASE-ENFORCE-001", title="Only the lease holder writes; others change nothing", needs=(CAPABILITY,))
def holder_only_writes(ctx: CheckContext) -> None:
    sid = ctx.create_session()["session_id"]
    turn = ctx.start_turn(sid)  # no lease held: writes need no header
    lease = held_lease(ctx, sid)["lease_id"]
    refused = writes(ctx, sid, turn["turn_id"], None) + writes(ctx, sid, turn["turn_id"], "someone-else")
    refused += writes(ctx, sid, turn["turn_id"], "w" * 64)  # well-formed (64 characters), not held
    for answer in refused:
        ctx.expect_status(answer, 409, "writer-conflict")
    for malformed in ("w" * 65, "", "has space"):  # not 1 to 64 visible ASCII characters
        for answer in writes(ctx, sid, turn["turn_id"], malformed):
            ctx.expect_status(answer, 422, "invalid-request")
    ctx.expect(ctx.walk(sid, "records") == [], "a write without the held lease stored records")
    held_lease(ctx, sid, renew=lease)  # renewed, in case refusing took a while
    headers = {"Writer-Lease": lease}
    appended = ctx.alice.post(
        f"/sessions/{sid}/turns/{turn['turn_id']}/records",
        json={"records": [{"type": "message", "content": {"by": "holder"}}]},
        headers=headers,
    )
    ctx.expect_status(appended, 201)
    finished = ctx.alice.post(f"/sessions/{sid}/turns/{turn['turn_id']}/finish", json={"status": "completed"}, headers=headers)
    ctx.expect_status(finished, 200)
    ctx.expect(len(ctx.walk(sid, "records")) == 1, "the holder's write was not stored")


@check("LEASE-RELEASE-001", title="Releasing a lease frees the session at once", needs=(CAPABILITY,))
def release(ctx: CheckContext) -> None:
    sid = ctx.create_session()["session_id"]
    lease = held_lease(ctx, sid)["lease_id"]
    path = f"/sessions/{sid}/lease"
    for other in ({}, {"Writer-Lease": "other"}, {"Writer-Lease": "r" * 64}):
        ctx.expect_status(ctx.alice.request("DELETE", path, headers=other), 409, "writer-conflict")
    for malformed in ("r" * 65, ""):
        ctx.expect_status(ctx.alice.request("DELETE", path, headers={"Writer-Lease": malformed}), 422, "invalid-request")
    ctx.expect_status(acquire(ctx, sid), 409, "writer-conflict")  # refused releases left the lease held
    ctx.expect_status(ctx.alice.request("DELETE", path, headers={"Writer-Lease": lease}), 204)
    ctx.expect_status(ctx.alice.post(f"/sessions/{sid}/turns", json={"role": "user"}), 201)  # free: no header needed
    ctx.expect_status(ctx.alice.request("DELETE", path, headers={"Writer-Lease": lease}), 409, "writer-conflict")
    ctx.expect_status(acquire(ctx, sid), 201)


@check("LEASE-EXPIRY-001", title="A short lease is held until just before it can expire and free just after", needs=(CAPABILITY,))
def lease_expires(ctx: CheckContext) -> None:
    # The server grants the lease between the acquisition's send and answer, so it expires between
    # sent + ttl and answered + ttl. A probe answered before sent + ttl must find it held; one sent
    # after answered + ttl must find it free. A ttl too short for this run's round trips gives way
    # to a longer one; when none leaves a provable margin the rule is not verified.
    ttls = sorted({min(ttl, max_ttl(ctx)) for ttl in EXPIRY_TTLS})
    for ttl in ttls:
        sid = ctx.create_session()["session_id"]
        first, start = timing.timed(lambda: held_lease(ctx, sid, ttl))
        probed = timing.probe_before(start, ttl, lambda: acquire(ctx, sid, ttl, client=ctx.alice))
        if probed is not None:
            break
    else:
        raise timing.margin_not_established("LEASE-EXPIRY-001", ttl, start)
    before, stamp = probed
    ctx.expect(
        before.status == 409,
        f"a {ttl}-second lease was acquired; {stamp.answered - start.sent:.2f} s after the acquisition was sent, "
        f"before it can have expired, another acquisition answered {before.status} instead of 409 writer-conflict",
    )
    ctx.expect_status(before, 409, "writer-conflict")
    after, stamp = timing.probe_after(start, ttl, lambda: acquire(ctx, sid, hold_ttl(ctx)))
    ctx.expect(
        after.status == 201,
        f"a {ttl}-second lease was answered {stamp.sent - start.answered:.2f} s before a new acquisition was sent, "
        f"and not renewed; the new acquisition answered {after.status} instead of 201",
    )
    turn = ctx.alice.post(f"/sessions/{sid}/turns", json={"role": "user"}, headers={"Writer-Lease": first["lease_id"]})
    ctx.expect_status(turn, 409, "writer-conflict")
