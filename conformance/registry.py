"""The catalogue of checks: each names the requirement IDs it verifies, and fails only those.

A check's failure may cite
(a) the requirements the check declares in `@check(...)`;
(b) the cross-cutting rules of `CROSS_CUTTING`: what every answer is held to (checked on every
    response the suite reads: no 5xx, problem+json, the problem type, the declared schema, and the
    diagnostic headers of an advertised diagnostics capability), and the capability document every
    check plans and sizes its requests from;
(c) the rule of a set-up step, only when raised inside a helper marked `@setup_step(RULE)`: creating
    the session a check needs fails SESS-CREATE-001, not the rule under test. A step cites only
    the rules it is marked with, so a check cannot cite an arbitrary rule through it.
Anything else is a defect of the suite, not of the target: the run reports that check as `error`
("suite defect: ..."), never as a failure (`undeclared`). tests/test_registry_enforcement.py holds
every check to this statically, from its source.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from conformance.errors import CheckFailed

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
    apart: bool = False  # may run in a second process beside the other checks (lanes.py)


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
    *requirements: str, title: str, needs: tuple[str, ...] = (), apart: bool = False
) -> Callable[[Callable[["CheckContext"], None]], Callable[["CheckContext"], None]]:
    """Register a check. `needs` lists capabilities without which the check is skipped. `apart`:
    the check keeps the suite's CPU busy (generating input) rather than the server, touches only
    sessions it creates, and judges no timing, so it may run in a second process beside the others."""
    if not requirements:
        raise ValueError("a check must name at least one requirement")

    def register(func: Callable[["CheckContext"], None]) -> Callable[["CheckContext"], None]:
        chapter = chapter_of(func.__module__)
        name = f"{chapter}.{func.__name__}"
        if name in _CHECKS:
            raise ValueError(f"duplicate check {name}")
        _CHECKS[name] = Check(name, title, chapter, tuple(requirements), tuple(needs), func, apart)
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


# (b) The rules a check may cite whatever it declares, each with why every check is held to it.
CROSS_CUTTING: dict[str, str] = {
    "ERR-NO-5XX-001": "no answer is a 5xx because of what its request holds",
    "ERR-PROBLEM-001": "every error answer is problem+json",
    "ERR-TYPE-001": "a problem's type, and its status, are the ones problem-types.yaml assigns",
    "ERR-SCHEMA-001": "every answer matches the schema its operation declares for its status",
    "CAP-DOC-001": "the capability document holds the limits a check sizes its requests from",
    "CAP-LIMITS-001": "every advertised limit is at least its minimum, so a check can size itself",
    "DIAG-HEADER-001": "with diagnostics.query-count, every answer carries Storage-Round-Trips",
    "DIAG-WRITES-001": "with diagnostics.write-count, every answer carries Storage-Items-Written",
    "DIAG-BYTES-001": "with diagnostics.write-count, every answer carries Storage-Bytes-Written",
    "DIAG-RECORDS-001": "with diagnostics.records-examined, every answer carries Storage-Records-Examined",
    "DIAG-COUNTS-AGREE-001": "with both sources of round trips, every answer's header equals its spans' count",
}

Step = TypeVar("Step", bound=Callable[..., Any])


def setup_step(*rules: str) -> Callable[[Step], Step]:
    """(c) Mark a helper as a set-up step that relies on `rules`: a failure raised inside it may cite
    them, whichever check called it."""
    if not rules:
        raise ValueError("a set-up step must name the rule it relies on")

    def mark(func: Step) -> Step:
        @functools.wraps(func)
        def step(*args: Any, **kwargs: Any) -> Any:
            try:
                return func(*args, **kwargs)
            except CheckFailed as failure:
                failure.setup_rules = failure.setup_rules | frozenset(rules)
                raise

        step.setup_rules = frozenset(rules)  # type: ignore[attr-defined]
        return step  # type: ignore[return-value]

    return mark


def undeclared(item: Check, failure: CheckFailed) -> list[str]:
    """The rules a failure cites that its check may not cite: a suite defect, never the target's."""
    allowed = {*item.requirements, *CROSS_CUTTING, *failure.setup_rules}
    return [rule for rule in failure.requirements if rule not in allowed]
