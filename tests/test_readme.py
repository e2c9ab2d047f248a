"""The README runs as written: its ```sh blocks, run in a temporary directory against the reference.

The two set-up commands (they install from the network and run the tests themselves) and the
`pytest --deep` command are left out; every other shell block runs, in order, in one directory:
the serve + check example (five principals, the outsider in another project) must pass, the gate
example must gate clean, and the sample summary's mutant run must fail exactly as the README shows.
Ports are swapped for free ones. Documentation that drifts fails here.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from conformance.embedded import free_port

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
PORTS = ("8080", "58899")


def blocks(kind: str) -> list[str]:
    return [body for lang, body in BLOCK.findall(README.read_text(encoding="utf-8")) if lang == kind]


def runnable() -> list[str]:
    """The shell blocks a reader runs after the set-up: not the installs, not the test runs."""
    return [body for body in blocks("sh") if "pip install" not in body and "pytest" not in body]


def test_the_readme_is_read_as_expected() -> None:
    """The blocks this file relies on are there, and later commands work in a fresh shell."""
    shell = blocks("sh")
    assert sum("pip install" in body for body in shell) == 1 and any("pytest --deep" in body for body in shell)
    assert [("session-lineage serve" in body, "gate" in body, "mutant_server" in body) for body in runnable()] == [
        (True, False, False), (False, True, False), (False, False, True)
    ]
    for body in shell:  # a bare `session-lineage` is "command not found" in a fresh shell
        assert not re.search(r"(^|[;&|]\s*)session-lineage\b", body, re.M), body
    text = README.read_text(encoding="utf-8")
    assert "pip install session-lineage" not in text  # not published on PyPI
    assert "SESSION_LINEAGE_TOKENS=a,b" in text and "{principal: P, project: Q}" in text


def _sample() -> list[str]:
    """The output the README shows for the mutant run."""
    return next(body for body in blocks("") if body.startswith("$ ")).splitlines()


@pytest.mark.deep
@pytest.mark.skipif(shutil.which("curl") is None, reason="the README's wait loop uses curl")
def test_the_readmes_commands_run_as_written(tmp_path: Path) -> None:
    (tmp_path / ".venv").symlink_to(ROOT / ".venv")
    env = {key: value for key, value in os.environ.items() if not key.startswith("SESSION_LINEAGE_")}
    env["PYTHONPATH"] = str(ROOT)  # `python -m tests.mutant_server`, as from the checkout
    ports = {port: str(free_port()) for port in PORTS}
    groups: list[int] = []
    results = []
    try:
        for number, body in enumerate(runnable()):
            for documented, free in ports.items():
                body = body.replace(documented, free)
            log = tmp_path / f"block-{number}.log"  # a file, not a pipe: the servers the block leaves keep it open
            with open(log, "w", encoding="utf-8") as sink:
                process = subprocess.Popen(
                    ["sh", "-c", body], cwd=tmp_path, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True,
                )
                groups.append(process.pid)
                code = process.wait(timeout=300)
            results.append((code, log.read_text(encoding="utf-8")))
    finally:
        for group in groups:  # the servers the blocks left running in the background
            try:
                os.killpg(group, signal.SIGTERM)
            except ProcessLookupError:
                pass
    (example, example_out), (gate, gate_out), (mutant, mutant_out) = results

    assert example == 0, example_out[-3000:]
    assert "PASSED: conformant: core " in example_out and ": none left" in example_out
    assert (tmp_path / "report.html").is_file() and (tmp_path / "report.json").is_file()

    assert gate == 0, gate_out[-3000:]
    assert "## Session Lineage release gate: PASSED" in gate_out and "not compared" in gate_out

    assert mutant == 1, mutant_out[-3000:]
    lines = mutant_out.splitlines()
    sample = _sample()

    def named(rows: list[str]) -> list[str]:
        return [" ".join(row.split()[:2]) for row in rows if re.match(r"^(FAIL|SKIP|\s+fail) ", row)]

    assert named(lines) == named(sample), mutant_out
    assert [row for row in lines if row.startswith("│ total")] == [row for row in sample if row.startswith("│ total")]
    assert lines[-1].startswith("FAILED: not conformant") and sample[-1].startswith("FAILED: not conformant")
    assert any(row.endswith("verified by listing as 5 principals: none left") for row in lines)
