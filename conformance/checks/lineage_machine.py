"""The lineage state machine: random programs of writes and forks against an independent model.

A Hypothesis state machine creates sessions, runs turns, forks with every cut mode (including
cuts that must be refused) and reads transcripts; after every step each transcript must equal the
one `conformance.model.LineageModel` computes. On a target that advertises `sharing`, two
principals also grant each other access, revoke it, delete sessions and fork each other's
sessions, and every read by either principal must answer what the model says (200 and the
transcript, 403 for an ancestor it may not read, 404). On a target that advertises `revert`, the
program also reverts sessions (with the current ETag, a stale one, or to a turn it must refuse) and
checks that descendants never change; with `idempotent-turns`, some turn starts and appends are
sent twice with one key and must take effect once. Failures are shrunk to a short program.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, multiple, precondition, rule

from conformance.client import ApiClient, Response
from conformance.context import CheckContext
from conformance.errors import CheckFailed
from conformance.model import LineageModel
from conformance.registry import setup_step
from conformance.response import describe


KIND_STATUS = {
    "precondition-failed": 412,
    "unknown-turn": 422,
    "turn-in-progress": 409,
    "turn-incomplete": 409,
    "depth-exceeded": 422,
    "not-found": 404,
    "ancestor-not-readable": 403,
    "session-deleted": 409,
}
# Which rule a refused read of a transcript follows.
REFUSAL_RULE = {
    "not-found": "AUTH-HIDE-001",
    "ancestor-not-readable": "AUTH-LINEAGE-READ-001",
}
CUT_RULE = {"through": "FORK-CUT-THROUGH-001", "before": "FORK-CUT-BEFORE-001", "latest": "FORK-CUT-LATEST-001"}
Refusal = tuple[str, str]  # (problem kind, the rule whose text gives that answer)


def refused(ctx: CheckContext, response: Response, applicable: list[Refusal], what: str) -> None:
    """A request that meets the conditions of the refusals in `applicable` (in the order of
    ERR-PRECEDENCE-001's table) gets the first one. Another of them fails the precedence, not the rule
    that answer follows; an answer that is none of them fails every rule in `applicable`."""
    first = applicable[0][0]
    if response.status == KIND_STATUS[first] and response.problem_type == f"urn:session-lineage:problem:{first}":
        return
    given = [kind for kind, _ in applicable[1:]
             if response.status == KIND_STATUS[kind] and response.problem_type == f"urn:session-lineage:problem:{kind}"]
    if given:
        raise CheckFailed(f"{what} meets the conditions of {', '.join(k for k, _ in applicable)}: {describe(response.exchange)}; "
                          f"the first that applies is {first}", ["ERR-PRECEDENCE-001"], response.exchange)
    ctx.expect_status(response, KIND_STATUS[first], first, *dict.fromkeys(rule for _, rule in applicable))


@setup_step("LIN-SUMMARY-001")
def read_session(ctx: CheckContext, client: ApiClient, sid: str) -> Response:
    """`GET /sessions/{id}` of a session the caller owns and has not deleted: 200 (LIN-SUMMARY-001)."""
    read = client.get(f"/sessions/{sid}")
    ctx.expect_status(read, 200, None, "LIN-SUMMARY-001")
    return read


def build_machine(ctx: CheckContext) -> type[RuleBasedStateMachine]:
    max_depth = ctx.limits["max_lineage_depth"]
    sharing = ctx.has("sharing")
    reverts = ctx.has("revert")
    keyed = ctx.has("idempotent-turns")
    clients = {"alice": ctx.alice, "bob": ctx.bob}
    principals = ("alice", "bob") if sharing else ("alice",)

    class LineageMachine(RuleBasedStateMachine):
        sessions = Bundle("sessions")

        def __init__(self) -> None:
            super().__init__()
            self.model = LineageModel()

        @initialize(target=sessions, turns=st.integers(1, 3))
        def root(self, turns: int) -> str:
            sid = ctx.create_session()["session_id"]
            self.model.create(sid)
            for n in range(turns):
                self.write(sid, "user" if n % 2 == 0 else "assistant", 1 + n % 2, True)
            return sid

        def _owner(self, sid: str) -> Any:
            return clients[self.model.sessions[sid].owner]

        @rule(
            sid=sessions,
            role=st.sampled_from(["user", "assistant"]),
            records=st.integers(0, 3),
            close=st.booleans(),
        )
        def write(self, sid: str, role: str, records: int, close: bool) -> None:
            owner = self._owner(sid)
            if self.model.sessions[sid].deleted:
                response = owner.post(f"/sessions/{sid}/turns", json={"role": role})
                ctx.expect_status(response, 404, "not-found", "DEL-SOFT-001")
                return
            running = self.model.sessions[sid].running
            if running is None:
                if keyed and records % 2:  # an idempotent start, retried: one turn (TURN-IDEM-001)
                    turn = self._start_retried(sid, role, owner)
                else:
                    turn = ctx.start_turn(sid, role, client=owner)
                running = self.model.start_turn(sid, turn["turn_id"], role)
            if records and keyed and close:  # an idempotent append, retried: appended once
                written = self._append_retried(sid, running.turn_id, records, owner)
                self.model.append(sid, running.turn_id, written)
            elif records:
                written = ctx.append(sid, running.turn_id, records, client=owner)
                self.model.append(sid, running.turn_id, written)
            if close:
                ctx.finish(sid, running.turn_id, "completed", client=owner)
                self.model.finish(sid, running.turn_id, "completed")
            for descendant in self._descendants(sid):  # a write must never reach a fork taken earlier
                self._compare(descendant, None, self.model.sessions[descendant].owner)

        def _start_retried(self, sid: str, role: str, owner: Any) -> dict[str, Any]:
            key = ctx.new_id("key")
            answers = [
                owner.post(f"/sessions/{sid}/turns", json={"role": role}, headers={"Idempotency-Key": f'"{key}"'})
                for _ in range(2)
            ]
            for answer in answers:
                ctx.expect_status(answer, 201, None, "TURN-IDEM-001")
            ctx.expect(answers[1].json() == answers[0].json() and answers[1].header("Idempotency-Replayed") == "true",
                       f"a start retried with its key answered {answers[1].json()}, first {answers[0].json()}",
                       "TURN-IDEM-001")
            return answers[0].json()

        def _append_retried(self, sid: str, turn_id: str, count: int, owner: Any) -> list[dict[str, Any]]:
            key = ctx.new_id("key")
            body = {"records": [{"type": "message", "content": {"n": n, "nonce": ctx.rng.randrange(10**9)}}
                                for n in range(min(count, ctx.limits["max_records_per_append"]))]}
            answers = [
                owner.post(f"/sessions/{sid}/turns/{turn_id}/records", json=body, headers={"Idempotency-Key": f'"{key}"'})
                for _ in range(2)
            ]
            for answer in answers:
                ctx.expect_status(answer, 201, None, "TURN-IDEM-001")
            ctx.expect(answers[1].json() == answers[0].json(), "an append retried with its key answered differently",
                       "TURN-IDEM-001")
            return list(answers[0].json()["records"])

        def _descendants(self, sid: str) -> list[str]:
            found, frontier = [], [sid]
            while frontier:
                parent = frontier.pop()
                children = [s.session_id for s in self.model.sessions.values() if s.parent == parent]
                found += children
                frontier += children
            return found

        @rule(sid=sessions, status=st.sampled_from(["completed", "completed", "failed"]))
        def finish(self, sid: str, status: str) -> None:
            running = self.model.sessions[sid].running
            if running is not None and not self.model.sessions[sid].deleted:
                ctx.finish(sid, running.turn_id, status, client=self._owner(sid))
                self.model.finish(sid, running.turn_id, status)

        @rule(
            target=sessions,
            source=sessions,
            mode=st.sampled_from(["through", "before", "latest"]),
            pick=st.integers(0, 40),
            foreign=st.booleans(),
            who=st.sampled_from(principals),
        )
        def fork(self, source: str, mode: str, pick: int, foreign: bool, who: str) -> Any:
            cut: dict[str, Any] = {"mode": mode}
            if mode != "latest":
                cut["turn_id"] = self._pick_turn(source, pick, foreign)
            expected = self.model.cut_prefix(source, cut)
            applicable = self._fork_refusals(source, who, expected)
            response = ctx.fork(source, cut, client=clients[who])
            if applicable:
                refused(ctx, response, applicable, f"a fork of {source} by {who} with cut {cut}")
                return multiple()
            body = ctx.forked(response)
            ctx.expect(
                body["lineage"]["inherited_turn_count"] == len(expected),
                f"fork of {source} with cut {cut}: inherited {body['lineage']['inherited_turn_count']} turns, "
                f"the model says {len(expected)}",
                "FORK-CREATE-001", CUT_RULE[mode],
            )
            child = body["session"]["session_id"]
            self.model.fork(source, child, expected, owner=who)
            self._compare(child, None, who)
            return child

        def _fork_refusals(self, source: str, who: str, cut: list[Any] | str) -> list[Refusal]:
            """Every refusal whose condition a fork meets, in ERR-PRECEDENCE-001's order: no role on
            the source or a deleted one (404), the owner's deleted source (409), an ancestor it may
            not read (403), the depth, then the cut."""
            session, found = self.model.sessions[source], []
            if sharing:
                if not self.model.has_role(who, session) or (session.deleted and session.owner != who):
                    found.append(("not-found", "DEL-FORK-001" if session.deleted else "AUTH-HIDE-001"))
                elif session.deleted:
                    found.append(("session-deleted", "DEL-FORK-001"))
                if not all(self.model.has_role(who, a) for a in self.model.ancestors(source)):
                    found.append(("ancestor-not-readable", "AUTH-FORK-001"))
            if session.depth + 1 > max_depth:
                found.append(("depth-exceeded", "FORK-DEPTH-001"))
            if isinstance(cut, str):
                found.append((cut, "FORK-CUT-UNKNOWN-001" if cut == "unknown-turn" else "FORK-INCOMPLETE-001"))
            return found

        if reverts:

            @rule(target=sessions, sid=sessions, pick=st.integers(0, 40), choice=st.integers(0, 7))
            def revert(self, sid: str, pick: int, choice: int) -> Any:
                """Revert to just before one of the session's own turns with its current ETag, or
                (choice 0) with a stale one, or (choice 1) to a turn it must refuse. Half the time the
                session is forked first, and after a revert a turn is written and the session forked
                again: descendants never change, reverted records never come back."""
                session = self.model.sessions[sid]
                who = session.owner
                owner = clients[who]
                if session.deleted:
                    ctx.expect_status(owner.get(f"/sessions/{sid}"), 404, "not-found", "DEL-SOFT-001")
                    return multiple()
                if session.running is not None and choice >= 4:
                    self.finish(sid, "completed")
                if session.running is None and not any(turn.status != "running" for turn in session.own):
                    self.write(sid, "assistant", 1 + pick % 2, True)  # something of its own to revert
                if pick % 2 and session.running is None and self.model.sessions[sid].depth < max_depth:
                    self.fork(sid, "latest", 0, False, who)  # a fork taken before the revert
                own = [turn.turn_id for turn in session.own if turn.status != "running"]
                target = self._pick_turn(sid, pick, True) if choice == 1 or not own else own[pick % len(own)]
                tag = read_session(ctx, owner, sid).header("ETag")
                ctx.expect(tag is not None and len(tag) >= 2 and tag[0] == tag[-1] == '"', f"GET /sessions/{sid} answered ETag {tag!r}, not a strong entity tag", "REVERT-ETAG-001")
                sent = '"stale-' + str(tag).strip('"') + '"' if choice == 0 else str(tag)
                response = owner.post(f"/sessions/{sid}/revert", json={"turn_id": target}, headers={"If-Match": sent})
                if choice != 0 and response.status == 412:  # the tag just read: a tag that changes by itself, or a bad compare
                    again = read_session(ctx, owner, sid).header("ETag")
                    raise CheckFailed(f"{describe(response.exchange)}: refused If-Match {tag}, the ETag GET /sessions/{sid} answered "
                                      f"just before (and {again} after)", ["REVERT-CAS-001"] if again == tag else
                                      ["REVERT-ETAG-001", "REVERT-CAS-001"], response.exchange)
                applicable = [("precondition-failed", "REVERT-CAS-001")] if choice == 0 else []
                applicable += [("turn-in-progress", "REVERT-001")] if session.running is not None else []
                applicable += [("unknown-turn", "REVERT-001")] if target not in [t.turn_id for t in session.own] else []
                child = None
                if applicable:
                    refused(ctx, response, applicable, f"a revert of {sid} to {target}")
                else:
                    ctx.expect_status(response, 200, None, "REVERT-001")
                    self.model.revert(sid, target)
                    if pick % 3 == 0 and session.depth < max_depth:
                        self.write(sid, "user", 1, True)
                        child = self.fork(sid, "latest", 0, False, who)
                self._compare(sid, None, who, also=("REVERT-EFFECTIVE-001",))
                for descendant in self._descendants(sid):
                    self._compare(descendant, None, self.model.sessions[descendant].owner, also=("REVERT-FORKS-001",))
                return child if isinstance(child, str) else multiple()

        def _pick_turn(self, source: str, pick: int, foreign: bool) -> str:
            pool = [turn.turn_id for turn in self.model.sessions[source].effective_turns]
            if foreign or not pool:
                others = [
                    turn.turn_id
                    for session in self.model.sessions.values()
                    for turn in session.effective_turns
                    if turn.turn_id not in pool
                ]
                pool = others or [ctx.new_id("no-such-turn")]
            return pool[pick % len(pool)]

        @precondition(lambda self: bool(self.model.sessions))
        @rule(pick=st.integers(0, 10**6), limit=st.sampled_from([None, 1, 3]), who=st.sampled_from(principals))
        def read(self, pick: int, limit: int | None, who: str) -> None:
            # Draw an index and resolve it against the model (sessions in creation order): what is
            # drawn never depends on the target's ids, so a seed replays the same program.
            created = list(self.model.sessions)
            self._compare(created[pick % len(created)], limit, who)

        if sharing:

            @rule(sid=sessions, branch=st.booleans())
            def grant(self, sid: str, branch: bool) -> None:
                """The owner grants the other principal `reader` on the session, or on it and every
                ancestor it also owns (a shared branch); a deleted session is not found."""
                session = self.model.sessions[sid]
                other = "bob" if session.owner == "alice" else "alice"
                targets = [session]
                if branch:
                    targets += [a for a in self.model.ancestors(sid) if a.owner == session.owner and not a.deleted]
                for target in targets:
                    path = f"/sessions/{target.session_id}/grants/{ctx.principal_id(clients[other])}"
                    response = clients[target.owner].request("PUT", path, json={"role": "reader"})
                    if target.deleted:
                        ctx.expect_status(response, 404, "not-found", "DEL-SOFT-001")
                        return
                    ctx.expect_status(response, 200, None, "AUTH-GRANT-001")
                    target.readers.add(other)

            @rule(target=sessions, sid=sessions)
            def share_and_fork(self, sid: str) -> Any:
                """The owner shares the session's branch with the other principal, which forks it:
                a fork whose ancestors belong to someone else, for revocations and deletions to cut."""
                self.grant(sid, True)
                session = self.model.sessions[sid]
                other = "bob" if session.owner == "alice" else "alice"
                if session.deleted or not all(self.model.has_role(other, a) for a in self.model.ancestors(sid)):
                    return multiple()
                return self.fork(sid, "latest", 0, False, other)

            def _granted_ancestor(self, sid: str) -> Any:
                owner = self.model.sessions[sid].owner
                return next((a for a in self.model.ancestors(sid) if a.owner != owner and owner in a.readers), None)

            @precondition(lambda self: any(self._granted_ancestor(sid) for sid in self.model.sessions))
            @rule(pick=st.integers(0, 10**6))
            def revoke_an_ancestor(self, pick: int) -> None:
                """An ancestor's owner revokes the grant a fork's owner forked it with; the fork's
                transcript must now be refused to its own owner."""
                candidates = [s for s in self.model.sessions if self._granted_ancestor(s)]  # creation order
                sid = candidates[pick % len(candidates)]
                self.revoke(self._granted_ancestor(sid).session_id)
                self._compare(sid, None, self.model.sessions[sid].owner, "AUTH-REVOKE-CASCADE-001")

            @precondition(lambda self: any(self._live_parent(sid) for sid in self.model.sessions))
            @rule(pick=st.integers(0, 10**6))
            def delete_a_parent(self, pick: int) -> None:
                """A parent is deleted; its child must read exactly as before."""
                candidates = [s for s in self.model.sessions if self._live_parent(s)]  # creation order
                sid = candidates[pick % len(candidates)]
                self.delete(self._live_parent(sid), 0)
                self._compare(sid, None, self.model.sessions[sid].owner)

            def _live_parent(self, sid: str) -> str | None:
                parent = self.model.sessions[sid].parent
                return parent if parent is not None and not self.model.sessions[parent].deleted else None

            @rule(sid=sessions)
            def revoke(self, sid: str) -> None:
                session = self.model.sessions[sid]
                other = "bob" if session.owner == "alice" else "alice"
                path = f"/sessions/{sid}/grants/{ctx.principal_id(clients[other])}"
                ctx.expect_status(clients[session.owner].request("DELETE", path), 204, None, "AUTH-REVOKE-001")
                session.readers.discard(other)

            @rule(sid=sessions, now=st.integers(0, 3))
            def delete(self, sid: str, now: int) -> None:
                """Delete, one time in four: a deleted session ends most of what a program can do."""
                if now:
                    return
                session = self.model.sessions[sid]
                response = clients[session.owner].request("DELETE", f"/sessions/{sid}")
                ctx.expect_status(response, 204, None, "DEL-SOFT-001")
                session.deleted = True

        def teardown(self) -> None:
            for sid in self.model.sessions:
                for who in principals:
                    self._compare(sid, None, who)

        def _compare(self, sid: str, limit: int | None, who: str = "alice", refusal_rule: str | None = None,
                     also: tuple[str, ...] = ()) -> None:
            """A transcript read as the model says: refused (by `refusal_rule`, else the rule of the
            refusal), or the model's records (XS-EFFECTIVE-001 and the rules in `also`)."""
            status = self.model.read_status(sid, who)
            if status != 200:
                kind = "not-found" if status == 404 else "ancestor-not-readable"
                rule = refusal_rule or ("DEL-SOFT-001" if self.model.sessions[sid].deleted else REFUSAL_RULE[kind])
                response = clients[who].get(f"/sessions/{sid}/transcript", params={"limit": limit})
                ctx.expect_status(response, status, kind, rule)
                return
            rules = ["XS-EFFECTIVE-001", *also]
            if any(ancestor.deleted for ancestor in self.model.ancestors(sid)):
                rules.append("DEL-DESCENDANTS-001")
            if who != self.model.sessions[sid].owner:
                rules.append("AUTH-LINEAGE-READ-001")
            try:
                got = ctx.keys(ctx.walk(sid, limit=limit, client=clients[who]))
            except CheckFailed as failure:
                raise CheckFailed(f"{who} reading {sid}: {failure.message}", rules, failure.exchange) from None
            expected = ctx.keys(self.model.transcript(sid))
            ctx.expect(got == expected, f"transcript of {sid} read by {who}: {got}, the model says {expected}", *rules)

    return LineageMachine
