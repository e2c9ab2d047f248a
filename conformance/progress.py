"""Terminal progress while checks run: a bar, the current check, and failures as they happen."""

from __future__ import annotations

from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from conformance.registry import Check
from conformance.results import CheckResult, Outcome

STYLE = {
    Outcome.PASS: "green",
    Outcome.FAIL: "bold red",
    Outcome.ERROR: "bold magenta",
    Outcome.SKIPPED: "yellow",
    Outcome.OUT_OF_SCOPE: "dim",
    Outcome.XFAIL: "cyan",
    Outcome.XPASS: "bold yellow",
}


class ProgressDisplay:
    def __init__(self, console: Console, total: int, enabled: bool = True) -> None:
        self.console = console
        self.enabled = enabled
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[current]}"),
            console=console,
            transient=True,
            disable=not enabled,
        )
        self.task = self.progress.add_task("checks", total=total, current="")

    def __enter__(self) -> "ProgressDisplay":
        self.progress.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self.progress.__exit__(kind, value, tb)

    def update(self, event: str, check: Check, result: CheckResult | None) -> None:
        if event == "start":
            self.progress.update(self.task, current=check.name)
            return
        assert result is not None
        self.progress.advance(self.task)
        if result.outcome not in (Outcome.PASS, Outcome.SKIPPED, Outcome.OUT_OF_SCOPE):
            style = STYLE[result.outcome]
            line = f"[{style}]{result.outcome.value:>16}[/{style}]  {check.name}"
            if result.outcome in (Outcome.FAIL, Outcome.ERROR):
                line += f"  [{', '.join(result.failed_requirements or result.requirements)}]"
            self.console.print(line, highlight=False)
