"""The command line: exit codes, reports on disk, expected failures, progress and summary."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from conformance.cli import main
from conformance.embedded import serve_app
from reference_impl.settings import Settings
from tests.mutants import MUTANTS, all_mutants

all_mutants()
TOKENS = {"cli-alice": "alice", "cli-bob": "bob"}


def test_embedded_run_writes_every_report(tmp_path, capsys) -> None:
    paths = {name: tmp_path / name for name in ("report.json", "junit.xml", "summary.md")}
    code = main([
        "check", "--embedded", "--select", "CAP", "--select", "fork.idempotent_retry", "--seed", "7",
        "--report-json", str(paths["report.json"]), "--junit", str(paths["junit.xml"]), "--markdown", str(paths["summary.md"]),
    ])
    assert code == 0
    report = json.loads(paths["report.json"].read_text())
    assert report["verdict"] == "conformant" and report["seed"] == 7
    assert report["summary"]["pass"] == 4 and report["suite_version"]
    assert all("redacted" in token for token in report["config"]["tokens"])
    suites = ET.parse(paths["junit.xml"]).getroot()
    assert sum(int(s.get("tests", 0)) for s in suites.iter("testsuite")) == 4
    assert "conformant" in paths["summary.md"].read_text()
    assert "seed 7" in capsys.readouterr().err


def test_unreachable_target_is_incomplete(monkeypatch) -> None:
    monkeypatch.delenv("SESSION_LINEAGE_CONFIG", raising=False)
    code = main(["check", "--target", "http://127.0.0.1:9", "--token", "a", "--token", "b", "--quiet", "--select", "CAP"])
    assert code == 3


def test_listing_checks(capsys) -> None:
    assert main(["check", "--list"]) == 0
    assert "fork.concurrent_identical_forks" in capsys.readouterr().out


def test_expected_failure_turns_a_failing_target_green_and_reports_it(tmp_path) -> None:
    mutant = MUTANTS["fork_not_idempotent"]
    expected = tmp_path / "expected.yaml"
    expected.write_text(
        "- check: fork.idempotent_retry\n  reason: keys not implemented yet\n"
        "- check: fork.concurrent_identical_forks\n  reason: keys not implemented yet\n"
        "- check: fork.refused_fork_leaves_no_trace\n  reason: listed, but it passes\n"
    )
    report = tmp_path / "r.json"
    with serve_app(mutant.build(Settings(database_url=f"sqlite:///{tmp_path / 'm.db'}", tokens=TOKENS))) as server:
        args = ["check", "--target", server.url, "--token", "cli-alice", "--token", "cli-bob", "--quiet",
                "--select", "fork.idempotent_retry", "--select", "fork.concurrent", "--select", "fork.refused",
                "--expected-failures", str(expected), "--report-json", str(report)]
        code = main(args)
        without = main(args[:-4])
    data = json.loads(report.read_text())
    outcomes = {c["name"]: c["outcome"] for c in data["checks"]}
    assert outcomes["fork.idempotent_retry"] == "expected-failure"
    assert outcomes["fork.refused_fork_leaves_no_trace"] == "unexpected-pass"
    assert code == 0 and without == 1


def test_should_failures_gate_only_when_strict(tmp_path) -> None:
    from reference_impl.http.problems import problem
    from tests.mutants import reference_app

    base = reference_app(Settings(database_url=f"sqlite:///{tmp_path / 's.db'}", tokens=TOKENS))

    async def discovery_needs_credentials(scope, receive, send):  # breaks only a SHOULD
        headers = dict(scope.get("headers", []))
        if scope["type"] == "http" and scope["path"] == "/capabilities" and b"authorization" not in headers:
            await problem("unauthenticated", "credentials required")(scope, receive, send)
            return
        await base(scope, receive, send)

    with serve_app(discovery_needs_credentials) as server:
        common = ["check", "--target", server.url, "--token", "cli-alice", "--token", "cli-bob", "--quiet", "--select", "CAP"]
        assert main(common) == 0
        assert main(common + ["--strict"]) == 1
