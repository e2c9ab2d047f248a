"""Which principals, by role, the checks of a run need: read from the checks' own code.

A check asks for principals with `ctx.principals("owner", "reader", ...)` and reaches the first two
as `ctx.alice` (owner) and `ctx.bob` (stranger). The check's function, and every function of the
suite it calls by name, is read once (ast): each such use names a role the run needs. A call inside
`if ... len(ctx.clients) ...` is optional (the check does without it), so it is not counted.
Preflight compares the result with the tokens given, so a run that cannot judge what it selected
stops as a set-up error before any check runs.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable, Iterable
from functools import lru_cache
from typing import Any

from conformance.config import ROLES

ATTRIBUTE_ROLES = {"alice": "owner", "bob": "stranger"}
SUITE_PACKAGE = "conformance.checks"


def roles_needed(checks: Iterable[Any]) -> dict[str, list[str]]:
    """role -> the names of the checks that need it, in ROLES order; `owner` is always needed."""
    needed: dict[str, list[str]] = {"owner": []}
    for item in checks:
        for role in sorted(_roles_of(item.func), key=_order):
            needed.setdefault(role, []).append(item.name)
    return {role: needed[role] for role in sorted(needed, key=_order)}


def _order(role: str) -> int:
    return ROLES.index(role) if role in ROLES else len(ROLES)


def _roles_of(func: Callable[..., Any]) -> frozenset[str]:
    return _walk(func, frozenset())


def _walk(func: Callable[..., Any], visiting: frozenset[int]) -> frozenset[str]:
    if id(func) in visiting:
        return frozenset()
    return _cached(func, visiting | {id(func)})


@lru_cache(maxsize=None)
def _tree(func: Callable[..., Any]) -> ast.AST | None:
    try:
        return ast.parse(textwrap.dedent(inspect.getsource(func)))
    except (OSError, TypeError, SyntaxError):
        return None


def _cached(func: Callable[..., Any], visiting: frozenset[int]) -> frozenset[str]:
    tree = _tree(func)
    if tree is None:
        return frozenset()
    found: set[str] = set()
    optional = _optional_nodes(tree)
    names = getattr(func, "__globals__", {})
    for node in ast.walk(tree):
        if id(node) in optional:
            continue
        if isinstance(node, ast.Attribute) and node.attr in ATTRIBUTE_ROLES:
            found.add(ATTRIBUTE_ROLES[node.attr])
        if not isinstance(node, ast.Call):
            continue
        if isinstance(node.func, ast.Attribute) and node.func.attr == "principals":
            found.update(arg.value for arg in node.args if isinstance(arg, ast.Constant) and isinstance(arg.value, str))
        elif isinstance(node.func, ast.Name):
            callee = names.get(node.func.id)
            if inspect.isfunction(callee) and callee.__module__.startswith(SUITE_PACKAGE):
                found |= _walk(callee, visiting)
    return frozenset(role for role in found if role in ROLES)


def _optional_nodes(tree: ast.AST) -> set[int]:
    """The nodes under an `if` whose test counts the configured clients (`len(ctx.clients) >= 3`)."""
    optional: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "clients" in ast.dump(node.test) and "len" in ast.dump(node.test):
            for statement in node.body:
                optional.update(id(child) for child in ast.walk(statement))
    return optional


__all__ = ["roles_needed"]
