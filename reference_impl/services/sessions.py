"""Chapter: sessions, turns and records - the append-only log every other chapter reads."""

from __future__ import annotations

from typing import Any

from reference_impl import etags, views
from reference_impl.errors import ReplayHistoryMismatch, SessionExists, TurnExists, TurnInProgress
from reference_impl.services import turn_steps as steps
from reference_impl.services.common import ChapterService, new_key, timestamp, utcnow
from reference_impl.store import Transaction
from reference_impl.store.rows import SessionRow, TurnRow
from reference_impl.store.store import IntegrityError


class SessionsService(ChapterService):
    chapter = "sessions"

    def create_session(self, principal: str, body: dict[str, Any]) -> dict[str, Any]:
        row: dict[str, Any] = {
            "session_id": body.get("session_id") or new_key(principal),
            "owner": principal,
            "name": body.get("name"),
            "description": body.get("description"),
            "created_at": timestamp(utcnow()),
            "depth": 0,
            "turn_count": 0,
            "record_count": 0,
            "running_turn_id": None,
        }
        try:
            with self.store.write() as tx:
                tx.insert_session(row)
        except IntegrityError as exc:
            raise SessionExists(f"session {row['session_id']} already exists") from exc
        created = SessionRow(lineage=None, **row)
        return etags.tagged(views.session(created), created)

    def get_session(self, principal: str, session_id: str) -> dict[str, Any]:
        with self.store.read() as tx:
            session = self.access.visible_session(tx, principal, session_id)
        return etags.tagged(views.session(session), session)

    def start_turn(
        self,
        principal: str,
        session_id: str,
        body: dict[str, Any],
        lease_id: str | None = None,
        prefix: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """Start a turn. `prefix`: records rebuilt from replay history (services/rollout.py), written
        to the new turn before any of its own, in the same transaction."""
        turn_id = body.get("turn_id")  # None: the store derives the turn's id
        rebuilt: list[dict[str, Any]] = []
        try:
            with self.store.write() as tx:
                self.access.writable_session(tx, principal, session_id, lease_id)
                turn = steps.open_turn(tx, session_id, turn_id, body["role"])
                if turn is None:
                    raise TurnInProgress(f"session {session_id} already has a running turn")
                if prefix:
                    rebuilt = self._rebuild_prefix(tx, turn, prefix)
        except IntegrityError as exc:
            raise TurnExists(f"turn {turn_id} already exists") from exc
        if rebuilt and self.store.split:
            self._write_reserved_records(turn, 0, rebuilt)
        return views.turn(turn)

    def _rebuild_prefix(self, tx: Transaction, turn: TurnRow, prefix: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """REPLAY-REBUILD-001: the replayed records become the session's first records."""
        if turn.first_record_index != 0:  # records arrived since the replay plan was made: compare instead, and differ
            raise ReplayHistoryMismatch(
                f"session {turn.session_id} has records now; the replay history does not match them"
            )
        items = [(item["type"], item["content"]) for item in prefix]
        start, rows = steps.append_rows(self.store, tx, turn, items, timestamp(utcnow()))
        assert start == 0
        return rows

    own_turn = staticmethod(steps.own_turn)

    def append_records(
        self, principal: str, session_id: str, turn_id: str, body: dict[str, Any], lease_id: str | None = None
    ) -> dict[str, Any]:
        inputs = body["records"]
        encoded = steps.encoded_contents(self.limits, inputs)
        created_at = timestamp(utcnow())
        with self.store.write() as tx:
            turn = steps.require_running(steps.writable_turn(self.access, tx, principal, session_id, turn_id, lease_id))
            items = [(item["type"], content) for item, content in zip(inputs, encoded)]
            first, rows = steps.append_rows(self.store, tx, turn, items, created_at)
        if self.store.split:
            self._write_reserved_records(turn, first, rows)
        return {"records": steps.record_views(rows, [item["content"] for item in inputs])}

    def _write_reserved_records(self, turn: TurnRow, first: int, rows: list[dict[str, Any]]) -> None:
        """Two stores: the core has reserved the indexes; now the records store takes the rows.

        If that write fails, the reservation is given back when no later append followed it, so
        no gap is left; otherwise reads over the gap answer 503 `records-unavailable`.
        """
        give_back = steps.release_indexes(turn.session_id, turn.turn_id, first, len(rows))
        steps.insert_or_give_back(self.store, rows, give_back, steps.NOTHING_APPENDED, steps.INDEXES_HELD)

    def finish_turn(
        self, principal: str, session_id: str, turn_id: str, body: dict[str, Any], lease_id: str | None = None
    ) -> dict[str, Any]:
        finished_at = timestamp(utcnow())
        with self.store.write() as tx:
            turn = steps.require_running(steps.writable_turn(self.access, tx, principal, session_id, turn_id, lease_id))
            finished = steps.close_turn(tx, turn, body["status"], finished_at)
            if body["status"] == "completed":
                tx.clear_pending_action(session_id)  # REWIND-CLEAR-001: only a success clears it
        return views.turn(finished)
