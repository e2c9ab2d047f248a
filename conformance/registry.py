"""The catalogue of checks: each names the requirement IDs it verifies."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from conformance.context import CheckContext

CHECK_MODULES = (
    "capabilities",
    "sessions",
    "fork",
    "transcript",
    "lineage",
    "leases",
    "diagnostics",
    "authorization",
    "turn_writes",
    "context",
    "export",
    "revert",
    "session_patch",
    "suspend",
    "legacy_import",
    "errors",
    "rollout",
    "vectors",
    "state_matrix",
    "stateful",
    "fuzz",
)


@dataclass(frozen=True)
class Check:
    name: str
    title: str
    chapter: str
    requirements: tuple[str, ...]
    needs: tuple[str, ...]
    func: Callable[["CheckContext"], None]


_CHECKS: dict[str, Check] = {}
CHECKS_PACKAGE = "conformance.checks"


def chapter_of(module: str) -> str:
    """A check's chapter: its module under conformance.checks, or the package a large chapter is
    split into (`conformance.checks.authorization.grants` is chapter `authorization`)."""
    prefix = CHECKS_PACKAGE + "."
    if module.startswith(prefix):
        return module[len(prefix):].split(".", 1)[0]
    return module.rsplit(".", 1)[-1]


def check(
    *requirements: str, title: str, needs: tuple[str, ...] = ()
) -> Callable[[Callable[["CheckContext"], None]], Callable[["CheckContext"], None]]:
    """Register a check. `needs` lists capabilities without which the check is skipped."""
    if not requirements:
        raise ValueError("a check must name at least one requirement")

    def register(func: Callable[["CheckContext"], None]) -> Callable[["CheckContext"], None]:
        chapter = chapter_of(func.__module__)
        name = f"{chapter}.{func.__name__}"
        if name in _CHECKS:
            raise ValueError(f"duplicate check {name}")
        _CHECKS[name] = Check(name, title, chapter, tuple(requirements), tuple(needs), func)
        return func

    return register


def all_checks() -> list[Check]:
    """Every check, in chapter order then definition order (a chapter package's `__init__`
    imports its modules in the order their checks run)."""
    for module in CHECK_MODULES:
        importlib.import_module(f"{CHECKS_PACKAGE}.{module}")
    # Sorted, not as registered: a module imported early (by a test, or by another chapter) must not
    # move its chapter ahead; the sort is stable, so each chapter keeps its definition order.
    rank = {chapter: index for index, chapter in enumerate(CHECK_MODULES)}
    return sorted(_CHECKS.values(), key=lambda item: rank.get(item.chapter, len(rank)))


def select(checks: list[Check], patterns: tuple[str, ...]) -> list[Check]:
    """Checks whose name, chapter or a requirement ID starts with one of the patterns."""
    if not patterns:
        return checks
    return [
        item
        for item in checks
        if any(
            item.name.startswith(p) or any(req.startswith(p) for req in item.requirements)
            for p in patterns
        )
    ]
