"""Attachments: stored and read back, retried, named by the client, inherited, immutable once inherited."""

from __future__ import annotations

import secrets

from conformance.checks.authorization.common import fetch, stored, turn_with_attachment, upload
from conformance.client import ApiClient, Response
from conformance.context import CheckContext
from conformance.registry import check


@check("ATT-STORE-001", "ATT-READ-001", title="Attachments are stored and read back byte for byte, within the advertised size", needs=("attachments",))
def attachments_round_trip(ctx: CheckContext) -> None:
    sid = ctx.create_session()["session_id"]
    limit = ctx.limits.get("max_attachment_bytes")
    ctx.expect(isinstance(limit, int) and limit > 0, f"max_attachment_bytes is {limit!r}", "ATT-STORE-001")
    for content, media_type in ((bytes(range(256)) * 3, "application/octet-stream"), ("héllo\n".encode(), "text/plain; charset=utf-8"), (b"", "application/x-empty")):
        stored = upload(ctx, ctx.alice, sid, content, media_type)
        ctx.expect(
            (stored["session_id"], stored["media_type"], stored["size"]) == (sid, media_type, len(content)),
            f"stored {stored}", "ATT-STORE-001",
        )
        read = fetch(ctx.alice, sid, stored["attachment_id"])
        ctx.expect_status(read, 200, None, "ATT-READ-001")
        ctx.expect(read.content == content, f"read back {len(read.content)} bytes, stored {len(content)}", "ATT-READ-001")
        ctx.expect(read.header("content-type") == media_type, f"Content-Type {read.header('content-type')!r}, stored {media_type!r}", "ATT-READ-001")
    at_limit = ctx.new_id("a")
    response = ctx.alice.request("PUT", f"/sessions/{sid}/attachments/{at_limit}", content=b"x" * limit, headers={"Content-Type": "application/octet-stream"})
    ctx.expect_status(response, 201, None, "ATT-STORE-001")
    over = ctx.new_id("a")
    response = ctx.alice.request("PUT", f"/sessions/{sid}/attachments/{over}", content=b"x" * (limit + 1), headers={"Content-Type": "application/octet-stream"})
    ctx.expect_status(response, 413, "payload-too-large", "ATT-STORE-001")
    ctx.expect_status(fetch(ctx.alice, sid, over), 404, "not-found", "ATT-STORE-001")
    for headers in ({}, {"Content-Type": "not a media type"}, {"Content-Type": "/plain"}):
        nameless = ctx.new_id("a")
        response = ctx.alice.request("PUT", f"/sessions/{sid}/attachments/{nameless}", content=b"abc", headers=headers)
        ctx.expect_status(response, 415, "unsupported-media-type", "ATT-STORE-001")
        ctx.expect_status(fetch(ctx.alice, sid, nameless), 404, "not-found", "ATT-STORE-001")
    ctx.expect_status(fetch(ctx.alice, sid, ctx.new_id("missing")), 404, "not-found", "ATT-READ-001")
    child = ctx.fork_ok(sid)["session"]["session_id"]  # stored in a descendant, it is the descendant's
    in_child = upload(ctx, ctx.alice, child, b"the fork's own", "text/plain")
    ctx.expect(in_child["session_id"] == child, f"stored in the fork {child}, described as {in_child}", "ATT-STORE-001")


@check("ATT-IDEMPOTENT-001", title="An upload retried with its Idempotency-Key stores nothing twice", needs=("attachments",))
def attachment_upload_retries(ctx: CheckContext) -> None:
    sid = ctx.create_session()["session_id"]
    key, content = ctx.new_id("key"), secrets.token_bytes(64)

    def send(client: ApiClient, body: bytes, where: str = sid) -> Response:
        return client.post(f"/sessions/{where}/attachments", content=body, headers={"Content-Type": "image/png", "Idempotency-Key": f'"{key}"'})

    first, again = send(ctx.alice, content), send(ctx.alice, content)
    stored(ctx, first)
    ctx.expect_status(again, 201, None, "ATT-IDEMPOTENT-001")
    ctx.expect(
        again.json() == first.json() and again.header("Idempotency-Replayed") == "true" and first.header("Idempotency-Replayed") != "true",
        f"the retry answered {again.json()} (replayed {again.header('Idempotency-Replayed')!r}), first {first.json()}",
        "ATT-IDEMPOTENT-001",
    )
    ctx.expect_status(send(ctx.alice, content + b"!"), 422, "idempotency-key-reused", "ATT-IDEMPOTENT-001")
    theirs = ctx.create_session(ctx.bob)["session_id"]
    other = send(ctx.bob, content, theirs)
    ctx.expect_status(other, 201, None, "ATT-IDEMPOTENT-001")
    ctx.expect(other.header("Idempotency-Replayed") != "true" and other.json()["session_id"] == theirs, "another principal's key", "ATT-IDEMPOTENT-001")


@check("ATT-ID-001", title="A client-chosen attachment id names one attachment in the session's reach", needs=("attachments",))
def attachment_client_ids(ctx: CheckContext) -> None:
    source, _, _ = ctx.conversation(1)
    sid = source["session_id"]
    chosen, content = ctx.new_id("att"), b"first content"

    def put(where: str, body: bytes, media_type: str = "text/plain") -> Response:
        return ctx.alice.request("PUT", f"/sessions/{where}/attachments/{chosen}", content=body, headers={"Content-Type": media_type})

    first, again = put(sid, content), put(sid, content)
    stored(ctx, first)
    ctx.expect_status(again, 201, None, "ATT-ID-001")
    ctx.expect(again.json() == first.json() and again.header("Idempotency-Replayed") == "true", f"a repeated PUT answered {again.json()}", "ATT-ID-001")
    ctx.expect_status(put(sid, b"other content"), 409, "attachment-exists", "ATT-ID-001")
    ctx.expect_status(put(sid, content, "text/csv"), 409, "attachment-exists", "ATT-ID-001")
    ctx.expect(fetch(ctx.alice, sid, chosen).content == content, "a refused PUT changed the attachment", "ATT-ID-001")
    turn = ctx.start_turn(sid)
    ctx.append(sid, turn["turn_id"], 1)  # a record after the attachment: a fork inherits it
    ctx.finish(sid, turn["turn_id"])
    child = ctx.fork_ok(sid)["session"]["session_id"]
    ctx.expect_status(put(child, b"mine"), 409, "attachment-exists", "ATT-ID-001")
    ctx.expect(fetch(ctx.alice, child, chosen).content == content, "the inherited attachment changed", "ATT-ID-001")


@check("ATT-INHERIT-001", title="Forks read exactly the attachments stored before their last inherited record, same ids, no copies", needs=("attachments",))
def attachment_inheritance(ctx: CheckContext) -> None:
    sid = ctx.create_session()["session_id"]
    turn = ctx.start_turn(sid)
    before_any = upload(ctx, ctx.alice, sid, b"before any record")  # position 0
    ctx.append(sid, turn["turn_id"], 1)
    mid_turn = upload(ctx, ctx.alice, sid, b"between records")  # position 1
    ctx.append(sid, turn["turn_id"], 1)
    after_last = upload(ctx, ctx.alice, sid, b"after the last record")  # position 2: nothing follows
    ctx.finish(sid, turn["turn_id"])
    second = ctx.start_turn(sid, "assistant")
    in_second = upload(ctx, ctx.alice, sid, b"in the second turn")
    ctx.append(sid, second["turn_id"], 1)
    ctx.finish(sid, second["turn_id"])
    contents = {
        before_any["attachment_id"]: b"before any record", mid_turn["attachment_id"]: b"between records",
        after_last["attachment_id"]: b"after the last record", in_second["attachment_id"]: b"in the second turn",
    }

    def reach(child: str) -> set[str]:
        found = set()
        for attachment_id, content in contents.items():
            response = fetch(ctx.alice, child, attachment_id)
            ctx.expect_status(response, (200, 404), None, "ATT-INHERIT-001")
            if response.status == 200:  # compared with the bytes stored, not with a read at the source (ATT-READ-001's)
                ctx.expect(response.content == content, f"{attachment_id} read through {child}: other bytes than stored", "ATT-INHERIT-001")
                found.add(attachment_id)
            else:
                ctx.expect_status(response, 404, "not-found", "ATT-INHERIT-001")
        return found

    cases = [
        ({"mode": "before", "turn_id": turn["turn_id"]}, set()),
        ({"mode": "through", "turn_id": turn["turn_id"]}, {before_any["attachment_id"], mid_turn["attachment_id"]}),
        ({"mode": "latest"}, {before_any["attachment_id"], mid_turn["attachment_id"], after_last["attachment_id"], in_second["attachment_id"]}),
    ]
    children = []
    for cut, expected in cases:
        child = ctx.fork_ok(sid, cut)["session"]["session_id"]
        children.append(child)
        got = reach(child)
        ctx.expect(got == expected, f"a fork with cut {cut} reaches {sorted(got)}, expected {sorted(expected)}", "ATT-INHERIT-001")
    late = upload(ctx, ctx.alice, sid, b"stored after the forks")
    third = ctx.start_turn(sid)
    ctx.append(sid, third["turn_id"], 2)
    ctx.finish(sid, third["turn_id"])
    for child in children:
        ctx.expect_status(fetch(ctx.alice, child, late["attachment_id"]), 404, "not-found", "ATT-INHERIT-001")
    grandchild = ctx.fork_ok(children[1])["session"]["session_id"]
    got = reach(grandchild)
    ctx.expect(got == cases[1][1], f"a grandchild reaches {sorted(got)}, expected what its parent inherited: {sorted(cases[1][1])}", "ATT-INHERIT-001")
    # The description of an attachment stored in a descendant names that descendant: ATT-STORE-001's
    # rule (checked by `attachments_round_trip`), not this one's.


@check("ATT-IMMUTABLE-001", "DEL-STABLE-001", title="Inherited attachments cannot be deleted, through the child or at their source", needs=("attachments",))
def attachment_immutability(ctx: CheckContext) -> None:
    sid = ctx.create_session()["session_id"]
    inherited = turn_with_attachment(ctx, ctx.alice, sid, True)
    assert inherited is not None
    child = ctx.fork_ok(sid)["session"]["session_id"]
    later = upload(ctx, ctx.alice, sid, b"not inherited")["attachment_id"]
    own = upload(ctx, ctx.alice, child, b"the child's own")["attachment_id"]
    content = fetch(ctx.alice, child, inherited).content
    for where in (child, sid):  # through the child, and at its source
        response = ctx.alice.request("DELETE", f"/sessions/{where}/attachments/{inherited}")
        ctx.expect_status(response, 409, "attachment-inherited", "ATT-IMMUTABLE-001")
        after = fetch(ctx.alice, child, inherited)
        ctx.expect(after.status == 200 and after.content == content, "a refused delete changed the inherited attachment", "DEL-STABLE-001")
    ctx.expect_status(fetch(ctx.alice, sid, inherited), 200, None, "ATT-IMMUTABLE-001")
    for where, attachment_id in ((sid, later), (child, own)):
        ctx.expect_status(ctx.alice.request("DELETE", f"/sessions/{where}/attachments/{attachment_id}"), 204, None, "ATT-IMMUTABLE-001")
        ctx.expect_status(fetch(ctx.alice, where, attachment_id), 404, "not-found", "ATT-IMMUTABLE-001")
    ctx.expect_status(ctx.alice.request("DELETE", f"/sessions/{child}/attachments/{later}"), 404, "not-found", "ATT-IMMUTABLE-001")
