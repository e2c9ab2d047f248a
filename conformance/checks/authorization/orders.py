"""Access under every order of grant, revoke, fork and delete, on an ancestor and its descendant.

The owner's session A; the events are the owner granting `writer` on A to a second principal, the
owner revoking it, that principal forking A into its own D, and the owner deleting A (or the
principal deleting D). Every permutation of the four runs on a fresh A. A small model of the rules
says what each event answers in that order, and what each principal then reads and writes of A and
D; the target must answer exactly that. The rules are about the state an order leaves, never about
the order itself: a grant revoked before or after the fork is revoked all the same
(AUTH-REVOKE-CASCADE-001), a deleted ancestor serves its descendant all the same
(DEL-DESCENDANTS-001).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import NamedTuple

from conformance.client import ApiClient, Response
from conformance.context import CheckContext
from conformance.errors import CheckFailed
from conformance.registry import check

PROBLEM = "urn:session-lineage:problem:"
EVENT_SETS = (
    ("grant", "revoke", "fork", "delete ancestor"),
    ("grant", "revoke", "fork", "delete descendant"),
)


class Expected(NamedTuple):
    status: int
    problem: str | None
    requirement: str


OK = None  # no problem type: a success


@dataclass
class Model:
    """What the spec says the events leave behind."""

    granted: bool = False
    ancestor_deleted: bool = False
    descendant: bool = False  # the fork was made
    descendant_deleted: bool = False
    no_descendant_because: str = "AUTH-FORK-001"

    def event(self, name: str) -> Expected:
        """The answer the event gets in the current state, then the state it leaves."""
        if name == "grant":
            if self.ancestor_deleted:  # not among a deleted session's exceptions
                return Expected(404, "not-found", "DEL-SOFT-001")
            self.granted = True
            return Expected(200, OK, "AUTH-GRANT-001")
        if name == "revoke":  # 204 with or without a grant, deleted or not
            self.granted = False
            return Expected(204, OK, "AUTH-REVOKE-001")
        if name == "fork":
            if self.ancestor_deleted:
                self.no_descendant_because = "DEL-FORK-001"
                return Expected(404, "not-found", "DEL-FORK-001")
            if not self.granted:
                return Expected(404, "not-found", "AUTH-FORK-001")
            self.descendant = True
            return Expected(201, OK, "AUTH-FORK-001")
        if name == "delete ancestor":  # a second delete by the owner answers 204 again
            self.ancestor_deleted = True
            return Expected(204, OK, "DEL-SOFT-001")
        if name == "delete descendant":
            if not self.descendant:
                return Expected(404, "not-found", self.no_descendant_because)
            self.descendant_deleted = True
            return Expected(204, OK, "DEL-SOFT-001")
        raise ValueError(name)

    def ancestor_for_grantee(self) -> Expected:
        if self.ancestor_deleted:
            return Expected(404, "not-found", "DEL-SOFT-001")
        if not self.granted:  # the grant was revoked after it was given
            return Expected(404, "not-found", "AUTH-REVOKE-CASCADE-001")
        return Expected(200, OK, "AUTH-GRANT-001")

    def descendant_alone(self) -> Expected:
        """`GET /sessions/D` by its owner: a read of the session alone."""
        if not self.descendant:
            return Expected(404, "not-found", self.no_descendant_because)
        if self.descendant_deleted:
            return Expected(404, "not-found", "DEL-SOFT-001")
        return Expected(200, OK, "AUTH-LINEAGE-READ-001")

    def through_descendant(self) -> Expected:
        """D's transcript or lineage by its owner: it draws from A."""
        alone = self.descendant_alone()
        if alone.status != 200:
            return alone
        if not self.granted:
            return Expected(403, "ancestor-not-readable", "AUTH-REVOKE-CASCADE-001")
        return Expected(200, OK, "DEL-DESCENDANTS-001" if self.ancestor_deleted else "AUTH-LINEAGE-READ-001")

    def ancestor_write_for_grantee(self) -> Expected:
        """A turn started in A by the grantee: its `writer` grant allows it while it holds."""
        read = self.ancestor_for_grantee()
        return read._replace(status=201, requirement="AUTH-ROLES-001") if read.status == 200 else read

    def ancestor_for_owner(self) -> Expected:
        if self.ancestor_deleted:
            return Expected(404, "not-found", "DEL-SOFT-001")
        return Expected(200, OK, "AUTH-ROLES-001")

    def descendant_for_ancestor_owner(self) -> Expected:
        if not self.descendant:
            return Expected(404, "not-found", self.no_descendant_because)
        return Expected(404, "not-found", "AUTH-GRANT-SCOPE-001")  # the fork is its maker's alone


def mismatch(what: str, answer: Response, expected: Expected) -> tuple[str, str] | None:
    """(requirement, message) when the answer is not the expected one."""
    if answer.status == expected.status and (expected.problem is None or answer.problem_type == PROBLEM + expected.problem):
        return None
    got = f"{answer.status} {(answer.problem_type or '').removeprefix(PROBLEM)}".strip()
    return expected.requirement, f"{what}: answered {got}; expected {expected.status} {expected.problem or ''}".rstrip()


def run_order(ctx: CheckContext, owner: ApiClient, grantee: ApiClient, order: tuple[str, ...]) -> list[tuple[str, str]]:
    """One order on a fresh ancestor: every event, then every read and write, against the model."""
    ancestor = ctx.create_session(owner)["session_id"]
    descendant = ctx.new_id("order-child")
    grant_path = f"/sessions/{ancestor}/grants/{ctx.principal_id(grantee)}"
    events = {
        "grant": lambda: owner.request("PUT", grant_path, json={"role": "writer"}),
        "revoke": lambda: owner.request("DELETE", grant_path),
        "fork": lambda: grantee.post(f"/sessions/{ancestor}/fork", json={"cut": {"mode": "latest"}, "target_session_id": descendant}),
        "delete ancestor": lambda: owner.request("DELETE", f"/sessions/{ancestor}"),
        "delete descendant": lambda: grantee.request("DELETE", f"/sessions/{descendant}"),
    }
    model = Model()
    label = " → ".join(order)
    found = [mismatch(f"{label}: the {event}", events[event](), model.event(event)) for event in order]
    after = [
        ("the grantee reads A", model.ancestor_for_grantee(), lambda: grantee.get(f"/sessions/{ancestor}")),
        ("the owner reads A", model.ancestor_for_owner(), lambda: owner.get(f"/sessions/{ancestor}")),
        ("the owner of A reads D", model.descendant_for_ancestor_owner(), lambda: owner.get(f"/sessions/{descendant}")),
        ("the grantee reads D", model.descendant_alone(), lambda: grantee.get(f"/sessions/{descendant}")),
        ("the grantee reads D's transcript", model.through_descendant(), lambda: grantee.get(f"/sessions/{descendant}/transcript")),
        ("the grantee reads D's lineage", model.through_descendant(), lambda: grantee.get(f"/sessions/{descendant}/lineage")),
        ("the grantee writes A", model.ancestor_write_for_grantee(), lambda: grantee.post(f"/sessions/{ancestor}/turns", json={"role": "user"})),
    ]
    found += [mismatch(f"{label}: {what}", send(), expected) for what, expected, send in after]
    return [item for item in found if item is not None]


@check(
    "AUTH-GRANT-001", "AUTH-REVOKE-001", "AUTH-REVOKE-CASCADE-001", "AUTH-FORK-001", "AUTH-GRANT-SCOPE-001",
    "AUTH-LINEAGE-READ-001", "AUTH-ROLES-001", "DEL-SOFT-001", "DEL-FORK-001", "DEL-DESCENDANTS-001",
    title="Access after every order of grant, revoke, fork and delete of the ancestor or the descendant",
    needs=("sharing",),
)
def access_under_every_order(ctx: CheckContext) -> None:
    owner, grantee = ctx.principals("owner", "writer")
    orders = [order for events in EVENT_SETS for order in itertools.permutations(events)]
    wrong = [item for order in orders for item in run_order(ctx, owner, grantee, order)]
    if wrong:
        raise CheckFailed(
            f"{len(wrong)} wrong answers over {len(orders)} orders:\n" + "\n".join(f"  {line} ({req})" for req, line in wrong[:20]),
            sorted({req for req, _ in wrong}),
        )
