"""Principals, the project each belongs to, and the project-scoped keys of session and turn ids.

Session and turn ids are unique per project (AUTH-NAMESPACE-001). The store keys a session or a
turn of project P by `P~id`; ids of the default project are stored as they are, so a deployment
with one project keeps its keys when it upgrades. `~` never occurs in an id or a project name, so a
key names exactly one (project, id) pair, and `public_id()` gives the id back.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

DEFAULT_PROJECT = "default"
KEY_SEPARATOR = "~"
PROJECT_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
PRINCIPAL_PATTERN = re.compile(r"^[A-Za-z0-9._@+-]{1,128}$")


class Caller(str):
    """The authenticated principal: its id (the string itself) and the project it belongs to.

    A str, so every rule that compares or stores principal ids takes a Caller unchanged.
    """

    project: str

    def __new__(cls, principal: str, project: str = DEFAULT_PROJECT) -> "Caller":
        caller = super().__new__(cls, principal)
        caller.project = project
        return caller

    def key(self, public: str) -> str:
        """The store key of an id of the caller's project."""
        return scoped_key(self.project, public)

    def __reduce__(self) -> Any:
        return (Caller, (str(self), self.project))


def scoped_key(project: str, public: str) -> str:
    return public if project == DEFAULT_PROJECT else f"{project}{KEY_SEPARATOR}{public}"


def public_id(key: str) -> str:
    """The id a client knows for a store key."""
    return key.rpartition(KEY_SEPARATOR)[2]


def project_of_key(key: str) -> str:
    project, separator, _ = key.rpartition(KEY_SEPARATOR)
    return project if separator else DEFAULT_PROJECT


@dataclass(frozen=True)
class Directory:
    """Which project each principal belongs to.

    With no tokens configured (development mode) every well-formed principal id exists, in the
    default project.
    """

    projects: Mapping[str, str]
    open: bool = False

    def project_of(self, principal: str) -> str | None:
        if self.open:
            return DEFAULT_PROJECT if PRINCIPAL_PATTERN.match(principal) else None
        return self.projects.get(principal)


class TokensFileError(ValueError):
    """The tokens file does not map bearer tokens to principals (and projects)."""


def parse_tokens(data: Any) -> tuple[dict[str, str], dict[str, str]]:
    """Tokens file contents to (token -> principal, principal -> project).

    Each entry is `token: principal` (the default project) or `token: {principal: p, project: q}`.
    A principal belongs to one project: naming it with two projects is an error.
    """
    if not isinstance(data, dict) or not data:
        raise TokensFileError("the tokens file must map bearer tokens to principals")
    tokens: dict[str, str] = {}
    projects: dict[str, str] = {}
    for token, entry in data.items():
        if isinstance(entry, dict):
            unknown = set(entry) - {"principal", "project"}
            if unknown or "principal" not in entry:
                raise TokensFileError(f"token {str(token)[:4]}…: expected {{principal: ..., project: ...}}")
            principal, project = str(entry["principal"]), str(entry.get("project", DEFAULT_PROJECT))
        else:
            principal, project = str(entry), DEFAULT_PROJECT
        if not PRINCIPAL_PATTERN.match(principal):
            raise TokensFileError(f"principal {principal!r} is not 1 to 128 letters, digits, '.', '_', '@', '+' or '-'")
        if not PROJECT_PATTERN.match(project):
            raise TokensFileError(f"project {project!r} is not 1 to 64 letters, digits, '_' or '-'")
        if projects.get(principal, project) != project:
            raise TokensFileError(f"principal {principal!r} is named with two projects; a principal belongs to one")
        tokens[str(token)] = principal
        projects[principal] = project
    return tokens, projects
