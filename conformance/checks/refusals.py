"""Refusals that are not schema violations (ERR-REFUSAL-TYPE-001, since 1.3.0).

A page size above `max_page_size`, a lease longer than `max_lease_seconds` and a grant to the
owner match the published schema; since 1.3.0 each has a problem type of its own. The rules that
name these refusals are older: their checks accept the type of 1.3.0 or `invalid-request`, the
type servers of 1.2 answer, and `errors.refusals_say_what_they_are` holds a server of 1.3.0 to the
new types and to a `detail` that names the accepted range.
"""

from __future__ import annotations

from conformance.context import CheckContext
from conformance.response import Response

URN = "urn:session-lineage:problem:"


def expect_refused(ctx: CheckContext, response: Response, kind: str, *requirements: str) -> None:
    """422 with `kind` (1.3.0) or `invalid-request` (before); the older rules allow either."""
    ctx.expect_status(response, 422, None, *requirements)
    allowed = {URN + kind, URN + "invalid-request"}
    ctx.expect(
        response.problem_type in allowed,
        f"{response.exchange.method} {response.exchange.url}: expected problem type {URN + kind} "
        f"(or, before 1.3.0, {URN}invalid-request), got {response.problem_type}",
        *requirements,
    )
