"""Chapter: revert. Undo a session to just before one of its own turns, by compare-and-swap on the
session's version (the strong ETag).

Nothing is deleted or rewritten: the session's own effective segments (segments.py) change, the
reverted records stay stored (readable in `GET /sessions/{id}/records`) and a revert history row
says what each revert took out. Forks keep the segments they captured, so a revert never changes a
descendant; cursors carry the revision they were issued at.
"""

from __future__ import annotations

from typing import Any

from reference_impl import etags, segments, views
from reference_impl.errors import PreconditionFailed, TurnInProgress, UnknownTurn
from reference_impl.principals import public_id
from reference_impl.services.common import ChapterService, timestamp, utcnow


def taken_out(before: list[segments.Seg], after: list[segments.Seg]) -> list[dict[str, int]]:
    """The record index ranges in `before` (closed segments) that `after` no longer holds."""
    kept = [(low, high) for _, _, low, high in after if high is not None]
    out: list[dict[str, int]] = []
    for _, _, low, high in before:
        assert high is not None
        start = low
        for keep_low, keep_high in kept:
            if keep_low <= start < keep_high:
                start = keep_high
        if start < high:
            out.append({"first_index": start, "end_index": high})
    return out


class RevertService(ChapterService):
    chapter = "revert"
    capabilities = ("revert",)

    def revert(
        self, principal: str, session_id: str, body: dict[str, Any], lease_id: str | None, if_match: list[str] | None
    ) -> etags.Tagged:
        if if_match is None:  # a request without it is refused before anything is read (428)
            etags.require_match(None, "")
        turn_id = body["turn_id"]
        now = timestamp(utcnow())
        with self.store.write() as tx:
            session = self.access.writable_session(tx, principal, session_id, lease_id)
            etags.require_match(if_match, etags.etag(session))
            if session.running_turn_id is not None or session.suspended_turn_id is not None:
                raise TurnInProgress(f"session {session_id} has an unfinished turn; finish it before reverting")
            turn = tx.turn(turn_id)
            if turn is None or turn.session_id != session_id or not segments.holds_turn(session.own_segments, turn.turn_index):
                raise UnknownTurn(f"turn {turn_id} is not one of the session's own effective turns")
            after, turns_out, records_out = segments.revert(
                session.own_segments, turn.turn_index, turn.first_record_index, session.turn_count, session.record_count
            )
            applied = tx.apply_revert(session_id, session.version, segments.dump(after))
            if applied is None:
                raise PreconditionFailed("the session changed while the revert was evaluated; read its ETag again")
            version, revision = applied
            before = segments.closed(session.own_segments, session.turn_count, session.record_count)
            row = {
                "session_id": session_id,
                "revision": revision,
                "before_turn_id": turn_id,
                "principal": str(principal),
                "segments_before": segments.dump(before),
                "segments_after": segments.dump(after),
                "reverted_turn_count": turns_out,
                "reverted_record_count": records_out,
                "created_at": now,
            }
            tx.insert_revert(row)
        result = {"session": views.session(session), "revert": revert_view(row)}
        return etags.tagged(result, session, version)

    def reverts(self, principal: str, session_id: str) -> dict[str, Any]:
        with self.store.read() as tx:
            self.access.visible_session(tx, principal, session_id)
            rows = tx.reverts(session_id)
        return {"session_id": public_id(session_id), "reverts": [revert_view(row) for row in rows]}


def revert_view(row: dict[str, Any]) -> dict[str, Any]:
    before = segments.parse(row["segments_before"])
    after = segments.parse(row["segments_after"])
    return {
        "revision": row["revision"],
        "before_turn_id": public_id(row["before_turn_id"]),
        "reverted_turn_count": row["reverted_turn_count"],
        "reverted_record_count": row["reverted_record_count"],
        "reverted_records": taken_out(before, after),
        "created_at": row["created_at"],
    }
