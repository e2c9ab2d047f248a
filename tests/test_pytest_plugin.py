"""The suite runs as a pytest plugin (installed through the `pytest11` entry point): one test per check."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from conformance.registry import all_checks, select

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
    assert f"collected {len(select(all_checks(), ('CAP', 'fork.idempotent_retry')))} items" in done.stdout
    assert "session-lineage::capabilities.discovery_document PASSED" in done.stdout
    assert "5 passed, 1 skipped" in done.stdout  # CAP-UNADVERTISED-001 has nothing to check on a full server
    assert "\n::" not in done.stdout  # node ids name the suite, never start with `::`


def test_plugin_selects_by_requirement_keyword(tmp_path) -> None:
    done = run_pytest(tmp_path, "--sl-embedded", "--sl-select", "CAP", "-k", "CAP_PUBLIC_001", "-v")
    assert done.returncode == 0, done.stdout + done.stderr
    total = len(select(all_checks(), ("CAP",)))
    assert f"collected {total} items / {total - 1} deselected / 1 selected" in done.stdout
    assert f"1 passed, {total - 1} deselected" in done.stdout


def test_plugin_items_sit_beside_the_projects_own_tests(tmp_path) -> None:
    (tmp_path / "test_mine.py").write_text("def test_ok():\n    assert 1 + 1 == 2\n")
    done = run_pytest(tmp_path, "--sl-embedded", "--sl-select", "capabilities.discovery_document", "-v")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "collected 2 items" in done.stdout
    assert "test_mine.py::test_ok PASSED" in done.stdout
    assert "session-lineage::capabilities.discovery_document PASSED" in done.stdout


def test_plugin_stops_on_a_failed_preflight(tmp_path) -> None:
    done = run_pytest(tmp_path, "--sl-target", "http://127.0.0.1:9", "--sl-token", "a", "--sl-token", "b")
    assert done.returncode == 4, done.stdout + done.stderr  # pytest's usage error: nothing ran
    assert "preflight failed, no check ran" in done.stderr and "target unreachable" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout


def test_plugin_is_inert_without_a_target(tmp_path) -> None:
    (tmp_path / "test_nothing.py").write_text("def test_ok():\n    assert 1 + 1 == 2\n")
    done = run_pytest(tmp_path, "-q")
    assert done.returncode == 0 and "1 passed" in done.stdout
