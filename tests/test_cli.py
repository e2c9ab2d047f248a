"""The command line: exit codes, reports on disk, expected failures, progress and summary."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conformance.cli import main
from conformance.preflight import ITEM_NAMES
from conformance.registry import all_checks, select
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
    selected = len(select(all_checks(), ("CAP", "fork.idempotent_retry")))
    summary = report["summary"]
    assert summary["fail"] == summary["error"] == 0 and report["suite_version"]
    assert summary["pass"] + summary["skipped"] == selected and summary["skipped"] <= 1  # not applicable here
    assert all("redacted" in token for token in report["config"]["tokens"])
    assert report["claim"] == {"profile": "full", "version": report["spec_version"], "source": "default"}
    assert {p["name"]: p["reached"] for p in report["profiles"]} == {"core": True, "full": True}
    assert [item["status"] for item in report["preflight"]] == ["ok"] * len(ITEM_NAMES)
    suites = ET.parse(paths["junit.xml"]).getroot()
    deployment_only = len(report["deployment_only"])
    assert deployment_only >= 1
    # JUnit counts are the console's; deployment-only requirements are properties, not test cases
    assert sum(int(s.get("tests", 0)) for s in suites.iter("testsuite")) == selected == int(suites.get("tests"))
    assert int(suites.get("skipped")) == sum(report["summary"][o] for o in ("skipped", "not-verified", "expected-failure", "out-of-scope"))
    first = suites.find("testsuite").find("properties")
    assert {p.get("name") for p in first} >= {f"deployment_only.{item['id']}" for item in report["deployment_only"]}
    assert "conformant" in paths["summary.md"].read_text()
    err = capsys.readouterr().err
    assert "seed 7" in err and "profiles at" in err and "removed " in err and "left behind" not in err


def test_unreachable_target_is_one_message_and_exit_2(monkeypatch, capsys) -> None:
    monkeypatch.delenv("SESSION_LINEAGE_CONFIG", raising=False)
    code = main(["check", "--target", "http://127.0.0.1:9", "--token", "a", "--token", "b", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("Connection refused") == 1 and "target unreachable" in err
    assert len(err.splitlines()) < 15 and "Traceback" not in err


def test_listing_checks(capsys) -> None:
    assert main(["check", "--list"]) == 0
    assert "fork.concurrent_identical_forks" in capsys.readouterr().out


def test_listing_into_a_closed_pipe_ends_quietly() -> None:
    """`check --list | head -1`: the reader leaves early; no BrokenPipe traceback, exit 0."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    listing = subprocess.Popen(
        [sys.executable, "-m", "conformance.cli", "check", "--list"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    )
    head = subprocess.run(["head", "-1"], stdin=listing.stdout, capture_output=True, text=True, timeout=120)
    listing.stdout.close()  # only `head` holds the read end now; it has exited
    errors = listing.stderr.read().decode()
    assert listing.wait(timeout=120) == 0, errors
    assert head.stdout.startswith("capabilities.") and len(head.stdout.splitlines()) == 1
    assert errors == ""


def test_output_not_going_to_a_terminal_is_not_wrapped(tmp_path, capsys) -> None:
    mutant = MUTANTS["fork_not_idempotent"]
    with serve_app(mutant.build(Settings(database_url=f"sqlite:///{tmp_path / 'm.db'}", tokens=TOKENS))) as server:
        code = main(["check", "--target", server.url, "--token", "cli-alice", "--token", "cli-bob", "--quiet",
                     "--select", "fork.idempotent_retry", "--seed", "3"])
    err = capsys.readouterr().err
    assert code == 1
    failure = next(line for line in err.splitlines() if line.startswith("FAIL  fork.idempotent_retry"))
    assert len(failure) > 120 and failure.endswith(")")  # the whole message, seed included, on one line
    verdict = err.splitlines()[-1]
    assert verdict.startswith("FAILED: not conformant to full") and verdict.endswith("(rerun with --seed 3)")
    assert all(line.startswith(("preflight ok: ", "session-lineage")) for line in err.splitlines()[:2])


def test_expected_failure_turns_a_failing_target_green_and_reports_it(tmp_path) -> None:
    mutant = MUTANTS["fork_not_idempotent"]
    expected = tmp_path / "expected.yaml"
    expected.write_text(
        "- check: fork.idempotent_retry\n  reason: keys not implemented yet\n  link: https://tracker.example/12\n"
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
    checks = {c["name"]: c for c in data["checks"]}
    assert checks["fork.idempotent_retry"]["outcome"] == "expected-failure"
    assert checks["fork.refused_fork_leaves_no_trace"]["outcome"] == "unexpected-pass"
    assert checks["fork.idempotent_retry"]["reason"] == "keys not implemented yet"
    assert checks["fork.idempotent_retry"]["link"] == "https://tracker.example/12"
    assert code == 0 and without == 1


def test_an_expected_failure_that_passes_fails_the_gate_only_when_strict(tmp_path, capsys) -> None:
    expected = tmp_path / "expected.yaml"
    report = tmp_path / "r.json"
    for entry in ("check: capabilities.discovery_document", "requirement: CAP-DOC-001"):
        expected.write_text(f"- {entry}\n  reason: believed broken\n  link: https://tracker.example/3\n")
        common = ["check", "--embedded", "--quiet", "--select", "capabilities.discovery_document",
                  "--expected-failures", str(expected), "--report-json", str(report)]
        assert main(common) == 0
        assert main(common + ["--strict"]) == 1, entry
        data = json.loads(report.read_text())
        stale = [c for c in data["checks"] if c["outcome"] == "unexpected-pass"] + [
            r for r in data["requirements"] if r["outcome"] == "unexpected-pass"
        ]
        assert len(stale) == 1 and stale[0]["link"] == "https://tracker.example/3"
        assert stale[0]["reason"] == "believed broken"
        assert data["exit_code"] == 1 and data["verdict"] == "not-conformant"
    assert "listed as an expected failure but passed" in capsys.readouterr().err


def test_markdown_appends_and_html_is_written(tmp_path) -> None:
    summary = tmp_path / "step-summary.md"
    summary.write_text("# Earlier CI step\n\nkept as it was\n")
    page = tmp_path / "report.html"
    common = ["check", "--embedded", "--quiet", "--select", "CAP", "--markdown", str(summary), "--html", str(page)]
    assert main(common) == 0
    assert main(common) == 0
    text = summary.read_text()
    assert text.startswith("# Earlier CI step\n\nkept as it was\n\n## Session Lineage conformance: PASSED")
    assert text.count("## Session Lineage conformance: PASSED") == 2
    html = page.read_text()
    assert "conformant: core" in html and "<details" in html
    assert "<script" not in html and " src=" not in html and "<link" not in html


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


needs_shell_tools = pytest.mark.skipif(
    not all(shutil.which(tool) for tool in ("sh", "curl", "python3")), reason="the reproducer runs sh, curl and python3"
)


def replay(script: str, tmp_path: Path, tokens: dict[str, str]) -> list[tuple[int, int]]:
    """Run a reproducer; for every step, the status the suite saw and the status of the replay."""
    path = tmp_path / "reproduce.sh"
    path.write_text(script)
    env = {**os.environ, **tokens}
    done = subprocess.run(["sh", str(path)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    seen = [int(m) for m in re.findall(r"the suite saw it answered (\d+)", done.stdout)]
    replayed = [int(m) for m in re.findall(r"^HTTP/1\.1 (\d+)", done.stdout, re.M)]
    return list(zip(seen, replayed, strict=True))


@needs_shell_tools
def test_a_reproducer_replays_the_whole_failing_check(tmp_path) -> None:
    mutant = MUTANTS["fork_not_idempotent"]
    report = tmp_path / "r.json"
    with serve_app(mutant.build(Settings(database_url=f"sqlite:///{tmp_path / 'm.db'}", tokens=TOKENS))) as server:
        code = main(["check", "--target", server.url, "--token", "cli-alice", "--token", "cli-bob", "--quiet",
                     "--select", "fork.idempotent_retry", "--report-json", str(report)])
        failing = next(c for c in json.loads(report.read_text())["checks"] if c["outcome"] == "fail")
        tokens = {"SESSION_LINEAGE_TOKEN_PRINCIPAL_1": "cli-alice", "SESSION_LINEAGE_TOKEN_PRINCIPAL_2": "cli-bob"}
        first, second = replay(failing["reproducer"], tmp_path, tokens), replay(failing["reproducer"], tmp_path, tokens)
    assert code == 1
    script = failing["reproducer"]
    assert script.startswith("#!/bin/sh\n") and "POST /sessions;" in script.split("\ncurl", 1)[0]  # set-up included
    assert "cli-alice" not in script and "[Filtered]" not in script
    assert len(first) >= 5 and all(seen == replayed for seen, replayed in first), first  # every step as the suite saw it
    assert first == second  # and again: each run uses fresh ids


@needs_shell_tools
def test_fuzz_failures_get_a_reproducer(tmp_path) -> None:
    from reference_impl.http import create_app

    base = create_app(Settings(database_url=f"sqlite:///{tmp_path / 'f.db'}", tokens=TOKENS))

    async def lineage_breaks(scope, receive, send):  # a 500 the fuzz layer must find
        if scope["type"] == "http" and scope["path"].endswith("/lineage"):
            await send({"type": "http.response.start", "status": 500, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"boom"})
            return
        await base(scope, receive, send)

    report = tmp_path / "r.json"
    with serve_app(lineage_breaks) as server:
        code = main(["check", "--target", server.url, "--token", "cli-alice", "--token", "cli-bob", "--quiet",
                     "--select", "fuzz.generated_valid_requests", "--seed", "4242", "--report-json", str(report)])
        failing = json.loads(report.read_text())["checks"][0]
        steps = replay(failing["reproducer"] or "", tmp_path, {"SESSION_LINEAGE_TOKEN_PRINCIPAL_1": "cli-alice"})
    assert code == 1 and failing["outcome"] == "fail"
    assert "ERR-NO-5XX-001" in failing["failed_requirements"]
    assert "[Filtered]" not in failing["message"] + failing["reproducer"]
    assert '"Authorization: Bearer $SESSION_LINEAGE_TOKEN_PRINCIPAL_1"' in failing["message"]
    assert "${SESSION_LINEAGE_TOKEN_PRINCIPAL_1}" in failing["reproducer"]
    assert steps == [(500, 500)]


def test_serve_is_the_reference_servers_own_command_line(tmp_path, capsys) -> None:
    """`session-lineage serve` hands its arguments to reference_impl/cli.py: same flags, same exits."""
    assert main(["serve", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: session-lineage serve [-h] [--database-url DATABASE_URL]")
    assert all(flag in out for flag in ("--tokens-file", "--legacy", "--port", "--workers", "--records-database-url"))
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text("a-token: [not, a, principal]\n")
    assert main(["serve", "--tokens-file", str(tokens)]) == 2
    assert capsys.readouterr().err.startswith(f"session-lineage: configuration error: {tokens}: ")


@pytest.mark.parametrize("workers", ["1", "2"])
def test_serve_on_a_database_it_cannot_open_is_one_line(tmp_path, capsys, workers: str) -> None:
    """With `--workers 2` the supervisor opens the database first (it reports the turns left
    running interrupted before any worker starts), so a URL it cannot open is the same one line."""
    url = f"sqlite:///{tmp_path / 'missing' / 'x.db'}"
    assert main(["serve", "--database-url", url, "--workers", workers, "--port", "1"]) == 2
    assert capsys.readouterr().err.splitlines()[-1].startswith(f"session-lineage: configuration error: cannot start on --database-url {url!r}: ")


def test_serve_on_an_inherited_socket_refuses_a_descriptor_that_is_not_one(tmp_path, capsys) -> None:
    """`--fd N` serves on a socket the parent bound (conformance/embedded.py hands its child one, so
    no other process can take the port in between); a descriptor that is not an open socket is a
    configuration error in one line, before anything starts."""
    with open(tmp_path / "plain.txt", "w") as plain:
        assert main(["serve", "--fd", str(plain.fileno())]) == 2
        assert capsys.readouterr().err == f"session-lineage: configuration error: --fd {plain.fileno()} is not a socket\n"
    closed = os.open(tmp_path / "gone.txt", os.O_CREAT | os.O_WRONLY)
    os.close(closed)
    assert main(["serve", "--fd", str(closed)]) == 2
    assert capsys.readouterr().err == (
        f"session-lineage: configuration error: --fd {closed} is not an open file descriptor of this process\n"
    )


def test_an_inherited_tcp_socket_is_served_as_tcp() -> None:
    """`--fd N` wraps the descriptor as the family it is. uvicorn's own `fd` setting takes every
    descriptor for a Unix socket; asyncio then leaves Nagle's algorithm on for the TCP connections
    it accepts, and every answer waits for the client's delayed acknowledgement."""
    from conformance.embedded import bound_socket
    from reference_impl.cli import inherited_socket

    with bound_socket() as bound:
        served = inherited_socket(os.dup(bound.fileno()))
        try:
            assert served.family == socket.AF_INET and served.type == socket.SOCK_STREAM
            assert served.getsockname() == bound.getsockname()
        finally:
            served.close()
