"""The release regression gate: `session-lineage gate --baseline OLD.json --candidate NEW.json`.

Compares two JSON reports of the suite (`conformance/report.schema.json`) requirement by
requirement and fails when anything that passed in the baseline does not pass in the candidate,
whatever the candidate's expected-failures list says. A team gates a release on "nothing that
worked has broken" with it, even while a long list of known failures remains.

Rules (stated in the top-level README, "Release regression gate"):

- A requirement *passes* when its outcome is `pass` or `unexpected-pass` (it passed although an
  expected-failures file listed it).
- **Regression** (exit 1): present in both reports, passes in the baseline, does not pass in the
  candidate (failed, errored, expected to fail, skipped or out of scope).
- **Evidence lost**: passes in the baseline, `not-verified` in the candidate (the rule applies, but
  the candidate's run could not observe its evidence: a diagnostics header gone, a timing margin
  not established). Listed apart; fails the gate (exit 1) only with `strict`.
- **Improvement**: present in both, does not pass in the baseline, passes in the candidate.
- **Not compared**: a requirement is compared only when every check that cites it (in either
  report, and in this suite's catalogue when a run was narrowed by `--select`) ran in both runs,
  whatever its outcome; otherwise it was judged on part of its evidence in one run, and is listed
  with the checks that did not run. Never a failure.
- **Added** / **removed**: in one report only (a newer catalogue, or a narrower `--select`); reported,
  never a failure, because the target did not get worse at something it was asked to do.
- **Versions**: a change of `spec_version`, suite version or claimed profile/version is reported;
  `--require-version X.Y[.Z]` fails (exit 1) when the candidate's claimed version is older, so a gate
  can demand a minimum spec version.
- Unreadable input (missing file, not JSON, not a report) exits 2 and compares nothing. Reports of
  every format version 1.x are read (`format_version`, absent in 1.0.0 reports); another major
  version is unreadable.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PASSING = frozenset({"pass", "unexpected-pass"})
NOT_VERIFIED = "not-verified"  # report format 1.1.0
EXIT_OK, EXIT_REGRESSED, EXIT_UNREADABLE = 0, 1, 2
_MARKDOWN_SPECIALS = re.compile(r"([\\`*_\[\]|~#<>])")
_VERSION = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?$")


class GateInputError(Exception):
    """A report could not be read as a conformance report."""


@dataclass(frozen=True)
class Entry:
    id: str
    outcome: str
    level: str
    title: str


@dataclass
class Report:
    path: str
    spec_version: str
    suite_version: str
    claim: str | None  # "full@1.2.0", or None
    verdict: str
    summary: str
    requirements: dict[str, Entry]
    checks: dict[str, tuple[str, ...]] | None = None  # check name -> the requirements it cites; None: not listed
    partial: bool = False  # the run was narrowed by --select


@dataclass
class Change:
    id: str
    before: str | None
    after: str | None
    level: str
    title: str


@dataclass
class Comparison:
    baseline: Report
    candidate: Report
    regressions: list[Change] = field(default_factory=list)
    improvements: list[Change] = field(default_factory=list)
    added: list[Change] = field(default_factory=list)
    removed: list[Change] = field(default_factory=list)
    version_changes: list[str] = field(default_factory=list)
    version_failure: str | None = None
    not_compared: list[Change] = field(default_factory=list)  # `title` holds the reason
    evidence_lost: list[Change] = field(default_factory=list)  # pass -> not verified
    strict: bool = False  # evidence lost fails the gate too

    @property
    def failed(self) -> bool:
        return bool(self.regressions) or self.version_failure is not None or (self.strict and bool(self.evidence_lost))

    @property
    def exit_code(self) -> int:
        return EXIT_REGRESSED if self.failed else EXIT_OK


def load_report(path: str | Path) -> Report:
    """Read one JSON report; anything that is not one raises GateInputError."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise GateInputError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise GateInputError(f"{path}: not JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("requirements"), list):
        raise GateInputError(f"{path}: not a conformance report (no `requirements` list)")
    format_version = data.get("format_version", "1.0.0")
    if not isinstance(format_version, str) or not re.match(r"^1\.\d+\.\d+$", format_version):
        raise GateInputError(f"{path}: report format {format_version!r} is not 1.x; this gate reads 1.x reports")
    entries: dict[str, Entry] = {}
    for index, item in enumerate(data["requirements"]):
        if not isinstance(item, dict) or not isinstance(item.get("id"), str) or not isinstance(item.get("outcome"), str):
            raise GateInputError(f"{path}: requirements[{index}] has no string `id` and `outcome`")
        if item["id"] in entries:
            raise GateInputError(f"{path}: requirement {item['id']} is listed twice")
        entries[item["id"]] = Entry(
            id=item["id"],
            outcome=item["outcome"],
            level=str(item.get("level") or ""),
            title=str(item.get("title") or ""),
        )
    checks: dict[str, tuple[str, ...]] | None = None
    if isinstance(data.get("checks"), list):
        checks = {}
        for item in data["checks"]:
            if isinstance(item, dict) and isinstance(item.get("name"), str):
                cited = item.get("requirements") if isinstance(item.get("requirements"), list) else []
                checks[item["name"]] = tuple(str(rid) for rid in cited)
    config = data.get("config") if isinstance(data.get("config"), dict) else {}
    claim = data.get("claim")
    claim_text = None
    if isinstance(claim, dict) and claim.get("profile"):
        claim_text = f"{claim.get('profile')}@{claim.get('version')}"
    return Report(
        path=str(path),
        spec_version=str(data.get("spec_version") or "?"),
        suite_version=str(data.get("suite_version") or "?"),
        claim=claim_text,
        verdict=str(data.get("verdict") or "?"),
        summary=str(data.get("summary_text") or ""),
        requirements=entries,
        checks=checks,
        partial=bool(config.get("select")),
    )


def _version_tuple(text: str | None) -> tuple[int, int, int] | None:
    match = _VERSION.match(text or "")
    if not match:
        return None
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


def compare(baseline: Report, candidate: Report, require_version: str | None = None, strict: bool = False) -> Comparison:
    result = Comparison(baseline=baseline, candidate=candidate, strict=strict)
    for rid, old in baseline.requirements.items():
        new = candidate.requirements.get(rid)
        if new is None:
            result.removed.append(Change(rid, old.outcome, None, old.level, old.title))
            continue
        unjudged = _not_selected(rid, baseline, candidate)
        if unjudged:
            result.not_compared.append(Change(rid, old.outcome, new.outcome, new.level or old.level, unjudged))
            continue
        was, now = old.outcome in PASSING, new.outcome in PASSING
        if was and new.outcome == NOT_VERIFIED:
            result.evidence_lost.append(Change(rid, old.outcome, new.outcome, new.level or old.level, new.title or old.title))
        elif was and not now:
            result.regressions.append(Change(rid, old.outcome, new.outcome, new.level or old.level, new.title or old.title))
        elif now and not was:
            result.improvements.append(Change(rid, old.outcome, new.outcome, new.level or old.level, new.title or old.title))
    for rid, new in candidate.requirements.items():
        if rid not in baseline.requirements:
            result.added.append(Change(rid, None, new.outcome, new.level, new.title))
    for what, before, after in (
        ("spec version", baseline.spec_version, candidate.spec_version),
        ("suite version", baseline.suite_version, candidate.suite_version),
        ("claim", baseline.claim, candidate.claim),
    ):
        if before != after:
            result.version_changes.append(f"{what}: {before or 'none'} → {after or 'none'}")
    if require_version is not None:
        wanted = _version_tuple(require_version)
        claimed_version = candidate.claim.split("@", 1)[1] if candidate.claim and "@" in candidate.claim else None
        have = _version_tuple(claimed_version)
        if have is None or wanted is None or have < wanted or have[0] != wanted[0]:
            result.version_failure = (
                f"the candidate's claim {candidate.claim or '(none)'} is not at version {require_version} or a later minor version"
            )
    return result


def _catalogue_citing(rid: str) -> set[str]:
    """This suite's checks that cite a requirement (used when a run was narrowed)."""
    from conformance.registry import all_checks

    return {item.name for item in all_checks() if rid in item.requirements}


def _not_selected(rid: str, baseline: Report, candidate: Report) -> str:
    """Why a requirement cannot be compared (empty when it can): a check citing it did not run in both."""
    if baseline.checks is None or candidate.checks is None:
        return ""  # a report without its checks: compare as reported
    citing = {name for report in (baseline, candidate) for name, cited in (report.checks or {}).items() if rid in cited}
    if baseline.partial or candidate.partial:
        citing |= _catalogue_citing(rid)
    reasons = []
    for what, report in (("baseline", baseline), ("candidate", candidate)):
        absent = sorted(citing - set(report.checks or {}))
        if absent:
            shown = ", ".join(absent[:3]) + (f" and {len(absent) - 3} more" if len(absent) > 3 else "")
            reasons.append(f"{shown} not selected in the {what}")
    return "; ".join(reasons)


def _escape(text: str) -> str:
    return _MARKDOWN_SPECIALS.sub(r"\\\1", text.replace("\r", " ").replace("\n", " "))


def _table(changes: list[Change]) -> list[str]:
    rows = ["| requirement | level | baseline | candidate | title |", "| --- | --- | --- | --- | --- |"]
    for change in sorted(changes, key=lambda c: c.id):
        rows.append(
            f"| {_escape(change.id)} | {_escape(change.level)} | {_escape(change.before or '-')} | "
            f"{_escape(change.after or '-')} | {_escape(change.title)} |"
        )
    return rows


def render_markdown(result: Comparison) -> str:
    word = "FAILED" if result.failed else "PASSED"
    lines = [
        f"## Session Lineage release gate: {word}",
        "",
        f"baseline `{_escape(Path(result.baseline.path).name)}` ({_escape(result.baseline.claim or 'no claim')}, "
        f"spec {_escape(result.baseline.spec_version)}, {_escape(result.baseline.verdict)}) → "
        f"candidate `{_escape(Path(result.candidate.path).name)}` ({_escape(result.candidate.claim or 'no claim')}, "
        f"spec {_escape(result.candidate.spec_version)}, {_escape(result.candidate.verdict)})  ",
        f"{len(result.regressions)} regressions · {len(result.evidence_lost)} evidence lost"
        f"{' (fails with strict)' if result.strict and result.evidence_lost else ''} · {len(result.improvements)} improvements · "
        f"{len(result.added)} added · {len(result.removed)} removed · {len(result.not_compared)} not compared",
    ]
    if result.version_failure:
        lines += ["", f"**Version:** {_escape(result.version_failure)}"]
    if result.version_changes:
        lines += ["", "### Version changes", ""] + [f"- {_escape(item)}" for item in result.version_changes]
    sections = (
        ("Regressions (passed in the baseline, not in the candidate)", result.regressions),
        ("Evidence lost (passed in the baseline, not verified in the candidate)", result.evidence_lost),
        ("Improvements", result.improvements),
        ("Added requirements", result.added),
        ("Removed requirements", result.removed),
    )
    for title, changes in sections:
        if changes:
            lines += ["", f"### {title}", ""] + _table(changes)
    if result.not_compared:
        lines += [
            "", "### Not compared (a check citing it did not run in both runs)", "",
            "| requirement | baseline | candidate | why |", "| --- | --- | --- | --- |",
        ]
        for change in sorted(result.not_compared, key=lambda c: c.id):
            lines.append(
                f"| {_escape(change.id)} | {_escape(change.before or '-')} | {_escape(change.after or '-')} | {_escape(change.title)} |"
            )
    return "\n".join(lines) + "\n"


def run_gate(
    baseline: str,
    candidate: str,
    markdown: str | None = None,
    require_version: str | None = None,
    out: Any = None,
    strict: bool | None = None,
) -> int:
    """Compare and print; `strict` (default: the environment's SESSION_LINEAGE_STRICT) fails on
    evidence lost too."""
    out = out or sys.stdout
    if strict is None:
        strict = os.environ.get("SESSION_LINEAGE_STRICT", "").strip().lower() in ("1", "true", "yes", "on")
    try:
        old, new = load_report(baseline), load_report(candidate)
    except GateInputError as exc:
        print(f"session-lineage gate: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    if require_version is not None and _version_tuple(require_version) is None:
        print(f"session-lineage gate: --require-version {require_version!r} is not X.Y or X.Y.Z", file=sys.stderr)
        return EXIT_UNREADABLE
    result = compare(old, new, require_version, strict)
    text = render_markdown(result)
    out.write(text)
    if markdown:
        target = Path(markdown)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            existing = target.stat().st_size if target.exists() else 0
            with open(target, "a", encoding="utf-8") as handle:
                if existing:
                    handle.write("\n")
                handle.write(text)
        except OSError as exc:
            print(f"session-lineage gate: cannot write {markdown}: {exc.strerror or exc}", file=sys.stderr)
            return EXIT_UNREADABLE
    return result.exit_code
