"""Chapter: rollout - the legacy `replay_history` field of a turn start (capability `replay-history`).

Before durable lineage, clients forked by creating a new session and sending the retained records
("replay history") on its first turn; the server rebuilt the context from them. A lineage server
still accepts the field during a rollout:

- on a session with records before the new turn (inherited or its own), it compares the replay
  history with them by record id, in order (REPLAY-MATCH-001): equal - nothing is stored, so the
  context holds every inherited record exactly once; different - 409 `replay-history-mismatch`
  (REPLAY-CONFLICT-001);
- on a session without lineage and without records (a new root: how a client forks on a server
  without `fork`), the replayed records become its first records (REPLAY-REBUILD-001).

`plan` decides before the turn starts; `SessionsService.start_turn` writes a rebuild in the turn's
own transaction. The deprecation headers are the HTTP layer's (routes/rollout.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from reference_impl.errors import PayloadTooLarge, ReplayHistoryMismatch
from reference_impl.principals import public_id
from reference_impl.services.common import ChapterService
from reference_impl.store.rows import Segment

# RFC 9745 / RFC 8594 values the reference server announces for `replay_history`.
DEPRECATED_SINCE = 1796083200  # 2026-12-01T00:00:00Z, the release of spec 1.2.0
SUNSET = "Thu, 01 Jul 2027 00:00:00 GMT"
MIGRATION_NOTE = "https://github.com/session-lineage/session-lineage/blob/main/spec/CHANGELOG.md#migrating-to-1-2-0"


@dataclass(frozen=True)
class ReplayPlan:
    """What a turn start with replay history does: `prefix` records to write first (a rebuild), or
    none (the history agreed with the records already there)."""

    prefix: list[dict[str, Any]]

    @property
    def rebuild(self) -> bool:
        return bool(self.prefix)


class ReplayService(ChapterService):
    chapter = "replay"
    capabilities = ("replay-history",)

    def plan(
        self, principal: str, session_id: str, replay: list[dict[str, Any]], lease_id: str | None = None
    ) -> ReplayPlan:
        """Compare or rebuild, after the session's visibility, the caller's role and the lease."""
        with self.store.read() as tx:
            session = self.access.writable_session(tx, principal, session_id, lease_id)
            if session.lineage is None and session.record_count == 0:
                return self.rebuild_plan(replay)
            preceding = self.preceding_record_ids(tx, principal, session_id)
        self.compare(session_id, preceding, replay)
        return ReplayPlan([])

    def rebuild_plan(self, replay: list[dict[str, Any]]) -> ReplayPlan:
        prefix = []
        for position, item in enumerate(replay):
            content = json.dumps(item["content"], separators=(",", ":"))
            if len(content.encode()) > self.limits.max_record_bytes:
                raise PayloadTooLarge(
                    f"replay_history[{position}] exceeds max_record_bytes ({self.limits.max_record_bytes})"
                )
            prefix.append({"type": item["type"], "content": content})
        return ReplayPlan(prefix)

    def preceding_record_ids(self, tx: Any, principal: str, session_id: str) -> list[str]:
        """The ids of the session's effective transcript, in order: two statements."""
        chain = self.access.visible_chain(tx, principal, session_id)
        segments = [
            Segment(link.session.session_id, -1, link.record_bound) for link in chain if link.record_bound != -1
        ]
        total = sum((s.upto + 1) if s.upto is not None else 0 for s in segments) + chain[-1].session.record_count
        return [row.record_id for row in tx.records(segments, total + 1)]

    @staticmethod
    def compare(session_id: str, preceding: list[str], replay: list[dict[str, Any]]) -> None:
        sent = [item["record_id"] for item in replay]
        if sent == preceding:
            return
        position = next((n for n, (a, b) in enumerate(zip(sent, preceding)) if a != b), min(len(sent), len(preceding)))
        raise ReplayHistoryMismatch(
            f"replay_history differs from the {len(preceding)} records before the new turn of session "
            f"{public_id(session_id)} at position {position} (compared by record_id)"
        )


def deprecation_headers() -> dict[str, str]:
    """COMPAT-DEPRECATION-001: RFC 9745 `Deprecation`, RFC 8594 `Sunset`, and the migration note."""
    return {
        "Deprecation": f"@{DEPRECATED_SINCE}",
        "Sunset": SUNSET,
        "Link": f'<{MIGRATION_NOTE}>; rel="deprecation"; type="text/markdown"',
    }
