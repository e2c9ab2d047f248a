"""Preflight item `roles`: the tokens cover every role the selected checks need, in the right projects.

A check that needs a principal the configuration lacks could only fail as "not testable", which
reads like non-conformance; a principal in the wrong project makes the authorization checks fail
for a reason that is the set-up's, not the server's. Both are set-up mistakes: one line, exit 2.
The project layout comes from `GET /me` (capability `sharing`): owner, stranger, reader and writer
share a project; the outsider is in another.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import spec
from conformance.config import ROLES
from conformance.roles_needed import roles_needed
from conformance.target import offered

SAME_PROJECT = ("owner", "stranger", "reader", "writer")
HOW = (
    "give one --token per role in the order {order} (or name them: SESSION_LINEAGE_TOKENS="
    "owner=A,stranger=B,...; `tokens: {{reader: TOKEN}}` in the --config file)"
)


def _names(roles: Sequence[str]) -> str:
    roles = list(roles)
    return roles[0] if len(roles) == 1 else f"{', '.join(roles[:-1])} and {roles[-1]}"


def check_roles(probe: Any, selected: Sequence[Any] | None) -> str:
    """One line on success; ValueError (one line) on a set-up mistake."""
    config = probe.config
    given = config.role_index()
    advertised = set((probe.state.capabilities or {}).get("capabilities", []))
    checks = list(selected or [])
    if probe.state.capabilities is not None:  # checks the target cannot run do not count
        catalogue = {req["id"]: req for req in spec.requirements()}
        checks = [item for item in checks if all(offered(item, need, advertised, catalogue) for need in item.needs)]
    needed = roles_needed(checks) if checks else {"owner": []}
    missing = [role for role in needed if role not in given]
    if missing:
        example = needed[missing[-1]][0] if needed[missing[-1]] else None
        raise ValueError(
            f"the selected checks need {len(needed)} principals ({', '.join(needed)}); the configuration "
            f"gives {len(given)} ({', '.join(given)}): missing {_names(missing)}"
            + (f" (e.g. {example} needs {missing[-1]})" if example else "")
            + f"; {HOW.format(order=', '.join(ROLES))}, or narrow --select"
        )
    summary = f"{len(needed)} needed ({', '.join(needed)}), {len(given)} given"
    if {"reachable", "tokens"} & probe.failed:
        return f"{summary}; project layout not checked"
    if "sharing" not in advertised:
        return f"{summary}; project layout not checked: the target does not advertise `sharing` (no GET /me)"
    layout = {role: index for role, index in given.items() if role in needed or role == "owner"}
    projects: dict[str, tuple[str, str]] = {}
    for role, index in layout.items():
        answer = probe._send("GET", f"{config.target}/me", index)
        try:
            body = answer.json()
            projects[role] = (str(body["principal_id"]), str(body["project_id"]))
        except (ValueError, KeyError, TypeError):
            raise ValueError(
                f"GET /me as the {role} (token {index + 1}) answered {answer.status_code} without principal_id "
                "and project_id, so the project layout cannot be checked (AUTH-PRINCIPAL-001)"
            ) from None
    home = projects["owner"][1]
    wrong = [role for role in SAME_PROJECT if role in projects and projects[role][1] != home]
    if "outsider" in projects and projects["outsider"][1] == home:
        wrong.append("outsider")
    if wrong:
        seen = ", ".join(f"{role} {principal}@{project}" for role, (principal, project) in projects.items())
        raise ValueError(
            "the project layout is wrong: owner, stranger, reader and writer must share a project and the "
            f"outsider must be in another; GET /me shows {seen} ({_names(wrong)} misplaced): give the outsider "
            "a principal of another project (reference server tokens file: `TOKEN: {principal: erin, project: "
            "other}`); if the tokens are right, GET /me is wrong (AUTH-PRINCIPAL-001)"
        )
    outsider = " + outsider in " + projects["outsider"][1] if "outsider" in projects else ""
    return f"{summary}; projects: {len(projects) - bool(outsider)} in {home}{outsider}"


__all__ = ["check_roles"]
