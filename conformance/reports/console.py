"""The terminal summary: a table per chapter, one line per failure, and how to replay the run.

Target-controlled text is printed as plain `Text`, never as rich markup, so a message holding
`[brackets]` is shown as it is.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from conformance.curl import printable
from conformance.reports.markdown import COLUMNS, LABELS, STATUS_WORDS, chapter_counts
from conformance.results import Outcome, RunResult, Verdict

STYLES = {
    Outcome.PASS: "green",
    Outcome.FAIL: "bold red",
    Outcome.SKIPPED: "dim",
    Outcome.XFAIL: "yellow",
    Outcome.XPASS: "magenta",
    Outcome.ERROR: "bold red",
}
VERDICT_STYLES = {
    Verdict.CONFORMANT: "bold green",
    Verdict.NOT_CONFORMANT: "bold red",
    Verdict.INCOMPLETE: "bold yellow",
}


def render_console(result: RunResult, console: Console) -> None:
    """Print the summary table, the failures and the verdict line to `console`."""
    table = Table(title="Session Lineage conformance", show_footer=True, title_justify="left")
    totals = result.counts()
    table.add_column("chapter", footer="total")
    for outcome in COLUMNS:
        table.add_column(LABELS[outcome], justify="right", footer=str(totals[outcome.value]))
    for chapter, counts in chapter_counts(result).items():
        cells = [Text(str(counts[o]), style=STYLES[o] if counts[o] else "dim") for o in COLUMNS]
        table.add_row(Text(printable(chapter)), *cells)
    console.print(table)

    for check in result.checks:
        if check.outcome not in (Outcome.FAIL, Outcome.ERROR):
            continue
        ids = check.failed_requirements or check.requirements
        line = Text()
        line.append(f"{check.outcome.name:<5} ", style=STYLES[check.outcome])
        line.append(f"{check.name}  [{', '.join(ids)}]  ")
        first = check.message.splitlines()[0] if check.message else ""
        line.append(printable(first if len(first) <= 240 else first[:237] + "..."))
        console.print(line)
    for note in result.notes:
        console.print(Text(f"note: {printable(note)}", style="yellow"))

    verdict = Text()
    verdict.append(
        f"{STATUS_WORDS[result.verdict]}: {result.verdict.value}", style=VERDICT_STYLES[result.verdict]
    )
    verdict.append(f"  exit code {result.exit_code}  seed {result.seed}  (rerun with --seed {result.seed})")
    console.print(verdict)


__all__ = ["render_console"]
