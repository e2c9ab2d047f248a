"""Progress while checks run: on a terminal, a bar, the current check, and failures as they happen;
off a terminal (a CI log), a plain line at least every `interval` seconds (chapters done, checks
done, failures so far) beside the failures as they happen, so a log never goes quiet for long."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
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
INTERVAL_S = 10.0  # at most this long between two progress lines off a terminal


class ProgressDisplay:
    def __init__(
        self,
        console: Console,
        total: int,
        enabled: bool = True,
        checks: Sequence[Check] = (),
        interval: float = INTERVAL_S,
    ) -> None:
        self.console = console
        self.enabled = enabled
        self.total = total
        self.lines = enabled and not console.is_terminal  # plain lines for a log
        self.interval = interval
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[current]}"),
            console=console,
            transient=True,
            disable=not enabled or self.lines,
        )
        self.task = self.progress.add_task("checks", total=total, current="")
        self._left: dict[str, int] = {}  # chapter -> checks not done yet
        for item in checks:
            self._left[item.chapter] = self._left.get(item.chapter, 0) + 1
        self._chapters = len(self._left)
        self._done = 0
        self._failures = 0
        self._current = ""
        self._started = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "ProgressDisplay":
        self.progress.__enter__()
        if self.lines:
            self._started = time.monotonic()
            self._thread = threading.Thread(target=self._tick, name="progress-lines", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.progress.__exit__(kind, value, tb)

    def line(self) -> str:
        """`progress: 3 of 20 chapters, 45 of 167 checks done, 2 failures so far (42 s; running fork.key_syntax)`."""
        with self._lock:
            chapters = sum(1 for left in self._left.values() if left == 0)
            running = f"; running {self._current}" if self._current else ""
            failures = f"{self._failures} failure{'s' if self._failures != 1 else ''} so far"
            chapter_part = f"{chapters} of {self._chapters} chapters, " if self._chapters else ""
            return (
                f"progress: {chapter_part}{self._done} of {self.total} checks done, {failures} "
                f"({time.monotonic() - self._started:.0f} s{running})"
            )

    def _tick(self) -> None:
        while not self._stop.wait(self.interval):
            self.console.print(self.line(), highlight=False, markup=False)

    def update(self, event: str, check: Check, result: CheckResult | None) -> None:
        if event == "start":
            with self._lock:
                self._current = check.name
            self.progress.update(self.task, current=check.name)
            return
        assert result is not None
        with self._lock:
            self._done += 1
            self._current = ""
            if check.chapter in self._left:
                self._left[check.chapter] -= 1
            if result.outcome in (Outcome.FAIL, Outcome.ERROR):
                self._failures += 1
        self.progress.advance(self.task)
        if result.outcome not in (Outcome.PASS, Outcome.SKIPPED, Outcome.OUT_OF_SCOPE):
            style = STYLE.get(result.outcome, "yellow")
            line = f"[{style}]{result.outcome.value:>16}[/{style}]  {check.name}"
            if result.outcome in (Outcome.FAIL, Outcome.ERROR):
                line += f"  [{', '.join(result.failed_requirements or result.requirements)}]"
            self.console.print(line, highlight=False)
