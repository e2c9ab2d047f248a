"""Chapter: suspend and recover (capability `suspend`).

A running turn can be suspended: the suspension is committed before the answer, no record is
written and the turn is not finished, and every input queued on the turn and not yet delivered is
dropped and reported. A suspended turn keeps the session's turn slot (no other turn starts) until
it is recovered - running again under the same id, its records appending to it - or abandoned.
A turn left running when the server starts again is interrupted: it is held like a suspended one.

Inputs: `POST .../inputs` queues one on a running turn; `POST .../inputs/deliver` appends the
pending ones, in queue order, as records of type `input`.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from reference_impl import views
from reference_impl.errors import PayloadTooLarge, TurnNotRunning, TurnNotSuspended
from reference_impl.principals import public_id
from reference_impl.services import turn_steps as steps
from reference_impl.services.common import ChapterService, new_id, timestamp, utcnow
from reference_impl.store import Transaction
from reference_impl.store.rows import TurnRow
from reference_impl.store.suspend import InputRow

INPUT_RECORD_TYPE = "input"


def input_view(row: InputRow) -> dict[str, Any]:
    return {
        "input_id": row.input_id,
        "session_id": public_id(row.session_id),
        "turn_id": public_id(row.turn_id),
        "index": row.input_index,
        "status": row.status,
        "content": json.loads(row.content),
        "queued_at": row.queued_at,
        "record_id": row.record_id,
    }


class SuspendService(ChapterService):
    chapter = "suspend"
    capabilities = ("suspend",)

    # ---------------------------------------------------------------- reads
    own_turn = staticmethod(steps.own_turn)

    def get_turn(self, principal: str, session_id: str, turn_id: str) -> dict[str, Any]:
        with self.store.read() as tx:
            self.access.visible_session(tx, principal, session_id)
            return views.turn(steps.own_turn(tx, session_id, turn_id))

    def list_inputs(self, principal: str, session_id: str, turn_id: str) -> dict[str, Any]:
        with self.store.read() as tx:
            self.access.visible_session(tx, principal, session_id)
            steps.own_turn(tx, session_id, turn_id)
            return {"inputs": [input_view(row) for row in tx.inputs_of(turn_id)]}

    # ---------------------------------------------------------------- suspend, recover, abandon
    def suspend(self, principal: str, session_id: str, turn_id: str, lease_id: str | None = None) -> dict[str, Any]:
        now = timestamp(utcnow())
        with self.store.write() as tx:
            turn = steps.writable_turn(self.access, tx, principal, session_id, turn_id, lease_id)
            if not tx.suspend_slot(session_id, turn_id):
                raise TurnNotRunning(f"turn {turn_id} is {turn.status}")
            tx.set_turn_state(turn_id, status="suspended")
            dropped = tx.drop_pending_inputs(turn_id, now)
        return {
            "turn": views.turn(replace(turn, status="suspended")),
            "dropped_inputs": [input_view(replace(row, status="dropped", settled_at=now)) for row in dropped],
        }

    def recover(self, principal: str, session_id: str, turn_id: str, lease_id: str | None = None) -> dict[str, Any]:
        with self.store.write() as tx:
            turn = steps.writable_turn(self.access, tx, principal, session_id, turn_id, lease_id)
            if not tx.recover_slot(session_id, turn_id):
                raise self._not_suspended(turn)
            tx.set_turn_state(turn_id, status="running")
        return views.turn(replace(turn, status="running"))

    def abandon(self, principal: str, session_id: str, turn_id: str, lease_id: str | None = None) -> dict[str, Any]:
        now = timestamp(utcnow())
        with self.store.write() as tx:
            turn = steps.writable_turn(self.access, tx, principal, session_id, turn_id, lease_id)
            end = tx.release_suspended_slot(session_id, turn_id)
            if end is None:
                raise self._not_suspended(turn)
            tx.set_turn_state(turn_id, status="abandoned", finished_at=now, end_record_index=end)
        return views.turn(replace(turn, status="abandoned", finished_at=now, end_record_index=end))

    @staticmethod
    def _not_suspended(turn: TurnRow) -> TurnNotSuspended:
        return TurnNotSuspended(f"turn {turn.turn_id} is {turn.status}, not suspended or interrupted")

    def interrupt_running_turns(self) -> int:
        """Called when the server starts: turns left running are reported interrupted."""
        with self.store.write() as tx:
            return tx.interrupt_running_turns()

    # ---------------------------------------------------------------- inputs
    def _running_now(
        self, tx: Transaction, principal: str, session_id: str, turn_id: str, lease_id: str | None
    ) -> TurnRow:
        """The writable turn, if it is the session's running turn (read under the session row's lock)."""
        turn = steps.writable_turn(self.access, tx, principal, session_id, turn_id, lease_id)
        if tx.running_turn_of(session_id, lock=True) != turn_id:
            raise TurnNotRunning(f"turn {turn_id} is not running")
        return turn

    def queue_input(
        self, principal: str, session_id: str, turn_id: str, body: dict[str, Any], lease_id: str | None = None
    ) -> dict[str, Any]:
        content = json.dumps(body["content"], separators=(",", ":"))
        if len(content.encode()) > self.limits.max_record_bytes:
            raise PayloadTooLarge(f"the input exceeds max_record_bytes ({self.limits.max_record_bytes})")
        with self.store.write() as tx:
            turn = self._running_now(tx, principal, session_id, turn_id, lease_id)
            row = InputRow(
                input_id=new_id(),
                session_id=session_id,
                turn_id=turn.turn_id,
                input_index=tx.next_input_index(turn_id),
                status="pending",
                content=content,
                queued_at=timestamp(utcnow()),
                record_id=None,
                settled_at=None,
            )
            tx.insert_input(row.__dict__)
        return input_view(row)

    def deliver_inputs(self, principal: str, session_id: str, turn_id: str, lease_id: str | None = None) -> dict[str, Any]:
        now = timestamp(utcnow())
        with self.store.write() as tx:
            turn = self._running_now(tx, principal, session_id, turn_id, lease_id)
            pending = tx.inputs_of(turn_id, "pending", limit=self.limits.max_records_per_append)
            if not pending:
                return {"records": []}
            items = [(INPUT_RECORD_TYPE, item.content) for item in pending]
            first, rows = steps.append_rows(self.store, tx, turn, items, now)
            for item, row in zip(pending, rows):
                tx.settle_input(item.input_id, "delivered", now, row["record_id"])
        if self.store.split:
            self._write_records(first, rows, pending)
        return {"records": steps.record_views(rows)}

    def _write_records(self, first: int, rows: list[dict[str, Any]], pending: list[InputRow]) -> None:
        """Two stores: as an append (DEPLOY-TWO-STORE-ORDER-001); if the records store refuses, the
        indexes are given back when nothing followed and the inputs wait again."""
        release = steps.release_indexes(rows[0]["session_id"], rows[0]["turn_id"], first, len(rows))

        def give_back(tx: Transaction) -> bool:
            released = release(tx)
            for item in pending:
                tx.settle_input(item.input_id, "pending", None, None)  # type: ignore[arg-type]
            return released

        steps.insert_or_give_back(self.store, rows, give_back, "the records store did not take the delivered inputs; they wait again")
