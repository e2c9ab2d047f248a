"""Mutants: suspend and recover (capability `suspend`)."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from sqlalchemy import select, update
from starlette.types import ASGIApp

from reference_impl import views
from reference_impl.errors import TurnNotRunning, TurnNotSuspended
from reference_impl.services.common import new_id, timestamp, utcnow
from reference_impl.services.suspend import SuspendService, input_view
from reference_impl.settings import Settings
from reference_impl.store import Transaction
from reference_impl.store import tables as t
from reference_impl.store.common import turn_where
from reference_impl.store.suspend import InputRow
from tests.mutants import app_with_layers, app_with_service, mutant


# ---------------------------------------------------------------- SUSPEND-TURN-001
class StaleTurnRead(SuspendService):
    """Reads every turn as running."""

    def get_turn(self, principal: str, session_id: str, turn_id: str) -> dict[str, Any]:
        return {**super().get_turn(principal, session_id, turn_id), "status": "running", "finished_at": None}


@mutant("SUSPEND-TURN-001", description="a turn is always read as running")
def turn_read_always_running(settings: Settings) -> ASGIApp:
    return app_with_service(settings, StaleTurnRead)


# ---------------------------------------------------------------- SUSPEND-001
class SuspendNotStored(SuspendService):
    """Answers the suspension without storing it."""

    def suspend(self, principal: str, session_id: str, turn_id: str, lease_id: str | None = None) -> dict[str, Any]:
        with self.store.read() as tx:
            self.access.visible_session(tx, principal, session_id)
            turn = self.own_turn(tx, session_id, turn_id)
        if turn.status != "running":
            raise TurnNotRunning(f"turn {turn_id} is {turn.status}")
        return {"turn": views.turn(replace(turn, status="suspended")), "dropped_inputs": []}


@mutant("SUSPEND-001", description="the suspension is answered but never stored")
def suspend_not_stored(settings: Settings) -> ASGIApp:
    return app_with_service(settings, SuspendNotStored)


# ---------------------------------------------------------------- SUSPEND-NO-TERMINAL-001
class SuspendWritesMarker(SuspendService):
    """Writes a terminal record (`turn-suspended`) into the turn before suspending it."""

    def suspend(self, principal: str, session_id: str, turn_id: str, lease_id: str | None = None) -> dict[str, Any]:
        with self.store.write() as tx:
            turn = self.own_turn(tx, session_id, turn_id)
            first = tx.reserve_record_indexes(session_id, turn_id, 1)
            if first is not None:
                tx.insert_records([{
                    "record_id": new_id(), "session_id": session_id, "record_index": first, "turn_id": turn_id,
                    "turn_index": turn.turn_index, "record_type": "turn-suspended", "content": "{}",
                    "created_at": timestamp(utcnow()),
                }])
        return super().suspend(principal, session_id, turn_id, lease_id)


@mutant("SUSPEND-NO-TERMINAL-001", description="suspending writes a terminal record into the turn")
def suspend_writes_terminal_record(settings: Settings) -> ASGIApp:
    return app_with_service(settings, SuspendWritesMarker)


class SuspendFinishes(SuspendService):
    """Finishes the turn as failed, then reports it suspended (a terminal state behind the answer)."""

    def suspend(self, principal: str, session_id: str, turn_id: str, lease_id: str | None = None) -> dict[str, Any]:
        body = super().suspend(principal, session_id, turn_id, lease_id)
        with self.store.write() as tx:
            tx.set_turn_state(turn_id, status="failed", finished_at=timestamp(utcnow()))
        return body


@mutant("SUSPEND-NO-TERMINAL-001", description="suspending finishes the turn as failed")
def suspend_finishes_turn(settings: Settings) -> ASGIApp:
    return app_with_service(settings, SuspendFinishes)


# ---------------------------------------------------------------- SUSPEND-INPUT-001 / DELIVER / DROP
class QueueOnAnyTurn(SuspendService):
    """Queues inputs whatever the turn's status."""

    def queue_input(self, principal: str, session_id: str, turn_id: str, body: dict[str, Any], lease_id: str | None = None) -> dict[str, Any]:
        import json

        with self.store.write() as tx:
            self.access.writable_session(tx, principal, session_id, lease_id)
            self.own_turn(tx, session_id, turn_id)
            row = InputRow(new_id(), session_id, turn_id, tx.next_input_index(turn_id), "pending",
                           json.dumps(body["content"], separators=(",", ":")), timestamp(utcnow()), None, None)
            tx.insert_input(row.__dict__)
        return input_view(row)


@mutant("SUSPEND-INPUT-001", description="inputs are queued on finished turns, and of any size")
def queue_on_any_turn(settings: Settings) -> ASGIApp:
    return app_with_service(settings, QueueOnAnyTurn)


class NewestFirst(Transaction):
    """Delivers the newest pending inputs first."""

    def inputs_of(self, turn_id: str, status: str | None = None, limit: int | None = None) -> list[InputRow]:
        rows = super().inputs_of(turn_id, status)
        rows = list(reversed(rows)) if status == "pending" else rows
        return rows[:limit] if limit is not None else rows


@mutant("SUSPEND-DELIVER-001", description="pending inputs are delivered newest first")
def deliver_newest_first(settings: Settings) -> ASGIApp:
    return app_with_layers(settings, transaction_class=NewestFirst)


class KeepsInputs(Transaction):
    """A suspension leaves the pending inputs pending (and reports them as dropped)."""

    def drop_pending_inputs(self, turn_id: str, settled_at: str) -> list[InputRow]:
        return self.inputs_of(turn_id, "pending")


@mutant("SUSPEND-DROP-001", description="a suspension reports the pending inputs dropped but keeps them pending")
def suspend_keeps_inputs(settings: Settings) -> ASGIApp:
    return app_with_layers(settings, transaction_class=KeepsInputs)


class ReportsNothing(SuspendService):
    """Drops the pending inputs without saying which."""

    def suspend(self, principal: str, session_id: str, turn_id: str, lease_id: str | None = None) -> dict[str, Any]:
        return {**super().suspend(principal, session_id, turn_id, lease_id), "dropped_inputs": []}


@mutant("SUSPEND-DROP-001", description="a suspension drops the pending inputs without reporting them")
def suspend_reports_nothing(settings: Settings) -> ASGIApp:
    return app_with_service(settings, ReportsNothing)


# ---------------------------------------------------------------- SUSPEND-UNFINISHED-001
class FreesSlot(Transaction):
    """Suspending gives the session's turn slot back: another turn can start."""

    def suspend_slot(self, session_id: str, turn_id: str) -> bool:
        result = self.conn.execute(
            update(t.sessions)
            .where(t.sessions.c.session_id == session_id, t.sessions.c.running_turn_id == turn_id)
            .values(running_turn_id=None)
        )
        return result.rowcount == 1

    def recover_slot(self, session_id: str, turn_id: str) -> bool:
        turn = self.turn(turn_id)
        if turn is None or turn.status not in ("suspended", "interrupted"):
            return False
        self.conn.execute(update(t.sessions).where(t.sessions.c.session_id == session_id).values(running_turn_id=turn_id))
        return True

    def release_suspended_slot(self, session_id: str, turn_id: str) -> int | None:
        turn = self.turn(turn_id)
        if turn is None or turn.status not in ("suspended", "interrupted"):
            return None
        return self.conn.execute(select(t.sessions.c.record_count).where(t.sessions.c.session_id == session_id)).scalar()


@mutant("SUSPEND-UNFINISHED-001", description="a suspended turn gives the session's slot back, so a new turn starts")
def suspended_turn_frees_slot(settings: Settings) -> ASGIApp:
    return app_with_layers(settings, transaction_class=FreesSlot)


# ---------------------------------------------------------------- SUSPEND-RECOVER-001
class RecoverAsNewTurn(SuspendService):
    """Recovering abandons the suspended turn and starts a new one in its place."""

    def recover(self, principal: str, session_id: str, turn_id: str, lease_id: str | None = None) -> dict[str, Any]:
        body = self.abandon(principal, session_id, turn_id, lease_id)
        from reference_impl.services.sessions import SessionsService

        sessions = SessionsService(self.store, self.limits, self.access)
        fresh = sessions.start_turn(principal, session_id, {"role": body["role"]}, lease_id)
        return {**fresh, "turn_id": body["turn_id"]}


@mutant("SUSPEND-RECOVER-001", description="recovering starts a new turn instead of resuming the suspended one")
def recover_starts_new_turn(settings: Settings) -> ASGIApp:
    return app_with_service(settings, RecoverAsNewTurn)


# ---------------------------------------------------------------- SUSPEND-RECOVER-CONCURRENT-001
class RecoverCheckThenAct(SuspendService):
    """Reads the turn's status in one transaction and resumes it unconditionally in another."""

    def recover(self, principal: str, session_id: str, turn_id: str, lease_id: str | None = None) -> dict[str, Any]:
        with self.store.read() as tx:
            self.access.writable_session(tx, principal, session_id, lease_id)
            turn = self.own_turn(tx, session_id, turn_id)
            if turn.status not in ("suspended", "interrupted"):
                raise TurnNotSuspended(f"turn {turn_id} is {turn.status}")
        time.sleep(0.005)  # the window between the check and the write
        with self.store.write() as tx:
            tx.conn.execute(
                update(t.sessions).where(t.sessions.c.session_id == session_id).values(running_turn_id=turn_id, suspended_turn_id=None)
            )
            tx.set_turn_state(turn_id, status="running")
        return views.turn(replace(turn, status="running"))


@mutant("SUSPEND-RECOVER-CONCURRENT-001", select=("suspend.concurrent_recovers",),
        description="a recover checks the status in one transaction and resumes the turn in another")
def recover_checked_then_resumed(settings: Settings) -> ASGIApp:
    return app_with_service(settings, RecoverCheckThenAct)


# ---------------------------------------------------------------- SUSPEND-ABANDON-001
class AbandonKeepsSlot(Transaction):
    """Abandoning marks the turn but keeps the session's slot held."""

    def release_suspended_slot(self, session_id: str, turn_id: str) -> int | None:
        row = self.conn.execute(
            select(t.sessions.c.record_count).where(t.sessions.c.session_id == session_id, t.sessions.c.suspended_turn_id == turn_id)
        ).first()
        return int(row[0]) if row else None


@mutant("SUSPEND-ABANDON-001", description="an abandoned turn keeps holding the session: no new turn starts")
def abandon_keeps_slot(settings: Settings) -> ASGIApp:
    return app_with_layers(settings, transaction_class=AbandonKeepsSlot)


# ---------------------------------------------------------------- SUSPEND-FORK-001
class SuspendSetsEnd(SuspendService):
    """Suspending records the turn's end as if it had finished, so forks go through it."""

    def suspend(self, principal: str, session_id: str, turn_id: str, lease_id: str | None = None) -> dict[str, Any]:
        body = super().suspend(principal, session_id, turn_id, lease_id)
        with self.store.write() as tx:
            count = tx.conn.execute(select(t.sessions.c.record_count).where(t.sessions.c.session_id == session_id)).scalar()
            tx.conn.execute(update(t.turns).where(turn_where(turn_id)).values(end_record_index=count, status="completed"))
        return body

    def get_turn(self, principal: str, session_id: str, turn_id: str) -> dict[str, Any]:
        body = super().get_turn(principal, session_id, turn_id)
        with self.store.read() as tx:
            holder = tx.conn.execute(select(t.sessions.c.suspended_turn_id).where(t.sessions.c.session_id == session_id)).scalar()
        return {**body, "status": "suspended"} if holder == turn_id else body


@mutant("SUSPEND-FORK-001", description="forks treat a suspended turn as finished")
def fork_through_suspended_turn(settings: Settings) -> ASGIApp:
    return app_with_service(settings, SuspendSetsEnd)


# ---------------------------------------------------------------- SUSPEND-WRITE-001
class AnyRole(SuspendService):
    """Lets anyone with a role (a reader too) suspend and recover."""

    def suspend(self, principal: str, session_id: str, turn_id: str, lease_id: str | None = None) -> dict[str, Any]:
        with self.store.read() as tx:
            owner = self.access.visible_session(tx, principal, session_id).owner
        return super().suspend(owner, session_id, turn_id, lease_id)


@mutant("SUSPEND-WRITE-001", description="a reader may suspend a turn")
def reader_may_suspend(settings: Settings) -> ASGIApp:
    return app_with_service(settings, AnyRole)


class IgnoresLease(SuspendService):
    """Suspends whoever holds the writer lease."""

    def suspend(self, principal: str, session_id: str, turn_id: str, lease_id: str | None = None) -> dict[str, Any]:
        with self.store.read() as tx:
            held = tx.conn.execute(select(t.session_leases.c.lease_id).where(t.session_leases.c.session_id == session_id)).scalar()
        return super().suspend(principal, session_id, turn_id, held or lease_id)


@mutant("SUSPEND-WRITE-001", description="a suspension ignores the held writer lease")
def suspend_ignores_lease(settings: Settings) -> ASGIApp:
    return app_with_service(settings, IgnoresLease)
