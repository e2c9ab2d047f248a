"""The suite runs as a pytest plugin (installed through the `pytest11` entry point): one test per check."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_pytest(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )


def test_plugin_runs_selected_checks_as_tests(tmp_path) -> None:
    done = run_pytest(tmp_path, "--sl-embedded", "--sl-select", "CAP", "--sl-select", "fork.idempotent_retry", "-v")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "capabilities.discovery_document PASSED" in done.stdout
    assert "5 passed, 1 skipped" in done.stdout  # CAP-UNADVERTISED-001 has nothing to check here


def test_plugin_selects_by_requirement_keyword(tmp_path) -> None:
    done = run_pytest(tmp_path, "--sl-embedded", "--sl-select", "CAP", "-k", "CAP_PUBLIC_001", "-q")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout


def test_plugin_is_inert_without_a_target(tmp_path) -> None:
    (tmp_path / "test_nothing.py").write_text("def test_ok():\n    assert 1 + 1 == 2\n")
    done = run_pytest(tmp_path, "-q")
    assert done.returncode == 0 and "1 passed" in done.stdout
