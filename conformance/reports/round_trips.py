"""Round-trip counts in the reports: per cost check, what each counted request cost and from which
source (header, spans or both: counts.py), and for a failed check the spans of the offending
request, so a team sees which statements made a read cost too much."""

from __future__ import annotations

from typing import Any

from conformance.counts import DETAILS_KEY
from conformance.response import trace_of
from conformance.results import CheckResult, Outcome

SHOWN = 12  # counts listed on a console line


def entries(check: CheckResult) -> list[dict[str, Any]]:
    """The counts a check read, in order (counts.round_trips publishes them in its details)."""
    found = check.details.get(DETAILS_KEY) if isinstance(check.details, dict) else None
    return [entry for entry in found or [] if isinstance(entry, dict) and "request" in entry]


WORDS = {"header": "the header", "spans": "spans", "both": "header and spans"}


def source(found: list[dict[str, Any]]) -> str:
    """Where the counts came from, in words: the header, spans, or header and spans."""
    names = {str(entry.get("source")) for entry in found}
    name = names.pop() if len(names) == 1 else "both"
    return WORDS.get(name, name)


def count_text(entry: dict[str, Any]) -> str:
    """An entry's count: one number, or both when header and spans differ."""
    header, spans = entry.get("header"), entry.get("spans")
    if header is not None and spans is not None and header != spans:
        return f"{header} (header) / {spans} (spans)"
    return str(spans if spans is not None else header)


def _cost(entry: dict[str, Any]) -> int:
    return max(int(entry.get("header") or 0), int(entry.get("spans") or 0))


def summary(check: CheckResult, limit: int = SHOWN) -> str | None:
    """`round trips from spans: depth 0 transcript page 2 · depth 1 transcript page 2 · ...`, or None."""
    found = entries(check)
    if not found:
        return None
    shown = " · ".join(f"{entry.get('what') or entry['request']} {count_text(entry)}" for entry in found[:limit])
    more = f" · and {len(found) - limit} more" if len(found) > limit else ""
    return f"round trips from {source(found)}: {shown}{more}"


def offending(check: CheckResult) -> dict[str, Any] | None:
    """For a failed check, the counted request it failed on (the failing exchange when it was counted),
    else its most expensive one; None when the check passed or counted nothing."""
    found = entries(check)
    if check.outcome not in (Outcome.FAIL, Outcome.XFAIL) or not found:
        return None
    failing = trace_of(check.exchange) if check.exchange is not None else None
    same = [entry for entry in found if failing is not None and entry.get("trace_id") == failing[0]]
    return same[0] if same else max(found, key=_cost)


def offending_text(entry: dict[str, Any]) -> str:
    """`GET url (depth 5 transcript page): 3 round trips; spans: SELECT ..., WITH ...`."""
    what = f" ({entry['what']})" if entry.get("what") else ""
    names = entry.get("span_names") or []
    spans = f"; spans: {'; '.join(names)}" if names else ("; no span names: counted from the header" if "spans" not in entry else "")
    return f"{entry['request']}{what}: {count_text(entry)} round trips{spans}"


__all__ = ["entries", "offending", "offending_text", "source", "summary"]
