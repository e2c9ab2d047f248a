"""`not-verified`, an outcome of its own: the rule applies, but the evidence it needs could not be
observed on this target or in this run. Never a pass, a failure only with `strict`; every report
names it, and the gate lists pass -> not verified apart ("evidence lost")."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from conformance.cli import main
from conformance.config import load
from conformance.errors import NotVerified, Unsupported
from conformance.gate import compare, load_report, run_gate
from conformance.profiles import Claim, Scope, profile_results, summary_text
from conformance.registry import Check
from conformance.reports import render_html, render_markdown
from conformance.reports.json_report import FORMAT_VERSION, SCHEMA_PATH, report_document
from conformance.reports.junit import build_junit
from conformance.results import CheckResult, Outcome, RunResult, Verdict
from conformance.target import Target
from conformance.verdicts import requirement_verdicts

REPORTS = Path(__file__).parent / "reports"
CORE = ["fork", "effective-transcript", "lineage", "idempotency"]


def _raise(exc: Exception) -> Any:
    def func(ctx: Any) -> None:
        raise exc

    return func


@pytest.mark.parametrize(
    ("raised", "outcome"),
    [
        (NotVerified("the margin could not be established"), Outcome.NOT_VERIFIED),
        (Unsupported("a key lifetime of a day is not waited out"), Outcome.SKIPPED),
    ],
)
def test_the_target_maps_not_verified_to_its_own_outcome(raised: Exception, outcome: Outcome) -> None:
    config = load(overrides={"target": "http://127.0.0.1:9", "tokens": ["t-one", "t-two"]}, environ={})
    target = Target(config, capabilities={"spec_version": "1.2.0", "capabilities": CORE}, expected={})
    try:
        item = Check("fork.storage", "t", "fork", ("FORK-NO-COPY-001",), (), _raise(raised))
        result = target.run_check(item)
    finally:
        target.close()
    assert result.outcome is outcome
    assert str(raised) in (result.reason or "") and result.failed_requirements == []


def _run(strict: bool) -> RunResult:
    """A run of three checks of `core`: one passes, two cannot observe their evidence."""
    import spec

    catalogue = {req["id"]: req for req in spec.requirements()}
    claim = Claim("core", "1.2.0", "configuration")
    scope = Scope(claim, catalogue)
    checks = [
        CheckResult("fork.fork_creates_child", "t", "fork", ["FORK-CREATE-001", "FORK-NO-COPY-001"], Outcome.PASS),
        CheckResult("fork.no_copy_bytes", "t", "fork", ["FORK-NO-COPY-001"], Outcome.NOT_VERIFIED,
                    reason="no write diagnostics <here>"),
        CheckResult("sessions.x", "t", "sessions", ["SESS-TURN-001"], Outcome.PASS),
    ]
    verdicts = requirement_verdicts(checks, catalogue, {}, scope)
    profiles = profile_results(scope, verdicts, CORE, strict)
    verdict = Verdict.NOT_CONFORMANT if any(p.claimed and not p.reached for p in profiles) else Verdict.CONFORMANT
    return RunResult(
        suite_version="1.0.0", spec_version="1.2.0", target="http://t", seed=1, started_at="2026-01-01T00:00:00Z",
        duration_s=1.0, strict=strict, config={}, capabilities=None, checks=checks, requirements=verdicts,
        verdict=verdict, claim=claim.as_dict(), profiles=profiles, summary=summary_text(verdict.value, claim, profiles, []),
    )


def test_the_verdict_line_names_not_verified_musts_and_strict_fails_on_them() -> None:
    relaxed = _run(strict=False)
    assert {v.id: v.outcome for v in relaxed.requirements}["FORK-NO-COPY-001"] is Outcome.NOT_VERIFIED
    assert relaxed.verdict is Verdict.CONFORMANT and relaxed.exit_code == 0
    assert relaxed.summary.endswith("; 1 MUST not verified: FORK-NO-COPY-001"), relaxed.summary
    strict = _run(strict=True)
    assert strict.verdict is Verdict.NOT_CONFORMANT and strict.exit_code == 1
    assert "core not reached: FORK-NO-COPY-001 not verified" in strict.summary


def test_every_report_renders_not_verified() -> None:
    result = _run(strict=False)
    document = report_document(result)
    Draft202012Validator(json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))).validate(document)
    assert document["format_version"] == FORMAT_VERSION == "1.1.0"
    assert document["summary"]["not-verified"] == 1 and document["summary"]["requirements"]["not-verified"] == 1
    assert {p["name"]: p["not_verified_requirements"] for p in document["profiles"]}["core"] == ["FORK-NO-COPY-001"]
    case = next(c for c in build_junit(result).iter("testcase") if c.get("name").startswith("fork.no_copy_bytes"))
    skipped = case.find("skipped")
    assert skipped is not None and skipped.get("message") == "not verified: no write diagnostics <here>"
    markdown = render_markdown(result)
    assert "| not verified | 1 | 1 |" in markdown and "### Not verified (the rule applies" in markdown
    import io

    from conformance.reports import make_console, render_console

    buffer = io.StringIO()
    render_console(result, make_console(buffer))
    assert "NOT VERIFIED  fork.no_copy_bytes  [FORK-NO-COPY-001]  no write diagnostics <here>" in buffer.getvalue()
    html = render_html(result)
    assert '<span class="o not-verified">not verified</span>' in html and "&lt;here&gt;" in html


def test_a_run_without_not_verified_renders_as_before() -> None:
    result = _run(strict=False)
    result = replace(result, checks=[c for c in result.checks if c.outcome is not Outcome.NOT_VERIFIED],
                     requirements=[replace(v, outcome=Outcome.PASS) for v in result.requirements], summary="conformant: core 1.2.0")
    assert "not verified" not in render_markdown(result)


# ---------------------------------------------------------------------------------------- the gate
def _report(outcomes: dict[str, str], version: str | None = "1.1.0") -> dict[str, Any]:
    data: dict[str, Any] = {
        "suite_version": "1.0.0", "spec_version": "1.2.0", "verdict": "conformant", "summary_text": "",
        "claim": {"profile": "core", "version": "1.2.0", "source": "configuration"},
        "requirements": [{"id": rid, "level": "MUST", "title": rid, "outcome": o} for rid, o in outcomes.items()],
    }
    if version is not None:
        data["format_version"] = version
    return data


def _files(tmp_path: Path, old: dict[str, Any], new: dict[str, Any]) -> tuple[str, str]:
    (tmp_path / "old.json").write_text(json.dumps(old), encoding="utf-8")
    (tmp_path / "new.json").write_text(json.dumps(new), encoding="utf-8")
    return str(tmp_path / "old.json"), str(tmp_path / "new.json")


def test_gate_lists_evidence_lost_apart_and_fails_on_it_only_when_strict(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.delenv("SESSION_LINEAGE_STRICT", raising=False)
    old, new = _files(tmp_path, _report({"A-001": "pass", "B-001": "pass"}, None),
                      _report({"A-001": "not-verified", "B-001": "pass"}))
    result = compare(load_report(old), load_report(new))
    assert [c.id for c in result.evidence_lost] == ["A-001"] and not result.regressions
    assert main(["gate", "--baseline", old, "--candidate", new]) == 0
    text = capsys.readouterr().out
    assert "### Evidence lost (passed in the baseline, not verified in the candidate)" in text
    assert "0 regressions · 1 evidence lost" in text
    assert run_gate(old, new, strict=True) == 1
    assert main(["gate", "--baseline", old, "--candidate", new, "--strict"]) == 1
    monkeypatch.setenv("SESSION_LINEAGE_STRICT", "true")  # the environment twin of --strict
    assert main(["gate", "--baseline", old, "--candidate", new]) == 1


def test_gate_pass_to_skipped_stays_a_regression(tmp_path: Path) -> None:
    old, new = _files(tmp_path, _report({"A-001": "pass"}), _report({"A-001": "skipped"}))
    result = compare(load_report(old), load_report(new))
    assert [c.id for c in result.regressions] == ["A-001"] and not result.evidence_lost
    assert run_gate(old, new, out=open("/dev/null", "w")) == 1


@pytest.mark.parametrize("name", sorted(p.name for p in REPORTS.glob("report-format-*.json")))
def test_gate_reads_a_real_report_of_every_format_version(name: str, tmp_path: Path) -> None:
    """One report of each format version, written by `check --report-json` of that version."""
    path = REPORTS / name
    version = name.removeprefix("report-format-").removesuffix(".json")
    document = json.loads(path.read_text(encoding="utf-8"))
    assert document.get("format_version", "1.0.0") == version
    Draft202012Validator(json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))).validate(document)  # additive: still valid
    report = load_report(path)
    assert report.requirements and all(e.outcome == "pass" for e in report.requirements.values())
    newest = REPORTS / f"report-format-{FORMAT_VERSION}.json"
    assert run_gate(str(path), str(newest), out=open("/dev/null", "w")) == 0
    assert run_gate(str(newest), str(path), out=open("/dev/null", "w")) == 0


def test_every_format_version_is_kept_and_another_major_is_unreadable(tmp_path: Path, capsys) -> None:
    kept = {p.name for p in REPORTS.glob("report-format-*.json")}
    assert kept == {"report-format-1.0.0.json", f"report-format-{FORMAT_VERSION}.json"}
    old, new = _files(tmp_path, _report({"A-001": "pass"}), _report({"A-001": "pass"}, "2.0.0"))
    assert main(["gate", "--baseline", old, "--candidate", new]) == 2
    assert "report format '2.0.0' is not 1.x" in capsys.readouterr().err
