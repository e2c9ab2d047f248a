"""Outcomes of a conformance run: per check, per requirement, per profile, and the verdict with its exit code."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class Outcome(str, enum.Enum):
    PASS = "pass"
    FAIL = "fail"  # the target violated a requirement, or cannot show one its claimed profile holds
    OUT_OF_SCOPE = "out-of-scope"  # outside the claimed profile (or newer than its version): counts neither way
    SKIPPED = "skipped"  # not applicable to this target (for example a key lifetime too long to wait out)
    # The rule applies, but the evidence it needs could not be observed on this target or in this
    # run (no-copy without write diagnostics, a timing margin that could not be established): never
    # a pass; fails the verdict only with `strict`.
    NOT_VERIFIED = "not-verified"
    XFAIL = "expected-failure"  # failed, and the target's expected-failures file lists it
    XPASS = "unexpected-pass"  # listed as an expected failure, but passed
    ERROR = "error"  # the suite itself broke, or the target stopped answering


class Verdict(str, enum.Enum):
    CONFORMANT = "conformant"
    NOT_CONFORMANT = "not-conformant"
    INCOMPLETE = "incomplete"


EXIT_CODES = {Verdict.CONFORMANT: 0, Verdict.NOT_CONFORMANT: 1, Verdict.INCOMPLETE: 3}
EXIT_USAGE = 2  # usage, configuration or preflight error: no check ran
NOT_VERIFIABLE = "not verifiable by the suite"


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
    reproducer: str | None = None  # shell script replaying the check's requests up to the failure
    exchange: Exchange | None = None
    duration_ms: float = 0.0
    seed: int | None = None
    reason: str | None = None  # why out of scope, skipped or not verified, or the expected-failure reason
    link: str | None = None  # the expected-failure entry's link, kept apart from its reason
    untestable: bool = False  # FAIL because the target lacks a capability the claimed profile needs
    details: dict[str, Any] = field(default_factory=dict)  # what the check published (the authorization matrix)


@dataclass
class RequirementVerdict:
    id: str
    level: str
    chapter: str
    title: str
    outcome: Outcome  # see runner.requirement_verdicts
    checks: list[str]
    in_scope: bool = True  # part of the claimed profile at the claimed version
    reason: str | None = None  # why out of scope, or the expected-failure reason
    link: str | None = None


@dataclass
class ProfileResult:
    """Whether a profile was reached at a version: every in-scope requirement met, none untestable."""

    name: str
    version: str
    title: str
    claimed: bool
    status: str  # "reached", "not reached" or "undetermined" (errors left requirements without a verdict)
    missing_capabilities: list[str] = field(default_factory=list)
    failed_requirements: list[str] = field(default_factory=list)  # failed or untestable
    undetermined_requirements: list[str] = field(default_factory=list)
    requirements: int = 0  # how many requirements of the profile the run judged
    # not verified, at a level that gates (MUST; SHOULD too with `strict`): named in the verdict line,
    # and with `strict` they keep the profile from being reached
    not_verified_requirements: list[str] = field(default_factory=list)
    strict: bool = False  # judged with `strict`: not-verified requirements keep it from being reached

    @property
    def reached(self) -> bool:
        return self.status == "reached"


@dataclass
class PreflightItem:
    name: str
    status: str  # "ok", "failed", "skipped" (by --skip-preflight) or "not run" (an earlier item failed)
    message: str  # one line: what was found, or what is wrong and how to fix it


@dataclass
class Cleanup:
    """What the suite created on the target and what became of it."""

    prefix: str
    sessions: list[str]
    removed: list[str]
    kept: bool
    note: str

    @property
    def left_behind(self) -> list[str]:
        removed = set(self.removed)
        return [session for session in self.sessions if session not in removed]


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
    claim: dict[str, str] = field(default_factory=dict)  # {"profile", "version", "source"}
    profiles: list[ProfileResult] = field(default_factory=list)
    summary: str = ""  # the verdict in words: "conformant: core 1.1.0; full not reached: ..."
    preflight: list[PreflightItem] = field(default_factory=list)
    deployment_only: list[dict[str, str]] = field(default_factory=list)  # id, level, chapter, title
    cleanup: Cleanup | None = None

    def counts(self) -> dict[str, int]:
        totals = {outcome.value: 0 for outcome in Outcome}
        for check in self.checks:
            totals[check.outcome.value] += 1
        return totals

    def requirement_counts(self) -> dict[str, int]:
        totals = {outcome.value: 0 for outcome in Outcome}
        for verdict in self.requirements:
            totals[verdict.outcome.value] += 1
        return totals

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]
