"""A self-contained HTML report: one file, inline CSS, no script, nothing fetched from the network.

It opens with the verdict and the profiles reached, then the run's facts (seed, versions, redacted
configuration), the requirements by chapter, one `<details>` per check with its message and
reproducer, and the requirements only a deployment can verify. Each requirement is shown with its
text from the catalogue, so the page stays whole when saved as a CI artifact; with a spec URL
(`check --spec-url URL`, e.g. the rendered spec/site) every requirement id links to `URL#ID`.
Everything a target controls is escaped with `html.escape`.
"""

from __future__ import annotations

import html
import json
import os
from pathlib import Path
from typing import Any

import spec
from conformance.curl import describe_response, printable
from conformance.profiles import describe
from conformance.reports.markdown import COLUMNS, LABELS, STATUS_WORDS
from conformance import matrix
from conformance.reports import round_trips
from conformance.results import NOT_VERIFIABLE, CheckResult, Outcome, RunResult

CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 75em; padding: 0 1em; color: #1d1d1f; }
h1 { font-size: 1.5em; margin-bottom: .2em; } h2 { font-size: 1.2em; margin-top: 2em; }
table { border-collapse: collapse; margin: .5em 0; } th, td { border: 1px solid #ccc; padding: .2em .6em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; } td.n { text-align: right; } td.bad { color: #b3261e; font-weight: 600; }
pre { background: #f6f6f6; border: 1px solid #ddd; padding: .6em; overflow-x: auto; white-space: pre-wrap; word-break: break-all; }
details { border: 1px solid #ddd; border-radius: 4px; margin: .3em 0; padding: .2em .6em; }
summary { cursor: pointer; } code { font-size: .95em; } .req { color: #444; font-size: .9em; margin-top: .2em; }
.verdict { font-size: 1.1em; padding: .5em .8em; border-radius: 4px; }
.conformant { background: #e3f5e1; } .not-conformant { background: #fde2e1; } .incomplete { background: #fff4d6; }
.o { display: inline-block; min-width: 7.5em; font-weight: 600; }
.pass { color: #17663a; } .fail, .error { color: #b3261e; } .unexpected-pass { color: #8a2be2; }
.expected-failure, .skipped, .not-verified { color: #8a6d00; } .out-of-scope { color: #777; } .muted { color: #666; }
"""


_SPEC_URL: list[str | None] = [None]  # the spec URL of the page being rendered


def render_html(result: RunResult, spec_url: str | None = None) -> str:
    """The whole report as one HTML document; requirement ids link to `spec_url#ID` when given."""
    _SPEC_URL[0] = spec_url.rstrip("#") if spec_url else None
    try:
        return _render(result)
    finally:
        _SPEC_URL[0] = None


def _render(result: RunResult) -> str:
    word = STATUS_WORDS[result.verdict]
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>Session Lineage conformance: {_e(word)}</title>",
        f"<style>{CSS}</style></head><body>",
        f"<h1>Session Lineage conformance: {_e(word)}</h1>",
        f'<p class="verdict {_e(result.verdict.value)}"><strong>{_e(result.verdict.value)}</strong> '
        f"(exit code {result.exit_code}): {_e(result.summary)}</p>",
        _facts(result),
        _profiles(result),
        _counts(result),
        _notes(result),
        _preflight(result),
        _requirements(result),
        _checks(result),
        _deployment_only(result),
        _configuration(result),
        "</body></html>",
    ]
    return "\n".join(part for part in parts if part) + "\n"


def write_html(result: RunResult, path: str | os.PathLike[str], spec_url: str | None = None) -> None:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render_html(result, spec_url), encoding="utf-8")


def _catalogue() -> dict[str, dict[str, Any]]:
    try:
        return {req["id"]: req for req in spec.requirements()}
    except (OSError, KeyError, TypeError):
        return {}


def _rid(rid: str) -> str:
    """A requirement id: a link into the rendered spec when a spec URL was given."""
    code = f"<code>{_e(rid)}</code>"
    base = _SPEC_URL[0]
    return f'<a href="{_e(base)}#{_e(rid)}">{code}</a>' if base else code


def _title_and_text(rid: str, title: str, catalogue: dict[str, dict[str, Any]]) -> str:
    text = (catalogue.get(rid) or {}).get("text")
    return _e(title) + (f'<div class="req">{_e(text)}</div>' if text else "")


def _e(value: Any) -> str:
    return html.escape(printable(str(value)), quote=True)


def _outcome(outcome: Outcome) -> str:
    return f'<span class="o {outcome.value}">{_e(LABELS[outcome])}</span>'


def _facts(result: RunResult) -> str:
    claim = result.claim
    rows = [
        ("target", f"<code>{_e(result.target)}</code>"),
        ("claim", _e(f"{claim['profile']}@{claim['version']} ({claim['source']})") if claim else "none"),
        ("seed", f"{result.seed} (rerun with <code>--seed {result.seed}</code>)"),
        ("suite version", _e(result.suite_version)),
        ("spec version", _e(result.spec_version)),
        ("target's spec version", _e((result.capabilities or {}).get("spec_version", "unknown"))),
        ("started", _e(result.started_at)),
        ("duration", f"{result.duration_s:.1f} s"),
        ("strict", "yes (SHOULD failures gate)" if result.strict else "no"),
    ]
    body = "".join(f"<tr><th>{name}</th><td>{value}</td></tr>" for name, value in rows)
    return f"<table>{body}</table>"


def _profiles(result: RunResult) -> str:
    if not result.profiles:
        return ""
    rows = []
    for profile in result.profiles:
        css = "pass" if profile.reached else "error" if profile.status == "undetermined" else "fail"
        rows.append(
            f"<tr><td>{_e(profile.name)}{' (claimed)' if profile.claimed else ''}</td><td>{_e(profile.version)}</td>"
            f'<td class="{css}">{_e(profile.status)}</td><td>{_e("" if profile.reached else describe(profile, limit=20))}</td>'
            f"<td>{_e(profile.title)}</td></tr>"
        )
    head = "<tr><th>profile</th><th>version</th><th>result</th><th>why not</th><th>holds</th></tr>"
    return f"<h2>Profiles</h2><table>{head}{''.join(rows)}</table>"


def _counts(result: RunResult) -> str:
    checks, requirements = result.counts(), result.requirement_counts()
    rows = "".join(
        f'<tr><td>{_outcome(o)}</td><td class="n">{checks[o.value]}</td><td class="n">{requirements[o.value]}</td></tr>'
        for o in COLUMNS
    )
    total = f'<tr><th>total</th><th class="n">{len(result.checks)}</th><th class="n">{len(result.requirements)}</th></tr>'
    return f"<h2>Summary</h2><table><tr><th>outcome</th><th>checks</th><th>requirements</th></tr>{rows}{total}</table>"


def _notes(result: RunResult) -> str:
    items = [f"<li>{_e(note)}</li>" for note in result.notes]
    if result.cleanup is not None:
        items.append(f"<li>{_e(result.cleanup.note)}</li>")
    return f"<ul>{''.join(items)}</ul>" if items else ""


def _preflight(result: RunResult) -> str:
    if not result.preflight:
        return ""
    rows = "".join(
        f"<tr><td>{_e(item.name)}</td><td>{_e(item.status)}</td><td>{_e(item.message)}</td></tr>" for item in result.preflight
    )
    return f"<h2>Preflight</h2><table><tr><th>item</th><th>status</th><th>result</th></tr>{rows}</table>"


def _chapter_titles() -> dict[str, str]:
    try:
        return {chapter["id"]: chapter["title"] for chapter in spec.load_yaml(spec.REQUIREMENTS_PATH)["chapters"]}
    except (OSError, KeyError, TypeError):
        return {}


def _requirements(result: RunResult) -> str:
    titles = _chapter_titles()
    chapters: dict[str, list[Any]] = {}
    for verdict in result.requirements:
        chapters.setdefault(verdict.chapter, []).append(verdict)
    checks = {check.name: check for check in result.checks}
    catalogue = _catalogue()
    blocks = ["<h2>Requirements by chapter</h2>"]
    for chapter, verdicts in chapters.items():
        bad = sum(1 for v in verdicts if v.outcome in (Outcome.FAIL, Outcome.ERROR, Outcome.XPASS))
        counts = ", ".join(
            f"{n} {LABELS[o]}" for o in COLUMNS if (n := sum(1 for v in verdicts if v.outcome is o))
        )
        rows = []
        for v in verdicts:
            note = v.reason or _message(v, checks)
            link = _link(v.link)
            rows.append(
                f"<tr><td>{_rid(v.id)}</td><td>{_e(v.level)}</td><td>{_title_and_text(v.id, v.title, catalogue)}</td>"
                f"<td>{_outcome(v.outcome)}</td><td>{'yes' if v.in_scope else 'no'}</td>"
                f"<td>{_e(note)}{link}</td><td>{', '.join(f'<code>{_e(c)}</code>' for c in v.checks)}</td></tr>"
            )
        head = "<tr><th>id</th><th>level</th><th>title</th><th>outcome</th><th>in claim</th><th>note</th><th>checks</th></tr>"
        blocks.append(
            f"<details{' open' if bad else ''}><summary><strong>{_e(titles.get(chapter, chapter))}</strong> "
            f'<span class="muted">({_e(counts)})</span></summary><table>{head}{"".join(rows)}</table></details>'
        )
    return "\n".join(blocks)


def _message(verdict: Any, checks: dict[str, CheckResult]) -> str:
    """What went wrong for a requirement: the first line of the message of a check that failed it."""
    for name in verdict.checks:
        check = checks.get(name)
        if check is None or not check.message:
            continue
        if verdict.id in check.failed_requirements or check.outcome is Outcome.ERROR:
            return check.message.splitlines()[0][:300]
    return ""


def _checks(result: RunResult) -> str:
    blocks = ["<h2>Checks</h2>"]
    for check in result.checks:
        blocks.append(_check(check))
    return "\n".join(blocks)


def _check(check: CheckResult) -> str:
    ids = check.failed_requirements or check.requirements
    body = [f"<p>{_e(check.title)} · {_e(check.level)} · {check.duration_ms:.0f} ms"]
    if check.seed is not None:
        body[0] += f" · check seed {check.seed}"
    body[0] += "</p>"
    if check.failed_requirements:
        body.append(f"<p>violated: {', '.join(_rid(r) for r in check.failed_requirements)}</p>")
    if check.message:
        body.append(f"<pre>{_e(check.message)}</pre>")
    if check.reason:
        body.append(f"<p>reason: {_e(check.reason)}{_link(check.link)}</p>")
    table = check.details.get(matrix.DETAILS_KEY)
    if table:
        body.append(_matrix(table))
    if round_trips.entries(check):
        body.append(_round_trips(check))
    if check.reproducer:
        body.append(f"<p>reproduce (shell script; tokens from the environment):</p><pre>{_e(check.reproducer)}</pre>")
    if check.exchange is not None:
        body.append(f"<p>response:</p><pre>{_e(describe_response(check.exchange))}</pre>")
    bad = check.outcome in (Outcome.FAIL, Outcome.ERROR, Outcome.XPASS)
    return (
        f"<details{' open' if bad else ''}><summary>{_outcome(check.outcome)} <code>{_e(check.name)}</code> "
        f'<span class="muted">[{", ".join(_rid(r) for r in ids)}]</span></summary>{"".join(body)}</details>'
    )


def _round_trips(check: CheckResult) -> str:
    """The round trips a cost check counted, request by request, with their source; for a failure,
    the spans of the offending request."""
    found = round_trips.entries(check)
    worst = round_trips.offending(check)
    rows = "".join(
        f'<tr class="{"bad" if entry is worst else ""}"><td>{_e(entry.get("what") or "")}</td><td><code>{_e(entry["request"])}</code></td>'
        f"<td>{_e(round_trips.count_text(entry))}</td><td>{_e('; '.join(entry.get('span_names') or []))}</td></tr>"
        for entry in found
    )
    head = "<tr><th>what</th><th>request</th><th>round trips</th><th>spans</th></tr>"
    note = f"<p>offending request: {_e(round_trips.offending_text(worst))}</p>" if worst is not None else ""
    return (
        f"<p>round trips from {_e(round_trips.source(found))} ({len(found)} requests counted)</p>{note}"
        f"<details><summary>every count</summary><table>{head}{rows}</table></details>"
    )


def _matrix(details: dict[str, Any]) -> str:
    """The authorization matrix: one table per position, wrong answers marked."""
    parts = [f"<p>authorization matrix: {_e(matrix.summary(details))}; <code>!</code> marks a wrong answer, <code>-</code> a cell not checked</p>"]
    for position, operations, rows in matrix.grid(details):
        head = f"<tr><th>{_e(position)}</th>" + "".join(f"<th>{_e(op)}</th>" for op in operations) + "</tr>"
        body = "".join(
            f"<tr><th>{_e(role)}</th>"
            + "".join(f'<td class="{"bad" if text.endswith("!") else ""}">{_e(text)}</td>' for text in row)
            + "</tr>"
            for role, row in rows
        )
        parts.append(f"<table>{head}{body}</table>")
    return "".join(parts)


def _deployment_only(result: RunResult) -> str:
    if not result.deployment_only:
        return ""
    catalogue = _catalogue()
    rows = "".join(
        f"<tr><td>{_rid(item['id'])}</td><td>{_e(item['level'])}</td><td>{_title_and_text(item['id'], item['title'], catalogue)}</td>"
        f"<td>{NOT_VERIFIABLE}</td></tr>"
        for item in result.deployment_only
    )
    return (
        f"<h2>{NOT_VERIFIABLE.capitalize()}</h2><p>Only a deployment can observe these requirements; "
        "the project's own tests check them for the reference server.</p>"
        f"<table><tr><th>id</th><th>level</th><th>title</th><th>status</th></tr>{rows}</table>"
    )


def _configuration(result: RunResult) -> str:
    config = json.dumps(result.config, indent=2, default=str)
    capabilities = json.dumps(result.capabilities, indent=2, default=str)
    return (
        "<h2>Configuration and capabilities</h2>"
        f"<details><summary>configuration (tokens redacted)</summary><pre>{_e(config)}</pre></details>"
        f"<details><summary>the target's capability document</summary><pre>{_e(capabilities)}</pre></details>"
    )


def _link(link: str | None) -> str:
    """An expected-failure entry's link: a clickable anchor only for http(s) addresses."""
    if not link:
        return ""
    if link.startswith(("http://", "https://")):
        return f' (<a href="{_e(link)}" rel="noreferrer">{_e(link)}</a>)'
    return f" ({_e(link)})"


__all__ = ["render_html", "write_html"]
