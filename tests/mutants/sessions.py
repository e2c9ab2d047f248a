"""Mutants: sessions, turns and records."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from sqlalchemy import update
from starlette.types import ASGIApp

from reference_impl import views
from reference_impl.errors import InvalidRequest, PayloadTooLarge, TurnNotRunning
from reference_impl.services.common import new_id, timestamp, utcnow
from reference_impl.services.sessions import SessionsService
from reference_impl.settings import Settings
from reference_impl.store import Transaction
from reference_impl.store import tables as t
from reference_impl.store.common import turn_where
from reference_impl.store.ids import key_scope
from reference_impl.store.sessions import Slot, new_turn_key
from reference_impl.store.rows import TurnRow
from tests.mutants import app_with_layers, app_with_service, app_with_transaction, mutant, reference_app

SESSION_ID = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


# ---------------------------------------------------------------- building blocks


RequestRewrite = Callable[[dict[str, Any], bytes], tuple[dict[str, Any], bytes]]


def rewrite_requests(app: ASGIApp, rewrite: RequestRewrite) -> ASGIApp:
    """Wrap an app so each buffered request passes through `rewrite(scope, body)` first."""

    async def wrapped(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        chunks: list[bytes] = []
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        scope, body = rewrite(dict(scope), b"".join(chunks))
        headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() != b"content-length"]
        scope["headers"] = headers + [(b"content-length", str(len(body)).encode())]
        delivered = False

        async def replay() -> dict[str, Any]:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await app(scope, replay, send)

    return wrapped


def relaxed_limits(service: SessionsService, **limits: int) -> SessionsService:
    """A twin of `service` over the same store that enforces other limits than it advertises."""
    return SessionsService(service.store, replace(service.limits, **limits), service.access)


class LooseReserve(Transaction):
    """Reserves record indexes whether or not the turn is the session's running one."""

    def reserve_record_indexes(self, session_id: str, turn_id: str, count: int) -> int | None:
        row = self.conn.execute(
            update(t.sessions)
            .where(t.sessions.c.session_id == session_id)
            .values(record_count=t.sessions.c.record_count + count)
            .returning(t.sessions.c.record_count)
        ).first()
        return int(row[0]) - count if row else None


class UncheckedAppend(SessionsService):
    """Appends to any turn of the session, whatever its status."""

    def _check_limits(self, inputs: list[dict[str, Any]]) -> None:
        if len(inputs) > self.limits.max_records_per_append:
            raise PayloadTooLarge(f"{len(inputs)} records exceed max_records_per_append")
        for position, item in enumerate(inputs):
            if len(json.dumps(item["content"], separators=(",", ":")).encode()) > self.limits.max_record_bytes:
                raise PayloadTooLarge(f"record {position} exceeds max_record_bytes")

    def _store_records(self, tx: Transaction, session_id: str, turn: TurnRow, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        created_at = timestamp(utcnow())
        first = tx.reserve_record_indexes(session_id, turn.turn_id, len(inputs))
        assert first is not None
        rows = [
            {
                "record_id": new_id(),
                "session_id": session_id,
                "record_index": first + offset,
                "turn_id": turn.turn_id,
                "turn_index": turn.turn_index,
                "record_type": item["type"],
                "content": json.dumps(item["content"], separators=(",", ":")),
                "created_at": created_at,
            }
            for offset, item in enumerate(inputs)
        ]
        tx.insert_records(rows)
        return {
            "records": [
                {
                    "record_id": row["record_id"],
                    "session_id": session_id,
                    "turn_id": turn.turn_id,
                    "index": row["record_index"],
                    "type": row["record_type"],
                    "content": item["content"],
                    "created_at": created_at,
                }
                for row, item in zip(rows, inputs)
            ]
        }


# ---------------------------------------------------------------- SESS-CREATE-001
@mutant("SESS-CREATE-001", select=("sessions.create_root_session",), description="A session without a client-chosen id is refused instead of getting a server-chosen one")
def session_id_required(settings: Settings) -> ASGIApp:
    class Service(SessionsService):
        def create_session(self, principal: str, body: dict[str, Any]) -> dict[str, Any]:
            if "session_id" not in body:
                raise InvalidRequest("/: 'session_id' is a required property")
            return super().create_session(principal, body)

    return app_with_service(settings, Service)


@mutant("SESS-CREATE-001", select=("sessions.create_root_session",), description="The session's name is answered but never stored")
def session_name_not_stored(settings: Settings) -> ASGIApp:
    class Tx(Transaction):
        def insert_session(self, row: dict[str, Any]) -> None:
            super().insert_session({**row, "name": None})

    return app_with_transaction(settings, Tx)


# ---------------------------------------------------------------- SESS-ID-001
@mutant("SESS-ID-001", select=("sessions.client_chosen_session_id",), description="A client-chosen session id is ignored and the server picks its own")
def chosen_session_id_ignored(settings: Settings) -> ASGIApp:
    class Service(SessionsService):
        def create_session(self, principal: str, body: dict[str, Any]) -> dict[str, Any]:
            return super().create_session(principal, {k: v for k, v in body.items() if k != "session_id"})

    return app_with_service(settings, Service)


@mutant("SESS-ID-001", select=("sessions.client_chosen_session_id",), description="An invalid client-chosen session id is silently replaced by a server-chosen one")
def invalid_session_id_replaced(settings: Settings) -> ASGIApp:
    def drop_invalid_id(scope: dict[str, Any], body: bytes) -> tuple[dict[str, Any], bytes]:
        if scope["method"] != "POST" or scope["path"] != "/sessions":
            return scope, body
        try:
            fields = json.loads(body)
        except ValueError:
            return scope, body
        if isinstance(fields, dict) and "session_id" in fields:
            chosen = fields["session_id"]
            if not isinstance(chosen, str) or not SESSION_ID.match(chosen):
                del fields["session_id"]
                body = json.dumps(fields).encode()
        return scope, body

    return rewrite_requests(reference_app(settings), drop_invalid_id)


# ---------------------------------------------------------------- SESS-ID-CONFLICT-001
@mutant("SESS-ID-CONFLICT-001", select=("sessions.duplicate_session_id",), description="Creating a session with a taken id overwrites the existing session")
def duplicate_session_id_overwrites(settings: Settings) -> ASGIApp:
    class Tx(Transaction):
        def insert_session(self, row: dict[str, Any]) -> None:
            if self.session(row["session_id"]) is None:
                super().insert_session(row)
                return
            self.conn.execute(
                update(t.sessions)
                .where(t.sessions.c.session_id == row["session_id"])
                .values(name=row["name"], description=row["description"])
            )

    return app_with_transaction(settings, Tx)


@mutant("SESS-ID-CONFLICT-001", select=("sessions.duplicate_session_id",), description="Creating a session with a taken id answers 201 with the existing session")
def duplicate_session_id_returns_existing(settings: Settings) -> ASGIApp:
    class Service(SessionsService):
        def create_session(self, principal: str, body: dict[str, Any]) -> dict[str, Any]:
            chosen = body.get("session_id")
            if chosen is not None:
                with self.store.read() as tx:
                    existing = tx.session(chosen)
                if existing is not None and existing.owner == principal:
                    return views.session(existing)
            return super().create_session(principal, body)

    return app_with_service(settings, Service)


# ---------------------------------------------------------------- SESS-TURN-001
@mutant("SESS-TURN-001", select=("sessions.start_turn",), description="Turn indexes start at 1 instead of 0")
def turn_index_starts_at_one(settings: Settings) -> ASGIApp:
    class Tx(Transaction):
        def claim_turn_slot(self, session_id: str, turn_id: str | None) -> Any:
            slot = super().claim_turn_slot(session_id, turn_id)
            return slot._replace(index=slot.index + 1) if slot else None

    return app_with_transaction(settings, Tx)


@mutant("SESS-TURN-001", select=("sessions.start_turn",), description="A client-chosen turn id is ignored and the server picks its own")
def chosen_turn_id_ignored(settings: Settings) -> ASGIApp:
    class Service(SessionsService):
        def start_turn(self, principal: str, session_id: str, body: dict[str, Any]) -> dict[str, Any]:
            return super().start_turn(principal, session_id, {k: v for k, v in body.items() if k != "turn_id"})

    return app_with_service(settings, Service)


@mutant("SESS-TURN-001", select=("sessions.start_turn",), description="A turn id already used in another session is replaced by a fresh one instead of refused")
def taken_turn_id_replaced(settings: Settings) -> ASGIApp:
    class Service(SessionsService):
        def start_turn(self, principal: str, session_id: str, body: dict[str, Any]) -> dict[str, Any]:
            chosen = body.get("turn_id")
            if chosen is not None:
                with self.store.read() as tx:
                    taken = tx.turn(chosen)
                if taken is not None and taken.session_id != session_id:
                    body = {**body, "turn_id": new_id()}
            return super().start_turn(principal, session_id, body)

    return app_with_service(settings, Service)


# ---------------------------------------------------------------- SESS-TURN-SINGLE-001
@mutant("SESS-TURN-SINGLE-001", select=("sessions.one_running_turn",), description="A new turn starts while another turn of the session is still running")
def second_running_turn_allowed(settings: Settings) -> ASGIApp:
    class Tx(Transaction):
        def claim_turn_slot(self, session_id: str, turn_id: str | None) -> Slot | None:
            row = self.conn.execute(
                update(t.sessions)
                .where(t.sessions.c.session_id == session_id)
                .values(running_turn_id=new_turn_key(), turn_count=t.sessions.c.turn_count + 1)
                .returning(t.sessions.c.turn_count, t.sessions.c.record_count, t.sessions.c.running_turn_id, t.sessions.c.token),
                {"p_turn_id": turn_id, "p_scope": key_scope(session_id)},
            ).first()
            return Slot(row[0] - 1, row[1], row[2], row[3]) if row else None

    return app_with_transaction(settings, Tx)


# ---------------------------------------------------------------- SESS-TURN-FINISH-001
@mutant("SESS-TURN-FINISH-001", select=("sessions.finish_turn_once",), description="Finishing an already finished turn succeeds again and overwrites its status")
def finished_turn_refinished(settings: Settings) -> ASGIApp:
    class Tx(Transaction):
        def refinish_turn(self, turn_id: str, status: str, finished_at: str) -> None:
            self.conn.execute(update(t.turns).where(turn_where(turn_id)).values(status=status, finished_at=finished_at))

    class Service(SessionsService):
        def finish_turn(self, principal: str, session_id: str, turn_id: str, body: dict[str, Any]) -> dict[str, Any]:
            with self.store.read() as tx:
                turn = tx.turn(turn_id)
            if turn is None or turn.session_id != session_id or turn.status == "running":
                return super().finish_turn(principal, session_id, turn_id, body)
            finished_at = timestamp(utcnow())
            with self.store.write() as tx:
                self.access.visible_session(tx, principal, session_id)
                assert isinstance(tx, Tx)
                tx.refinish_turn(turn_id, body["status"], finished_at)
            return views.turn(replace(turn, status=body["status"], finished_at=finished_at))

    return app_with_layers(settings, Service, transaction_class=Tx)


@mutant("SESS-TURN-FINISH-001", select=("sessions.finish_turn_once",), description="A turn finished as failed is stored and answered as completed")
def failed_finish_stored_as_completed(settings: Settings) -> ASGIApp:
    class Service(SessionsService):
        def finish_turn(self, principal: str, session_id: str, turn_id: str, body: dict[str, Any]) -> dict[str, Any]:
            return super().finish_turn(principal, session_id, turn_id, {**body, "status": "completed"})

    return app_with_service(settings, Service)


@mutant("SESS-TURN-FINISH-001", select=("sessions.finish_turn_once",), description="The finish answer renders the turn as it was read before the update")
def finish_answers_stale_turn(settings: Settings) -> ASGIApp:
    class Service(SessionsService):
        def finish_turn(self, principal: str, session_id: str, turn_id: str, body: dict[str, Any]) -> dict[str, Any]:
            with self.store.read() as tx:
                before = tx.turn(turn_id)
            super().finish_turn(principal, session_id, turn_id, body)
            assert before is not None
            return views.turn(before)

    return app_with_service(settings, Service)


# ---------------------------------------------------------------- SESS-RECORD-APPEND-001
@mutant("SESS-RECORD-APPEND-001", select=("sessions.append_records",), description="Record indexes of a session start at 1 instead of 0")
def record_indexes_start_at_one(settings: Settings) -> ASGIApp:
    class Tx(Transaction):
        def reserve_record_indexes(self, session_id: str, turn_id: str, count: int) -> int | None:
            first = super().reserve_record_indexes(session_id, turn_id, count)
            return first + 1 if first is not None else None

    return app_with_transaction(settings, Tx)


@mutant("SESS-RECORD-APPEND-001", select=("sessions.append_records",), description="Records are stored with a timestamp truncated to seconds while the answer shows microseconds")
def record_timestamp_truncated_in_storage(settings: Settings) -> ASGIApp:
    class Tx(Transaction):
        def insert_records(self, rows: list[dict[str, Any]]) -> None:
            super().insert_records([{**row, "created_at": row["created_at"][:19] + "Z"} for row in rows])

    return app_with_transaction(settings, Tx)


# ---------------------------------------------------------------- SESS-RECORD-CLOSED-001
@mutant("SESS-RECORD-CLOSED-001", select=("sessions.closed_turn",), description="Records can be appended to a finished turn")
def append_to_finished_turn_allowed(settings: Settings) -> ASGIApp:
    class Service(UncheckedAppend):
        def append_records(self, principal: str, session_id: str, turn_id: str, body: dict[str, Any]) -> dict[str, Any]:
            inputs = body["records"]
            self._check_limits(inputs)
            with self.store.write() as tx:
                self.access.visible_session(tx, principal, session_id)
                turn = self.own_turn(tx, session_id, turn_id)
                return self._store_records(tx, session_id, turn, inputs)

    return app_with_layers(settings, Service, transaction_class=LooseReserve)


@mutant("SESS-RECORD-CLOSED-001", select=("sessions.closed_turn",), description="An append commits its records before checking that the turn is running")
def closed_turn_checked_after_insert(settings: Settings) -> ASGIApp:
    class Service(UncheckedAppend):
        def append_records(self, principal: str, session_id: str, turn_id: str, body: dict[str, Any]) -> dict[str, Any]:
            self._check_limits(body["records"])
            with self.store.write() as tx:
                self.access.visible_session(tx, principal, session_id)
                turn = self.own_turn(tx, session_id, turn_id)
                answer = self._store_records(tx, session_id, turn, body["records"])
            if turn.status != "running":
                raise TurnNotRunning(f"turn {turn_id!r} is {turn.status}")
            return answer

    return app_with_layers(settings, Service, transaction_class=LooseReserve)


# ---------------------------------------------------------------- SESS-RECORD-LIMITS-001
@mutant("SESS-RECORD-LIMITS-001", select=("sessions.record_limits",), description="The advertised max_record_bytes is not enforced")
def record_size_not_limited(settings: Settings) -> ASGIApp:
    class Service(SessionsService):
        def append_records(self, *args: Any) -> dict[str, Any]:
            return relaxed_limits(self, max_record_bytes=sys.maxsize).append_records(*args)

    return app_with_service(settings, Service)


@mutant("SESS-RECORD-LIMITS-001", select=("sessions.record_limits",), description="The advertised max_records_per_append is not enforced")
def batch_size_not_limited(settings: Settings) -> ASGIApp:
    class Service(SessionsService):
        def append_records(self, *args: Any) -> dict[str, Any]:
            return relaxed_limits(self, max_records_per_append=sys.maxsize).append_records(*args)

    return app_with_service(settings, Service)


@mutant("SESS-RECORD-LIMITS-001", select=("sessions.record_limits",), description="An append above the record limits answers 422 invalid-request instead of 413")
def oversized_append_answers_422(settings: Settings) -> ASGIApp:
    class Service(SessionsService):
        def append_records(self, *args: Any) -> dict[str, Any]:
            try:
                return super().append_records(*args)
            except PayloadTooLarge as exc:
                raise InvalidRequest(exc.detail) from exc

    return app_with_service(settings, Service)


# ---------------------------------------------------------------- SESS-RECORD-ATOMIC-001
@mutant("SESS-RECORD-ATOMIC-001", select=("sessions.atomic_append",), description="Each record of a batch is checked and committed on its own, so a refused batch keeps its first records")
def append_commits_record_by_record(settings: Settings) -> ASGIApp:
    class Service(SessionsService):
        def append_records(self, principal: str, session_id: str, turn_id: str, body: dict[str, Any]) -> dict[str, Any]:
            inputs = body["records"]
            if len(inputs) > self.limits.max_records_per_append:
                raise PayloadTooLarge("too many records")
            written: list[dict[str, Any]] = []
            for item in inputs:
                written += super().append_records(principal, session_id, turn_id, {"records": [item]})["records"]
            return {"records": written}

    return app_with_service(settings, Service)


@mutant("SESS-RECORD-LIMITS-001", select=("sessions.record_limits",), description="A record or batch exactly at the advertised limit is refused.")
def record_limits_inclusive(settings: Settings) -> ASGIApp:
    """A record of exactly max_record_bytes and a batch of exactly max_records_per_append are refused."""

    class Service(SessionsService):
        def append_records(self, *args: Any) -> dict[str, Any]:
            limits = self.limits
            stricter = relaxed_limits(
                self,
                max_record_bytes=limits.max_record_bytes - 1,
                max_records_per_append=limits.max_records_per_append - 1,
            )
            return stricter.append_records(*args)

    return app_with_service(settings, Service)


# ---------------------------------------------------------------- races (check, then act in another transaction)
@mutant("SESS-ID-CONFLICT-001", select=("sessions.concurrent_creates",),
        description="A create checks the id is free in one transaction, then upserts it in another: concurrent creates all win")
def session_created_twice(settings: Settings) -> ASGIApp:
    import time

    from sqlalchemy import delete

    from reference_impl.errors import SessionExists
    from reference_impl.store import tables as t

    class Service(SessionsService):
        def create_session(self, principal: str, body: dict[str, Any]) -> dict[str, Any]:
            sid = body.get("session_id")
            if sid is None:
                return super().create_session(principal, body)
            with self.store.read() as tx:
                if tx.session(sid) is not None:
                    raise SessionExists(f"session {sid} already exists")
            time.sleep(0.005)  # the window between the check and the write
            with self.store.write() as tx:
                tx.conn.execute(delete(t.sessions).where(t.sessions.c.session_id == sid))
            return super().create_session(principal, body)

    return app_with_service(settings, Service)


@mutant("SESS-TURN-SINGLE-001", select=("sessions.concurrent_turn_starts",),
        description="A turn start checks for a running turn in one transaction and claims the slot unconditionally in another")
def turn_slot_checked_then_taken(settings: Settings) -> ASGIApp:
    import time

    from sqlalchemy import update

    from reference_impl.errors import TurnInProgress
    from reference_impl.store import tables as t

    class Tx(Transaction):
        def claim_turn_slot(self, session_id: str, turn_id: str | None) -> Slot | None:
            row = self.conn.execute(
                update(t.sessions).where(t.sessions.c.session_id == session_id)
                .values(running_turn_id=new_turn_key(), turn_count=t.sessions.c.turn_count + 1)
                .returning(t.sessions.c.turn_count, t.sessions.c.record_count, t.sessions.c.running_turn_id, t.sessions.c.token),
                {"p_turn_id": turn_id, "p_scope": key_scope(session_id)},
            ).first()
            return Slot(row[0] - 1, row[1], row[2], row[3]) if row else None

    class Service(SessionsService):
        def start_turn(self, principal: str, session_id: str, body: dict[str, Any], lease_id: str | None = None) -> dict[str, Any]:
            with self.store.read() as tx:
                found = tx.session(session_id)
                if found is not None and found.running_turn_id is not None:
                    raise TurnInProgress(f"session {session_id} already has a running turn")
            time.sleep(0.005)
            return super().start_turn(principal, session_id, body, lease_id)

    return app_with_layers(settings, Service, transaction_class=Tx)


@mutant("SESS-TURN-FINISH-001", select=("sessions.concurrent_finishes",),
        description="A finish reads the turn's status in one transaction and closes it unconditionally in another")
def turn_finished_twice(settings: Settings) -> ASGIApp:
    import time

    from sqlalchemy import select

    from reference_impl.errors import TurnNotRunning

    class Service(SessionsService):
        def finish_turn(self, principal: str, session_id: str, turn_id: str, body: dict[str, Any],
                        lease_id: str | None = None) -> dict[str, Any]:
            with self.store.read() as tx:
                self.access.writable_session(tx, principal, session_id, lease_id)
                turn = self.own_turn(tx, session_id, turn_id)
                if turn.status != "running":
                    raise TurnNotRunning(f"turn {turn_id} is {turn.status}")
            time.sleep(0.005)  # the window between the check and the write
            finished_at = timestamp(utcnow())
            with self.store.write() as tx:  # closes the turn whatever its status is by now
                end = tx.conn.execute(select(t.sessions.c.record_count).where(t.sessions.c.session_id == session_id)).scalar_one()
                tx.conn.execute(update(t.sessions).where(t.sessions.c.session_id == session_id).values(running_turn_id=None))
                tx.conn.execute(update(t.turns).where(turn_where(turn_id))
                                .values(status=body["status"], finished_at=finished_at, end_record_index=end))
            return views.turn(replace(turn, status=body["status"], end_record_index=end, finished_at=finished_at))

    return app_with_service(settings, Service)
