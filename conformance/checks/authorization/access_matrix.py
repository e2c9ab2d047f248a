"""The authorization matrix: every role at every position of a three-owner chain, every operation."""

from __future__ import annotations

from conformance.checks.authorization.common import ThreeOwners, fetch, grant, listed_access, revoke, three_owners
from conformance.client import ApiClient, Response
from conformance.context import CheckContext
from conformance.errors import CheckFailed
from conformance.matrix import ABSENT, CAPABILITY_OPERATIONS, LISTED, OPERATIONS, POSITIONS, ROLES, Matrix
from conformance.registry import check

PROBLEM = "urn:session-lineage:problem:"


def answer(response: Response) -> str:
    """A response as the matrix writes it: the status, and the problem kind for errors."""
    if response.status >= 400 and (response.problem_type or "").startswith(PROBLEM):
        return f"{response.status} {response.problem_type[len(PROBLEM):]}"
    return str(response.status)


def perform(ctx: CheckContext, operation: str, actor: ApiClient, chain: ThreeOwners, position: str, role: str) -> str:
    sid = chain.ids[position]
    if operation == "read session":
        return answer(actor.get(f"/sessions/{sid}"))
    if operation == "lineage":
        return answer(actor.get(f"/sessions/{sid}/lineage"))
    if operation == "transcript":
        return answer(actor.get(f"/sessions/{sid}/transcript"))
    if operation == "attachment read":
        assert chain.root_attachment is not None
        return answer(fetch(actor, sid, chain.root_attachment))
    if operation == "list":
        access = listed_access(ctx, actor, sid)
        return ABSENT if access is None else LISTED if access == role else f"listed as {access}"
    if operation == "descendants":
        return answer(actor.get(f"/sessions/{sid}/descendants"))
    if operation == "fork":
        return answer(actor.post(f"/sessions/{sid}/fork", json={"cut": {"mode": "latest"}}))
    if operation == "append":
        started = actor.post(f"/sessions/{sid}/turns", json={"role": "user"})
        if started.status == 201:
            ctx.finish(sid, started.json()["turn_id"], client=actor)
        return answer(started)
    if operation == "grant":
        grantee = chain.owners["leaf" if position == "root" else "root"]
        return answer(actor.request("PUT", f"/sessions/{sid}/grants/{ctx.principal_id(grantee)}", json={"role": "reader"}))
    if operation == "attachment delete":
        return answer(actor.request("DELETE", f"/sessions/{sid}/attachments/{chain.own_attachment[position]}"))
    if operation == "delete":
        return answer(actor.request("DELETE", f"/sessions/{sid}"))
    if operation == "export":
        return answer(actor.get(f"/sessions/{sid}/export"))
    if operation == "turn at":
        return answer(actor.get(f"/sessions/{sid}/effective-turns/1"))
    raise ValueError(operation)


# The matrix needs `sharing`: it cites only rules of that capability (and of `attachments`), so a
# server without them is judged on AUTH-HIDE-001 by `invisible_sessions` alone; a wrong 404 cell
# still reports AUTH-HIDE-001 as failed.
MATRIX_REQUIREMENTS = (
    "AUTH-ROLES-001",
    "AUTH-LINEAGE-READ-001",
    "AUTH-FORK-001",
    "AUTH-GRANT-001",
    "AUTH-REVOKE-CASCADE-001",
    "LIST-SESSIONS-001",
    "LIST-DESCENDANTS-001",
    "DEL-SOFT-001",
    "ATT-READ-001",
    "ATT-INHERIT-001",
    "ATT-IMMUTABLE-001",
)


@check(*MATRIX_REQUIREMENTS, title="Authorization matrix: 5 roles x 9 to 13 operations x root, middle and leaf of a three-owner chain", needs=("sharing",))
def authorization_matrix(ctx: CheckContext) -> None:
    alice, bob, carol, dave = ctx.principals("owner", "stranger", "reader", "writer")
    matrix = Matrix(tuple(op for op in OPERATIONS if op not in CAPABILITY_OPERATIONS or ctx.has(CAPABILITY_OPERATIONS[op])))
    for position in POSITIONS:
        for role in ROLES:
            chain = three_owners(ctx, alice, carol, dave)  # fresh: the last operation deletes
            sid, owner = chain.ids[position], chain.owners[position]
            actor = owner if role == "owner" else bob
            if role in ("reader", "writer", "revoked"):
                grant(ctx, owner, sid, bob, "writer" if role == "writer" else "reader")
            if role == "revoked":
                revoke(ctx, owner, sid, bob)
            for operation in matrix.operations:
                matrix.record(role, position, operation, perform(ctx, operation, actor, chain, position, role))
    ctx.details["authorization_matrix"] = matrix.as_details()
    wrong = matrix.failures()
    if wrong:
        lines = [
            f"  {cell.role} at the {cell.position}, {cell.operation}: expected {cell.expected}, got {cell.observed} ({cell.requirement})"
            for cell in wrong[:24]
        ]
        raise CheckFailed(
            f"{len(wrong)} of {len(matrix.cells)} matrix cells answered wrongly:\n" + "\n".join(lines) + "\n" + matrix.render(),
            sorted({cell.requirement for cell in wrong}),
        )
