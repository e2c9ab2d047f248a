"""Mutants: idempotent turn writes and the one-request turn write."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import insert, select, update
from starlette.types import ASGIApp

from reference_impl.errors import TurnInProgress
from reference_impl.services.turn_writes import TurnWritesService, WriteOutcome
from reference_impl.settings import Settings
from reference_impl.store import Transaction
from reference_impl.store import tables as t
from reference_impl.store.common import sid_of
from reference_impl.store.ids import key_scope, turn_key
from reference_impl.store.sessions import new_turn_key, stored_record
from reference_impl.store.rows import IdempotencyRow
from reference_impl.store.store import IntegrityError
from tests.mutants import app_with_layers, app_with_service, app_with_transaction, mutant


@mutant("TURN-IDEM-001", select=("turn_writes.idempotent_turn_retries",),
        description="A start-turn retried with its Idempotency-Key starts a second turn (the key is ignored)")
def turn_start_retry_creates_second_turn(settings: Settings) -> ASGIApp:
    class Service(TurnWritesService):
        def start_turn(self, principal: str, session_id: str, body: dict[str, Any], lease_id: str | None = None,
                       key: str | None = None) -> WriteOutcome:
            return super().start_turn(principal, session_id, body, lease_id, None)

    return app_with_service(settings, Service)


@mutant("TURN-IDEM-001", select=("turn_writes.idempotent_turn_retries",),
        description="An append retried with its Idempotency-Key appends its records again")
def turn_append_retry_appends_again(settings: Settings) -> ASGIApp:
    class Service(TurnWritesService):
        def append_records(self, principal: str, session_id: str, turn_id: str, body: dict[str, Any],
                           lease_id: str | None = None, key: str | None = None) -> WriteOutcome:
            return super().append_records(principal, session_id, turn_id, body, lease_id, None)

    return app_with_service(settings, Service)


@mutant("TURN-IDEM-MISMATCH-001", select=("turn_writes.turn_key_reused_differently",),
        description="A turn-write key reused with a different request replays the first answer instead of 422")
def turn_key_mismatch_replayed(settings: Settings) -> ASGIApp:
    class Service(TurnWritesService):
        @staticmethod
        def _replay(stored: IdempotencyRow, fingerprint: str) -> WriteOutcome:
            return TurnWritesService._replay(stored, stored.fingerprint)

    return app_with_service(settings, Service)


@mutant("TURN-IDEM-SCOPE-001", select=("turn_writes.turn_keys_scoped_per_principal",),
        description="Turn-write keys are looked up across principals: another principal's key replays or conflicts")
def turn_keys_not_scoped(settings: Settings) -> ASGIApp:
    class Tx(Transaction):
        def session_for_turn_write(self, session_id: str, viewer: str, key: str | None) -> Any:
            found = super().session_for_turn_write(session_id, viewer, None)
            if found is None or key is None:
                return found
            row = self.conn.execute(
                select(t.idempotency_keys).where(t.idempotency_keys.c.idempotency_key == key).limit(1)
            ).mappings().first()
            return found[0], found[1], IdempotencyRow(**row) if row else None

    return app_with_transaction(settings, Tx)


@mutant("TURN-IDEM-CONCURRENT-001", select=("turn_writes.concurrent_identical_turn_writes",),
        description="A turn write checks its key in one transaction and writes in another, remembering the key "
                    "afterwards if no one else did: concurrent identical writes all take effect")
def turn_key_checked_then_written(settings: Settings) -> ASGIApp:
    class Service(TurnWritesService):
        def _checked(self, principal: str, key: str | None, fingerprint: str) -> WriteOutcome | None:
            if key is None:
                return None
            with self.store.read() as tx:
                stored = tx.idempotency(principal, key)
            time.sleep(0.005)
            return self._replay(stored, fingerprint) if stored is not None else None

        def _remember_later(self, principal: str, key: str | None, fingerprint: str, session_id: str, outcome: WriteOutcome) -> None:
            if key is None:
                return
            try:
                with self.store.write() as tx:
                    self._remember(tx, principal, key, fingerprint, session_id, outcome.status, outcome.body)
            except IntegrityError:
                pass

        def start_turn(self, principal: str, session_id: str, body: dict[str, Any], lease_id: str | None = None,
                       key: str | None = None) -> WriteOutcome:
            from reference_impl.services.turn_writes import fingerprint_of

            fingerprint = fingerprint_of("startTurn", session_id, None, body)
            replay = self._checked(principal, key, fingerprint)
            if replay is not None:
                return replay
            outcome = super().start_turn(principal, session_id, body, lease_id, None)
            self._remember_later(principal, key, fingerprint, session_id, outcome)
            return outcome

        def append_records(self, principal: str, session_id: str, turn_id: str, body: dict[str, Any],
                           lease_id: str | None = None, key: str | None = None) -> WriteOutcome:
            from reference_impl.services.turn_writes import fingerprint_of

            fingerprint = fingerprint_of("appendRecords", session_id, turn_id, body)
            replay = self._checked(principal, key, fingerprint)
            if replay is not None:
                return replay
            outcome = super().append_records(principal, session_id, turn_id, body, lease_id, None)
            self._remember_later(principal, key, fingerprint, session_id, outcome)
            return outcome

    return app_with_service(settings, Service)


@mutant("TURN-WRITE-001", select=("turn_writes.one_request_turn",),
        description="A turn written in one request ignores its final status and stays running")
def one_request_turn_stays_running(settings: Settings) -> ASGIApp:
    class Service(TurnWritesService):
        def start_turn(self, principal: str, session_id: str, body: dict[str, Any], lease_id: str | None = None,
                       key: str | None = None) -> WriteOutcome:
            return super().start_turn(principal, session_id, {k: v for k, v in body.items() if k != "status"}, lease_id, key)

    return app_with_service(settings, Service)


@mutant("TURN-WRITE-001", select=("turn_writes.one_request_turn",),
        description="A one-request turn refused for its records' size has already started its turn")
def one_request_turn_not_atomic(settings: Settings) -> ASGIApp:
    class Service(TurnWritesService):
        def start_turn(self, principal: str, session_id: str, body: dict[str, Any], lease_id: str | None = None,
                       key: str | None = None) -> WriteOutcome:
            if len(body.get("records") or []) > self.limits.max_records_per_append:
                super().start_turn(principal, session_id, {"role": body["role"], "status": "failed"}, lease_id, None)
            return super().start_turn(principal, session_id, body, lease_id, key)

    return app_with_service(settings, Service)


@mutant("TURN-WRITE-COST-001", select=("turn_writes.one_request_turn_cost",),
        description="Records are inserted one statement each, so a one-request turn costs more with more records")
def records_inserted_one_by_one(settings: Settings) -> ASGIApp:
    class Tx(Transaction):
        def insert_records(self, rows: list[dict[str, Any]]) -> None:
            for row in rows:
                columns = {key: value for key, value in stored_record(row).items() if key != "session_id"}
                self.records_conn.execute(insert(t.records).values(**columns, sid=sid_of(row["session_id"], self.record_keys)).inline())

    return app_with_transaction(settings, Tx)


@mutant("TURN-WRITE-001", select=("turn_writes.concurrent_one_request_turns",),
        description="A one-request turn start checks for a running turn in one transaction, then claims the slot "
                    "unconditionally in another")
def one_request_slot_checked_then_taken(settings: Settings) -> ASGIApp:
    class Tx(Transaction):
        def claim_turn_write(self, session_id: str, turn_id: str | None, count: int, finish: bool) -> Any:
            row = self.conn.execute(
                update(t.sessions)
                .where(t.sessions.c.session_id == session_id)
                .values(
                    running_turn_id=None if finish else new_turn_key(),
                    turn_count=t.sessions.c.turn_count + 1,
                    record_count=t.sessions.c.record_count + count,
                )
                .returning(t.sessions.c.turn_count, t.sessions.c.record_count, t.sessions.c.child_count, t.sessions.c.token),
                {} if finish else {"p_turn_id": turn_id, "p_scope": key_scope(session_id)},
            ).first()
            if row is None:
                return None
            index, token = int(row[0]) - 1, str(row[3])
            key = turn_id if turn_id is not None else turn_key(session_id, token, index)
            return index, int(row[1]) - count, int(row[2] or 0), key, token

    class Service(TurnWritesService):
        def start_turn(self, principal: str, session_id: str, body: dict[str, Any], lease_id: str | None = None,
                       key: str | None = None) -> WriteOutcome:
            with self.store.read() as tx:
                found = tx.session(session_id)
                if found is not None and found.running_turn_id is not None:
                    raise TurnInProgress(f"session {session_id} already has a running turn")
            time.sleep(0.005)
            return super().start_turn(principal, session_id, body, lease_id, key)

    return app_with_layers(settings, Service, transaction_class=Tx)
