"""What several fork modules check: a refused fork left nothing behind."""

from __future__ import annotations

from conformance.context import CheckContext


def absent(ctx: CheckContext, session_id: str, why: str) -> None:
    """A refused fork created no session under the target id it named (FORK-ATOMIC-001)."""
    response = ctx.alice.get(f"/sessions/{session_id}")
    ctx.expect(response.status == 404, f"{why}: session {session_id} exists (HTTP {response.status})", "FORK-ATOMIC-001")
