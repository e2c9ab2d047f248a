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
from conformance.profiles import describe
from conformance import matrix
from conformance.results import NOT_VERIFIABLE, CheckResult, Outcome, RunResult, Verdict

COLUMNS = (
    Outcome.PASS,
    Outcome.FAIL,
    Outcome.OUT_OF_SCOPE,
    Outcome.SKIPPED,
    Outcome.NOT_VERIFIED,
    Outcome.XFAIL,
    Outcome.XPASS,
    Outcome.ERROR,
)
LABELS = {
    Outcome.PASS: "pass",
    Outcome.FAIL: "fail",
    Outcome.OUT_OF_SCOPE: "out of scope",
    Outcome.SKIPPED: "skipped",
    Outcome.NOT_VERIFIED: "not verified",
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
    blocks = [_header(result)]
    if result.profiles:
        blocks.append(_profiles_table(result))
    blocks += [_counts_table(result), _chapter_table(result)]
    blocks += _matrices(result)
    failures = [c for c in result.checks if c.outcome in (Outcome.FAIL, Outcome.ERROR)]
    if failures:
        blocks.append(f"### Failures ({len(failures)})")
        blocks += [_failure(check) for check in failures]
    expected = [c for c in result.checks if c.outcome is Outcome.XFAIL]
    if expected:
        blocks.append(f"### Expected failures ({len(expected)})")
        blocks.append(
            "\n".join(f"- {_name(c)}: {_escape(c.reason or 'no reason given')}{_link(c.link)}" for c in expected)
        )
    unexpected = [c for c in result.checks if c.outcome is Outcome.XPASS]
    unexpected_requirements = [v for v in result.requirements if v.outcome is Outcome.XPASS]
    if unexpected or unexpected_requirements:
        blocks.append(f"### Unexpected passes ({len(unexpected) + len(unexpected_requirements)})")
        lines = [
            f"- {_name(c)}: listed as an expected failure ({_escape(c.reason or 'no reason given')}){_link(c.link)} "
            "but passed; remove it from the expected-failures file"
            for c in unexpected
        ]
        lines += [
            f"- {_code(v.id)}: listed as an expected failure ({_escape(v.reason or 'no reason given')}){_link(v.link)} "
            "but passed; remove it from the expected-failures file"
            for v in unexpected_requirements
        ]
        blocks.append("\n".join(lines))
    for outcome, title in (
        (Outcome.NOT_VERIFIED, "Not verified (the rule applies; its evidence could not be observed)"),
        (Outcome.SKIPPED, "Not verifiable in this run"),
        (Outcome.OUT_OF_SCOPE, "Out of scope"),
    ):
        listed = [c for c in result.checks if c.outcome is outcome]
        if listed:
            blocks.append(f"### {title} ({len(listed)})")
            items = "\n".join(f"- {_name(c)}: {_escape(c.reason or '')}" for c in listed)
            blocks.append(f"<details><summary>checks and reasons</summary>\n\n{items}\n\n</details>")
    if result.deployment_only:
        blocks.append(f"### {NOT_VERIFIABLE.capitalize()} ({len(result.deployment_only)})")
        blocks.append(
            "Only a deployment can observe these; the project's own tests check them for the reference server.\n\n"
            + "\n".join(
                f"- {_code(item['id'])} ({item['level']}): {_escape(item['title'])}: {NOT_VERIFIABLE}"
                for item in result.deployment_only
            )
        )
    return "\n\n".join(blocks) + "\n"


def write_markdown(result: RunResult, path: str | os.PathLike[str]) -> None:
    """Append the summary to `path` (a CI job summary collects several steps' output)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    existing = target.stat().st_size if target.exists() else 0
    with open(target, "a", encoding="utf-8") as handle:
        if existing:
            handle.write("\n")
        handle.write(render_markdown(result))


def _matrices(result: RunResult) -> list[str]:
    """The authorization matrix, wherever a check published one."""
    blocks = []
    for check in result.checks:
        details = check.details.get(matrix.DETAILS_KEY)
        if details:
            blocks.append(f"### Authorization matrix ({_escape(matrix.summary(details))})")
            blocks.append(
                f"From {_name(check)}: observed status per role (rows) and operation (columns) at each "
                "position of a three-owner chain; `!` marks a wrong answer, `-` a cell not checked.\n\n"
                + matrix.render_markdown(details)
            )
    return blocks


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
    if result.claim:
        facts.append(f"claim {_escape(result.claim['profile'])}@{_escape(result.claim['version'])} ({_escape(result.claim['source'])})")
    lines = [
        f"## Session Lineage conformance: {STATUS_WORDS[result.verdict]}",
        "",
        f"Verdict **{result.verdict.value}** (exit code {result.exit_code})  ",
    ]
    if result.summary:
        lines.append(f"{_escape(result.summary)}  ")
    lines.append(" · ".join(facts))
    lines += [f"- {_escape(note)}" for note in result.notes]
    if result.cleanup is not None:
        lines.append(f"- {_escape(result.cleanup.note)}")
    return "\n".join(lines)


def _profiles_table(result: RunResult) -> str:
    rows = ["| profile | version | claimed | result | why |", "| --- | --- | --- | --- | --- |"]
    for profile in result.profiles:
        why = "" if profile.reached else _escape(describe(profile, limit=10))
        rows.append(
            f"| {_escape(profile.name)} | {profile.version} | {'yes' if profile.claimed else ''} | {profile.status} | {why} |"
        )
    return "\n".join(rows)


def _link(link: str | None) -> str:
    return f" ([link]({_escape_url(link)}))" if link else ""


def _escape_url(url: str) -> str:
    return printable(url).replace(" ", "%20").replace("(", "%28").replace(")", "%29")


def _columns(result: RunResult) -> list[Outcome]:
    """Every outcome column; "not verified" only when a check or requirement ended so."""
    shown = any(c.outcome is Outcome.NOT_VERIFIED for c in result.checks) or any(
        v.outcome is Outcome.NOT_VERIFIED for v in result.requirements
    )
    return [o for o in COLUMNS if shown or o is not Outcome.NOT_VERIFIED]


def _counts_table(result: RunResult) -> str:
    checks = result.counts()
    requirements = result.requirement_counts()
    rows = ["| outcome | checks | requirements |", "| --- | ---: | ---: |"]
    rows += [f"| {LABELS[o]} | {checks[o.value]} | {requirements[o.value]} |" for o in _columns(result)]
    rows.append(f"| **total** | **{len(result.checks)}** | **{len(result.requirements)}** |")
    return "\n".join(rows)


def _chapter_table(result: RunResult) -> str:
    columns = _columns(result)
    rows = [
        "| chapter | " + " | ".join(LABELS[o] for o in columns) + " |",
        "| --- |" + " ---: |" * len(columns),
    ]
    for chapter, counts in chapter_counts(result).items():
        rows.append(f"| {_escape(chapter)} | " + " | ".join(str(counts[o]) for o in columns) + " |")
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
