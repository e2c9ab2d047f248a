"""Chapter: sessions, turns and records - the append-only log every other chapter reads."""

from __future__ import annotations

import json
from typing import Any

from reference_impl import etags, views
from reference_impl.errors import (
    NotFound,
    PayloadTooLarge,
    ReplayHistoryMismatch,
    SessionExists,
    StorageUnavailable,
    TurnExists,
    TurnInProgress,
    TurnNotRunning,
)
from reference_impl.principals import public_id
from reference_impl.services.common import ChapterService, new_id, new_key, timestamp, utcnow
from reference_impl.store import Transaction
from reference_impl.store.rows import SessionRow, TurnRow
from reference_impl.store.store import IntegrityError, StorageError


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
        turn_id = body.get("turn_id") or new_key(principal)
        rebuilt: list[dict[str, Any]] = []
        try:
            with self.store.write() as tx:
                self.access.writable_session(tx, principal, session_id, lease_id)
                slot = tx.claim_turn_slot(session_id, turn_id)
                if slot is None:
                    raise TurnInProgress(f"session {session_id} already has a running turn")
                turn_index, first_record_index = slot
                row = {
                    "turn_id": turn_id,
                    "session_id": session_id,
                    "turn_index": turn_index,
                    "role": body["role"],
                    "status": "running",
                    "first_record_index": first_record_index,
                    "end_record_index": None,
                    "created_at": timestamp(utcnow()),
                    "finished_at": None,
                }
                tx.insert_turn(row)
                if prefix:
                    rebuilt = self._rebuild_prefix(tx, session_id, turn_id, turn_index, first_record_index, prefix)
        except IntegrityError as exc:
            raise TurnExists(f"turn {turn_id} already exists") from exc
        if rebuilt and self.store.split:
            self._write_reserved_records(session_id, turn_id, 0, rebuilt)
        return views.turn(TurnRow(**row))

    def _rebuild_prefix(
        self, tx: Transaction, session_id: str, turn_id: str, turn_index: int, first: int, prefix: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """REPLAY-REBUILD-001: the replayed records become the session's first records."""
        if first != 0:  # records arrived since the replay plan was made: compare instead, and differ
            raise ReplayHistoryMismatch(f"session {session_id} has records now; the replay history does not match them")
        start = tx.reserve_record_indexes(session_id, turn_id, len(prefix))
        assert start == 0
        created_at = timestamp(utcnow())
        rows = [
            {
                "record_id": new_id(),
                "session_id": session_id,
                "record_index": offset,
                "turn_id": turn_id,
                "turn_index": turn_index,
                "record_type": item["type"],
                "content": item["content"],
                "created_at": created_at,
            }
            for offset, item in enumerate(prefix)
        ]
        if not self.store.split:
            tx.insert_records(rows)
        return rows

    def own_turn(self, tx: Transaction, session_id: str, turn_id: str) -> TurnRow:
        turn = tx.turn(turn_id)
        if turn is None or turn.session_id != session_id:
            raise NotFound(f"turn {turn_id} not found in session {session_id}")
        return turn

    def append_records(
        self,
        principal: str,
        session_id: str,
        turn_id: str,
        body: dict[str, Any],
        lease_id: str | None = None,
    ) -> dict[str, Any]:
        inputs = body["records"]
        if len(inputs) > self.limits.max_records_per_append:
            raise PayloadTooLarge(
                f"{len(inputs)} records exceed max_records_per_append "
                f"({self.limits.max_records_per_append})"
            )
        encoded = [json.dumps(item["content"], separators=(",", ":")) for item in inputs]
        for position, content in enumerate(encoded):
            if len(content.encode()) > self.limits.max_record_bytes:
                raise PayloadTooLarge(
                    f"record {position} exceeds max_record_bytes ({self.limits.max_record_bytes})"
                )
        created_at = timestamp(utcnow())
        with self.store.write() as tx:
            self.access.writable_session(tx, principal, session_id, lease_id)
            turn = self.own_turn(tx, session_id, turn_id)
            if turn.status != "running":
                raise TurnNotRunning(f"turn {turn_id} is {turn.status}")
            first = tx.reserve_record_indexes(session_id, turn_id, len(inputs))
            if first is None:
                raise TurnNotRunning(f"turn {turn_id} is not running")
            rows = [
                {
                    "record_id": new_id(),
                    "session_id": session_id,
                    "record_index": first + offset,
                    "turn_id": turn_id,
                    "turn_index": turn.turn_index,
                    "record_type": item["type"],
                    "content": encoded[offset],
                    "created_at": created_at,
                }
                for offset, item in enumerate(inputs)
            ]
            if not self.store.split:
                tx.insert_records(rows)  # one store: reservation and records commit together
        if self.store.split:
            self._write_reserved_records(session_id, turn_id, first, rows)
        return {
            "records": [
                {
                    "record_id": row["record_id"],
                    "session_id": public_id(session_id),
                    "turn_id": public_id(turn_id),
                    "index": row["record_index"],
                    "type": row["record_type"],
                    "content": item["content"],
                    "created_at": created_at,
                }
                for row, item in zip(rows, inputs)
            ]
        }

    def _write_reserved_records(
        self, session_id: str, turn_id: str, first: int, rows: list[dict[str, Any]]
    ) -> None:
        """Two stores: the core has reserved the indexes; now the records store takes the rows.

        If that write fails, the reservation is given back when no later append followed it, so
        no gap is left; otherwise reads over the gap answer 503 `records-unavailable`.
        """
        try:
            with self.store.write_records() as records_tx:
                records_tx.insert_records(rows)
        except StorageError as exc:
            with self.store.write() as tx:
                released = tx.release_record_indexes(session_id, turn_id, first, len(rows))
            raise StorageUnavailable(
                "the records store did not take the records; nothing was appended"
                + ("" if released else " and a later append holds the indexes after them")
            ) from exc

    def finish_turn(
        self,
        principal: str,
        session_id: str,
        turn_id: str,
        body: dict[str, Any],
        lease_id: str | None = None,
    ) -> dict[str, Any]:
        finished_at = timestamp(utcnow())
        with self.store.write() as tx:
            self.access.writable_session(tx, principal, session_id, lease_id)
            turn = self.own_turn(tx, session_id, turn_id)
            if turn.status != "running":
                raise TurnNotRunning(f"turn {turn_id} is {turn.status}")
            end = tx.finish_turn(turn_id, body["status"], finished_at)
            if end is None:
                raise TurnNotRunning(f"turn {turn_id} is not running")
            if body["status"] == "completed":
                tx.clear_pending_action(session_id)  # REWIND-CLEAR-001: only a success clears it
        return views.turn(
            TurnRow(
                turn_id=turn.turn_id,
                session_id=turn.session_id,
                turn_index=turn.turn_index,
                role=turn.role,
                status=body["status"],
                first_record_index=turn.first_record_index,
                end_record_index=end,
                created_at=turn.created_at,
                finished_at=finished_at,
            )
        )
