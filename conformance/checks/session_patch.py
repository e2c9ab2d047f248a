"""Chapter: partial update of session metadata (capability `session-patch`): JSON Merge Patch with
compare-and-swap on the session's ETag."""

from __future__ import annotations

from typing import Any

from conformance.checks.leases import held_lease
from conformance.checks.revert import etag_of
from conformance.client import ApiClient, Response
from conformance.context import CheckContext
from conformance.registry import check

PATCH = "session-patch"
MERGE_PATCH = "application/merge-patch+json"


def patch(ctx: CheckContext, sid: str, body: Any, if_match: str | None, client: ApiClient | None = None,
          media_type: str = MERGE_PATCH, headers: dict[str, str] | None = None) -> Response:
    sent = {"Content-Type": media_type, **(headers or {})}
    if if_match is not None:
        sent["If-Match"] = if_match
    import json

    return (client or ctx.alice).request("PATCH", f"/sessions/{sid}", content=json.dumps(body).encode(), headers=sent)


@check("SESS-PATCH-001", title="Merge patch of name and description: absent leaves, null clears, a string (even empty) sets",
       needs=(PATCH,))
def merge_patch_semantics(ctx: CheckContext) -> None:
    sid = ctx.create_session(name="first name", description="first description")["session_id"]
    steps: list[tuple[Any, dict[str, Any]]] = [
        ({"name": "second name"}, {"name": "second name", "description": "first description"}),
        ({"description": None}, {"name": "second name", "description": None}),
        ({"name": ""}, {"name": "", "description": None}),
        ({"description": ""}, {"name": "", "description": ""}),
        ({"name": None, "description": "third"}, {"name": None, "description": "third"}),
        ({"name": "x", "description": None}, {"name": "x", "description": None}),
    ]
    for body, expected in steps:
        tag = etag_of(ctx, sid)
        response = patch(ctx, sid, body, tag)
        ctx.expect_status(response, 200)
        got = {field: response.json()[field] for field in ("name", "description")}
        ctx.expect(got == expected, f"after PATCH {body} the answer holds {got}; expected {expected}")
        read = ctx.alice.get(f"/sessions/{sid}").json()
        stored = {field: read[field] for field in ("name", "description")}
        ctx.expect(stored == expected, f"after PATCH {body} GET /sessions/{sid} holds {stored}; expected {expected}")
        new_tag = response.header("ETag")
        ctx.expect(new_tag not in (None, tag) and new_tag == etag_of(ctx, sid),
                   f"PATCH {body} answered ETag {new_tag!r}; before it was {tag}, GET now gives {etag_of(ctx, sid)}")
    # A patch that changes nothing keeps the ETag.
    tag = etag_of(ctx, sid)
    for body in ({}, {"name": "x"}, {"description": None}):
        response = patch(ctx, sid, body, tag)
        ctx.expect_status(response, 200)
        ctx.expect(response.json()["name"] == "x" and response.json()["description"] is None, f"PATCH {body} answered {response.json()}")
        ctx.expect(response.header("ETag") == tag and etag_of(ctx, sid) == tag, f"PATCH {body} changed nothing but the ETag")
    # Refused patches change nothing.
    refused: list[tuple[Any, str, int, str]] = [
        ({"name": "y"}, "application/json", 415, "unsupported-media-type"),
        ({"other": 1}, MERGE_PATCH, 422, "invalid-request"),
        ({"name": 5}, MERGE_PATCH, 422, "invalid-request"),
        ({"session_id": "other"}, MERGE_PATCH, 422, "invalid-request"),
        (["name"], MERGE_PATCH, 422, "invalid-request"),
        (None, MERGE_PATCH, 422, "invalid-request"),
        ("name", MERGE_PATCH, 422, "invalid-request"),
    ]
    for body, media_type, status, kind in refused:
        ctx.expect_status(patch(ctx, sid, body, tag, media_type=media_type), status, kind)
    ctx.expect(etag_of(ctx, sid) == tag, "a refused patch changed the session")
    # Only the metadata changes: the transcript and a fork's inheritance stay.
    session, _, records = ctx.conversation(1)
    other = session["session_id"]
    patched = patch(ctx, other, {"name": "renamed"}, etag_of(ctx, other))
    ctx.expect_status(patched, 200)
    ctx.expect(ctx.walk(other) == records, "a patch changed the transcript")
    # The writer role, and a held writer lease.
    if ctx.has("sharing") and len(ctx.clients) >= 3:
        from conformance.checks.authorization.common import grant

        (reader,) = ctx.principals("reader")
        grant(ctx, ctx.alice, sid, reader, "reader")
        ctx.expect_status(patch(ctx, sid, {"name": "z"}, etag_of(ctx, sid, reader), reader), 403, "forbidden")
    if ctx.has("writer-lease"):
        held = held_lease(ctx, sid)["lease_id"]
        ctx.expect_status(patch(ctx, sid, {"name": "z"}, tag), 409, "writer-conflict")
        ctx.expect_status(patch(ctx, sid, {"name": "z"}, tag, headers={"Writer-Lease": held}), 200)
        ctx.alice.request("DELETE", f"/sessions/{sid}/lease", headers={"Writer-Lease": held})


@check("SESS-PATCH-CAS-001", title="A patch needs If-Match with the current ETag: 428 without, 412 when stale", needs=(PATCH,))
def patch_compares_the_etag(ctx: CheckContext) -> None:
    sid = ctx.create_session(name="a")["session_id"]
    tag = etag_of(ctx, sid)
    ctx.expect_status(patch(ctx, sid, {"name": "b"}, None), 428, "precondition-required")
    ok = patch(ctx, sid, {"name": "b"}, tag)
    ctx.expect_status(ok, 200)
    current = etag_of(ctx, sid)
    for stale in (tag, f"W/{current}", '"nothing-like-it"'):
        ctx.expect_status(patch(ctx, sid, {"name": "c"}, stale), 412, "precondition-failed")
    ctx.expect(ctx.alice.get(f"/sessions/{sid}").json()["name"] == "b" and etag_of(ctx, sid) == current,
               "a refused patch changed the session")
    ctx.expect_status(patch(ctx, sid, {"name": "c"}, "*"), 200)
    ctx.expect_status(patch(ctx, sid, {"name": "d"}, f'"x", {etag_of(ctx, sid)}'), 200)
    ctx.expect(ctx.alice.get(f"/sessions/{sid}").json()["name"] == "d", "the patches with a matching If-Match did not apply")
