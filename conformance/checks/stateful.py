"""Stateful property checks: random programs of writes and forks against an independent model.

A Hypothesis state machine creates sessions, runs turns, forks with every cut mode (including
cuts that must be refused) and reads transcripts; after every step each transcript must equal the
one `conformance.model.LineageModel` computes. Failures are shrunk to a short program.
"""

from __future__ import annotations

from typing import Any

import hypothesis
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, multiple, precondition, rule, run_state_machine_as_test

from conformance.context import CheckContext
from conformance.errors import CheckFailed
from conformance.model import LineageModel
from conformance.registry import check

REQUIREMENTS = (
    "XS-EFFECTIVE-001",
    "FORK-SNAPSHOT-001",
    "FORK-CUT-THROUGH-001",
    "FORK-CUT-BEFORE-001",
    "FORK-CUT-LATEST-001",
    "FORK-CUT-UNKNOWN-001",
    "FORK-INCOMPLETE-001",
)
KIND_STATUS = {"unknown-turn": 422, "turn-incomplete": 409, "depth-exceeded": 422}


def build_machine(ctx: CheckContext) -> type[RuleBasedStateMachine]:
    max_depth = ctx.limits["max_lineage_depth"]

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

        @rule(
            sid=sessions,
            role=st.sampled_from(["user", "assistant"]),
            records=st.integers(0, 3),
            close=st.booleans(),
        )
        def write(self, sid: str, role: str, records: int, close: bool) -> None:
            running = self.model.sessions[sid].running
            if running is None:
                turn = ctx.start_turn(sid, role)
                running = self.model.start_turn(sid, turn["turn_id"], role)
            if records:
                written = ctx.append(sid, running.turn_id, records)
                self.model.append(sid, running.turn_id, written)
            if close:
                ctx.finish(sid, running.turn_id, "completed")
                self.model.finish(sid, running.turn_id, "completed")
            for descendant in self._descendants(sid):  # a write must never reach a fork taken earlier
                self._compare(descendant, None)

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
            if running is not None:
                ctx.finish(sid, running.turn_id, status)
                self.model.finish(sid, running.turn_id, status)

        @rule(
            target=sessions,
            source=sessions,
            mode=st.sampled_from(["through", "before", "latest"]),
            pick=st.integers(0, 40),
            foreign=st.booleans(),
        )
        def fork(self, source: str, mode: str, pick: int, foreign: bool) -> Any:
            cut: dict[str, Any] = {"mode": mode}
            if mode != "latest":
                cut["turn_id"] = self._pick_turn(source, pick, foreign)
            expected = self.model.cut_prefix(source, cut)
            if self.model.sessions[source].depth + 1 > max_depth:  # checked before the cut (ERR-PRECEDENCE-001)
                expected = "depth-exceeded"
            response = ctx.fork(source, cut)
            if isinstance(expected, str):
                ctx.expect_status(response, KIND_STATUS[expected], expected)
                return multiple()
            ctx.expect_status(response, 201, None, "FORK-CREATE-001")
            body = response.json()
            ctx.expect(
                body["lineage"]["inherited_turn_count"] == len(expected),
                f"fork of {source} with cut {cut}: inherited {body['lineage']['inherited_turn_count']} turns, "
                f"the model says {len(expected)}",
            )
            child = body["session"]["session_id"]
            self.model.fork(source, child, expected)
            self._compare(child, None)
            return child

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
        @rule(pick=st.integers(0, 10**6), limit=st.sampled_from([None, 1, 3]))
        def read(self, pick: int, limit: int | None) -> None:
            # Draw an index and resolve it against the model (sessions in creation order): what is
            # drawn never depends on the target's ids, so a seed replays the same program.
            created = list(self.model.sessions)
            self._compare(created[pick % len(created)], limit)

        def teardown(self) -> None:
            for sid in self.model.sessions:
                self._compare(sid, None)

        def _compare(self, sid: str, limit: int | None) -> None:
            got = ctx.keys(ctx.walk(sid, limit=limit))
            expected = ctx.keys(self.model.transcript(sid))
            ctx.expect(got == expected, f"transcript of {sid}: {got}, the model says {expected}", "XS-EFFECTIVE-001")

    return LineageMachine


@check(*REQUIREMENTS, title="Random programs of writes and forks agree with an independent model")
def lineage_state_machine(ctx: CheckContext) -> None:
    machine = build_machine(ctx)
    hypothesis.seed(ctx.seed)(machine)
    try:
        run_state_machine_as_test(
            machine,
            settings=settings(
                max_examples=ctx.config.stateful_examples,
                stateful_step_count=14,
                deadline=None,
                database=None,
                phases=[Phase.explicit, Phase.generate, Phase.shrink],
                suppress_health_check=list(HealthCheck),
                report_multiple_bugs=False,
            ),
        )
    except CheckFailed as failure:
        steps = "\n".join(getattr(failure, "__notes__", []))
        failure.message = f"{failure.message}\nshrunk program:\n{steps}" if steps else failure.message
        raise
    except hypothesis.errors.FlakyFailure as flaky:
        inner = first_failure(flaky)
        if inner is None:
            raise
        raise CheckFailed(
            f"{inner.message}\n(when Hypothesis ran the program again the target answered differently, so "
            "it could not be shrunk)",
            inner.requirements,
            inner.exchange,
        ) from None


def first_failure(group: BaseException) -> CheckFailed | None:
    """The first CheckFailed inside a (nested) exception group, such as Hypothesis's FlakyFailure."""
    for inner in getattr(group, "exceptions", ()):
        if isinstance(inner, CheckFailed):
            return inner
        found = first_failure(inner)
        if found is not None:
            return found
    return None
