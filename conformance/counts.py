"""The storage round trips of one request, from the run's source of counts: the server's
`Storage-Round-Trips` header (`diagnostics.query-count`, DIAG-HEADER-001), the database client spans
it exports to the suite's OTLP receiver (`diagnostics.trace-context`, DIAG-SPANS-001), or both, which
must then agree (DIAG-COUNTS-AGREE-001). Every cost check reads its counts here, and each count is
published in the check's details with its source (and the spans behind it) for the reports.
"""

from __future__ import annotations

from typing import Any, Protocol

from conformance.checks.fork.writes import header_count
from conformance.errors import CheckFailed, NotVerified
from conformance.otlp import TRACE_CAPABILITY, WAIT_S, Trace, running, start
from conformance.response import Response

QUERY_COUNT = "diagnostics.query-count"
HEADER = "Storage-Round-Trips"
AGREEMENT = "DIAG-COUNTS-AGREE-001"
DETAILS_KEY = "round_trips"  # in a check's details: every count it read, with its source
SPAN_LABELS = 12  # span names kept per request in the details


class _Run(Protocol):
    config: Any
    capabilities: dict[str, Any]
    details: dict[str, Any]


def sources(capabilities: dict[str, Any], config: Any) -> tuple[str, ...]:
    """Where this run reads round trips: "header" with `diagnostics.query-count`, "spans" with
    `diagnostics.trace-context` and a receiver (`otlp_receiver`), both, or none."""
    advertised = capabilities.get("capabilities", []) if isinstance(capabilities, dict) else []
    found = []
    if QUERY_COUNT in advertised:
        found.append("header")
    if TRACE_CAPABILITY in advertised and getattr(config, "otlp_receiver", None):
        found.append("spans")
    return tuple(found)


def source_name(found: tuple[str, ...]) -> str:
    """"header", "spans", "both" or "none"."""
    return "both" if len(found) == 2 else found[0] if found else "none"


def header_round_trips(response: Response) -> int:
    """The `Storage-Round-Trips` header's count (DIAG-HEADER-001 fails when it is missing or malformed)."""
    return header_count(response, HEADER, "DIAG-HEADER-001")


def _request(response: Response) -> str:
    return f"{response.exchange.method} {response.exchange.url}"


def request_spans(config: Any, response: Response) -> Trace:
    """The spans the target exported for one request, waited for (bounded); NotVerified, naming the
    request, when none can count it: no traceparent sent, no trace arrived, or neither a server span
    nor a database span in it."""
    receiver = running(config) or start(config)
    trace_ids = response.trace
    if receiver is None or trace_ids is None:
        raise NotVerified(f"{_request(response)}: no trace to count it by (no OTLP receiver, or no traceparent sent)")
    wait = getattr(config, "otlp_wait", WAIT_S)
    trace = receiver.trace(*trace_ids, wait_s=wait)
    if trace is None:
        raise NotVerified(
            f"{_request(response)}: no span of its trace {trace_ids[0]} reached the OTLP receiver within "
            f"{wait:g} s (the target does not continue the caller's trace context, "
            "or does not export to the receiver)"
        )
    if trace.server_span(trace_ids[1]) is None and not trace.round_trips:
        raise NotVerified(
            f"{_request(response)}: its trace {trace_ids[0]} holds no server span for the suite's request and "
            "no database client span, so its round trips cannot be told"
        )
    return trace


def counted(run: _Run) -> bool:
    """Whether this run can count round trips at all."""
    return bool(sources(run.capabilities, run.config))


def require_counts(run: _Run) -> None:
    """NotVerified, before a cost check sets anything up, when the run has no source of counts."""
    if not counted(run):
        raise NotVerified(
            f"round trips are shown by `{QUERY_COUNT}` (the {HEADER} header) or by `{TRACE_CAPABILITY}` with the "
            "suite's OTLP receiver (--otlp-receiver); this run has neither"
        )


def round_trips(run: _Run, response: Response, what: str | None = None, require_spans: bool = False) -> int:
    """The round trips of one request from the run's source (see `sources`), recorded once in the
    check's details, labelled `what` (e.g. "depth 5") for the reports. NotVerified when the run has
    no source; a failure of DIAG-COUNTS-AGREE-001, citing the request, both numbers and the spans,
    when header and spans differ. When the header is there but the request's spans cannot be found,
    the header alone judges the cost (it is evidence of its own) and the details say why the spans
    were not used; `require_spans` (the agreement check) makes that NotVerified instead."""
    require_counts(run)
    found = sources(run.capabilities, run.config)
    header = header_round_trips(response) if "header" in found else None
    trace = None
    unused = None
    if "spans" in found:
        try:
            trace = request_spans(run.config, response)
        except NotVerified as exc:
            if header is None or require_spans:
                raise
            found, unused = ("header",), str(exc)
    spans = trace.round_trips if trace is not None else []
    entry: dict[str, Any] = {"request": _request(response), "source": source_name(found)}
    if unused is not None:
        entry["spans_not_used"] = unused
    if what is not None:
        entry["what"] = what
    if response.trace is not None:
        entry["trace_id"] = response.trace[0]
    if header is not None:
        entry["header"] = header
    if trace is not None:
        entry["spans"] = len(spans)
        entry["span_names"] = [span.label() for span in spans[:SPAN_LABELS]]
    recorded = run.details.setdefault(DETAILS_KEY, [])
    if not any(e.get("trace_id") == entry.get("trace_id") and e["request"] == entry["request"] for e in recorded):
        recorded.append(entry)
    if header is not None and trace is not None and header != len(spans):
        names = "; ".join(entry["span_names"]) or "none"
        failure = CheckFailed(
            f"{_request(response)} answered {response.status} with {HEADER}: {header}, but its trace holds "
            f"{len(spans)} database round trip span(s) ({names}); the header and the spans must count the same",
            [AGREEMENT],
            response.exchange,
        )
        failure.setup_rules = frozenset({AGREEMENT})  # type: ignore[attr-defined]  # any check may cite it (registry.py)
        raise failure
    return header if header is not None else len(spans)


__all__ = ["AGREEMENT", "DETAILS_KEY", "QUERY_COUNT", "counted", "header_round_trips", "require_counts", "request_spans", "round_trips", "source_name", "sources"]
