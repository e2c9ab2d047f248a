"""The terminal summary: a table per chapter, one line per failure, the profiles reached, and how to
replay the run.

Target-controlled text is printed as plain `Text`, never as rich markup, so a message holding
`[brackets]` is shown as it is. Output that is not going to a terminal is never wrapped.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from conformance.curl import printable
from conformance.profiles import describe
from conformance.reports.markdown import COLUMNS, LABELS, STATUS_WORDS, chapter_counts
from conformance import matrix
from conformance.reports import round_trips
from conformance.reports.terminal import make_console
from conformance.results import NOT_VERIFIABLE, Outcome, PreflightItem, RunResult, Verdict

STYLES = {
    Outcome.PASS: "green",
    Outcome.FAIL: "bold red",
    Outcome.OUT_OF_SCOPE: "dim",
    Outcome.SKIPPED: "yellow",
    Outcome.NOT_VERIFIED: "yellow",
    Outcome.XFAIL: "yellow",
    Outcome.XPASS: "magenta",
    Outcome.ERROR: "bold red",
}
VERDICT_STYLES = {
    Verdict.CONFORMANT: "bold green",
    Verdict.NOT_CONFORMANT: "bold red",
    Verdict.INCOMPLETE: "bold yellow",
}
ALWAYS_SHOWN = (Outcome.PASS, Outcome.FAIL, Outcome.ERROR)
PREFLIGHT_STYLES = {"ok": "green", "failed": "bold red", "skipped": "yellow", "not run": "dim"}


def render_preflight(items: list[PreflightItem], console: Console) -> None:
    """One line when every item passed; otherwise one line per item, failures saying what to fix."""
    if all(item.status != "failed" for item in items):
        line = Text("preflight ok: ", style="green")
        line.append(", ".join(f"{item.name} ({printable(item.message)})" for item in items), style="dim")
        console.print(line)
        return
    failed = [item.name for item in items if item.status == "failed"]
    console.print(Text(f"preflight failed: {', '.join(failed)}", style="bold red"))
    for item in items:
        line = Text(f"  {item.status:<8} ", style=PREFLIGHT_STYLES.get(item.status, ""))
        line.append(f"{item.name}: {printable(item.message)}")
        console.print(line)
    console.print(Text("no check ran: fix the set-up above and run again (exit code 2)", style="bold red"))


def render_console(result: RunResult, console: Console) -> None:
    """Print the summary table, the failures, the profiles and the verdict line to `console`."""
    totals = result.counts()
    columns = [o for o in COLUMNS if o in ALWAYS_SHOWN or totals[o.value]]
    table = Table(title="Session Lineage conformance", show_footer=True, title_justify="left")
    table.add_column("chapter", footer="total")
    for outcome in columns:
        table.add_column(LABELS[outcome], justify="right", footer=str(totals[outcome.value]))
    for chapter, counts in chapter_counts(result).items():
        cells = [Text(str(counts[o]), style=STYLES[o] if counts[o] else "dim") for o in columns]
        table.add_row(Text(printable(chapter)), *cells)
    console.print(table)

    for check in result.checks:
        if check.outcome not in (Outcome.FAIL, Outcome.ERROR, Outcome.XPASS):
            continue
        ids = check.failed_requirements or check.requirements
        line = Text()
        label = "XPASS" if check.outcome is Outcome.XPASS else check.outcome.name
        line.append(f"{label:<5} ", style=STYLES[check.outcome])
        line.append(f"{check.name}  [{', '.join(ids)}]  ")
        if check.outcome is Outcome.XPASS:
            link = f", {check.link}" if check.link else ""
            first = f"listed as an expected failure ({check.reason or 'no reason given'}{link}) but passed"
        else:
            first = check.message.splitlines()[0] if check.message else ""
        line.append(printable(first if len(first) <= 240 else first[:237] + "..."))
        console.print(line)
    for check in result.checks:  # skipped and not-verified checks, named with their reason (the counts alone say too little)
        if check.outcome in (Outcome.SKIPPED, Outcome.NOT_VERIFIED):
            label = "SKIP  " if check.outcome is Outcome.SKIPPED else "NOT VERIFIED  "
            line = Text(label, style=STYLES[check.outcome])
            line.append(f"{check.name}  [{', '.join(check.requirements)}]  ")
            line.append(printable(check.reason or check.message or "not verifiable in this run"))
            console.print(line)
    for check in result.checks:  # what each cost check counted, by depth, and the spans of a failure
        line_text = round_trips.summary(check)
        if line_text:
            console.print(Text(f"{check.name}: {line_text}", style="dim"), soft_wrap=True)
        worst = round_trips.offending(check)
        if worst is not None:
            console.print(Text(f"  offending request: {printable(round_trips.offending_text(worst))}"), soft_wrap=True)
    for check in result.checks:
        details = check.details.get(matrix.DETAILS_KEY)
        if details:
            console.print(Text(f"authorization matrix ({check.name}): {matrix.summary(details)}", style="bold"))
            console.print(Text(matrix.render_text(details)), soft_wrap=True)
    for note in result.notes:
        console.print(Text(f"note: {printable(note)}", style="yellow"))
    if result.deployment_only:
        ids = ", ".join(item["id"] for item in result.deployment_only)
        console.print(Text(f"{NOT_VERIFIABLE} (deployment-only): {ids}", style="dim"))
    if result.profiles:
        parts, stated = [], {}
        for profile in result.profiles:
            status = profile.status if profile.reached else f"{profile.status}: {describe(profile, stated=stated)}"
            parts.append(f"{profile.name}{' (claimed)' if profile.claimed else ''} {status}")
        version = result.profiles[0].version
        console.print(Text(f"profiles at {version}: " + " · ".join(parts)))
    if result.cleanup is not None:
        console.print(Text(result.cleanup.note, style="dim"))

    verdict = Text()
    verdict.append(f"{STATUS_WORDS[result.verdict]}: {result.summary or result.verdict.value}", style=VERDICT_STYLES[result.verdict])
    verdict.append(f"  exit code {result.exit_code}  seed {result.seed}  (rerun with --seed {result.seed})")
    console.print(verdict)


__all__ = ["render_console", "render_preflight", "make_console"]
