"""Audit of the deletion, listing and attachment checks (issue 17 item 4): each is exactly its rule.

Servers the spec permits (pages that end early, even empty; listed sessions with more members)
pass them; servers that break another rule than theirs pass them too, and are caught by the check
of the rule they break.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from starlette.types import ASGIApp

from conformance.checks.authorization import common
from conformance.config import load
from conformance.context import CheckContext
from conformance.embedded import serve_app
from conformance.errors import CheckFailed
from conformance.response import Response
from conformance.results import Exchange, Outcome, RunResult
from conformance.runner import run
from reference_impl import cursors
from reference_impl.services.listing import ListingService
from reference_impl.settings import Settings
from tests.mutants import app_with_service, reference_app, rewrite_responses
from tests.mutants import audit_authorization as audit
from tests.servers import PROJECTS, TOKENS

AUTH = "authorization."
LISTINGS = (AUTH + "list_sessions", AUTH + "list_descendants", AUTH + "listing_order_under_adversarial_ids")


# ---------------------------------------------------------------- walking a listing, page by page
class Pages:
    """A client whose listing answers the given pages in turn (the last one again and again)."""

    def __init__(self, *pages: dict[str, Any]) -> None:
        self.pages = list(pages)
        self.asked: list[dict[str, Any]] = []

    def get(self, path: str, params: dict[str, Any] | None = None) -> Response:
        self.asked.append(dict(params or {}))
        page = self.pages[min(len(self.asked), len(self.pages)) - 1]
        body = json.dumps(page).encode()
        return Response(Exchange("GET", "http://target" + path, {}, None, 200, {"content-type": "application/json"}, body))


def page(ids: list[str], has_more: bool, cursor: str | None) -> dict[str, Any]:
    items = [{"session": {"session_id": sid, "lineage": None}, "access": "owner"} for sid in ids]
    return {"sessions": items, "has_more": has_more, "next_cursor": cursor}


def context() -> CheckContext:
    ctx = CheckContext.__new__(CheckContext)
    ctx.capabilities = {"limits": {"max_page_size": 3}}
    return ctx


def test_an_empty_page_with_has_more_and_a_cursor_is_followed() -> None:
    client = Pages(page([], True, "c1"), page(["a", "b"], True, "c2"), page([], True, "c3"), page(["c"], False, None))
    items = common.walk_listing(context(), client, "/sessions", 2, "LIST-SESSIONS-001")  # type: ignore[arg-type]
    assert [item["session"]["session_id"] for item in items] == ["a", "b", "c"]
    assert [asked.get("cursor") for asked in client.asked] == [None, "c1", "c2", "c3"]


def test_has_more_without_a_cursor_fails_the_listing_rule() -> None:
    for first in (page([], True, None), page(["a"], True, None)):
        with pytest.raises(CheckFailed) as failed:
            common.walk_listing(context(), Pages(first), "/sessions/x/descendants", 2, "LIST-DESCENDANTS-001")  # type: ignore[arg-type]
        assert failed.value.requirements == ["LIST-DESCENDANTS-001"]
        assert "no next_cursor" in failed.value.message


def test_a_page_over_its_limit_fails() -> None:
    with pytest.raises(CheckFailed) as failed:
        common.walk_listing(context(), Pages(page(["a", "b", "c"], False, None)), "/sessions", 2, "LIST-SESSIONS-001")  # type: ignore[arg-type]
    assert failed.value.requirements == ["LIST-SESSIONS-001"]


def test_a_listing_that_never_ends_is_walked_a_bounded_number_of_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(common, "MAX_LISTING_PAGES", 7)
    client = Pages(page([], True, "again"))
    with pytest.raises(CheckFailed) as failed:
        common.walk_listing(context(), client, "/sessions", 2, "LIST-SESSIONS-001")  # type: ignore[arg-type]
    assert failed.value.requirements == ["LIST-SESSIONS-001"] and len(client.asked) == 7


def test_listed_access_cites_the_listing_it_walks() -> None:
    client = Pages(page([], True, "c1"), page(["a"], False, None))
    assert common.listed_access(context(), client, "a", "/sessions/r/descendants") == "owner"  # type: ignore[arg-type]
    assert client.asked[0]["limit"] == 3  # max_page_size
    with pytest.raises(CheckFailed) as failed:
        common.listed_access(context(), Pages(page([], True, None)), "a", "/sessions/r/descendants")  # type: ignore[arg-type]
    assert failed.value.requirements == ["LIST-DESCENDANTS-001"]
    assert failed.value.setup_rules == {"LIST-SESSIONS-001", "LIST-DESCENDANTS-001"}


# ---------------------------------------------------------------- servers
def run_checks(build: Callable[[Settings], ASGIApp], tmp_path: Any, select: tuple[str, ...]) -> RunResult:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'audit.db'}", tokens=TOKENS, projects=PROJECTS)
    with serve_app(build(settings)) as server:
        config = load(overrides={"target": server.url, "tokens": list(TOKENS), "select": list(select), "seed": 17, "strict": True},
                      environ={})
        return run(config)


def outcomes(result: RunResult) -> dict[str, str]:
    return {c.name: f"{c.outcome.value}: {(c.message or c.reason or '')[:300]}" for c in result.checks}


def early_ending_pages(settings: Settings) -> ASGIApp:
    """Permitted: every page that would hold sessions is preceded by an empty one with `has_more`
    and a cursor (as a server does that ends a page early, say after skipping sessions the caller
    cannot see); the cursor it gives goes on from the same place."""

    class Service(ListingService):
        def list_sessions(self, principal: str, cursor: str | None, limit: int | None) -> dict[str, Any]:
            return self._early(cursor, "sessions", str(principal), lambda c: ListingService.list_sessions(self, principal, c, limit))

        def descendants(self, principal: str, session_id: str, cursor: str | None, limit: int | None) -> dict[str, Any]:
            return self._early(cursor, "descendants", session_id, lambda c: ListingService.descendants(self, principal, session_id, c, limit))

        @staticmethod
        def _early(cursor: str | None, kind: str, listing: str, answer: Callable[[str | None], dict[str, Any]]) -> dict[str, Any]:
            real = answer(cursor)  # validates the cursor, the limit and the caller's role
            at = cursors.decode(cursor, kind, listing) if cursor is not None else cursors.Position(kind, listing, "", 0)
            if at.index == 1 or not real["sessions"]:
                return real
            held = cursors.encode(cursors.Position(kind, listing, at.session_id, 1))
            return {"sessions": [], "has_more": True, "next_cursor": held}

    return app_with_service(settings, Service)


def open_listing_items(settings: Settings) -> ASGIApp:
    """Permitted (VERSION-OPEN-RESPONSE-001): listed items and sessions carry members a later minor
    version may add, and so does a forked session's lineage summary."""

    def rewrite(scope: dict[str, Any], status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        path = scope["path"]
        if scope["method"] != "GET" or status != 200 or not (path == "/sessions" or path.endswith("/descendants")):
            return status, headers, body
        document = json.loads(body)
        for item in document["sessions"]:
            item["pinned"] = False
            item["session"]["labels"] = ["listed"]
            if item["session"]["lineage"] is not None:
                item["session"]["lineage"]["cut_mode"] = "latest"
        return status, headers, json.dumps(document).encode()

    return rewrite_responses(reference_app(settings), rewrite)


@pytest.mark.parametrize("build", [early_ending_pages, open_listing_items], ids=lambda build: build.__name__)
def test_permitted_listings_pass(build: Callable[[Settings], ASGIApp], tmp_path: Any) -> None:
    select = (*LISTINGS, AUTH + "soft_delete", AUTH + "authorization_matrix", AUTH + "revocation_cascades")
    result = run_checks(build, tmp_path, select)
    assert len(result.checks) == len(select)
    assert all(c.outcome is Outcome.PASS for c in result.checks), outcomes(result)


# Each breaks another rule than the audited checks': they pass it, the check of that rule fails it.
OTHER_RULES = [
    (audit.owner_operations_hidden_from_grantees, "AUTH-ROLES-001", (AUTH + "soft_delete",)),
    (audit.descendants_forbidden_to_strangers, "AUTH-HIDE-001", (AUTH + "list_descendants",)),
    (audit.revoke_on_deleted_refused, "AUTH-REVOKE-001", (AUTH + "soft_delete",)),
    (audit.fork_attachment_described_at_root, "ATT-STORE-001", (AUTH + "attachment_inheritance",)),
]


@pytest.mark.parametrize("build, rule, audited", OTHER_RULES, ids=[build.__name__ for build, _, _ in OTHER_RULES])
def test_another_rule_broken_is_not_blamed_on_the_audited_check(
    build: Callable[[Settings], ASGIApp], rule: str, audited: tuple[str, ...], tmp_path: Any
) -> None:
    from tests.mutants import MUTANTS

    catching = MUTANTS[build.__name__].select
    result = run_checks(build, tmp_path, (*audited, *catching))
    by_name = {c.name: c for c in result.checks}
    assert all(by_name[name].outcome is Outcome.PASS for name in audited), outcomes(result)
    failed = {v.id for v in result.requirements if v.outcome is Outcome.FAIL}
    assert rule in failed, outcomes(result)


def test_a_hidden_revocation_on_a_deleted_session_fails_soft_delete(tmp_path: Any) -> None:
    result = run_checks(audit.revoke_on_deleted_hidden, tmp_path, (AUTH + "soft_delete",))
    (check,) = result.checks
    assert check.outcome is Outcome.FAIL and check.failed_requirements == ["DEL-SOFT-001"], outcomes(result)
    assert "revocation" in check.message
