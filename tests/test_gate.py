"""`session-lineage gate`: two JSON reports in, regressions out (exit 1), unreadable input exit 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conformance.cli import main
from conformance.gate import compare, load_report


def _report(outcomes: dict[str, str], spec: str = "1.2.0", claim: tuple[str, str] | None = ("full", "1.2.0")) -> dict[str, Any]:
    return {
        "suite_version": "1.2.0",
        "spec_version": spec,
        "target": "http://127.0.0.1:1",
        "verdict": "conformant" if all(o in ("pass", "out-of-scope") for o in outcomes.values()) else "not-conformant",
        "summary_text": "",
        "claim": {"profile": claim[0], "version": claim[1], "source": "configuration"} if claim else None,
        "requirements": [
            {"id": rid, "level": "MUST", "chapter": "x", "title": f"title of {rid}", "outcome": outcome}
            for rid, outcome in outcomes.items()
        ],
    }


def _write(tmp_path: Path, name: str, data: Any) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(data) if not isinstance(data, str) else data, encoding="utf-8")
    return str(path)


def _gate(tmp_path: Path, old: Any, new: Any, *extra: str) -> int:
    return main(["gate", "--baseline", _write(tmp_path, "old.json", old), "--candidate", _write(tmp_path, "new.json", new), *extra])


def test_regression_fails_and_is_listed_in_markdown(tmp_path: Path, capsys) -> None:
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n", encoding="utf-8")
    old = _report({"A-001": "pass", "B-001": "pass", "C-001": "fail"})
    new = _report({"A-001": "fail", "B-001": "pass", "C-001": "fail"})
    assert _gate(tmp_path, old, new, "--markdown", str(summary)) == 1
    out = capsys.readouterr().out
    assert "release gate: FAILED" in out
    assert "### Regressions" in out and "| A-001 | MUST | pass | fail |" in out
    assert "B-001" not in out  # unchanged passes are not listed
    text = summary.read_text(encoding="utf-8")
    assert text.startswith("earlier step\n\n## Session Lineage release gate: FAILED")


@pytest.mark.parametrize("now", ["expected-failure", "error", "out-of-scope", "skipped"])
def test_anything_but_a_pass_after_a_pass_is_a_regression(tmp_path: Path, now: str) -> None:
    """An expected-failures entry added for a requirement that used to pass does not hide it."""
    assert _gate(tmp_path, _report({"A-001": "pass"}), _report({"A-001": now})) == 1


def test_improvement_passes_and_is_reported(tmp_path: Path, capsys) -> None:
    old = _report({"A-001": "expected-failure", "B-001": "pass"})
    new = _report({"A-001": "pass", "B-001": "unexpected-pass"})
    assert _gate(tmp_path, old, new) == 0
    out = capsys.readouterr().out
    assert "release gate: PASSED" in out and "### Improvements" in out
    assert "| A-001 | MUST | expected-failure | pass |" in out
    assert "Regressions" not in out


def test_added_requirement_is_reported_never_a_failure(tmp_path: Path, capsys) -> None:
    old = _report({"A-001": "pass"})
    new = _report({"A-001": "pass", "NEW-001": "fail"})
    assert _gate(tmp_path, old, new) == 0
    out = capsys.readouterr().out
    assert "### Added requirements" in out and "| NEW-001 | MUST | - | fail |" in out


def test_removed_requirement_is_reported_never_a_failure(tmp_path: Path, capsys) -> None:
    old = _report({"A-001": "pass", "OLD-001": "pass"})
    new = _report({"A-001": "pass"})
    assert _gate(tmp_path, old, new) == 0
    out = capsys.readouterr().out
    assert "### Removed requirements" in out and "| OLD-001 | MUST | pass | - |" in out


def test_version_change_is_reported_and_a_minimum_version_is_enforced(tmp_path: Path, capsys) -> None:
    old = _report({"A-001": "pass"}, spec="1.1.0", claim=("full", "1.1.0"))
    new = _report({"A-001": "pass"}, spec="1.2.0", claim=("full", "1.2.0"))
    assert _gate(tmp_path, old, new) == 0
    out = capsys.readouterr().out
    assert "### Version changes" in out
    assert "spec version: 1.1.0 → 1.2.0" in out and "claim: full@1.1.0 → full@1.2.0" in out
    assert _gate(tmp_path, old, new, "--require-version", "1.2") == 0
    assert _gate(tmp_path, new, old, "--require-version", "1.2") == 1
    assert "not at version 1.2" in capsys.readouterr().out
    assert _gate(tmp_path, old, _report({"A-001": "pass"}, spec="2.0.0", claim=("full", "2.0.0")), "--require-version", "1.2") == 1


@pytest.mark.parametrize(
    "broken",
    ["{not json", json.dumps([1, 2]), json.dumps({"requirements": [{"id": 3}]}), json.dumps({"verdict": "conformant"}),
     json.dumps({"requirements": [{"id": "A", "outcome": "pass"}, {"id": "A", "outcome": "fail"}]})],
)
def test_unreadable_input_exits_2(tmp_path: Path, capsys, broken: str) -> None:
    assert _gate(tmp_path, _report({"A-001": "pass"}), broken) == 2
    assert "session-lineage gate:" in capsys.readouterr().err


def test_missing_file_exits_2(tmp_path: Path, capsys) -> None:
    good = _write(tmp_path, "good.json", _report({"A-001": "pass"}))
    assert main(["gate", "--baseline", str(tmp_path / "absent.json"), "--candidate", good]) == 2


def test_markdown_escapes_report_text(tmp_path: Path) -> None:
    old = _report({"A-001": "pass"})
    new = _report({"A-001": "fail"})
    new["requirements"][0]["title"] = "a | b\n# heading"
    result = compare(load_report(_write(tmp_path, "o.json", old)), load_report(_write(tmp_path, "n.json", new)))
    from conformance.gate import render_markdown

    text = render_markdown(result)
    assert "a \\| b \\# heading" in text


def test_real_reports_of_the_embedded_server_compare_clean(tmp_path: Path) -> None:
    """A report written by `check --report-json` is what the gate reads (two runs of one server: no regression)."""
    report = tmp_path / "r.json"
    assert main(["check", "--embedded", "--quiet", "--select", "capabilities", "--report-json", str(report)]) in (0, 1)
    assert main(["gate", "--baseline", str(report), "--candidate", str(report)]) == 0


# ------------------------------------------------------------------ only what both runs selected
def _with_checks(outcomes: dict[str, str], checks: dict[str, list[str]], select: list[str] | None = None) -> dict[str, Any]:
    report = _report(outcomes)
    report["checks"] = [{"name": name, "requirements": cited, "outcome": "pass"} for name, cited in checks.items()]
    report["config"] = {"select": select or []}
    return report


def test_a_requirement_half_judged_by_a_narrower_run_is_not_compared(tmp_path: Path, capsys) -> None:
    """FORK-IDEMPOTENT-MISMATCH-001 is cited by two checks; `--select FORK-IDEMPOTENT-001` ran only one."""
    full = {"fork.idempotent_retry": ["X-IDEM-001"], "fork.key_lifetime": ["X-IDEM-001", "X-MISMATCH-001"],
            "fork.key_reused_differently": ["X-MISMATCH-001"]}
    old = _with_checks({"X-IDEM-001": "pass", "X-MISMATCH-001": "pass"}, full)
    narrowed = {name: cited for name, cited in full.items() if "X-IDEM-001" in cited}
    new = _with_checks({"X-IDEM-001": "pass", "X-MISMATCH-001": "skipped"}, narrowed, ["X-IDEM-001"])
    assert _gate(tmp_path, old, new) == 0
    out = capsys.readouterr().out
    assert "0 regressions" in out and "1 not compared" in out
    assert "| X-MISMATCH-001 | pass | skipped | fork.key\\_reused\\_differently not selected in the candidate |" in out


def test_a_fully_selected_requirement_is_still_compared_in_a_narrower_run(tmp_path: Path, capsys) -> None:
    full = {"a.one": ["X-A-001"], "a.two": ["X-B-001"]}
    old = _with_checks({"X-A-001": "pass", "X-B-001": "pass"}, full)
    new = _with_checks({"X-A-001": "fail"}, {"a.one": ["X-A-001"]}, ["a.one"])
    assert _gate(tmp_path, old, new) == 1
    out = capsys.readouterr().out
    assert "1 regressions" in out and "| X-A-001 | MUST | pass | fail |" in out and "1 removed" in out


def test_pass_to_skipped_in_two_full_runs_stays_a_regression(tmp_path: Path, capsys) -> None:
    checks = {"a.one": ["X-A-001"], "a.two": ["X-A-001"]}
    old = _with_checks({"X-A-001": "pass"}, checks)
    new = _with_checks({"X-A-001": "skipped"}, checks)
    assert _gate(tmp_path, old, new) == 1
    assert "| X-A-001 | MUST | pass | skipped |" in capsys.readouterr().out


def test_the_committed_old_reports_are_compared_check_by_check(tmp_path: Path, capsys) -> None:
    """The reports kept in tests/reports (today's and older formats) carry their checks: a report
    gated against a copy narrowed to one of its checks compares only what that check fully covers."""
    kept = sorted((Path(__file__).parent / "reports").glob("report-format-*.json"))
    assert kept
    for path in kept:
        data = json.loads(path.read_text())
        first = data["checks"][0]
        narrowed = dict(data, checks=[first], config=dict(data["config"], select=[first["name"]]))
        assert main(["gate", "--baseline", str(path), "--candidate", _write(tmp_path, "narrow.json", narrowed)]) == 0
        out = capsys.readouterr().out
        assert "0 regressions" in out and "### Not compared" in out, out
