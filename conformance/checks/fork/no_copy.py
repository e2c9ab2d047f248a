"""Nothing is copied, as storage shows it: the API shows only that the child's own records are empty
and ids are kept, which a copy that keeps ids also shows. Whether a fork stored a copy is seen in
the bytes it wrote (`diagnostics.write-count`, FORK-NO-COPY-001's `verifiable_with`); without them
the rule is not verified, never passed. The same holds for attachments (ATT-INHERIT-001)."""

from __future__ import annotations

from conformance.checks.fork.writes import (
    BYTES_HEADER,
    FORK_BYTES_ALLOWANCE,
    SIZED_SOURCE_BYTES,
    WRITES_CAPABILITY,
    fork_writes,
    judge_fork_writes,
)
from conformance.checks.authorization.common import stored
from conformance.context import CheckContext
from conformance.errors import NotVerified
from conformance.registry import check


@check("FORK-NO-COPY-001", title="A fork stores no copy: a large source's fork writes what a 1-record source's does")
def fork_stores_no_copy(ctx: CheckContext) -> None:
    if not ctx.has(WRITES_CAPABILITY):
        raise NotVerified(
            f"whether a fork stores a copy is shown only by {WRITES_CAPABILITY} (the bytes each request wrote), "
            "which this server does not advertise; ids kept and no own records do not rule out a copy"
        )
    found = fork_writes(ctx, "FORK-NO-COPY-001")
    if any(size is None for _, written in found for _, size in written.values()):
        raise NotVerified(
            f"the server counts stored items but not {BYTES_HEADER}: a copy into one stored item "
            "(a checkpoint of the whole transcript) keeps the item count"
        )
    judge_fork_writes(ctx, found, "FORK-NO-COPY-001", "FORK-NO-COPY-001")


@check("ATT-INHERIT-001", title="A fork stores no copy of an attachment: forks of sources with a small and a large one write alike",
       needs=("attachments",))
def fork_stores_no_attachment_copy(ctx: CheckContext) -> None:
    if not ctx.has(WRITES_CAPABILITY):
        raise NotVerified(
            f"whether a fork copies attachments is shown only by {WRITES_CAPABILITY} (the bytes each request wrote), "
            "which this server does not advertise"
        )
    size = min(int(ctx.limits.get("max_attachment_bytes", 0) or 0), SIZED_SOURCE_BYTES)
    written: dict[str, int | None] = {}
    for name, body in (("a 1-byte attachment", b"a"), (f"a {size}-byte attachment", b"b" * size)):
        sid = ctx.create_session()["session_id"]
        turn = ctx.start_turn(sid)
        ctx.append(sid, turn["turn_id"], 1)
        stored(ctx, ctx.alice.post(f"/sessions/{sid}/attachments", content=body, headers={"Content-Type": "application/octet-stream"}))
        ctx.append(sid, turn["turn_id"], 1)  # the attachment is below an inherited record: the child reaches it
        ctx.finish(sid, turn["turn_id"])
        forked = ctx.fork(sid, {"mode": "latest"})
        ctx.forked(forked)
        raw = forked.header(BYTES_HEADER)
        written[name] = int(raw) if raw is not None and raw.strip().isdigit() else None
    ctx.details["fork_writes"] = written
    if None in written.values():
        raise NotVerified(f"the server counts stored items but not {BYTES_HEADER}")
    spread = max(written.values()) - min(written.values())  # type: ignore[type-var, operator]
    ctx.expect(
        spread <= FORK_BYTES_ALLOWANCE,
        f"forks of sources holding {sorted(written)} wrote {written} bytes: {spread} apart, more than the "
        f"{FORK_BYTES_ALLOWANCE} allowed, so the fork stores a copy of the attachment",
    )
