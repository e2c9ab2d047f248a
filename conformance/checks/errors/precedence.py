"""ERR-PRECEDENCE-001's rows of replay history, suspended turns and legacy imports: each request
meets the conditions of two rows at once, and the earlier row's answer must come. (The rows of
the core operations are errors.error_precedence's.)"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import httpx

from conformance.checks.authorization.common import grant
from conformance.checks.leases import held_lease
from conformance.checks.legacy_import import (
    MEDIA_TYPE,
    build,
    fresh_ids,
    split_lines,
    upload,
)
from conformance.checks.probes import probes
from conformance.client import Response, tls
from conformance.context import CheckContext
from conformance.errors import NotVerified, Unsupported
from conformance.registry import check

BAD_LEASE = "two words"  # not 1 to 64 visible ASCII characters: the Writer-Lease row (422) applies
HELD_SECONDS = 30  # how long an upload is held open while another is sent
PROBLEM = "urn:session-lineage:problem:"


def first_row(ctx: CheckContext, what: str, response: Response, status: int, kind: str) -> None:
    """`response` is the answer of the row that comes first in the table: `status` and `kind`."""
    ctx.expect(
        response.status == status and response.problem_type == f"{PROBLEM}{kind}",
        f"{what}: {response.exchange.method} {response.exchange.url} answered {response.status} "
        f"{response.problem_type}, expected {status} {kind}",
    )


def _rows_apply(ctx: CheckContext, capability: str) -> None:
    """Skipped (not applicable) when the server does not advertise `capability`: ERR-PRECEDENCE-001
    (a core rule) leaves out the rows of a capability the server lacks, so nothing of them applies.
    Not `needs`, which would fail a core server as untestable; never a pass that tested nothing."""
    if not ctx.has(capability):
        raise Unsupported(f"none of these rows apply: the server does not advertise {capability}")


def _release(ctx: CheckContext, sid: str, lease_id: str) -> None:
    ctx.alice.request("DELETE", f"/sessions/{sid}/lease", headers={"Writer-Lease": lease_id})


@check("ERR-PRECEDENCE-001", title="Replay history that differs: after the session, role and lease, before the turn's own rules")
def replay_history_rows(ctx: CheckContext) -> None:
    _rows_apply(ctx, "replay-history")
    source, _, _ = ctx.conversation(1)  # records before any new turn: an empty replay history differs
    sid = source["session_id"]
    differs = {"role": "user", "replay_history": []}
    running = ctx.start_turn(sid)
    response = ctx.alice.post(f"/sessions/{sid}/turns", json=differs)
    first_row(ctx, "a replay history that differs while a turn runs", response, 409, "replay-history-mismatch")
    ctx.finish(sid, running["turn_id"])
    response = ctx.alice.post(f"/sessions/{sid}/turns", json={**differs, "turn_id": running["turn_id"]})
    first_row(ctx, "a replay history that differs, with a turn id in use", response, 409, "replay-history-mismatch")
    if ctx.has("writer-lease"):
        lease_id = held_lease(ctx, sid)["lease_id"]
        response = ctx.alice.post(f"/sessions/{sid}/turns", json=differs)
        first_row(ctx, "a replay history that differs, without the held lease", response, 409, "writer-conflict")
        _release(ctx, sid, lease_id)
    if ctx.has("sharing"):
        grant(ctx, ctx.alice, sid, ctx.bob)
        response = ctx.bob.post(f"/sessions/{sid}/turns", json=differs)
        first_row(ctx, "a replay history that differs, sent by a reader", response, 403, "forbidden")


@check("ERR-PRECEDENCE-001", title="A turn that is not suspended: after the session, role and lease")
def suspended_turn_rows(ctx: CheckContext) -> None:
    _rows_apply(ctx, "suspend")
    sid = ctx.create_session()["session_id"]
    turn = ctx.start_turn(sid)  # running: neither suspended nor interrupted
    path = f"/sessions/{sid}/turns/{turn['turn_id']}"
    if ctx.has("writer-lease"):
        lease_id = held_lease(ctx, sid)["lease_id"]
        for action in ("recover", "abandon"):
            response = ctx.alice.post(f"{path}/{action}")
            first_row(ctx, f"{action} of a running turn without the held lease", response, 409, "writer-conflict")
        _release(ctx, sid, lease_id)
    if ctx.has("sharing"):
        grant(ctx, ctx.alice, sid, ctx.bob)
        for action in ("recover", "abandon"):
            response = ctx.bob.post(f"{path}/{action}")
            first_row(ctx, f"{action} of a running turn by a reader", response, 403, "forbidden")
    for action in ("recover", "abandon"):
        first_row(ctx, f"{action} of a running turn", ctx.alice.post(f"{path}/{action}"), 409, "turn-not-suspended")
    ctx.finish(sid, turn["turn_id"])


def _meta(ctx: CheckContext, parent: str | None = None) -> bytes:
    payload = {"id": ctx.new_id("legacy"), **({"forked_from_id": parent} if parent else {})}
    return json.dumps({"type": "session_meta", "payload": payload}).encode() + b"\n"


def _conflicting(lines: list[bytes]) -> bytes:
    """The history's meta line, then a record line other than its own second line."""
    return lines[0] + b'{"type": "message", "turn_id": "other", "payload": {"text": "not what was imported"}}\n'


@check("ERR-PRECEDENCE-001", title="Legacy imports: media type and header syntax before the history, a conflict before the lease")
def legacy_import_rows(ctx: CheckContext) -> None:
    _rows_apply(ctx, "legacy-import")
    not_meta = b'{"type": "message", "turn_id": "t1", "payload": {}}\n'
    orphan = _meta(ctx, parent=ctx.new_id("never-imported"))
    for body, what in ((not_meta, "a history without a meta line"), (orphan, "a history whose fork parent was never imported")):
        response = ctx.alice.post("/imports", content=body, headers={"Content-Type": "text/plain"})
        first_row(ctx, f"{what}, sent as text/plain", response, 415, "unsupported-media-type")
        response = upload(ctx, body, headers={"Writer-Lease": BAD_LEASE})
        first_row(ctx, f"{what}, with a malformed Writer-Lease", response, 422, "invalid-request")
    if ctx.has("writer-lease"):
        data, _ = build(ctx, "valid", fresh_ids(ctx))
        lines = split_lines(data)
        sid = ctx.ok(upload(ctx, b"".join(lines[:3])), 201)["session_id"]
        lease_id = held_lease(ctx, sid)["lease_id"]
        response = upload(ctx, _conflicting(lines))
        first_row(ctx, "an upload that conflicts with the imported bytes, without the held lease", response, 409, "legacy-conflict")
        _release(ctx, sid, lease_id)


def _held_open(data: bytes, cut: int, release: threading.Event) -> Iterator[bytes]:
    yield data[:cut]
    release.wait(HELD_SECONDS)
    yield data[cut:]


def _claimed_while_held(ctx: CheckContext) -> bool:
    """Hold an upload that continues an imported history open, and while another upload is seen in
    progress, send one that conflicts with the imported bytes; False when none was seen in progress."""
    data, _ = build(ctx, "valid", fresh_ids(ctx))
    lines = split_lines(data)
    prefix = b"".join(lines[:3])
    ctx.ok(upload(ctx, prefix), 201)
    release = threading.Event()
    answers: list[int] = []
    auth = {"Authorization": f"Bearer {ctx.alice.token}"} if ctx.alice.token else {}

    def continue_slowly() -> None:  # the history grown by its next turns, held open after one more line
        with httpx.Client(base_url=ctx.alice.base_url, headers=auth, timeout=HELD_SECONDS * 2, verify=tls()) as raw:
            cut = len(prefix) + len(lines[3])
            answers.append(raw.post("/imports", content=_held_open(data, cut, release), headers={"Content-Type": MEDIA_TYPE}).status_code)

    worker = threading.Thread(target=continue_slowly, daemon=True)
    worker.start()
    try:
        deadline = time.monotonic() + HELD_SECONDS / 2
        while not answers and time.monotonic() < deadline:  # the imported prefix again: refused while the other holds it
            release.wait(0.2)
            seen = upload(ctx, prefix)
            if seen.status == 409 and seen.problem_type == f"{PROBLEM}import-in-progress":
                response = upload(ctx, _conflicting(lines))
                first_row(ctx, "an upload that conflicts with the imported bytes while another upload imports the history",
                          response, 409, "import-in-progress")
                return True
        return False  # the held upload ended first (refused while a probe held the history), or was never seen
    finally:
        release.set()
        worker.join(HELD_SECONDS * 2)


@check("ERR-PRECEDENCE-001", title="Legacy imports: another upload in progress before a conflict")
def import_in_progress_row(ctx: CheckContext) -> None:
    _rows_apply(ctx, "legacy-import")
    for _ in range(3):
        if _claimed_while_held(ctx):
            return
    raise NotVerified("no upload was seen in progress while one was held open (the server may read an upload whole first)")


@check("ERR-PRECEDENCE-001", "NEGOTIATE-HEADER-001",
       title="Requires-Capabilities naming a missing capability answers 412 before every later row, on every operation")
def capability_missing_row(ctx: CheckContext) -> None:
    lacking = f"x-unknown-{ctx.rng.randrange(16**6):06x}"
    unknown = ctx.new_id("missing")  # no such session, and no body: later rows apply too
    ids = {"turn_id": ctx.new_id("t"), "attachment_id": "no-such-attachment", "principal_id": "someone", "position": "1"}
    for operation_id, method, template, _ in probes(ctx, "NEGOTIATE-HEADER-001", ids):
        response = ctx.alice.request(method, template.format(sid=unknown), headers={"Requires-Capabilities": lacking})
        first_row(ctx, f"{operation_id} naming a missing capability, of an unknown session, without a body", response, 412,
                  "capability-missing")
        body = response.json() if response.status == 412 else {"missing_capabilities": [lacking]}
        missing = body.get("missing_capabilities") if isinstance(body, dict) else body
        ctx.expect(missing == [lacking], f"{operation_id}: missing_capabilities is {missing!r}, expected [{lacking!r}]",
                   "NEGOTIATE-HEADER-001")
