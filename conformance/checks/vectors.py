"""Chapter: vectors (the language-neutral lineage vectors of fixtures/lineage, run on the target).

One check per vector file. Each case maps its symbolic names to fresh ids, runs its steps with the
context helpers, then compares every expected transcript as (session id, record index) pairs, so
the same JSON that any other runner loads is the one this suite enforces.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import fixtures
import spec
from conformance.context import CheckContext
from conformance.errors import CheckFailed, Unsupported
from conformance.registry import check

VECTOR_DIR = Path(fixtures.__file__).resolve().parent / "lineage"

Case = dict[str, Any]
Step = dict[str, Any]


@lru_cache(maxsize=None)
def load_cases(name: str) -> tuple[Case, ...]:
    """The cases of `fixtures/lineage/<name>.json`, read once per process."""
    return tuple(json.loads((VECTOR_DIR / f"{name}.json").read_text(encoding="utf-8")))


def requirements_of(name: str) -> tuple[str, ...]:
    """The union of a file's requirement IDs (first-seen order): what its check verifies."""
    return tuple(dict.fromkeys(req for case in load_cases(name) for req in case["requirements"]))


def problem_status(kind: str) -> int:
    """The HTTP status spec/problem-types.yaml assigns to a problem kind."""
    return int(spec.load_yaml(spec.PROBLEM_TYPES_PATH)["types"][kind]["status"])


def deepest_fork(case: Case) -> int:
    """The lineage depth the case reaches, so a target with a lower limit can skip it."""
    depth: dict[str, int] = {}
    for step in case["steps"]:
        if step["op"] == "create":
            depth[step["session"]] = 0
        elif step["op"] == "fork" and "expect_error" not in step:
            depth[step["child"]] = depth.get(step["source"], 0) + 1
    return max(depth.values(), default=0)


@dataclass
class CaseRun:
    """One case in progress against the target: symbolic names mapped to real ids."""

    ctx: CheckContext
    case: Case
    sessions: dict[str, str] = field(default_factory=dict)
    turns: dict[str, str] = field(default_factory=dict)
    created: set[str] = field(default_factory=set)
    fork_lineage: dict[str, Any] = field(default_factory=dict)

    @property
    def requirements(self) -> list[str]:
        return list(self.case["requirements"])

    def session_id(self, name: str) -> str:
        """A fresh id per session name; a name never created stays an id no session has."""
        if name not in self.sessions:
            self.sessions[name] = self.ctx.new_id(f"vec-{name}")
        return self.sessions[name]

    def turn_id(self, name: str) -> str:
        """A fresh id per turn name; names no turn step introduced name no turn at all."""
        if name not in self.turns:
            self.turns[name] = self.ctx.new_id(f"vec-{name}")
        return self.turns[name]

    def name_of(self, session_id: str) -> str:
        return next((name for name, sid in self.sessions.items() if sid == session_id), session_id)

    # ------------------------------------------------------------ steps
    def run(self) -> None:
        for step in self.case["steps"]:
            getattr(self, f"op_{step['op']}")(step)
        self.verify_transcripts()
        self.verify_lineage()

    def op_create(self, step: Step) -> None:
        sid = self.session_id(step["session"])
        created = self.ctx.create_session(session_id=sid)
        self.ctx.expect(created["session_id"] == sid, f"session created as {created['session_id']}, not {sid}", "SESS-ID-001")
        self.created.add(step["session"])

    def op_turn(self, step: Step) -> None:
        sid, tid = self.session_id(step["session"]), self.turn_id(step["turn"])
        started = self.ctx.start_turn(sid, step["role"], turn_id=tid)
        self.ctx.expect(started["turn_id"] == tid, f"turn started as {started['turn_id']}, not {tid}", "SESS-TURN-001")
        self.append_records(sid, tid, step["records"])
        if step["status"] != "running":
            self.ctx.finish(sid, tid, step["status"])

    def op_append(self, step: Step) -> None:
        self.append_records(self.session_id(step["session"]), self.turn_id(step["turn"]), step["records"])

    def op_finish(self, step: Step) -> None:
        self.ctx.finish(self.session_id(step["session"]), self.turn_id(step["turn"]), step["status"])

    def append_records(self, session_id: str, turn_id: str, count: int) -> None:
        """Append in batches the target accepts: the batch size is not what a vector is about."""
        batch = self.ctx.limits["max_records_per_append"]
        while count > 0:
            self.ctx.append(session_id, turn_id, min(count, batch))
            count -= batch

    def op_fork(self, step: Step) -> None:
        cut: dict[str, Any] = {"mode": step["cut"]["mode"]}
        if "turn" in step["cut"]:
            cut["turn_id"] = self.turn_id(step["cut"]["turn"])
        child = step["child"]
        existed = child in self.created
        extra = {"header": step["header"]} if "header" in step else {}
        response = self.ctx.fork(self.session_id(step["source"]), cut, target=self.session_id(child), **extra)
        kind = step.get("expect_error")
        if kind is not None:
            self.ctx.expect_status(response, problem_status(kind), kind, *self.requirements)
            if not existed:
                self.expect_absent(child)
            return
        self.ctx.expect_status(response, 201, None, *self.requirements)
        body = response.json()
        self.ctx.expect(
            body["session"]["session_id"] == self.sessions[child],
            f"the child was created as {body['session']['session_id']}, not the target {self.sessions[child]}",
            "FORK-TARGET-001",
        )
        self.created.add(child)
        self.fork_lineage[child] = body["lineage"]

    def expect_absent(self, name: str) -> None:
        response = self.ctx.alice.get(f"/sessions/{self.sessions[name]}")
        self.ctx.expect(
            response.status == 404,
            f"the refused fork left session {name} behind (HTTP {response.status})",
            *dict.fromkeys([*self.requirements, "FORK-ATOMIC-001"]),
        )

    # ------------------------------------------------------------ expectations
    def verify_transcripts(self) -> None:
        for name, pairs in self.case["expect"].items():
            if name == "lineage":
                continue
            got = self.ctx.keys(self.ctx.walk(self.sessions[name]))
            want = [(self.sessions[owner], index) for owner, index in pairs]
            self.ctx.expect(
                got == want,
                f"transcript of {name}: {self.symbolic(got)}, expected {self.symbolic(want)}",
                *self.requirements,
            )

    def verify_lineage(self) -> None:
        for name, summary in self.case["expect"].get("lineage", {}).items():
            want = self.real_lineage(summary)
            got = self.ctx.alice.get(f"/sessions/{self.sessions[name]}").json()["lineage"]
            self.ctx.expect(self.ctx.known(got, want) == want, f"lineage of {name}: {got}, expected {want}", *self.requirements)
            if name in self.fork_lineage:
                answered = self.fork_lineage[name]
                self.ctx.expect(self.ctx.known(answered, want) == want, f"fork answer lineage of {name}: {answered}, expected {want}", *self.requirements)

    def real_lineage(self, summary: dict[str, Any] | None) -> dict[str, Any] | None:
        if summary is None:
            return None
        return {
            "root_session_id": self.sessions[summary["root"]],
            "parent_session_id": self.sessions[summary["parent"]],
            "inherited_turn_count": summary["inherited_turn_count"],
            "depth": summary["depth"],
        }

    def symbolic(self, pairs: list[tuple[str, int]]) -> str:
        """Pairs in the vector's own names, so a failure reads like the JSON it came from."""
        return "[" + ", ".join(f"{self.name_of(sid)}{index}" for sid, index in pairs) + "]"


def run_case(ctx: CheckContext, case: Case) -> None:
    """Run one case; a failure names the case so it can be found in the vector file."""
    try:
        CaseRun(ctx, case).run()
    except CheckFailed as failure:
        raise failure.retold(case["description"]) from None


MINIMUM_DEPTH = 5  # every server supports lineage this deep (CAP-LIMITS-001)


def run_file(ctx: CheckContext, name: str) -> None:
    """Every case of one file. A case deeper than the advertised depth limit fails CAP-LIMITS-001
    when it stays within the depth every server supports, and is skipped beyond it."""
    limit = ctx.limits["max_lineage_depth"]
    skipped = []
    for case in load_cases(name):
        depth = deepest_fork(case)
        if depth > limit and depth <= MINIMUM_DEPTH:
            raise CheckFailed(
                f"{case['description']}: the case forks to depth {depth}, every server supports depth "
                f"{MINIMUM_DEPTH}, and the target advertises max_lineage_depth {limit}",
                ["CAP-LIMITS-001"],
            )
        if depth > limit:
            skipped.append(case["description"])
            continue
        run_case(ctx, case)
    if skipped:
        raise Unsupported(f"max_lineage_depth {limit} is below what {len(skipped)} case(s) need: {skipped}")


@check(*requirements_of("cuts"), title="Vectors: through, before and latest cuts (fixtures/lineage/cuts.json)")
def cuts(ctx: CheckContext) -> None:
    run_file(ctx, "cuts")


@check(*requirements_of("chains"), title="Vectors: chains, cuts inside ancestors, siblings (fixtures/lineage/chains.json)")
def chains(ctx: CheckContext) -> None:
    run_file(ctx, "chains")


@check(*requirements_of("snapshots"), title="Vectors: snapshots and running turns (fixtures/lineage/snapshots.json)")
def snapshots(ctx: CheckContext) -> None:
    run_file(ctx, "snapshots")


@check(*requirements_of("errors"), title="Vectors: refused forks (fixtures/lineage/errors.json)")
def errors(ctx: CheckContext) -> None:
    run_file(ctx, "errors")
