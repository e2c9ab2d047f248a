"""JUnit XML, the format every CI system can display: one test suite per spec chapter.

Expected failures, out-of-scope checks, checks not verifiable in this run and checks whose rule
could not be verified ("not verified: ...") are reported as skipped (they must not turn the CI job red), and an unexpected pass is a passing test case that
says so, because the verdict, not the XML, decides the exit code. Deployment-only requirements
are no test cases (the counts match the console's): each chapter suite's properties list them,
"not verifiable by the suite".
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from pathlib import Path

from conformance.curl import describe_response, printable
from conformance import matrix
from conformance.results import NOT_VERIFIABLE, CheckResult, Outcome, RunResult

SUITE_NAME = "session-lineage-conformance"


def build_junit(result: RunResult) -> ET.Element:
    """The `<testsuites>` element: one `<testsuite>` per chapter, in the order the run met them."""
    chapters: dict[str, list[CheckResult]] = {}
    for check in result.checks:
        chapters.setdefault(check.chapter, []).append(check)
    root = ET.Element("testsuites", _totals(result.checks, SUITE_NAME))
    root.set("time", _seconds(result.duration_s))
    facts = [
        ("suite_version", result.suite_version),
        ("spec_version", result.spec_version),
        ("target", result.target),
        ("seed", str(result.seed)),
        ("verdict", result.verdict.value),
        ("summary", result.summary),
    ]
    if result.claim:
        facts.append(("claim", f"{result.claim['profile']}@{result.claim['version']}"))
    facts += [(f"profile.{p.name}", p.status) for p in result.profiles]
    if result.deployment_only:
        facts.append(("deployment_only", f"{NOT_VERIFIABLE}: {', '.join(item['id'] for item in result.deployment_only)}"))
        facts += [(f"deployment_only.{item['id']}", item["title"]) for item in result.deployment_only]
    for chapter, checks in chapters.items():
        suite = ET.SubElement(root, "testsuite", _totals(checks, f"{SUITE_NAME}.{chapter}"))
        suite.set("timestamp", result.started_at)
        properties = ET.SubElement(suite, "properties")
        for name, value in facts:
            ET.SubElement(properties, "property", name=name, value=printable(value))
        for check in checks:
            suite.append(_testcase(check))
    return root


def write_junit(result: RunResult, path: str | os.PathLike[str]) -> None:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tree = ET.ElementTree(build_junit(result))
    ET.indent(tree)
    tree.write(target, encoding="utf-8", xml_declaration=True)


def _totals(checks: list[CheckResult], name: str) -> dict[str, str]:
    def count(*outcomes: Outcome) -> str:
        return str(sum(1 for check in checks if check.outcome in outcomes))

    return {
        "name": name,
        "tests": str(len(checks)),
        "failures": count(Outcome.FAIL),
        "errors": count(Outcome.ERROR),
        "skipped": count(Outcome.SKIPPED, Outcome.NOT_VERIFIED, Outcome.XFAIL, Outcome.OUT_OF_SCOPE),
        "time": _seconds(sum(check.duration_ms for check in checks) / 1000),
    }


def _testcase(check: CheckResult) -> ET.Element:
    name = f"{check.name} [{', '.join(check.requirements)}]" if check.requirements else check.name
    case = ET.Element(
        "testcase",
        classname=f"conformance.{check.chapter}",
        name=printable(name),
        time=_seconds(check.duration_ms / 1000),
    )
    if check.outcome is Outcome.FAIL:
        failure = ET.SubElement(
            case, "failure", message=printable(check.message), type=f"{check.level} violation"
        )
        failure.text = _details(check)
    elif check.outcome is Outcome.ERROR:
        error = ET.SubElement(case, "error", message=printable(check.message), type="error")
        error.text = _details(check)
    elif check.outcome is Outcome.SKIPPED:
        ET.SubElement(case, "skipped", message=printable(check.reason or "not verifiable in this run"))
    elif check.outcome is Outcome.NOT_VERIFIED:
        ET.SubElement(case, "skipped", message=printable(f"not verified: {check.reason or 'its evidence could not be observed'}"))
    elif check.outcome is Outcome.OUT_OF_SCOPE:
        ET.SubElement(case, "skipped", message=printable(f"out of scope: {check.reason or 'outside the claimed profile'}"))
    elif check.outcome is Outcome.XFAIL:
        skipped = ET.SubElement(
            case, "skipped", message=printable(f"expected failure: {check.reason or 'no reason given'}")
        )
        skipped.text = _details(check)
    elif check.outcome is Outcome.XPASS:
        out = ET.SubElement(case, "system-out")
        out.text = printable(
            f"listed as an expected failure ({check.reason or 'no reason given'}) but passed; "
            "remove it from the expected-failures file"
        )
    details = check.details.get(matrix.DETAILS_KEY)
    if details:
        out = case.find("system-out")
        if out is None:
            out = ET.SubElement(case, "system-out")
            out.text = ""
        out.text = (out.text + "\n\n" if out.text else "") + printable(
            f"authorization matrix: {matrix.summary(details)}\n{matrix.render_text(details)}"
        )
    if check.link:
        properties = ET.Element("properties")
        ET.SubElement(properties, "property", name="link", value=printable(check.link))
        case.insert(0, properties)
    return case


def _details(check: CheckResult) -> str:
    parts = [check.message]
    if check.failed_requirements:
        parts.append(f"violated: {', '.join(check.failed_requirements)}")
    if check.reproducer:
        parts.append(f"reproduce:\n{check.reproducer}")
    if check.exchange:
        parts.append(f"response:\n{describe_response(check.exchange)}")
    return printable("\n\n".join(part for part in parts if part))


def _seconds(value: float) -> str:
    return f"{value:.3f}"


__all__ = ["build_junit", "write_junit"]
