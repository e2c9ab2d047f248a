"""Issue 17 item 4 for the diagnostics and fuzz checks: each is exactly its rule. A server the rules
permit passes (a 503 `unavailable` with Retry-After, discovery as costly as a read, a middle page or an
empty listing page of another cost), and a failure cites the rule the text places it under."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from conformance.config import load
from conformance.embedded import serve_app
from conformance.results import CheckResult, Outcome
from conformance.runner import run
from reference_impl.settings import Settings
from tests.mutants import reference_app, rewrite_responses

TOKENS = {"audit-alice": "alice", "audit-bob": "bob"}
PROBLEM = "urn:session-lineage:problem:"
LINEAGE = re.compile(r"^/sessions/[^/]+/lineage$")
ROUND_TRIPS = b"storage-round-trips"


def one_check(app: Any, name: str) -> CheckResult:
    with serve_app(app) as server:
        config = load(overrides={"target": server.url, "tokens": list(TOKENS), "select": [name], "seed": 17,
                                 "fuzz_examples": 2, "stateful_examples": 5}, environ={})
        result = run(config)
    return next(c for c in result.checks if c.name == name)


def reference(tmp_path: Any, rewrite: Any) -> Any:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'audit.db'}", tokens=TOKENS)
    return rewrite_responses(reference_app(settings), rewrite)


def _without(headers: list[tuple[bytes, bytes]], *names: bytes) -> list[tuple[bytes, bytes]]:
    return [(k, v) for k, v in headers if k.lower() not in names]


def lineage_answers(status: int, media: bytes, kind: str | None, retry_after: bool) -> Any:
    """Every lineage read answered `status` with a problem of `kind` (or plain text)."""

    def rewrite(scope: dict[str, Any], code: int, headers: Any, body: bytes) -> Any:
        if scope["method"] != "GET" or not LINEAGE.match(scope["path"]):
            return code, headers, body
        kept = _without(headers, b"content-type", b"content-length")
        if kind is None:
            return status, [*kept, (b"content-type", media)], b"boom"
        problem = {"type": PROBLEM + kind, "title": "Storage is unavailable; retry later", "status": status}
        extra = [(b"retry-after", b"1")] if retry_after else []
        return status, [*kept, (b"content-type", media), *extra], json.dumps(problem).encode()

    return rewrite


def test_fuzz_passes_the_503_the_spec_allows(tmp_path: Any) -> None:
    """ERR-NO-5XX-001: a 503 `unavailable` with Retry-After is allowed on any operation."""
    check = one_check(reference(tmp_path, lineage_answers(503, b"application/problem+json", "unavailable", True)),
                      "fuzz.generated_valid_requests")
    assert check.outcome is Outcome.PASS, check.message[:2000]


def test_fuzz_fails_a_503_without_retry_after_as_a_5xx(tmp_path: Any) -> None:
    check = one_check(reference(tmp_path, lineage_answers(503, b"application/problem+json", "unavailable", False)),
                      "fuzz.generated_valid_requests")
    assert check.outcome is Outcome.FAIL
    assert check.failed_requirements == ["ERR-NO-5XX-001"], (check.failed_requirements, check.message[:2000])


def test_fuzz_charges_a_plain_text_error_to_the_problem_rule(tmp_path: Any) -> None:
    """An error answer that is not problem+json breaks ERR-PROBLEM-001, not ERR-SCHEMA-001."""
    check = one_check(reference(tmp_path, lineage_answers(404, b"text/plain", None, False)), "fuzz.generated_valid_requests")
    assert check.outcome is Outcome.FAIL
    assert check.failed_requirements == ["ERR-PROBLEM-001"], (check.failed_requirements, check.message[:2000])


def test_fuzz_charges_a_protocol_rejection_of_valid_http_to_the_protocol_rule(tmp_path: Any) -> None:
    check = one_check(reference(tmp_path, lineage_answers(400, b"text/plain", None, False)), "fuzz.generated_invalid_requests")
    assert check.outcome is Outcome.FAIL
    assert set(check.failed_requirements) == {"ERR-PROTOCOL-001", "ERR-PROBLEM-001"}, check.failed_requirements


def test_header_check_allows_discovery_as_costly_as_a_read(tmp_path: Any) -> None:
    """DIAG-HEADER-001 fixes discovery's count nowhere: it may cost what a transcript page costs."""

    def rewrite(scope: dict[str, Any], status: int, headers: Any, body: bytes) -> Any:
        if scope["path"] == "/capabilities":
            return status, [*_without(headers, ROUND_TRIPS), (ROUND_TRIPS, b"2")], body
        return status, headers, body

    check = one_check(reference(tmp_path, rewrite), "diagnostics.header_on_every_response")
    assert check.outcome is Outcome.PASS, check.message


@pytest.mark.parametrize(("which", "value"), [("anonymous", b"1"), ("read", b"0")])
def test_header_check_holds_the_two_counts_the_rule_fixes(tmp_path: Any, which: str, value: bytes) -> None:
    """A request refused for missing credentials makes no round trip; a read of session data at least one."""

    def rewrite(scope: dict[str, Any], status: int, headers: Any, body: bytes) -> Any:
        hit = status == 401 if which == "anonymous" else (status == 200 and scope["path"].endswith("/lineage"))
        if hit:
            return status, [*_without(headers, ROUND_TRIPS), (ROUND_TRIPS, value)], body
        return status, headers, body

    check = one_check(reference(tmp_path, rewrite), "diagnostics.header_on_every_response")
    assert check.outcome is Outcome.FAIL and check.failed_requirements == ["DIAG-HEADER-001"], (check.outcome, check.message)


def test_page_cost_compares_the_first_and_the_last_page_only(tmp_path: Any) -> None:
    """DIAG-PAGE-COST-001 names the first page and a page at the end: a page between may cost more."""
    seen: list[int] = []

    def rewrite(scope: dict[str, Any], status: int, headers: Any, body: bytes) -> Any:
        if scope["path"].endswith("/transcript") and b"limit=7" in scope["query_string"]:
            seen.append(1)
            if len(seen) == 4:
                return status, [*_without(headers, ROUND_TRIPS), (ROUND_TRIPS, b"3")], body
        return status, headers, body

    check = one_check(reference(tmp_path, rewrite), "diagnostics.page_cost_by_position")
    assert check.outcome is Outcome.PASS, check.message
    assert len(seen) > 5


def test_listing_cost_leaves_an_empty_descendants_page_to_the_bound(tmp_path: Any) -> None:
    """DIAG-LIST-COST-001 compares pages by the depth of the sessions listed: an empty page lists none."""

    def rewrite(scope: dict[str, Any], status: int, headers: Any, body: bytes) -> Any:
        if scope["path"].endswith("/descendants") and status == 200 and json.loads(body).get("sessions") == []:
            return status, [*_without(headers, ROUND_TRIPS), (ROUND_TRIPS, b"1")], body
        return status, headers, body

    check = one_check(reference(tmp_path, rewrite), "diagnostics.listing_cost_by_depth")
    assert check.outcome is Outcome.PASS, check.message


@pytest.mark.parametrize("value", ["²", "١٢", " 3x", "-1"])
def test_a_count_header_that_is_no_ascii_integer_fails_its_rule_instead_of_crashing(value: str) -> None:
    """`str.isdigit` takes '²' and Arabic-Indic digits, which `int` then refuses or reads: both fail the rule."""
    from conformance.counts import header_round_trips
    from conformance.errors import CheckFailed
    from conformance.response import Response
    from conformance.results import Exchange

    answer = Response(Exchange("GET", "http://target/sessions/s", {}, None, 200, {"storage-round-trips": value}, b"{}"))
    with pytest.raises(CheckFailed) as failed:
        header_round_trips(answer)
    assert failed.value.requirements == ["DIAG-HEADER-001"]
