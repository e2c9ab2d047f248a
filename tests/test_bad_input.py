"""Every command's bad input: one line on stderr naming what is wrong, exit 2, never a traceback.

One table across `check`, `serve`, `gate`, `import`, `docs` and `bundle`: missing files, unreadable
files, wrong shapes, unreachable targets, malformed arguments. `{tmp}` in an argument is the test's
temporary directory, where the files below are written first.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conformance.cli import main

UNREACHABLE = "http://127.0.0.1:9"
TWO = ["--token", "a", "--token", "b"]
OFFLINE = "reachable,capabilities,tokens,principals,replicas"  # preflight items that need the target
FILES = {
    "binary.bin": b"\xff\xfe\x00\x81 not text",
    "list.yaml": b"- just\n- a list\n",
    "broken.yaml": b"key: [unclosed\nother: 1\n",
    "tokens-list.yaml": b"- tok-a\n- tok-b\n",
    "tokens-bad-entry.yaml": b"tok-a: {who: alice}\n",
    "misspelled.yaml": b"- check: fork.idempotent_retry\n  reason: fine\n- chek: fork.key_syntax\n  reason: typo\n",
    "report.json": json.dumps({"requirements": [{"id": "A-001", "outcome": "pass"}]}).encode(),
    "not-a-report.json": json.dumps({"verdict": "conformant"}).encode(),
    "not-json.json": b"{nope",
    "history.jsonl": b'{"type":"session_meta","payload":{"id":"x"}}\n',
}

# (id, argv, what the one line must say)
CASES = [
    # check
    ("check-config-missing", ["check", "--config", "{tmp}/absent.yaml"], "configuration file '{tmp}/absent.yaml' does not exist"),
    ("check-config-unreadable", ["check", "--config", "{tmp}/binary.bin"], "configuration file '{tmp}/binary.bin' cannot be read"),
    ("check-config-wrong-shape", ["check", "--config", "{tmp}/list.yaml"], "configuration file '{tmp}/list.yaml' must hold a mapping"),
    ("check-config-broken-yaml", ["check", "--config", "{tmp}/broken.yaml"], "is not valid YAML: "),
    ("check-target-not-a-url", ["check", "--target", "example.org", *TWO], "invalid 'target' (SESSION_LINEAGE_TARGET): expected an http:// or https:// URL"),
    ("check-one-token", ["check", "--target", UNREACHABLE, "--token", "a"], "expected bearer tokens of at least two principals"),
    ("check-unknown-option", ["check", "--targte", UNREACHABLE], "unrecognized arguments: --targte"),
    ("check-unreachable", ["check", "--quiet", "--target", UNREACHABLE, *TWO, "--select", "fork"], "failed   reachable: target unreachable: GET http://127.0.0.1:9/capabilities"),
    ("check-expected-failures-missing", ["check", "--quiet", "--target", UNREACHABLE, *TWO, "--select", "fork", "--skip-preflight", OFFLINE, "--expected-failures", "{tmp}/absent.yaml"], "expected-failures file '{tmp}/absent.yaml' does not exist"),
    ("check-expected-failures-misspelled", ["check", "--quiet", "--target", UNREACHABLE, *TWO, "--select", "fork", "--skip-preflight", OFFLINE, "--expected-failures", "{tmp}/misspelled.yaml"], "expected-failures file '{tmp}/misspelled.yaml', entry 2 has unknown key 'chek' (known: check, requirement, reason, link)"),
    ("check-report-unwritable", ["check", "--quiet", "--target", UNREACHABLE, *TWO, "--select", "fork", "--skip-preflight", OFFLINE, "--junit", "{tmp}/binary.bin/junit.xml"], "cannot write the JUnit report to {tmp}/binary.bin/junit.xml"),
    # serve
    ("serve-tokens-missing", ["serve", "--tokens-file", "{tmp}/missing.yaml"], "tokens file '{tmp}/missing.yaml' does not exist"),
    ("serve-tokens-directory", ["serve", "--tokens-file", "{tmp}"], "tokens file '{tmp}' does not exist (or is not a file)"),
    ("serve-tokens-unreadable", ["serve", "--tokens-file", "{tmp}/binary.bin"], "tokens file '{tmp}/binary.bin' cannot be read"),
    ("serve-tokens-broken-yaml", ["serve", "--tokens-file", "{tmp}/broken.yaml"], "is not valid YAML (line"),
    ("serve-tokens-wrong-shape", ["serve", "--tokens-file", "{tmp}/tokens-list.yaml"], "the tokens file must map bearer tokens to principals"),
    ("serve-tokens-bad-entry", ["serve", "--tokens-file", "{tmp}/tokens-bad-entry.yaml"], "expected {principal: ..., project: ...}"),
    ("serve-port-not-a-number", ["serve", "--port", "eighty"], "argument --port: invalid int value: 'eighty'"),
    ("serve-port-out-of-range", ["serve", "--port", "70000"], "--port 70000 is not a TCP port"),
    ("serve-database-url", ["serve", "--database-url", "session.db"], "--database-url 'session.db' is not a database URL"),
    # gate
    ("gate-baseline-missing", ["gate", "--baseline", "{tmp}/absent.json", "--candidate", "{tmp}/report.json"], "{tmp}/absent.json: cannot read"),
    ("gate-candidate-unreadable", ["gate", "--baseline", "{tmp}/report.json", "--candidate", "{tmp}/binary.bin"], "{tmp}/binary.bin: cannot read"),
    ("gate-not-json", ["gate", "--baseline", "{tmp}/report.json", "--candidate", "{tmp}/not-json.json"], "{tmp}/not-json.json: not JSON"),
    ("gate-wrong-shape", ["gate", "--baseline", "{tmp}/not-a-report.json", "--candidate", "{tmp}/report.json"], "not a conformance report"),
    ("gate-no-candidate", ["gate", "--baseline", "{tmp}/report.json"], "the following arguments are required: --candidate"),
    ("gate-bad-version", ["gate", "--baseline", "{tmp}/report.json", "--candidate", "{tmp}/report.json", "--require-version", "one"], "--require-version 'one' is not X.Y or X.Y.Z"),
    # import
    ("import-missing-file", ["import", "{tmp}/absent.jsonl", "--target", UNREACHABLE, "--token", "t"], "no such file {tmp}/absent.jsonl"),
    ("import-directory", ["import", "{tmp}", "--target", UNREACHABLE, "--token", "t"], "no such file {tmp}"),
    ("import-unreachable", ["import", "{tmp}/history.jsonl", "--target", UNREACHABLE, "--token", "t"], "cannot reach http://127.0.0.1:9: ConnectError"),
    ("import-target-not-a-url", ["import", "{tmp}/history.jsonl", "--target", "localhost:8080", "--token", "t"], "--target 'localhost:8080' is not an http:// or https:// URL"),
    ("import-no-token", ["import", "{tmp}/history.jsonl", "--target", UNREACHABLE], "the following arguments are required: --token"),
    # docs and bundle
    ("docs-extra-argument", ["docs", "{tmp}/out.md"], "unrecognized arguments: {tmp}/out.md"),
    ("bundle-unknown-option", ["bundle", "--out", "x.yaml"], "unrecognized arguments: --out x.yaml"),
    ("no-such-command", ["serve-me"], "invalid choice: 'serve-me'"),
]


@pytest.fixture(autouse=True)
def _no_outside_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("CONFIG", "TARGET", "TOKENS", "PROFILE", "SKIP_PREFLIGHT", "EXPECTED_FAILURES", "REPLICAS", "KEEP", "SELECT"):
        monkeypatch.delenv(f"SESSION_LINEAGE_{name}", raising=False)


@pytest.mark.parametrize(("argv", "expected"), [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_bad_input_is_one_line_and_exit_2(argv: list[str], expected: str, tmp_path: Path, capsys) -> None:
    for name, content in FILES.items():
        (tmp_path / name).write_bytes(content)
    tmp = str(tmp_path)
    code = main([arg.replace("{tmp}", tmp) for arg in argv])
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert "Traceback" not in out + err
    wanted = expected.replace("{tmp}", tmp)
    if argv[0] == "check" and "--quiet" in argv:
        # preflight lists every item, one line each: the mistake is on exactly one of them
        assert [line for line in err.splitlines() if wanted in line] != [], err
        assert sum(1 for line in err.splitlines() if line.startswith("  failed ")) == 1, err
        return
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert wanted in lines[0], lines[0]
    assert not out.strip(), out  # nothing on stdout: no half a document


def test_every_command_is_in_the_table() -> None:
    commands = {case[1][0] for case in CASES}
    assert {"check", "serve", "gate", "import", "docs", "bundle"} <= commands


def test_tokens_separated_by_spaces_say_commas(monkeypatch, capsys) -> None:
    monkeypatch.setenv("SESSION_LINEAGE_TOKENS", "token-a token-b")
    assert main(["check", "--target", UNREACHABLE]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (
        "session-lineage: configuration error: invalid 'tokens' (SESSION_LINEAGE_TOKENS): separate the tokens with "
        "commas (a,b or owner=a,stranger=b), not spaces"
    )
