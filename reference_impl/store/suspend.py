"""Statements of the suspend chapter: the session's turn slot while suspended, and turn inputs.

The slot is the session row: `running_turn_id` while a turn runs, `suspended_turn_id` while it is
suspended or interrupted. Each move is one conditional UPDATE of that row, so concurrent moves of
one turn have exactly one winner on SQLite and PostgreSQL alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import exists, func, insert, select, update

from reference_impl.store import tables as t
from reference_impl.store.common import Statements, turn_where


@dataclass(frozen=True)
class InputRow:
    input_id: str
    session_id: str
    turn_id: str
    input_index: int
    status: str
    content: str
    queued_at: str
    record_id: str | None
    settled_at: str | None


def _input_from(row: Any) -> InputRow:
    return InputRow(**{key: row[key] for key in InputRow.__dataclass_fields__})


class SuspendStatements(Statements):
    # ---------------------------------------------------------------- the slot
    def suspend_slot(self, session_id: str, turn_id: str) -> bool:
        result = self.conn.execute(
            update(t.sessions)
            .where(t.sessions.c.session_id == session_id, t.sessions.c.running_turn_id == turn_id)
            .values(running_turn_id=None, suspended_turn_id=turn_id, version=t.sessions.c.version + 1)
        )
        return result.rowcount == 1

    def recover_slot(self, session_id: str, turn_id: str) -> bool:
        result = self.conn.execute(
            update(t.sessions)
            .where(t.sessions.c.session_id == session_id, t.sessions.c.suspended_turn_id == turn_id)
            .values(running_turn_id=turn_id, suspended_turn_id=None, version=t.sessions.c.version + 1)
        )
        return result.rowcount == 1

    def release_suspended_slot(self, session_id: str, turn_id: str) -> int | None:
        """Free the slot of a suspended turn; the session's record count (the turn's end) or None."""
        row = self.conn.execute(
            update(t.sessions)
            .where(t.sessions.c.session_id == session_id, t.sessions.c.suspended_turn_id == turn_id)
            .values(suspended_turn_id=None, version=t.sessions.c.version + 1)
            .returning(t.sessions.c.record_count)
        ).first()
        return int(row[0]) if row else None

    def running_turn_of(self, session_id: str, lock: bool = False) -> str | None:
        query = select(t.sessions.c.running_turn_id).where(t.sessions.c.session_id == session_id)
        if lock:
            query = query.with_for_update()
        return self.conn.execute(query).scalar()

    def set_turn_state(self, turn_id: str, **values: Any) -> None:
        self.conn.execute(update(t.turns).where(turn_where(turn_id)).values(**values))

    def interrupt_running_turns(self) -> int:
        """At start: every running turn becomes interrupted, its pending inputs dropped."""
        running = select(t.sessions.c.running_turn_id).where(t.sessions.c.running_turn_id.is_not(None))
        self.conn.execute(
            update(t.turn_inputs)
            .where(t.turn_inputs.c.status == "pending", t.turn_inputs.c.turn_id.in_(running))
            .values(status="dropped")
        )
        # A running turn is its session's last (no turn starts while one runs), whatever its id.
        last_running = exists().where(
            t.sessions.c.sid == t.turns.c.sid,
            t.sessions.c.running_turn_id.is_not(None),
            t.turns.c.turn_index == t.sessions.c.turn_count - 1,
        )
        count = self.conn.execute(update(t.turns).where(last_running).values(status="interrupted")).rowcount
        self.conn.execute(
            update(t.sessions)
            .where(t.sessions.c.running_turn_id.is_not(None))
            .values(
                suspended_turn_id=t.sessions.c.running_turn_id, running_turn_id=None, version=t.sessions.c.version + 1
            )
        )
        return int(count or 0)

    # ---------------------------------------------------------------- inputs
    def next_input_index(self, turn_id: str) -> int:
        value = self.conn.execute(
            select(func.max(t.turn_inputs.c.input_index)).where(t.turn_inputs.c.turn_id == turn_id)
        ).scalar()
        return 0 if value is None else int(value) + 1

    def insert_input(self, row: dict[str, Any]) -> None:
        self.conn.execute(insert(t.turn_inputs).values(**row))

    def inputs_of(self, turn_id: str, status: str | None = None, limit: int | None = None) -> list[InputRow]:
        query = select(t.turn_inputs).where(t.turn_inputs.c.turn_id == turn_id)
        if status is not None:
            query = query.where(t.turn_inputs.c.status == status)
        query = query.order_by(t.turn_inputs.c.input_index)
        if limit is not None:
            query = query.limit(limit)
        return [_input_from(row) for row in self.conn.execute(query).mappings()]

    def settle_input(self, input_id: str, status: str, settled_at: str, record_id: str | None = None) -> None:
        self.conn.execute(
            update(t.turn_inputs)
            .where(t.turn_inputs.c.input_id == input_id)
            .values(status=status, settled_at=settled_at, record_id=record_id)
        )

    def drop_pending_inputs(self, turn_id: str, settled_at: str) -> list[InputRow]:
        pending = self.inputs_of(turn_id, "pending")
        if pending:
            self.conn.execute(
                update(t.turn_inputs)
                .where(t.turn_inputs.c.turn_id == turn_id, t.turn_inputs.c.status == "pending")
                .values(status="dropped", settled_at=settled_at)
            )
        return pending
