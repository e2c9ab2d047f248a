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
from collections.abc import Callable, Iterable
from functools import cache
from pathlib import Path
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
    """The roles `func` and every suite function it reaches by name use."""
    found: set[str] = set()
    stack, seen = [func], {id(func)}
    while stack:
        roles, callees = _local(stack.pop())
        found |= roles
        for callee in callees:
            if id(callee) not in seen:
                seen.add(id(callee))
                stack.append(callee)
    return frozenset(found)


@cache
def _module_functions(filename: str) -> dict[int, ast.AST]:
    """Each function of a source file by the line its code starts on (its first decorator's, or its
    `def`'s): the file is parsed once, however many of its functions are read, and only its
    statements are searched (a function is never inside an expression)."""
    try:
        tree = ast.parse(Path(filename).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return {}
    found: dict[int, ast.AST] = {}
    statements: list[ast.AST] = [tree]
    while statements:
        node = statements.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found.setdefault(node.lineno, node)
            if node.decorator_list:
                found.setdefault(node.decorator_list[0].lineno, node)
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            statements.extend(child for child in getattr(node, field, ()) if isinstance(child, ast.AST))
    return found


def _tree(func: Callable[..., Any]) -> ast.AST | None:
    code = getattr(inspect.unwrap(func), "__code__", None)
    if code is None:
        return None
    return _module_functions(code.co_filename).get(code.co_firstlineno)


@cache
def _local(func: Callable[..., Any]) -> tuple[frozenset[str], tuple[Callable[..., Any], ...]]:
    """The roles one function's own code uses, and the suite functions it calls by name."""
    tree = _tree(func)
    if tree is None:
        return frozenset(), ()
    found: set[str] = set()
    callees: list[Callable[..., Any]] = []
    names = getattr(func, "__globals__", {})
    pending = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.If) and _counts_clients(node.test):
            pending += [node.test, *node.orelse]  # its body is optional: the check does without it
            continue
        pending.extend(ast.iter_child_nodes(node))
        if isinstance(node, ast.Attribute) and node.attr in ATTRIBUTE_ROLES:
            found.add(ATTRIBUTE_ROLES[node.attr])
        if not isinstance(node, ast.Call):
            continue
        if isinstance(node.func, ast.Attribute) and node.func.attr == "principals":
            found.update(arg.value for arg in node.args if isinstance(arg, ast.Constant) and isinstance(arg.value, str))
        elif isinstance(node.func, ast.Name):
            callee = names.get(node.func.id)
            if inspect.isfunction(callee) and callee.__module__.startswith(SUITE_PACKAGE):
                callees.append(callee)
    return frozenset(role for role in found if role in ROLES), tuple(callees)


def _counts_clients(test: ast.expr) -> bool:
    """Whether an `if` test counts the configured clients (`len(ctx.clients) >= 3`)."""
    dumped = ast.dump(test)
    return "clients" in dumped and "len" in dumped


__all__ = ["roles_needed"]
