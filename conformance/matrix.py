"""The authorization matrix: who may do what, where, in a lineage whose segments have different owners.

Axes: the caller's role on the session it names (owner, stranger, reader, writer, revoked), the
operation, and the session's position in a chain root -> middle -> leaf owned by three different
principals. Grants to a `reader` or `writer` name that one session (AUTH-GRANT-SCOPE-001), so at
the middle and the leaf they give no role on the ancestors; `revoked` held a reader grant on the
session until its owner revoked it. Each cell's expectation cites the requirement it follows. The
matrix is data: `as_details()` is published on the check's result for reports to print.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ROLES = ("owner", "stranger", "reader", "writer", "revoked")
POSITIONS = ("root", "middle", "leaf")
OPERATIONS = (
    "read session",
    "lineage",
    "transcript",
    "export",
    "turn at",
    "attachment read",
    "list",
    "descendants",
    "fork",
    "append",
    "grant",
    "attachment delete",
    "delete",
)
ATTACHMENT_OPERATIONS = ("attachment read", "attachment delete")
# Operations of optional capabilities besides `sharing`: a matrix leaves out those the target lacks.
CAPABILITY_OPERATIONS = {
    "attachment read": "attachments",
    "attachment delete": "attachments",
    "export": "transcript-export",
    "turn at": "turn-by-position",
}
LISTED, ABSENT = "listed", "absent"


@dataclass(frozen=True)
class Cell:
    role: str
    position: str
    operation: str
    expected: str  # a status ("200", "403 forbidden") or, for `list`, "listed" / "absent"
    requirement: str
    observed: str | None = None

    @property
    def ok(self) -> bool:
        return self.observed == self.expected


def expected(role: str, position: str, operation: str) -> tuple[str, str]:
    """The answer a conformant server gives, and the requirement that says so."""
    if role in ("stranger", "revoked"):
        requirement = "AUTH-REVOKE-CASCADE-001" if role == "revoked" else "AUTH-HIDE-001"
        if operation == "list":
            return ABSENT, "LIST-SESSIONS-001"
        return "404 not-found", requirement
    inherits = position != "root"
    # Owners of the middle and the leaf hold reader grants on their ancestors (they forked them);
    # a reader or writer holds a grant on the named session only.
    ancestors_readable = role == "owner" or not inherits
    writes = role in ("owner", "writer")
    through = "200" if ancestors_readable else "403 ancestor-not-readable"
    table = {
        "read session": ("200", "AUTH-ROLES-001"),
        "lineage": (through, "AUTH-LINEAGE-READ-001"),
        "transcript": (through, "AUTH-LINEAGE-READ-001"),
        # The root's attachment: the root's own, inherited by the middle and the leaf.
        "attachment read": (through, "ATT-INHERIT-001" if inherits else "ATT-READ-001"),
        "list": (LISTED, "LIST-SESSIONS-001"),
        "descendants": ("200", "LIST-DESCENDANTS-001"),
        "fork": ("201" if ancestors_readable else "403 ancestor-not-readable", "AUTH-FORK-001"),
        "append": ("201" if writes else "403 forbidden", "AUTH-ROLES-001"),
        "grant": ("200" if role == "owner" else "403 forbidden", "AUTH-GRANT-001" if role == "owner" else "AUTH-ROLES-001"),
        # The session's own attachment, which no descendant inherits.
        "attachment delete": ("204" if writes else "403 forbidden", "ATT-IMMUTABLE-001" if writes else "AUTH-ROLES-001"),
        "delete": ("204" if role == "owner" else "403 forbidden", "DEL-SOFT-001" if role == "owner" else "AUTH-ROLES-001"),
        # Reads of what the session inherits (EXPORT-READ-001, TURN-POS-READ-001 authorise them so).
        "export": (through, "AUTH-LINEAGE-READ-001"),
        "turn at": (through, "AUTH-LINEAGE-READ-001"),
    }
    return table[operation]


@dataclass
class Matrix:
    operations: tuple[str, ...] = OPERATIONS
    cells: list[Cell] = field(default_factory=list)

    def record(self, role: str, position: str, operation: str, observed: str) -> None:
        answer, requirement = expected(role, position, operation)
        self.cells.append(Cell(role, position, operation, answer, requirement, observed))

    @property
    def size(self) -> int:
        return len(ROLES) * len(POSITIONS) * len(self.operations)

    def failures(self) -> list[Cell]:
        return [cell for cell in self.cells if not cell.ok]

    def as_details(self) -> dict[str, Any]:
        return {
            "axes": {"roles": list(ROLES), "positions": list(POSITIONS), "operations": list(self.operations)},
            "size": self.size,
            "checked": len(self.cells),
            "cells": [
                {
                    "role": cell.role,
                    "position": cell.position,
                    "operation": cell.operation,
                    "expected": cell.expected,
                    "observed": cell.observed,
                    "requirement": cell.requirement,
                    "ok": cell.ok,
                }
                for cell in self.cells
            ],
        }

    def render(self) -> str:
        """One compact table per position: roles down, operations across; `!` marks a wrong answer."""
        return render_text(self.as_details())


DETAILS_KEY = "authorization_matrix"  # where the check publishes the matrix in `CheckResult.details`


def grid(details: dict[str, Any]) -> list[tuple[str, list[str], list[tuple[str, list[str]]]]]:
    """The published matrix as tables: per position, the operations, then one row per role.

    A cell shows the observed status (its first word), with `!` when it differs from the expected
    answer, or `-` when the run did not check it (attachments not advertised, for example).
    """
    axes = details.get("axes", {})
    operations = list(axes.get("operations", OPERATIONS))
    found = {(c.get("role"), c.get("position"), c.get("operation")): c for c in details.get("cells", [])}
    tables = []
    for position in axes.get("positions", POSITIONS):
        rows = []
        for role in axes.get("roles", ROLES):
            row = []
            for operation in operations:
                cell = found.get((role, position, operation))
                if cell is None:
                    row.append("-")
                else:
                    row.append(str(cell.get("observed") or "?").split(" ")[0] + ("" if cell.get("ok") else "!"))
            rows.append((role, row))
        tables.append((position, operations, rows))
    return tables


def summary(details: dict[str, Any]) -> str:
    """`135 of 165 cells checked, 0 answered wrongly`."""
    cells = details.get("cells", [])
    wrong = sum(1 for cell in cells if not cell.get("ok"))
    return f"{len(cells)} of {details.get('size', len(cells))} cells checked, {wrong} answered wrongly"


def render_text(details: dict[str, Any]) -> str:
    lines = []
    for position, operations, rows in grid(details):
        widths = [max(len(operation), 5) for operation in operations]
        lines.append(f"{position:>10} | " + " | ".join(f"{op:>{w}}" for op, w in zip(operations, widths)))
        for role, row in rows:
            lines.append(f"{role:>10} | " + " | ".join(f"{text:>{w}}" for text, w in zip(row, widths)))
    return "\n".join(lines)


def render_markdown(details: dict[str, Any]) -> str:
    """One Markdown table per position (roles down, operations across)."""
    blocks = []
    for position, operations, rows in grid(details):
        head = f"| {position} | " + " | ".join(operations) + " |"
        rule = "| --- " * (len(operations) + 1) + "|"
        body = [f"| {role} | " + " | ".join(row) + " |" for role, row in rows]
        blocks.append("\n".join([head, rule, *body]))
    return "\n\n".join(blocks)
