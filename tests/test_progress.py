"""A quiet, informative log: progress lines off a terminal, the embedded server's log in a file."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console

from conformance.progress import INTERVAL_S, ProgressDisplay
from conformance.registry import all_checks, select
from conformance.results import CheckResult, Outcome

ROOT = Path(__file__).resolve().parents[1]


def _result(check, outcome: Outcome) -> CheckResult:
    return CheckResult(check.name, check.title, check.chapter, list(check.requirements), outcome)


def test_off_a_terminal_a_progress_line_comes_at_least_every_interval() -> None:
    assert INTERVAL_S <= 10
    checks = select(all_checks(), ("capabilities", "sessions.create_root_session"))
    chapter = [c for c in checks if c.chapter == "capabilities"]
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=False, width=250)
    with ProgressDisplay(console, len(checks), checks=checks, interval=0.05) as display:
        for item in chapter:
            display.update("start", item, None)
            display.update("done", item, _result(item, Outcome.FAIL if item is chapter[0] else Outcome.PASS))
        display.update("start", checks[-1], None)
        deadline = time.monotonic() + 5
        while "running sessions.create_root_session" not in buffer.getvalue() and time.monotonic() < deadline:
            time.sleep(0.02)
    lines = [line for line in buffer.getvalue().splitlines() if line.startswith("progress: ")]
    assert lines, buffer.getvalue()
    assert lines[-1].startswith(
        f"progress: 1 of 2 chapters, {len(chapter)} of {len(checks)} checks done, 1 failure so far ("
    ) and lines[-1].endswith("; running sessions.create_root_session)")
    assert "fail  " in buffer.getvalue()  # the failure itself, as it happened


def test_on_a_terminal_or_quiet_no_progress_lines() -> None:
    checks = select(all_checks(), ("capabilities",))
    for console, enabled in ((Console(file=io.StringIO(), force_terminal=True), True), (Console(file=io.StringIO()), False)):
        with ProgressDisplay(console, len(checks), enabled=enabled, checks=checks, interval=0.01):
            time.sleep(0.1)
        assert "progress: " not in console.file.getvalue()


def test_the_embedded_servers_log_goes_to_a_file_not_the_console(tmp_path: Path) -> None:
    """The protocol probes make uvicorn warn "Invalid HTTP request received": into the log file only."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env = {k: v for k, v in env.items() if not k.startswith("SESSION_LINEAGE_")}
    done = subprocess.run(
        [sys.executable, "-m", "conformance.cli", "check", "--embedded", "--select", "errors.protocol_level_rejections"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "Invalid HTTP request" not in done.stdout + done.stderr
    log = done.stderr.split("its log: ", 1)[1].split(")", 1)[0]
    assert "Invalid HTTP request received" in Path(log).read_text()
    Path(log).unlink()
