"""Chapter: state matrix (the language-neutral tables of fixtures/states, run on the target).

Each table is one state machine of the spec: named states, each reached through the API by a list
of requests; named operations; and rows `(state, operation) -> expected status, problem type and
members`, each citing the requirement that says so. A row is only in a table where the spec's text
decides it (fixtures/states/README.md). Every row gets a fresh copy of its state, so rows never see
one another. States behind an expiry wait for it once: every row reaches its state up to the wait,
the suite waits for the latest edge, then every row goes on (conformance/timing.py).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import fixtures
import spec
from conformance import timing
from conformance.checks.leases import hold_ttl
from conformance.client import ApiClient, Response
from conformance.context import CheckContext
from conformance.errors import CheckFailed, NotVerified
from conformance.registry import check, setup_step
from conformance.response import describe

STATES_DIR = Path(fixtures.__file__).resolve().parent / "states"
PROBLEM = "urn:session-lineage:problem:"
PLACEHOLDER = re.compile(r"\{([a-z_]+)(?::([A-Za-z_]+))?\}")
SHORTEST_LEASE = 1  # seconds: the smallest ttl LEASE-ACQUIRE-001 lets every server grant
# The core rules a state's steps rely on (creating the session, starting, appending to and finishing a
# turn, forking it) that a table needing a capability does not declare: a step that fails cites its own
# rule through the set-up step `stepped`, never a row's rule (registry.py (c)).
STEP_RULES = ("SESS-CREATE-001", "SESS-TURN-001", "SESS-RECORD-APPEND-001", "SESS-TURN-FINISH-001", "FORK-CREATE-001")

Table = dict[str, Any]
Step = dict[str, Any]


@lru_cache(maxsize=None)
def load_table(name: str) -> Table:
    """`fixtures/states/<name>.json`, read once per process."""
    return json.loads((STATES_DIR / f"{name}.json").read_text(encoding="utf-8"))


@lru_cache(maxsize=None)
def requirements_of(name: str) -> tuple[str, ...]:
    """What a table's check verifies (first-seen order): its rows' rules, then the rules its steps
    rely on that belong to the capabilities the table needs. A core rule a step relies on is not
    declared by a table that needs a capability: a server without it would be judged untestable
    on that core rule."""
    table = load_table(name)
    capability = {req["id"]: req.get("capability") for req in spec.requirements()}
    steps = [step for state in table["states"].values() for step in state.get("steps", [])]
    relied_on = [r for step in steps for r in step.get("requirements", []) if not table["needs"] or capability.get(r) in table["needs"]]
    return tuple(dict.fromkeys([*(r for row in table["rows"] for r in row["requirements"]), *relied_on]))


def step_rules(name: str) -> list[str]:
    """The rules of a table's steps that its check can cite neither as declared nor through
    `stepped`: a defect of the table (none may exist; run_table refuses such a table)."""
    table, declared = load_table(name), requirements_of(name)
    steps = [step for state in table["states"].values() for step in state.get("steps", [])]
    return sorted({r for step in steps for r in step.get("requirements", []) if r not in declared and r not in STEP_RULES})


@setup_step(*STEP_RULES)
def stepped(ctx: CheckContext, response: Response, step: Step, rules: list[str]) -> dict[str, Any]:
    """A step that builds a row's state: its status, then the values it saves; anything else fails
    the rules the step relies on (`rules`), not the row's."""
    ctx.expect_status(response, step["expect"], None, *rules)
    saved: dict[str, Any] = {}
    for name, path in step.get("save", {}).items():
        found: Any = response.json()
        for key in path:
            if not isinstance(found, (dict, list)) or (isinstance(found, dict) and key not in found) \
                    or (isinstance(found, list) and not (isinstance(key, int) and -len(found) <= key < len(found))):
                raise CheckFailed(f"{describe(response.exchange)}: the answer holds no {'.'.join(map(str, path))}", rules)
            found = found[key]
        saved[name] = found
    return saved


def state_steps(table: Table, name: str) -> list[Step]:
    """A state's requests, after those of the state it starts `from`."""
    state = table["states"][name]
    return [*(state_steps(table, state["from"]) if "from" in state else []), *state["steps"]]


@dataclass
class Clock:
    """A lease (or other window) a state started: when its request was answered, and for how long."""

    stamp: timing.Stamp
    seconds: float
    waited: bool = False


@dataclass
class RowRun:
    """One row against the target: its own fresh state, its bindings, where it stands."""

    ctx: CheckContext
    table_name: str
    row: dict[str, Any]
    clients: dict[str, ApiClient]
    bindings: dict[str, Any] = field(default_factory=dict)
    clocks: dict[str, Clock] = field(default_factory=dict)
    position: int = 0
    unverified: str | None = None  # a wrong answer given after a window the state holds may have ended

    @property
    def table(self) -> Table:
        return load_table(self.table_name)

    @property
    def requirements(self) -> list[str]:
        return list(self.row["requirements"])

    @property
    def steps(self) -> list[Step]:
        return state_steps(self.table, self.row["state"])

    @property
    def waits(self) -> bool:
        return any("wait" in step for step in self.steps)

    # ------------------------------------------------------------ values
    def value(self, text: str) -> Any:
        """A fixture string with its placeholders bound; a string that is one placeholder keeps
        the bound value's type (a number stays a number)."""
        whole = PLACEHOLDER.fullmatch(text)
        if whole:
            return self.lookup(*whole.groups())
        return PLACEHOLDER.sub(lambda m: str(self.lookup(*m.groups())), text)

    def lookup(self, name: str, qualifier: str | None) -> Any:
        if name == "new":  # a fresh id per row and name
            key = f"new:{qualifier}"
            if key not in self.bindings:
                self.bindings[key] = self.ctx.new_id(f"st-{qualifier}")
            return self.bindings[key]
        if name == "principal":
            return self.ctx.principal_id(self.clients[str(qualifier)])
        if name == "limit":
            return self.ctx.limits[str(qualifier)]
        if qualifier is None and name in self.bindings:
            return self.bindings[name]
        raise ValueError(f"fixtures/states: {self.row['state']}: nothing is bound to {{{name}}}")

    def resolve(self, item: Any) -> Any:
        if isinstance(item, str):
            return self.value(item)
        if isinstance(item, list):
            return [self.resolve(x) for x in item]
        if isinstance(item, dict):
            return {self.value(k): self.resolve(v) for k, v in item.items()}
        return item

    # ------------------------------------------------------------ requests
    def send(self, request: dict[str, Any]) -> tuple[Response, timing.Stamp]:
        client = self.clients[request.get("as", "owner")]
        headers = {k: str(v) for k, v in self.resolve(request.get("headers", {})).items()}
        kwargs: dict[str, Any] = {"headers": headers}
        if "body" in request:
            kwargs["json"] = self.resolve(request["body"])
        elif "lines" in request:  # a JSONL upload: one compact JSON value per line
            lines = [json.dumps(line, separators=(",", ":"), ensure_ascii=False) for line in self.resolve(request["lines"])]
            kwargs["content"] = "".join(f"{line}\n" for line in lines).encode()
        if "content_type" in request:
            headers["Content-Type"] = request["content_type"]
        method, path = request["method"], self.value(request["path"])
        return timing.timed(lambda: client.request(method, path, **kwargs))

    def step(self, step: Step) -> None:
        """One request that builds the state: anything but its status fails the rules the step relies
        on (declared by the check, or a core rule of STEP_RULES), never the row's."""
        response, stamp = self.send(step["request"])
        self.bindings.update(stepped(self.ctx, response, step, list(step["requirements"])))
        if "clock" in step:
            self.clocks[step["clock"]["name"]] = Clock(stamp, float(self.value(step["clock"]["seconds"])))

    def reach(self, until_wait: bool) -> float | None:
        """Run the state's steps; with `until_wait`, stop at a wait and give its edge."""
        steps = self.steps
        while self.position < len(steps):
            step = steps[self.position]
            self.position += 1
            if "wait" in step:
                clock = self.clocks[step["wait"]]
                clock.waited = True
                edge = clock.stamp.answered + clock.seconds + timing.EXPIRY_MARGIN
                if until_wait:
                    return edge
                timing.wait_until(edge)
            else:
                self.step(step)
        return None

    # ------------------------------------------------------------ the row's operation
    def complete(self) -> str | None:
        """The rest of the state, then the operation: what was wrong, or None."""
        self.reach(until_wait=False)
        return self.judge()

    def judge(self) -> str | None:
        """The row's operation on its state: None when the answer is the expected one."""
        operation = self.table["operations"][self.row["operation"]]
        response, stamp = self.send({**operation, **({"as": self.row["as"]} if "as" in self.row else {})})
        expect = self.row["expect"]
        statuses = expect["status"] if isinstance(expect["status"], list) else [expect["status"]]
        problem = expect.get("problem")
        wrong = None
        if response.status not in statuses:
            wrong = f"expected {'/'.join(map(str, statuses))}{f' {problem}' if problem else ''}"
        elif problem is not None and response.problem_type != PROBLEM + problem:
            wrong = f"expected problem type {problem}, got {response.problem_type}"
        elif "body" in expect:
            try:
                body = response.json() if response.content else None
            except CheckFailed:  # not JSON: it holds none of the members
                body = None
            expected = self.resolve(expect["body"])
            if CheckContext.known(body, expected) != expected:
                wrong = f"expected members {json.dumps(expected)}, got {json.dumps(CheckContext.known(body, expected))}"
        if wrong is None:
            return None
        self.unverified = self.clock_ran_out(stamp)
        return f"{self.row['state']} / {self.row['operation']}: {describe(response.exchange)}; {wrong} ({', '.join(self.requirements)})"

    def clock_ran_out(self, stamp: timing.Stamp) -> str | None:
        """A row whose state holds a window it did not wait out proves nothing once the window may
        have ended before the operation reached the server: why, or None while it surely held."""
        for name, clock in self.clocks.items():
            if not clock.waited and stamp.answered >= clock.stamp.sent + clock.seconds:
                return (
                    f"{self.row['state']} / {self.row['operation']}: the {clock.seconds:g}-second {name} may have ended "
                    f"before the operation arrived ({stamp.answered - clock.stamp.sent:.2f} s after it was started)"
                )
        return None


def run_table(ctx: CheckContext, name: str, clients: dict[str, ApiClient]) -> None:
    """Every row of a table (its check needs what the table needs); all wrong answers together."""
    table = load_table(name)
    if step_rules(name):
        raise ValueError(f"fixtures/states/{name}.json: steps rely on {step_rules(name)}, which its check can cite neither as declared nor as a set-up step")
    base = {"short_ttl": SHORTEST_LEASE, "hold_ttl": hold_ttl(ctx)} if ctx.has("writer-lease") else {}
    runs = [RowRun(ctx, name, row, clients, dict(base)) for row in table["rows"]]
    waiting = [run for run in runs if run.waits]
    # The rows behind a wait start their clocks first; the other rows run whole meanwhile (a held
    # lease is used at once), then one wait serves every row behind an expiry.
    edges = [edge for edge in (run.reach(until_wait=True) for run in waiting) if edge is not None]
    results = [(run, run.complete()) for run in runs if not run.waits]
    if edges:
        timing.wait_until(max(edges))
        results += [(run, run.complete()) for run in waiting]
    wrong = [(run, found) for run, found in results if found and run.unverified is None]
    if wrong:
        raise CheckFailed(
            f"{len(wrong)} of {len(runs)} rows of fixtures/states/{name}.json answered wrongly:\n"
            + "\n".join(f"  {line}" for _, line in wrong[:20]),
            list(dict.fromkeys(req for run, _ in wrong for req in run.requirements)),
        )
    unverified = [run.unverified for run, found in results if found and run.unverified]
    if unverified:
        raise NotVerified(f"{len(unverified)} rows of fixtures/states/{name}.json could not be judged: {unverified[0]}")


# ---------------------------------------------------------------- one check per state machine
@check(*requirements_of("leases"), title="Writer lease: free, held, released, expired and taken, against every lease operation and write", needs=("writer-lease",))
def leases(ctx: CheckContext) -> None:
    run_table(ctx, "leases", {"owner": ctx.alice})


@check(*requirements_of("turns"), title="Turns: running, completed and failed, against every turn write and every cut")
def turns(ctx: CheckContext) -> None:
    run_table(ctx, "turns", {"owner": ctx.alice})


@check(*requirements_of("suspend"), title="Suspended turns: running, suspended, recovered, abandoned, completed, against every operation", needs=("suspend",))
def suspended_turns(ctx: CheckContext) -> None:
    run_table(ctx, "suspend", {"owner": ctx.alice})


@check(*requirements_of("rewinds"), title="Pending rewind action: before a turn, while one runs, after failure and success", needs=("rewind", "fork"))
def pending_rewinds(ctx: CheckContext) -> None:
    run_table(ctx, "rewinds", {"owner": ctx.alice})


@check(*requirements_of("deleted"), title="Deletion: live, deleted, purged and deleted with a child, for the owner and a reader", needs=("sharing",))
def deleted_sessions(ctx: CheckContext) -> None:
    owner, reader = ctx.principals("owner", "reader")
    run_table(ctx, "deleted", {"owner": owner, "reader": reader})


@check(*requirements_of("imports"), title="Legacy import: not imported and imported, against re-upload, growth, change and a child", needs=("legacy-import",))
def legacy_imports(ctx: CheckContext) -> None:
    run_table(ctx, "imports", {"owner": ctx.alice})


@check(*requirements_of("patch"), title="Session patch: name given, null and empty, against absent, null, empty and a value", needs=("session-patch",))
def patch_three_state(ctx: CheckContext) -> None:
    run_table(ctx, "patch", {"owner": ctx.alice})


@check(*requirements_of("lease_suspend"), title="Writer lease held and released, against suspend, recover, abandon and inputs", needs=("writer-lease", "suspend"))
def leases_and_suspended_turns(ctx: CheckContext) -> None:
    run_table(ctx, "lease_suspend", {"owner": ctx.alice})


@check(*requirements_of("lease_import"), title="Writer lease held and released, against continuing a legacy import", needs=("writer-lease", "legacy-import"))
def leases_and_imports(ctx: CheckContext) -> None:
    run_table(ctx, "lease_import", {"owner": ctx.alice})


@check(*requirements_of("turn_writes"), title="Turns written in one request: running, completed and failed, against appends, finish and another turn", needs=("turn-write",))
def one_request_turns(ctx: CheckContext) -> None:
    run_table(ctx, "turn_writes", {"owner": ctx.alice})


@check(*requirements_of("turn_keys"), title="Keyed turn writes: started and finished with a key, against the same request and a changed one", needs=("idempotent-turns",))
def keyed_turn_writes(ctx: CheckContext) -> None:
    run_table(ctx, "turn_keys", {"owner": ctx.alice})
