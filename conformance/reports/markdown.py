"""A Markdown summary for CI job pages (GitHub `$GITHUB_STEP_SUMMARY`): verdict first, then what to fix.

Everything a target controls (messages, reasons, response bodies) is escaped or fenced, so a
hostile or merely odd response cannot break the page layout.
"""

from __future__ import annotations

import html
import os
import re
from pathlib import Path

from conformance.curl import describe_response, printable
from conformance.results import CheckResult, Outcome, RunResult, Verdict

COLUMNS = (Outcome.PASS, Outcome.FAIL, Outcome.SKIPPED, Outcome.XFAIL, Outcome.XPASS, Outcome.ERROR)
LABELS = {
    Outcome.PASS: "pass",
    Outcome.FAIL: "fail",
    Outcome.SKIPPED: "skipped",
    Outcome.XFAIL: "expected failure",
    Outcome.XPASS: "unexpected pass",
    Outcome.ERROR: "error",
}
STATUS_WORDS = {
    Verdict.CONFORMANT: "PASSED",
    Verdict.NOT_CONFORMANT: "FAILED",
    Verdict.INCOMPLETE: "INCOMPLETE",
}
_MARKDOWN_SPECIALS = re.compile(r"([\\`*_\[\]|~#])")


def chapter_counts(result: RunResult) -> dict[str, dict[Outcome, int]]:
    """Check outcomes per chapter, chapters in the order the run met them."""
    table: dict[str, dict[Outcome, int]] = {}
    for check in result.checks:
        row = table.setdefault(check.chapter, {outcome: 0 for outcome in Outcome})
        row[check.outcome] += 1
    return table


def render_markdown(result: RunResult) -> str:
    """The whole summary as one Markdown document."""
    blocks = [_header(result), _counts_table(result), _chapter_table(result)]
    failures = [c for c in result.checks if c.outcome in (Outcome.FAIL, Outcome.ERROR)]
    if failures:
        blocks.append(f"### Failures ({len(failures)})")
        blocks += [_failure(check) for check in failures]
    expected = [c for c in result.checks if c.outcome is Outcome.XFAIL]
    if expected:
        blocks.append(f"### Expected failures ({len(expected)})")
        blocks.append("\n".join(f"- {_name(c)}: {_escape(c.reason or 'no reason given')}" for c in expected))
    unexpected = [c for c in result.checks if c.outcome is Outcome.XPASS]
    if unexpected:
        blocks.append(f"### Unexpected passes ({len(unexpected)})")
        blocks.append(
            "\n".join(
                f"- {_name(c)}: listed as an expected failure ({_escape(c.reason or 'no reason given')}) "
                "but passed; remove it from the expected-failures file"
                for c in unexpected
            )
        )
    skipped = [c for c in result.checks if c.outcome is Outcome.SKIPPED]
    if skipped:
        blocks.append(f"### Skipped ({len(skipped)})")
        items = "\n".join(f"- {_name(c)}: {_escape(c.reason or 'unsupported')}" for c in skipped)
        blocks.append(f"<details><summary>checks and reasons</summary>\n\n{items}\n\n</details>")
    return "\n\n".join(blocks) + "\n"


def write_markdown(result: RunResult, path: str | os.PathLike[str]) -> None:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render_markdown(result), encoding="utf-8")


def _header(result: RunResult) -> str:
    facts = [
        f"target {_code(result.target)}",
        f"suite {_escape(result.suite_version)}",
        f"spec {_escape(result.spec_version)}",
        f"seed {result.seed}",
        f"{result.duration_s:.1f} s",
    ]
    if result.strict:
        facts.append("strict")
    lines = [
        f"## Session Lineage conformance: {STATUS_WORDS[result.verdict]}",
        "",
        f"Verdict **{result.verdict.value}** (exit code {result.exit_code})  ",
        " · ".join(facts),
    ]
    lines += [f"- {_escape(note)}" for note in result.notes]
    return "\n".join(lines)


def _counts_table(result: RunResult) -> str:
    checks = result.counts()
    requirements = {outcome: 0 for outcome in Outcome}
    for verdict in result.requirements:
        requirements[verdict.outcome] += 1
    rows = ["| outcome | checks | requirements |", "| --- | ---: | ---: |"]
    rows += [f"| {LABELS[o]} | {checks[o.value]} | {requirements[o]} |" for o in COLUMNS]
    rows.append(f"| **total** | **{len(result.checks)}** | **{len(result.requirements)}** |")
    return "\n".join(rows)


def _chapter_table(result: RunResult) -> str:
    rows = [
        "| chapter | " + " | ".join(LABELS[o] for o in COLUMNS) + " |",
        "| --- |" + " ---: |" * len(COLUMNS),
    ]
    for chapter, counts in chapter_counts(result).items():
        rows.append(f"| {_escape(chapter)} | " + " | ".join(str(counts[o]) for o in COLUMNS) + " |")
    return "\n".join(rows)


def _failure(check: CheckResult) -> str:
    if check.outcome is Outcome.FAIL:
        ids = f"violates {', '.join(check.failed_requirements or check.requirements)}"
    else:
        ids = f"requirements {', '.join(check.requirements)}"
    lines = [f"**{check.outcome.name}** {_code(check.name)} · {check.level} · {ids}"]
    if check.message:
        lines += [""] + ["> " + _escape(line) for line in check.message.splitlines()]
    if check.reproducer or check.exchange:
        details = ["", f"<details><summary>{'reproduce' if check.reproducer else 'response'}</summary>", ""]
        if check.reproducer:
            details += [_fence(check.reproducer, "sh"), ""]
        if check.exchange:
            details += [_fence(describe_response(check.exchange), "text"), ""]
        lines += details + ["</details>"]
    return "\n".join(lines)


def _name(check: CheckResult) -> str:
    ids = f" [{', '.join(check.requirements)}]" if check.requirements else ""
    return _code(check.name) + ids


def _escape(text: str) -> str:
    return printable(_MARKDOWN_SPECIALS.sub(r"\\\1", html.escape(text, quote=False)))


def _code(text: str) -> str:
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    ticks = "`" * (longest + 1)
    return f"{ticks} {text} {ticks}" if longest else f"`{text}`"


def _fence(text: str, language: str) -> str:
    longest = max((len(run) for run in re.findall(r"`{3,}", text)), default=2)
    ticks = "`" * (longest + 1)
    return f"{ticks}{language}\n{text}\n{ticks}"


__all__ = ["render_markdown", "write_markdown", "chapter_counts", "LABELS", "COLUMNS", "STATUS_WORDS"]
