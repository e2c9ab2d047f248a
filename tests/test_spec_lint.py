"""An independent lint of spec/openapi.yaml: Redocly CLI (npm, pinned in spec/site/tools).

The configuration (spec/site/tools/redocly.yaml) extends Redocly's recommended rules, makes the
rules issue 19 names errors (unused components, undeclared security, missing operation ids,
invalid examples) and turns the two benign warnings off with their reasons. The document must lint
with no problem at all, warnings included; and each named rule must fire on a copy of the document
broken on purpose, so a rule switched off by mistake cannot pass unnoticed. Redocly is installed
with `npm ci` into spec/site/tools on first use; without Node.js and npm, or when npm cannot install
it (the registry is outside the project), the test skips, saying so with npm's own words.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

import spec
from conformance.spec_site import TOOLS_DIR, install_tools

CONFIG = TOOLS_DIR / "redocly.yaml"
# One worker would install and run it, but pytest 9.2 and pytest-xdist 3.8 no longer group tests
# (pytest-xdist issue 1386); `install_tools` keeps two workers from installing at once either way.
pytestmark = pytest.mark.xdist_group("redocly")


def _redocly() -> Path:
    binary = TOOLS_DIR / "node_modules" / ".bin" / "redocly"
    if binary.exists():
        return binary
    npm = shutil.which("npm")
    if shutil.which("node") is None or npm is None:
        pytest.skip("Redocly CLI needs Node.js and npm (Debian packages nodejs and npm)")
    done = install_tools(npm, binary)  # serialised: another worker may be installing them too
    if done is None:
        return binary
    if done.returncode != 0 or not binary.exists():  # the npm registry is outside this project: say so, never pass
        pytest.skip(f"npm ci could not install Redocly CLI (exit {done.returncode}): "
                    f"{(done.stderr or done.stdout).decode(errors='replace')[-400:]}")
    return binary


def lint(document: Path) -> dict[str, Any]:
    done = subprocess.run(
        [str(_redocly()), "lint", str(document), "--config", str(CONFIG), "--format=json"],
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.stdout.strip(), f"redocly printed nothing: {done.stderr.decode(errors='replace')[-800:]}"
    return json.loads(done.stdout)


def test_the_spec_lints_clean() -> None:
    report = lint(spec.SPEC_DIR / "openapi.yaml")
    problems = [f"{p['ruleId']} ({p['severity']}): {p['message']} at {p['location'][0].get('pointer')}" for p in report["problems"]]
    assert report["totals"] == {"errors": 0, "warnings": 0, "ignored": 0}, problems


def test_the_named_rules_fire_on_a_broken_copy(tmp_path: Path) -> None:
    shutil.copytree(spec.SPEC_DIR / "schemas", tmp_path / "schemas")
    document = copy.deepcopy(spec.load_yaml(spec.SPEC_DIR / "openapi.yaml"))  # the loaded document is shared (cached)
    document["components"]["parameters"]["NobodyUsesThis"] = {"name": "X-Unused", "in": "header", "schema": {"type": "string"}}
    me = document["paths"]["/me"]["get"]
    del me["operationId"]
    me["security"] = [{"undeclaredScheme": []}]
    limit = document["components"]["parameters"]["Limit"]
    limit["example"] = "not a number"
    broken = tmp_path / "openapi.yaml"
    broken.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    fired = {problem["ruleId"] for problem in lint(broken)["problems"] if problem["severity"] == "error"}
    expected = {"no-unused-components", "security-defined", "operation-operationId", "no-invalid-parameter-examples"}
    assert expected <= fired, f"rules that did not fire: {sorted(expected - fired)} (fired: {sorted(fired)})"


@pytest.mark.skipif(sys.platform == "win32", reason="the install lock is a POSIX file lock")
def test_two_installs_at_once_run_one_after_the_other(tmp_path: Path) -> None:
    """Two workers that need the tools at the same moment: one installs, the other waits and finds
    them (npm ci empties node_modules first, so two at once broke each other)."""
    log, marker = tmp_path / "log", tmp_path / "installed"
    npm = tmp_path / "npm"
    npm.write_text(f"#!/bin/sh\necho start >> '{log}'\nsleep 0.3\necho end >> '{log}'\ntouch '{marker}'\n")
    npm.chmod(0o755)
    results: list[Any] = []
    workers = [threading.Thread(target=lambda: results.append(install_tools(str(npm), marker))) for _ in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=30)
    assert log.read_text().split() == ["start", "end"], "the installs overlapped or both ran"
    assert sorted(result is None for result in results) == [False, True]
