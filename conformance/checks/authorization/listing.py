"""Listings: the sessions a principal may read, and a session's live descendants."""

from __future__ import annotations

from typing import Any

from conformance.checks.authorization.common import delete_session, grant, issued_cursor, revoke, turn_with_attachment, walk_listing
from conformance.checks.refusals import expect_refused
from conformance.context import CheckContext
from conformance.registry import check


@check("LIST-SESSIONS-001", title="The session listing holds exactly the readable sessions, once each, in id order", needs=("sharing",))
def list_sessions(ctx: CheckContext) -> None:
    alice, carol, dave = ctx.principals("owner", "reader", "writer")
    made = [ctx.create_session(alice, session_id=ctx.new_id("l"))["session_id"] for _ in range(5)]
    turn_with_attachment(ctx, alice, made[0], False)
    fork = ctx.fork_ok(made[0])["session"]
    made.append(fork["session_id"])
    expected = {made[0]: "reader", made[2]: "writer", made[4]: "reader", fork["session_id"]: "writer"}
    for sid, role in expected.items():
        grant(ctx, alice, sid, carol, role)
    grant(ctx, alice, made[3], carol)
    revoke(ctx, alice, made[3], carol)
    grant(ctx, alice, made[1], carol)
    delete_session(ctx, alice, made[1])
    own = ctx.create_session(carol)["session_id"]
    items = walk_listing(ctx, carol, "/sessions", 2, "LIST-SESSIONS-001")
    ids = [item["session"]["session_id"] for item in items]
    ctx.expect(ids == sorted(ids) and len(ids) == len(set(ids)), "the listing is not in ascending id order, once each", "LIST-SESSIONS-001")
    got = {item["session"]["session_id"]: item["access"] for item in items if item["session"]["session_id"] in made}
    ctx.expect(got == expected, f"carol's listing gives {got}, expected {expected}", "LIST-SESSIONS-001")
    ctx.expect(dict((i["session"]["session_id"], i["access"]) for i in items).get(own) == "owner", "an own session", "LIST-SESSIONS-001")
    listed = {item["session"]["session_id"]: item["session"] for item in items}
    roots = [made[0], made[2], made[4], own]
    ctx.expect(all(summary(listed.get(sid)) is None for sid in roots),
               f"roots' lineage summaries {[summary(listed.get(sid)) for sid in roots]}, expected null", "LIST-SESSIONS-001")
    forked = {"parent_session_id": made[0], "root_session_id": made[0], "depth": 1, "inherited_turn_count": 1}
    got_fork = summary(listed.get(fork["session_id"]))
    ctx.expect(got_fork is not None and got_fork in (forked, summary(fork)), f"the listed fork's lineage summary {got_fork}, expected {forked}", "LIST-SESSIONS-001")
    ctx.expect_status(carol.get("/sessions", params={"limit": 0}), 422, "invalid-request", "LIST-SESSIONS-001")
    expect_refused(ctx, carol.get("/sessions", params={"limit": ctx.limits["max_page_size"] + 1}), "page-size-exceeded", "LIST-SESSIONS-001")
    cursor = issued_cursor(ctx, carol, "/sessions")
    ctx.expect_status(dave.get("/sessions", params={"cursor": cursor}), 400, "invalid-cursor", "LIST-SESSIONS-001")
    ctx.expect_status(carol.get("/sessions", params={"cursor": "bm90LWEtY3Vyc29y"}), 400, "invalid-cursor", "LIST-SESSIONS-001")


@check("LIST-DESCENDANTS-001", title="The branch family lists the readable, live descendants, once each, in id order", needs=("sharing",))
def list_descendants(ctx: CheckContext) -> None:
    alice, carol = ctx.principals("owner", "reader")
    root, _, _ = ctx.conversation(1)
    rid = root["session_id"]
    grant(ctx, alice, rid, carol)
    answered = {"first": ctx.fork_ok(rid)["session"]}
    first = answered["first"]["session_id"]
    second = ctx.fork_ok(rid)["session"]["session_id"]
    answered["grandchild"] = ctx.fork_ok(first)["session"]
    grandchild = answered["grandchild"]["session_id"]
    carols = ctx.fork_ok(rid, client=carol)["session"]["session_id"]
    gone = ctx.fork_ok(second)["session"]["session_id"]
    delete_session(ctx, alice, gone)
    path = f"/sessions/{rid}/descendants"
    items = walk_listing(ctx, alice, path, 1, "LIST-DESCENDANTS-001")
    ids = [item["session"]["session_id"] for item in items]
    expected = sorted([first, second, grandchild])
    ctx.expect(ids == expected, f"alice's descendants of the root: {ids}, expected {expected}", "LIST-DESCENDANTS-001")
    ctx.expect(all(item["access"] == "owner" for item in items), f"access {[i['access'] for i in items]}", "LIST-DESCENDANTS-001")
    got = {item["session"]["session_id"]: summary(item["session"]) for item in items}
    made = {
        "first": {"parent_session_id": rid, "root_session_id": rid, "depth": 1, "inherited_turn_count": 1},
        "grandchild": {"parent_session_id": first, "root_session_id": rid, "depth": 2, "inherited_turn_count": 1},
    }
    wrong = {
        name: got.get(session["session_id"]) for name, session in answered.items()
        if got.get(session["session_id"]) is None or got.get(session["session_id"]) not in (made[name], summary(session))
    }
    ctx.expect(not wrong, f"lineage summaries {wrong}, expected {made}", "LIST-DESCENDANTS-001")
    theirs = [i["session"]["session_id"] for i in walk_listing(ctx, carol, path, 2, "LIST-DESCENDANTS-001")]
    ctx.expect(theirs == [carols], f"carol's descendants of the root: {theirs}, expected only her own fork", "LIST-DESCENDANTS-001")
    grant(ctx, alice, grandchild, carol)
    theirs = [i["session"]["session_id"] for i in walk_listing(ctx, carol, path, 2, "LIST-DESCENDANTS-001")]
    ctx.expect(theirs == sorted([carols, grandchild]), f"after a grant on the grandchild: {theirs}", "LIST-DESCENDANTS-001")
    # A caller without a role is answered 404 by AUTH-HIDE-001 (the authorization matrix checks it), not by this rule.
    ctx.expect_status(alice.get(path, params={"limit": 0}), 422, "invalid-request", "LIST-DESCENDANTS-001")
    cursor = issued_cursor(ctx, alice, path)
    ctx.expect_status(alice.get(f"/sessions/{first}/descendants", params={"cursor": cursor}), 400, "invalid-cursor", "LIST-DESCENDANTS-001")
    listing_cursor = issued_cursor(ctx, alice, "/sessions")
    ctx.expect_status(alice.get(path, params={"cursor": listing_cursor}), 400, "invalid-cursor", "LIST-DESCENDANTS-001")


def summary(session: Any) -> dict[str, Any] | None:
    """The lineage summary of a session, by the members LIST-SESSIONS-001 names (a response may
    carry more: VERSION-OPEN-RESPONSE-001); None for a root, or for a session not listed. A listing
    must give a fork the summary the fork made - by FORK-CREATE-001, or, where the target answered
    the fork with another one, the one it answered: that difference is FORK-CREATE-001's, not the
    listing's."""
    lineage = session.get("lineage") if isinstance(session, dict) else None
    if not isinstance(lineage, dict):
        return None
    return {name: lineage.get(name) for name in ("parent_session_id", "root_session_id", "depth", "inherited_turn_count")}


# Ids that differ only in case, digits and punctuation: code-point order puts `-` < digits < upper
# case < `_` < lower case, which a case-folding or locale collation does not.
ADVERSARIAL_SUFFIXES = ("A", "a", "B", "b", "Z", "z", "0", "9", "_", "-", "_a", "-a", "aA", "Aa", "a_", "a-")


@check("LIST-SESSIONS-001", title="The listing keeps code-point order under ids differing in case and punctuation, "
       "and lists once each session that exists throughout while others come and go between pages", needs=("sharing",))
def listing_order_under_adversarial_ids(ctx: CheckContext) -> None:
    (erin,) = ctx.principals("outsider")  # another project: the listing holds few sessions besides these
    base = ctx.new_id("o") + "-"
    ids = [base + suffix for suffix in ADVERSARIAL_SUFFIXES] + [base + "z" * (128 - len(base))]
    for sid in ctx.rng.sample(ids, len(ids)):  # created in a random order
        ctx.create_session(erin, session_id=sid)
    listed: list[str] = []
    cursor, gone_before_listed, inserted = None, None, base + "a0"
    for page_number in range(10_000):
        response = erin.get("/sessions", params={"cursor": cursor, "limit": 2})
        ctx.expect_status(response, 200, None, "LIST-SESSIONS-001")
        page = response.json()
        listed.extend(item["session"]["session_id"] for item in page["sessions"])
        if page_number == 0:  # between the first and second page: one deleted on each side, one inserted
            mine = [sid for sid in listed if sid.startswith(base)]
            ahead = max(set(ids) - set(mine))
            for sid in ([mine[0]] if mine else []) + [ahead]:
                delete_session(ctx, erin, sid)
            gone_before_listed = ahead
            ctx.create_session(erin, session_id=inserted)
        if not page["has_more"]:
            break
        cursor = page["next_cursor"]
    ctx.expect(listed == sorted(listed) and len(listed) == len(set(listed)),
               f"the listing is not in ascending code-point order, once each: {[s[len(base):] if s.startswith(base) else s for s in listed][:40]}",
               "LIST-SESSIONS-001")
    throughout = set(ids) - {gone_before_listed}
    ours = [sid for sid in listed if sid.startswith(base) and sid != inserted]
    missing = sorted(throughout - set(ours))
    ctx.expect(not missing and gone_before_listed not in ours,
               f"sessions that existed throughout the walk, missing from it: {missing}; deleted before its page "
               f"was read, yet listed: {gone_before_listed in ours}", "LIST-SESSIONS-001")
