"""Reports and reproducers: JUnit, JSON, Markdown and console output of a hand-built run."""

from __future__ import annotations

import base64
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import pytest
from jsonschema import Draft202012Validator, ValidationError

from conformance.curl import describe_response, to_curl, to_script, token_variables
from conformance.reports import (
    make_console,
    render_console,
    render_html,
    render_markdown,
    write_html,
    write_json,
    write_junit,
    write_markdown,
)
from conformance.reports.json_report import SCHEMA_PATH
from conformance.results import (
    Cleanup,
    CheckResult,
    Exchange,
    Outcome,
    PreflightItem,
    ProfileResult,
    RequirementVerdict,
    RunResult,
    Verdict,
)

TOKEN = "s3cr3t-bearer-token"
BASE = "http://127.0.0.1:8080"
QUOTED_BODY = b'{"note": "it\'s O\'Brien\'s ```fork``` $HOME `id`"}'
BINARY_BODY = b"\xff\xfe\x00raw'\x80\n"


def post_exchange(body: bytes, path: str = "/sessions/s1/forks") -> Exchange:
    return Exchange(
        method="POST",
        url=f"{BASE}{path}?note=a b&ids[]=1",
        request_headers={
            "Accept": "application/json, application/problem+json",
            "Authorization": f"Bearer {TOKEN}",
            "Host": "127.0.0.1:8080",
            "Content-Length": str(len(body)),
            "User-Agent": "python-httpx/0.27",
            "accept-encoding": "gzip",
            "Connection": "keep-alive",
            "Content-Type": "application/json",
            "Idempotency-Key": "key 'one'",
        },
        request_body=body,
        status=409,
        response_headers={"content-type": "application/problem+json"},
        response_body=b'{"type": "https://example.test/problems/conflict", "status": 409}',
        principal="alice",
    )


KEPT_HEADERS = {
    "Accept": "application/json, application/problem+json",
    "Content-Type": "application/json",
    "Idempotency-Key": "key 'one'",
}


REQUIREMENT_OUTCOMES = {
    "capabilities.document": [("CAP-DOC-001", "MUST", Outcome.PASS)],
    "fork.idempotent_retry": [
        ("FORK-IDEMPOTENT-001", "MUST", Outcome.FAIL),
        ("FORK-IDEMPOTENT-002", "MUST", Outcome.PASS),
    ],
    "sessions.binary_record": [("SES-RECORD-003", "SHOULD", Outcome.FAIL)],
    "transcript.pagination": [("TRN-PAGE-001", "MUST", Outcome.ERROR)],
    "diagnostics.round_trips": [("DIAG-RT-001", "MUST", Outcome.OUT_OF_SCOPE)],
    "leases.expiry": [("LEASE-EXPIRY-001", "MUST", Outcome.SKIPPED)],
    "lineage.depth_limit": [("LIN-DEPTH-001", "MUST", Outcome.XFAIL)],
    "fork.cut_is_immutable": [("FORK-CUT-001", "MUST", Outcome.PASS)],
}


def make_result(verdict: Verdict = Verdict.NOT_CONFORMANT) -> RunResult:
    quoted = post_exchange(QUOTED_BODY)
    binary = post_exchange(BINARY_BODY, "/sessions/s1/turns/t1/records")
    checks = [
        CheckResult(
            name="capabilities.document",
            title="Discovery document",
            chapter="capabilities",
            requirements=["CAP-DOC-001"],
            outcome=Outcome.PASS,
            duration_ms=12.5,
            seed=4242,
        ),
        CheckResult(
            name="fork.idempotent_retry",
            title="A retried fork returns the same child",
            chapter="fork",
            requirements=["FORK-IDEMPOTENT-001", "FORK-IDEMPOTENT-002"],
            outcome=Outcome.FAIL,
            message=(
                "second fork answered 409 <conflict> & [bold]not[/bold] the same child\x1b[0m\n"
                "second line"
            ),
            failed_requirements=["FORK-IDEMPOTENT-001"],
            level="MUST",
            reproducer=to_curl(quoted),
            exchange=quoted,
            duration_ms=250.0,
            seed=4242,
        ),
        CheckResult(
            name="sessions.binary_record",
            title="Records keep their bytes",
            chapter="sessions",
            requirements=["SES-RECORD-003"],
            outcome=Outcome.FAIL,
            message="record bytes changed",
            failed_requirements=["SES-RECORD-003"],
            level="SHOULD",
            reproducer=to_curl(binary),
            exchange=binary,
            duration_ms=40.0,
        ),
        CheckResult(
            name="transcript.pagination",
            title="Pages cover the transcript",
            chapter="transcript",
            requirements=["TRN-PAGE-001"],
            outcome=Outcome.ERROR,
            message="GET /sessions/s1/transcript: ConnectError: connection refused",
            duration_ms=3.0,
        ),
        CheckResult(
            name="diagnostics.round_trips",
            title="Round trips are reported",
            chapter="diagnostics",
            requirements=["DIAG-RT-001"],
            outcome=Outcome.OUT_OF_SCOPE,
            reason="target lacks 'diagnostics'; DIAG-RT-001 is outside the claimed core@1.0.0",
        ),
        CheckResult(
            name="leases.expiry",
            title="Leases expire",
            chapter="leases",
            requirements=["LEASE-EXPIRY-001"],
            outcome=Outcome.SKIPPED,
            reason="not verifiable in this run: leases last at least 600 s",
        ),
        CheckResult(
            name="lineage.depth_limit",
            title="Deep lineages are refused",
            chapter="lineage",
            requirements=["LIN-DEPTH-001"],
            outcome=Outcome.XFAIL,
            message="depth 65 accepted",
            failed_requirements=["LIN-DEPTH-001"],
            reason="known bug #12",
            link="https://tracker.example/12",
            duration_ms=80.0,
        ),
        CheckResult(
            name="fork.cut_is_immutable",
            title="The cut never moves",
            chapter="fork",
            requirements=["FORK-CUT-001"],
            outcome=Outcome.XPASS,
            reason="fixed upstream in 2.3",
            duration_ms=9.0,
        ),
    ]
    requirements = [
        RequirementVerdict(requirement, level, check.chapter, check.title, outcome, [check.name])
        for check in checks
        for requirement, level, outcome in REQUIREMENT_OUTCOMES.get(check.name, [])
    ]
    return RunResult(
        suite_version="1.0.0",
        spec_version="1.0.0",
        target=BASE,
        seed=4242,
        started_at="2025-01-01T00:00:00Z",
        duration_s=4.25,
        strict=False,
        config={"target": BASE, "tokens": ["<redacted:19 chars>", "<redacted:19 chars>"], "seed": 4242},
        capabilities={"spec_version": "1.0.0", "capabilities": ["fork"]},
        checks=checks,
        requirements=requirements,
        verdict=verdict,
        notes=["transcript checks could not reach the target"],
        claim={"profile": "core", "version": "1.0.0", "source": "configuration"},
        profiles=[
            ProfileResult("core", "1.0.0", "Core", True, "not reached", [], ["FORK-IDEMPOTENT-001"], ["TRN-PAGE-001"], 6),
            ProfileResult("full", "1.0.0", "Full", False, "not reached", ["writer-lease"], ["FORK-IDEMPOTENT-001"], [], 7),
        ],
        summary=(
            "not conformant to core 1.0.0: no profile reached; core not reached: FORK-IDEMPOTENT-001 failed; "
            "full not reached: writer-lease missing, FORK-IDEMPOTENT-001 failed"
        ),
        preflight=[PreflightItem("reachable", "ok", "answers"), PreflightItem("replicas", "ok", "none")],
        deployment_only=[
            {"id": "DEPLOY-MULTI-PROCESS-001", "level": "MUST", "chapter": "deployment",
             "title": "Guarantees hold across processes", "note": "not verifiable by the suite"},
        ],
        cleanup=Cleanup("slc-0000-", ["slc-0000-s-1", "slc-0000-s-2"], [], False,
                        "left behind: 2 sessions with prefix slc-0000-; the API offers no deletion in spec 1.0.0"),
    )


@pytest.fixture
def result() -> RunResult:
    return make_result()


def by_name(result: RunResult, name: str) -> CheckResult:
    return next(check for check in result.checks if check.name == name)


def curl_args(command: str) -> tuple[list[str], list[str]]:
    """Split a reproducer into the commands of its pipeline and the curl command's arguments."""
    tokens = shlex.split(command)
    segments: list[list[str]] = [[]]
    for token in tokens:
        if token == "|":
            segments.append([])
        else:
            segments[-1].append(token)
    curl = segments[-1]
    assert curl[0] == "curl"
    return [" ".join(segment) for segment in segments[:-1]], curl


def option_values(args: list[str], option: str) -> list[str]:
    return [args[i + 1] for i, arg in enumerate(args[:-1]) if arg == option]


# ---------------------------------------------------------------------------------------- curl


def test_curl_replays_method_url_headers_and_quoted_body() -> None:
    exchange = post_exchange(QUOTED_BODY)
    command = to_curl(exchange)
    pipeline, args = curl_args(command)

    assert pipeline == []
    assert option_values(args, "-X") == ["POST"]
    assert exchange.url in args
    headers = option_values(args, "-H")
    sent = dict(header.split(": ", 1) for header in headers)
    assert sent == {**KEPT_HEADERS, "Authorization": "Bearer $SESSION_LINEAGE_TOKEN"}
    assert option_values(args, "--data-binary") == [QUOTED_BODY.decode()]
    assert TOKEN not in command


def test_curl_pipes_non_utf8_body_through_base64() -> None:
    command = to_curl(post_exchange(BINARY_BODY), token_env="ALICE_TOKEN")
    pipeline, args = curl_args(command)

    assert len(pipeline) == 2 and pipeline[1] == "base64 -d"
    printf = shlex.split(pipeline[0])
    assert printf[:2] == ["printf", "%s"]
    assert base64.b64decode(printf[2]) == BINARY_BODY
    assert option_values(args, "--data-binary") == ["@-"]
    assert "Authorization: Bearer $ALICE_TOKEN" in option_values(args, "-H")
    assert TOKEN not in command


@pytest.mark.parametrize(
    "body", [b"@/etc/passwd", b"nul\x00inside", b"bell\x07\x1b[2J"], ids=["at-sign", "nul", "control"]
)
def test_curl_never_passes_file_references_or_control_characters_as_arguments(body: bytes) -> None:
    pipeline, args = curl_args(to_curl(post_exchange(body)))
    assert option_values(args, "--data-binary") == ["@-"]
    assert base64.b64decode(shlex.split(pipeline[0])[2]) == body


def test_curl_without_body_or_auth() -> None:
    exchange = Exchange("GET", f"{BASE}/capabilities", {"Accept": "application/json"}, None, 200, {}, b"{}")
    _, args = curl_args(to_curl(exchange))
    assert option_values(args, "-X") == ["GET"]
    assert option_values(args, "-H") == ["Accept: application/json"]
    assert "--data-binary" not in args


def test_curl_head_uses_head_option() -> None:
    exchange = Exchange("HEAD", f"{BASE}/capabilities", {}, None, 200, {}, b"")
    _, args = curl_args(to_curl(exchange))
    assert "--head" in args and "-X" not in args


@pytest.mark.parametrize("name", ["", "1TOKEN", "TOKEN; rm -rf /", "A-B", "$(id)"])
def test_curl_rejects_env_names_that_are_not_variables(name: str) -> None:
    with pytest.raises(ValueError):
        to_curl(post_exchange(QUOTED_BODY), token_env=name)


@pytest.mark.skipif(
    sys.platform == "win32" or not (shutil.which("bash") and shutil.which("base64")),
    reason="needs a POSIX shell and base64",
)
@pytest.mark.parametrize("body", [QUOTED_BODY, BINARY_BODY, b"@file"], ids=["quoted", "binary", "at-sign"])
def test_curl_command_runs_in_a_real_shell(tmp_path: Path, body: bytes) -> None:
    """A stand-in `curl` records what the shell hands it: the exact body and the expanded token."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "record.json"
    fake = bin_dir / "curl"
    fake.write_text(
        f"#!{sys.executable}\n"
        "import base64, json, sys\n"
        "args = sys.argv[1:]\n"
        "stdin = sys.stdin.buffer.read() if '@-' in args else b''\n"
        f"open({str(record)!r}, 'w').write(json.dumps("
        "{'args': args, 'stdin': base64.b64encode(stdin).decode()}))\n"
    )
    fake.chmod(0o755)
    exchange = post_exchange(body)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "SESSION_LINEAGE_TOKEN": "from-env",
    }
    subprocess.run(["bash", "-c", to_curl(exchange)], env=env, check=True, timeout=30)

    seen = json.loads(record.read_text())
    args = seen["args"]
    data = option_values(args, "--data-binary")
    sent = data[0].encode() if data != ["@-"] else base64.b64decode(seen["stdin"])
    assert sent == body
    assert exchange.url in args
    assert "Authorization: Bearer from-env" in option_values(args, "-H")


def test_describe_response_truncates_long_bodies() -> None:
    long = Exchange("GET", BASE, {}, None, 200, {}, b"x" * 2500)
    text = describe_response(long)
    assert text.startswith("HTTP 200\n" + "x" * 2000)
    assert "x" * 2001 not in text
    assert text.endswith("[500 more characters]")
    assert describe_response(Exchange("GET", BASE, {}, None, 204, {}, b"")) == "HTTP 204"
    assert describe_response(Exchange("GET", BASE, {}, None, None, {}, b"")) == "no response"
    assert describe_response(Exchange("GET", BASE, {}, None, 400, {}, b"\xff")) == "HTTP 400\n\ufffd"
    escaped = describe_response(Exchange("GET", BASE, {}, None, 400, {}, b"a\x1b[2Jb\r\n"))
    assert escaped == "HTTP 400\na\\x1b[2Jb\\r\n"


# ---------------------------------------------------------------------------------------- junit


def test_junit_counts_equal_the_inputs(tmp_path: Path, result: RunResult) -> None:
    path = tmp_path / "out" / "junit.xml"
    write_junit(result, path)
    root = ET.parse(path).getroot()

    assert root.tag == "testsuites"
    totals = result.counts()
    # the counts are the console's: one test case per check, deployment-only requirements are no test case
    assert int(root.get("tests")) == len(result.checks)
    assert int(root.get("failures")) == totals["fail"]
    assert int(root.get("errors")) == totals["error"]
    assert int(root.get("skipped")) == totals["skipped"] + totals["not-verified"] + totals["expected-failure"] + totals["out-of-scope"]

    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == [
        f"session-lineage-conformance.{chapter}"
        for chapter in dict.fromkeys(check.chapter for check in result.checks)
    ]
    for suite in suites:  # deployment-only requirements: in every suite's properties
        properties = {p.get("name"): p.get("value") for p in suite.find("properties")}
        assert properties["deployment_only"] == "not verifiable by the suite: DEPLOY-MULTI-PROCESS-001"
        assert properties["deployment_only.DEPLOY-MULTI-PROCESS-001"] == "Guarantees hold across processes"
    for suite in suites:
        chapter = suite.get("name").rsplit(".", 1)[1]
        outcomes = Counter(c.outcome for c in result.checks if c.chapter == chapter)
        cases = suite.findall("testcase")
        assert int(suite.get("tests")) == len(cases) == sum(outcomes.values())
        assert (
            int(suite.get("failures"))
            == outcomes[Outcome.FAIL]
            == sum(len(c.findall("failure")) for c in cases)
        )
        assert (
            int(suite.get("errors"))
            == outcomes[Outcome.ERROR]
            == sum(len(c.findall("error")) for c in cases)
        )
        assert (
            int(suite.get("skipped"))
            == outcomes[Outcome.SKIPPED] + outcomes[Outcome.XFAIL] + outcomes[Outcome.OUT_OF_SCOPE]
            == sum(len(c.findall("skipped")) for c in cases)
        )
        properties = {p.get("name"): p.get("value") for p in suite.find("properties")}
        assert properties["claim"] == "core@1.0.0"
        assert properties["summary"] == result.summary
        assert (properties["profile.core"], properties["profile.full"]) == ("not reached", "not reached")
        assert properties["suite_version"] == "1.0.0"
        assert properties["spec_version"] == "1.0.0"
        assert properties["target"] == BASE
        assert properties["seed"] == "4242"


def test_junit_testcases_describe_each_outcome(tmp_path: Path, result: RunResult) -> None:
    path = tmp_path / "junit.xml"
    write_junit(result, path)
    cases = {case.get("name"): case for case in ET.parse(path).getroot().iter("testcase")}

    failing = cases["fork.idempotent_retry [FORK-IDEMPOTENT-001, FORK-IDEMPOTENT-002]"]
    assert failing.get("classname") == "conformance.fork"
    assert failing.get("time") == "0.250"
    failure = failing.find("failure")
    assert failure.get("type") == "MUST violation"
    assert failure.get("message").startswith("second fork answered 409 <conflict>")
    assert "\\x1b" in failure.get("message")
    assert by_name(result, "fork.idempotent_retry").reproducer in failure.text
    assert "violated: FORK-IDEMPOTENT-001" in failure.text

    binary = cases["sessions.binary_record [SES-RECORD-003]"].find("failure")
    assert binary.get("type") == "SHOULD violation"
    assert "connection refused" in cases["transcript.pagination [TRN-PAGE-001]"].find("error").get("message")
    assert (
        cases["diagnostics.round_trips [DIAG-RT-001]"].find("skipped").get("message")
        == "out of scope: target lacks 'diagnostics'; DIAG-RT-001 is outside the claimed core@1.0.0"
    )
    assert (
        cases["leases.expiry [LEASE-EXPIRY-001]"].find("skipped").get("message")
        == "not verifiable in this run: leases last at least 600 s"
    )
    expected = cases["lineage.depth_limit [LIN-DEPTH-001]"]
    assert expected.find("skipped").get("message") == "expected failure: known bug #12"
    assert {p.get("name"): p.get("value") for p in expected.find("properties")} == {"link": "https://tracker.example/12"}
    xpass = cases["fork.cut_is_immutable [FORK-CUT-001]"]
    assert [child.tag for child in xpass] == ["system-out"]
    assert "listed as an expected failure" in xpass.find("system-out").text
    assert list(cases["capabilities.document [CAP-DOC-001]"]) == []


def test_junit_never_contains_the_token(tmp_path: Path, result: RunResult) -> None:
    path = tmp_path / "junit.xml"
    write_junit(result, path)
    assert TOKEN not in path.read_text(encoding="utf-8")


# ---------------------------------------------------------------------------------------- json


@pytest.fixture(scope="module")
def report_validator() -> Draft202012Validator:
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def test_json_report_validates_and_round_trips(
    tmp_path: Path, result: RunResult, report_validator: Draft202012Validator
) -> None:
    path = tmp_path / "report.json"
    write_json(result, path)
    text = path.read_text(encoding="utf-8")
    document = json.loads(text)

    report_validator.validate(document)
    assert TOKEN not in text
    assert document["verdict"] == "not-conformant"
    assert document["exit_code"] == result.exit_code == 1
    assert {k: document["summary"][k] for k in result.counts()} == result.counts()
    assert document["summary"]["checks"] == len(result.checks)
    assert document["summary"]["requirements"] == {
        "pass": 3, "fail": 2, "out-of-scope": 1, "skipped": 1, "not-verified": 0, "expected-failure": 1,
        "unexpected-pass": 0, "error": 1,
    }
    assert document["summary_text"] == result.summary
    assert document["claim"] == {"profile": "core", "version": "1.0.0", "source": "configuration"}
    profiles = {p["name"]: p for p in document["profiles"]}
    assert profiles["core"]["claimed"] and not profiles["core"]["reached"]
    assert profiles["full"]["missing_capabilities"] == ["writer-lease"]
    assert document["preflight"] == [
        {"name": "reachable", "status": "ok", "message": "answers"},
        {"name": "replicas", "status": "ok", "message": "none"},
    ]
    assert document["deployment_only"][0]["note"] == "not verifiable by the suite"
    assert document["cleanup"]["left_behind"] == ["slc-0000-s-1", "slc-0000-s-2"]
    assert document["cleanup"]["note"].startswith("left behind: 2 sessions with prefix slc-0000-")
    assert document["config"] == result.config
    assert document["notes"] == result.notes
    assert [c["name"] for c in document["checks"]] == [c.name for c in result.checks]
    checks = {c["name"]: c for c in document["checks"]}
    assert checks["fork.idempotent_retry"]["response"].startswith("HTTP 409\n")
    assert checks["fork.idempotent_retry"]["reproducer"] == to_curl(post_exchange(QUOTED_BODY))
    assert checks["transcript.pagination"]["response"] is None
    assert checks["lineage.depth_limit"]["reason"] == "known bug #12"
    assert checks["lineage.depth_limit"]["link"] == "https://tracker.example/12"
    assert checks["fork.cut_is_immutable"]["link"] is None
    assert [r["id"] for r in document["requirements"]] == [r.id for r in result.requirements]


@pytest.mark.parametrize("verdict", list(Verdict))
def test_json_exit_code_follows_verdict(
    tmp_path: Path, verdict: Verdict, report_validator: Draft202012Validator
) -> None:
    path = tmp_path / "report.json"
    write_json(make_result(verdict), path)
    document = json.loads(path.read_text(encoding="utf-8"))
    report_validator.validate(document)
    expected_code = {Verdict.CONFORMANT: 0, Verdict.NOT_CONFORMANT: 1, Verdict.INCOMPLETE: 3}[verdict]
    assert (document["verdict"], document["exit_code"]) == (verdict.value, expected_code)


def test_report_schema_enums_match_the_data_model(report_validator: Draft202012Validator) -> None:
    schema = report_validator.schema
    assert set(schema["$defs"]["outcome"]["enum"]) == {o.value for o in Outcome}
    assert set(schema["properties"]["verdict"]["enum"]) == {v.value for v in Verdict}
    summary = schema["properties"]["summary"]
    # every outcome is counted; one added by a later minor format version is not required, so a
    # report of an earlier format version still validates
    added = {"not-verified"}  # format 1.1.0
    assert set(summary["properties"]) == {o.value for o in Outcome} | {"checks", "requirements"}
    assert set(summary["required"]) == {o.value for o in Outcome} - added | {"checks", "requirements"}
    assert set(summary["properties"]["requirements"]["properties"]) == {o.value for o in Outcome}
    assert set(summary["properties"]["requirements"]["required"]) == {o.value for o in Outcome} - added


@pytest.mark.parametrize(
    "corrupt",
    [
        lambda d: d.pop("verdict"),
        lambda d: d.update(exit_code=2),
        lambda d: d["checks"][0].update(outcome="passed"),
        lambda d: d["summary"]["requirements"].pop("error"),
        lambda d: d["checks"][1].pop("reproducer"),
    ],
    ids=["no-verdict", "usage-exit-code", "unknown-outcome", "no-requirement-count", "no-reproducer"],
)
def test_report_schema_rejects_broken_documents(
    tmp_path: Path,
    result: RunResult,
    report_validator: Draft202012Validator,
    corrupt: Callable[[dict[str, Any]], object],
) -> None:
    path = tmp_path / "report.json"
    write_json(result, path)
    document = json.loads(path.read_text(encoding="utf-8"))
    corrupt(document)
    with pytest.raises(ValidationError):
        report_validator.validate(document)


# ---------------------------------------------------------------------------------------- markdown


def fenced_blocks(markdown: str, language: str) -> list[str]:
    return [m.group(2) for m in re.finditer(rf"^(`{{3,}}){language}\n(.*?)\n\1$", markdown, re.M | re.S)]


def test_markdown_lists_every_failure_with_its_reproducer(tmp_path: Path, result: RunResult) -> None:
    path = tmp_path / "summary.md"
    write_markdown(result, path)
    markdown = path.read_text(encoding="utf-8")
    assert markdown == render_markdown(result)

    failures = markdown.split("### Failures (3)", 1)[1].split("### Expected failures", 1)[0]
    for check in result.checks:
        if check.outcome in (Outcome.FAIL, Outcome.ERROR):
            assert f"`{check.name}`" in failures
            for requirement in check.failed_requirements or check.requirements:
                assert requirement in failures
        else:
            assert check.name not in failures
    assert "**FAIL** `fork.idempotent_retry` · MUST · violates FORK-IDEMPOTENT-001" in failures
    assert "**FAIL** `sessions.binary_record` · SHOULD · violates SES-RECORD-003" in failures
    assert "**ERROR** `transcript.pagination`" in failures
    assert failures.count("<details><summary>reproduce</summary>") == 2
    assert fenced_blocks(markdown, "sh") == [
        by_name(result, "fork.idempotent_retry").reproducer,
        by_name(result, "sessions.binary_record").reproducer,
    ]
    assert TOKEN not in markdown


def test_markdown_header_tables_and_other_sections(result: RunResult) -> None:
    markdown = render_markdown(result)
    assert markdown.startswith("## Session Lineage conformance: FAILED\n")
    assert "Verdict **not-conformant** (exit code 1)" in markdown
    assert f"target `{BASE}` · suite 1.0.0 · spec 1.0.0 · seed 4242 · 4.2 s" in markdown
    assert "- transcript checks could not reach the target" in markdown
    assert "| fail | 2 | 2 |" in markdown
    assert "| **total** | **8** | **9** |" in markdown
    assert (
        "| chapter | pass | fail | out of scope | skipped | expected failure | unexpected pass | error |" in markdown
    )
    assert "| fork | 0 | 1 | 0 | 0 | 0 | 1 | 0 |" in markdown
    assert (
        "### Expected failures (1)\n\n- `lineage.depth_limit` [LIN-DEPTH-001]: known bug \\#12 "
        "([link](https://tracker.example/12))"
    ) in markdown
    assert "### Unexpected passes (1)" in markdown and "fixed upstream in 2.3" in markdown
    assert "### Not verifiable in this run (1)" in markdown and "leases last at least 600 s" in markdown
    assert "### Out of scope (1)" in markdown and "outside the claimed core@1.0.0" in markdown
    assert "claim core@1.0.0 (configuration)" in markdown
    assert "| core | 1.0.0 | yes | not reached | FORK-IDEMPOTENT-001 failed, TRN-PAGE-001 without a verdict (a check erred, or stopped at another rule's failure first) |" in markdown
    assert "| full | 1.0.0 |  | not reached | writer-lease missing, FORK-IDEMPOTENT-001 failed |" in markdown
    assert "### Not verifiable by the suite (1)" in markdown
    assert "- `DEPLOY-MULTI-PROCESS-001` (MUST): Guarantees hold across processes: not verifiable by the suite" in markdown
    assert "- left behind: 2 sessions with prefix slc-0000-" in markdown


def test_markdown_escapes_target_controlled_text(result: RunResult) -> None:
    markdown = render_markdown(result)
    assert "<conflict>" not in markdown
    assert "> second fork answered 409 &lt;conflict&gt; &amp; \\[bold\\]not\\[/bold\\]" in markdown
    assert "> second line" in markdown
    assert "\x1b" not in markdown and "the same child\\x1b\\[0m" in markdown


@pytest.mark.parametrize(
    ("verdict", "word", "code"),
    [
        (Verdict.CONFORMANT, "PASSED", 0),
        (Verdict.NOT_CONFORMANT, "FAILED", 1),
        (Verdict.INCOMPLETE, "INCOMPLETE", 3),
    ],
)
def test_markdown_status_word_follows_verdict(verdict: Verdict, word: str, code: int) -> None:
    markdown = render_markdown(make_result(verdict))
    assert markdown.splitlines()[0] == f"## Session Lineage conformance: {word}"
    assert f"Verdict **{verdict.value}** (exit code {code})" in markdown


def test_markdown_omits_empty_sections() -> None:
    result = make_result(Verdict.CONFORMANT)
    result.checks = [check for check in result.checks if check.outcome is Outcome.PASS]
    result.requirements = [verdict for verdict in result.requirements if verdict.outcome is Outcome.PASS]
    result.deployment_only = []
    markdown = render_markdown(result)
    for section in ("Failures", "Expected failures", "Unexpected passes", "Not verifiable", "Out of scope"):
        assert f"### {section}" not in markdown


# ---------------------------------------------------------------------------------------- console


def test_console_names_each_skipped_check_with_its_reason(result: RunResult) -> None:
    buffer = io.StringIO()
    render_console(result, make_console(buffer))
    lines = buffer.getvalue().splitlines()
    skipped = [check for check in result.checks if check.outcome is Outcome.SKIPPED]
    assert skipped
    for check in skipped:
        assert f"SKIP  {check.name}  [{', '.join(check.requirements)}]  {check.reason}" in lines


def test_console_prints_table_failures_and_replay_hint(result: RunResult) -> None:
    buffer = io.StringIO()
    render_console(result, make_console(buffer))
    output = buffer.getvalue()
    lines = output.splitlines()

    for chapter in dict.fromkeys(check.chapter for check in result.checks):
        assert any(line.lstrip("│┃ ").startswith(chapter) for line in lines), chapter
    assert (
        "FAIL  fork.idempotent_retry  [FORK-IDEMPOTENT-001]  "
        "second fork answered 409 <conflict> & [bold]not[/bold] the same child"
    ) in output
    assert "FAIL  sessions.binary_record  [SES-RECORD-003]  record bytes changed" in output
    assert "ERROR transcript.pagination  [TRN-PAGE-001]  GET /sessions/s1/transcript" in output
    assert "\x1b" not in output and "the same child\\x1b[0m" in output
    assert "lineage.depth_limit" not in output
    assert "note: transcript checks could not reach the target" in output
    assert "not verifiable by the suite (deployment-only): DEPLOY-MULTI-PROCESS-001" in output
    assert (
        "profiles at 1.0.0: core (claimed) not reached: FORK-IDEMPOTENT-001 failed, TRN-PAGE-001 without a verdict (a check erred, or stopped at another rule's failure first) · "
        "full not reached: writer-lease missing, the failures of core"
    ) in output
    assert "left behind: 2 sessions with prefix slc-0000-" in output
    assert lines[-1] == f"FAILED: {result.summary}  exit code 1  seed 4242  (rerun with --seed 4242)"


# ---------------------------------------------------------------------------------------- html


def test_html_report_is_one_self_contained_file(tmp_path: Path, result: RunResult) -> None:
    path = tmp_path / "report.html"
    write_html(result, path)
    page = path.read_text(encoding="utf-8")
    assert page == render_html(result)
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "<style>" in page and "<script" not in page and "<link" not in page
    assert not re.search(r"""\bsrc\s*=|url\(|@import""", page)
    hrefs = re.findall(r'href="([^"]*)"', page)
    assert hrefs == ["https://tracker.example/12"]  # only the expected failure's own link, as an anchor
    assert TOKEN not in page
    assert result.summary.replace("<", "&lt;") in page and "seed" in page and "4242" in page
    assert "core (claimed)" in page and "writer-lease missing" in page
    assert "not verifiable by the suite" in page and "DEPLOY-MULTI-PROCESS-001" in page
    assert page.count("<details") >= len(result.checks) + 2  # one per check, per chapter, configuration
    assert "&lt;conflict&gt;" in page and "<conflict>" not in page
    assert "\\x1b" in page and "\x1b" not in page
    assert html_escape(by_name(result, "fork.idempotent_retry").reproducer) in page
    assert "left behind: 2 sessions with prefix slc-0000-" in page


def test_html_report_shows_each_cited_requirements_text_and_links_ids_to_the_spec_url(result: RunResult) -> None:
    import spec

    catalogue = {req["id"]: req for req in spec.requirements()}
    page = render_html(result)
    cited = {verdict.id for verdict in result.requirements if verdict.id in catalogue}
    assert cited
    for rid in cited:  # the text itself, so the saved page needs nothing else
        assert html_escape(catalogue[rid]["text"]) in page, rid
    assert "https://spec.example" not in page
    linked = render_html(result, "https://spec.example/site/index.html")
    for rid in {verdict.id for verdict in result.requirements} | {item["id"] for item in result.deployment_only}:
        assert f'href="https://spec.example/site/index.html#{rid}"' in linked, rid
    assert render_html(result) == page  # the URL belongs to one rendering only


def html_escape(text: str | None) -> str:
    import html

    return html.escape(text or "", quote=True)


# ---------------------------------------------------------------------------------------- markdown append


def test_markdown_appends_to_an_existing_summary(tmp_path: Path, result: RunResult) -> None:
    path = tmp_path / "summary.md"
    path.write_text("previous step\n", encoding="utf-8")
    write_markdown(result, path)
    write_markdown(result, path)
    text = path.read_text(encoding="utf-8")
    assert text == "previous step\n\n" + render_markdown(result) + "\n" + render_markdown(result)


# ---------------------------------------------------------------------------------------- reproducer scripts


def exchange(method: str, path: str, status: int, body: bytes | None = None, answer: bytes = b"", token: str = TOKEN) -> Exchange:
    headers = {"Accept": "application/json", "Authorization": f"Bearer {token}"}
    if body is not None:
        headers["Content-Type"] = "application/json"
    return Exchange(method, f"{BASE}{path}", headers, body, status, {"content-type": "application/json"}, answer)


def test_script_names_token_variables_and_keeps_made_up_credentials() -> None:
    variables = token_variables([TOKEN, "second-principal-token"])
    steps = [
        exchange("GET", "/sessions/x", 404),
        exchange("GET", "/sessions/x", 404, token="second-principal-token"),
        exchange("GET", "/sessions/x", 401, token="made-up"),
    ]
    script = to_script(steps, variables, "title", steps[-1])
    assert TOKEN not in script and "second-principal-token" not in script and "[Filtered]" not in script
    assert '-H "Authorization: Bearer ${SESSION_LINEAGE_TOKEN_PRINCIPAL_1}"' in script
    assert '-H "Authorization: Bearer ${SESSION_LINEAGE_TOKEN_PRINCIPAL_2}"' in script
    assert "-H 'Authorization: Bearer made-up'" in script
    assert "# Export the tokens first (see the README): SESSION_LINEAGE_TOKEN_PRINCIPAL_1, SESSION_LINEAGE_TOKEN_PRINCIPAL_2" in script
    assert "set -e" not in script.replace("No `set -e`", "")
    assert "step 3 of 3: GET /sessions/x; the suite saw it answered 401 (the failing request)" in script


def test_script_gives_fresh_ids_and_reads_the_ids_the_target_chose() -> None:
    prefix = "slc-abcdef12-"
    steps = [
        exchange("POST", "/sessions", 201, f'{{"session_id": "{prefix}s-1"}}'.encode(), f'{{"session_id": "{prefix}s-1"}}'.encode()),
        exchange("POST", f"/sessions/{prefix}s-1/turns", 201, b'{"role": "user"}', b'{"turn_id": "0f1e2d3c-server-chosen", "index": 0}'),
        exchange("POST", f"/sessions/{prefix}s-1/turns/0f1e2d3c-server-chosen/finish", 200, b'{"status": "completed"}'),
    ]
    script = to_script(steps, token_variables([TOKEN]), "title", steps[-1], prefix)
    assert prefix not in script.split("\n", 6)[6]  # after the comment naming the old prefix
    assert 'P="slc-r$(date +%s)-$$-"' in script
    assert "ID1=$(field turn_id)" in script
    assert '"http://127.0.0.1:8080/sessions/${P}s-1/turns/${ID1}/finish"' in script
    assert "0f1e2d3c-server-chosen" not in script.split("ID1=$(field turn_id)", 1)[1]


def test_long_sequences_are_truncated_and_say_so() -> None:
    steps = [exchange("GET", f"/sessions/s-{n}", 404) for n in range(450)]
    script = to_script(steps, token_variables([TOKEN]), "title", steps[-1], max_steps=300)
    assert script.count("\ncurl ") == 300
    assert "# ... 150 requests left out here (truncated: a reproducer keeps 300) ..." in script
    assert "step 100 of 450" in script and "step 101 of 450" not in script and "step 251 of 450" in script
    assert "step 450 of 450: GET /sessions/s-449; the suite saw it answered 404 (the failing request)" in script
