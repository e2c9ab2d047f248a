"""Chapter: rollout - the pending rewind action (capability `rewind`).

A fork with `rewind` stores the child's pending action (mode `edit` with the restored draft, or
`rerun`) in the fork's own transaction (ForkService). Its state is not stored: it is `in-flight`
exactly while a turn of the session runs, so a client that reloads, or reads after the turn
stopped, always finds `pending` (REWIND-STATE-001). The first turn that finishes `completed`
clears it, in the finishing transaction (SessionsService.finish_turn, REWIND-CLEAR-001); a purge
removes it (DeletionService, REWIND-PURGE-001).
"""

from __future__ import annotations

from typing import Any

from reference_impl.services.common import ChapterService, timestamp, utcnow
from reference_impl.store import Transaction
from reference_impl.store.rows import SessionRow


def pending_action_row(session_id: str, rewind: dict[str, Any]) -> dict[str, Any]:
    """The row a fork with `rewind` stores for its child."""
    return {
        "session_id": session_id,
        "mode": rewind["mode"],
        "draft": rewind.get("draft") if rewind["mode"] == "edit" else None,
        "created_at": timestamp(utcnow()),
    }


class RewindService(ChapterService):
    chapter = "rewind"
    capabilities = ("rewind",)

    def pending_action(self, principal: str, session_id: str) -> dict[str, Any]:
        with self.store.read() as tx:
            session = self.access.visible_session(tx, principal, session_id)
            action = tx.pending_action(session_id)
        if action is None:
            return {"pending_action": None}
        return {"pending_action": {"mode": action["mode"], "draft": action["draft"], "state": self.state(session)}}

    @staticmethod
    def state(session: SessionRow) -> str:
        return "in-flight" if session.running_turn_id is not None else "pending"

    @staticmethod
    def store_for_fork(tx: Transaction, child_id: str, rewind: dict[str, Any] | None) -> None:
        if rewind is not None:
            tx.insert_pending_action(pending_action_row(child_id, rewind))
