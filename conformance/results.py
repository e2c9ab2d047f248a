"""Outcomes of a conformance run: per check, per requirement, and the verdict with its exit code."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class Outcome(str, enum.Enum):
    PASS = "pass"
    FAIL = "fail"
    SKIPPED = "skipped"  # unsupported by the target, as its capability document says
    XFAIL = "expected-failure"  # failed, and the target's expected-failures file lists it
    XPASS = "unexpected-pass"  # listed as an expected failure, but passed
    ERROR = "error"  # the suite itself broke, or the target could not be reached


class Verdict(str, enum.Enum):
    CONFORMANT = "conformant"
    NOT_CONFORMANT = "not-conformant"
    INCOMPLETE = "incomplete"


EXIT_CODES = {Verdict.CONFORMANT: 0, Verdict.NOT_CONFORMANT: 1, Verdict.INCOMPLETE: 3}
EXIT_USAGE = 2


@dataclass
class Exchange:
    """One HTTP request and its response, kept for reports and reproducers."""

    method: str
    url: str
    request_headers: dict[str, str]
    request_body: bytes | None
    status: int | None
    response_headers: dict[str, str]
    response_body: bytes
    principal: str | None = None  # which configured principal's token was sent
    elapsed_ms: float = 0.0


@dataclass
class CheckResult:
    name: str  # "<chapter module>.<function>", e.g. "fork.idempotent_retry"
    title: str
    chapter: str
    requirements: list[str]  # every requirement ID the check verifies
    outcome: Outcome
    message: str = ""
    failed_requirements: list[str] = field(default_factory=list)  # violated IDs when FAIL/XFAIL
    level: str = "MUST"  # strongest level among the violated (or cited) requirements
    reproducer: str | None = None  # curl command(s) replaying the failing exchange
    exchange: Exchange | None = None
    duration_ms: float = 0.0
    seed: int | None = None
    reason: str | None = None  # skip reason, or the expected-failure reason


@dataclass
class RequirementVerdict:
    id: str
    level: str
    chapter: str
    title: str
    outcome: Outcome  # PASS, FAIL, XFAIL, ERROR or SKIPPED; see runner.requirement_verdicts
    checks: list[str]


@dataclass
class RunResult:
    suite_version: str
    spec_version: str
    target: str
    seed: int
    started_at: str
    duration_s: float
    strict: bool
    config: dict[str, Any]  # redacted
    capabilities: dict[str, Any] | None
    checks: list[CheckResult]
    requirements: list[RequirementVerdict]
    verdict: Verdict
    notes: list[str] = field(default_factory=list)  # why the run is incomplete, and similar

    def counts(self) -> dict[str, int]:
        totals = {outcome.value: 0 for outcome in Outcome}
        for check in self.checks:
            totals[check.outcome.value] += 1
        return totals

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]
