"""Building blocks of the authorization checks, and of other chapters that share sessions:
grants, attachments, listings and a chain of three owners.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from conformance.client import ApiClient, Response
from conformance.context import CheckContext
from conformance.errors import CheckFailed
from conformance.registry import setup_step


@setup_step("AUTH-GRANT-001")
def grant(ctx: CheckContext, owner: ApiClient, sid: str, grantee: ApiClient, role: str = "reader") -> dict[str, Any]:
    response = owner.request("PUT", f"/sessions/{sid}/grants/{ctx.principal_id(grantee)}", json={"role": role})
    ctx.expect_status(response, 200, None, "AUTH-GRANT-001")
    return response.json()


@setup_step("AUTH-REVOKE-001")
def revoke(ctx: CheckContext, owner: ApiClient, sid: str, grantee: ApiClient) -> None:
    response = owner.request("DELETE", f"/sessions/{sid}/grants/{ctx.principal_id(grantee)}")
    ctx.expect_status(response, 204, None, "AUTH-REVOKE-001")


@setup_step("DEL-SOFT-001")
def delete_session(ctx: CheckContext, owner: ApiClient, sid: str) -> None:
    ctx.expect_status(owner.request("DELETE", f"/sessions/{sid}"), 204, None, "DEL-SOFT-001")


@setup_step("DEL-PURGE-001")
def purge_session(ctx: CheckContext, owner: ApiClient, sid: str) -> None:
    ctx.expect_status(owner.post(f"/sessions/{sid}/purge"), 204, None, "DEL-PURGE-001")


@setup_step("ATT-STORE-001")
def stored(ctx: CheckContext, response: Response) -> dict[str, Any]:
    """The description of an attachment whose upload (POST, or PUT with a client id) must succeed."""
    ctx.expect_status(response, 201, None, "ATT-STORE-001")
    return response.json()  # type: ignore[no-any-return]


def upload(
    ctx: CheckContext, client: ApiClient, sid: str, content: bytes | None = None, media_type: str = "application/octet-stream"
) -> dict[str, Any]:
    body = content if content is not None else secrets.token_bytes(24)
    return stored(ctx, client.post(f"/sessions/{sid}/attachments", content=body, headers={"Content-Type": media_type}))


def fetch(client: ApiClient, sid: str, attachment_id: str) -> Response:
    return client.get(f"/sessions/{sid}/attachments/{attachment_id}")


def turn_with_attachment(ctx: CheckContext, client: ApiClient, sid: str, attach: bool) -> str | None:
    """A finished turn of one record, with an attachment stored before the record (so a fork
    through this turn inherits it); the attachment id, or None without `attach`."""
    turn = ctx.start_turn(sid, client=client)
    attachment = upload(ctx, client, sid)["attachment_id"] if attach else None
    ctx.append(sid, turn["turn_id"], 1, client=client)
    ctx.finish(sid, turn["turn_id"], client=client)
    return attachment


MAX_LISTING_PAGES = 10_000


def listing_pages(ctx: CheckContext, client: ApiClient, path: str, limit: int, requirement: str) -> Iterator[Any]:
    """The pages of a listing (`/sessions` or `/sessions/{id}/descendants`), from its first page on,
    following `next_cursor` while `has_more` is true. A page holds at most `limit` items and may hold
    fewer, none included: a server may end a page early (say after skipping sessions the caller cannot
    see), and neither LIST-SESSIONS-001 nor XS-PAGE-001 forbids that. A page with `has_more` must
    carry a `next_cursor` to go on from; a listing that has not ended after MAX_LISTING_PAGES pages
    fails, so the walk is bounded whatever the target answers."""
    cursor = None
    for _ in range(MAX_LISTING_PAGES):
        response = client.get(path, params={"cursor": cursor, "limit": limit})
        ctx.expect_status(response, 200, None, requirement)
        page = response.json()
        ctx.expect(len(page["sessions"]) <= limit, f"{path}: a page of limit {limit} held {len(page['sessions'])} items", requirement)
        yield page
        if not page["has_more"]:
            return
        cursor = page["next_cursor"]
        ctx.expect(cursor is not None, f"{path}: a page with has_more true has no next_cursor to go on from", requirement)
    raise CheckFailed(f"{path}: pagination did not end within {MAX_LISTING_PAGES} pages", [requirement])


def listing_rule(path: str) -> str:
    return "LIST-SESSIONS-001" if path == "/sessions" else "LIST-DESCENDANTS-001"


@setup_step("LIST-SESSIONS-001", "LIST-DESCENDANTS-001")
def listed_access(ctx: CheckContext, client: ApiClient, sid: str, path: str = "/sessions") -> str | None:
    """The `access` a listing gives the session, or None when the listing leaves it out."""
    found: str | None = None
    for page in listing_pages(ctx, client, path, ctx.limits["max_page_size"], listing_rule(path)):
        for item in page["sessions"]:
            if item["session"]["session_id"] == sid:
                found = item["access"]
    return found


@setup_step("LIST-SESSIONS-001", "LIST-DESCENDANTS-001")
def issued_cursor(ctx: CheckContext, client: ApiClient, path: str) -> str:
    """A cursor the listing at `path` issues to `client`: the `next_cursor` of its first page of
    limit 1, for a listing that holds more than one session (so more follow that page)."""
    response = client.get(path, params={"limit": 1})
    ctx.expect_status(response, 200, None, listing_rule(path))
    page = response.json()
    ctx.expect(
        page["has_more"] is True and page["next_cursor"] is not None,
        f"{path}: the first page of limit 1 of a listing of more than one session gives has_more "
        f"{page['has_more']!r} and next_cursor {page['next_cursor']!r}",
        listing_rule(path),
    )
    return page["next_cursor"]  # type: ignore[no-any-return]


def walk_listing(ctx: CheckContext, client: ApiClient, path: str, limit: int, requirement: str) -> list[dict[str, Any]]:
    """Every item of a listing, page by page (listing_pages)."""
    return [item for page in listing_pages(ctx, client, path, limit, requirement) for item in page["sessions"]]


@dataclass
class ThreeOwners:
    """A chain root -> middle -> leaf owned by alice, carol and dave. Each later owner holds reader
    grants on the ancestors (it needed them to fork); each session holds an own attachment stored
    after the fork below it, so no descendant inherits it."""

    ids: dict[str, str]
    owners: dict[str, ApiClient]
    root_attachment: str | None
    own_attachment: dict[str, str]


def three_owners(ctx: CheckContext, alice: ApiClient, carol: ApiClient, dave: ApiClient) -> ThreeOwners:
    attach = ctx.has("attachments")
    root = ctx.create_session(alice)["session_id"]
    root_attachment = turn_with_attachment(ctx, alice, root, attach)
    grant(ctx, alice, root, carol)
    middle = ctx.fork_ok(root, client=carol)["session"]["session_id"]
    turn_with_attachment(ctx, carol, middle, attach)
    grant(ctx, alice, root, dave)
    grant(ctx, carol, middle, dave)
    leaf = ctx.fork_ok(middle, client=dave)["session"]["session_id"]
    turn_with_attachment(ctx, dave, leaf, attach)
    ids = {"root": root, "middle": middle, "leaf": leaf}
    owners = {"root": alice, "middle": carol, "leaf": dave}
    own = {position: upload(ctx, owners[position], sid)["attachment_id"] for position, sid in ids.items()} if attach else {}
    return ThreeOwners(ids, owners, root_attachment, own)
