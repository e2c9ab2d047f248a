"""Mutants: one state of a state machine answered as another (fixtures/states, checks/state_matrix).

Each breaks a rule in one state only, where a check that follows one path through the machine may
never look: an expired lease's id still writes, a released lease renews, a finished turn finishes
again, a suspended turn finishes, a recover ignores the held lease, a pending action stays in
flight after its turn, an import replay is not reported, a purged id stays taken, an empty string
in a patch clears.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from starlette.types import ASGIApp

from reference_impl import views
from reference_impl.errors import SessionExists
from reference_impl.services import turn_steps as steps
from reference_impl.services.access import Access
from reference_impl.services.common import timestamp, utcnow
from reference_impl.services.leases import LeasesService
from reference_impl.services.deletion import DeletionService
from reference_impl.services.rewind import RewindService
from reference_impl.services.sessions import SessionsService
from reference_impl.services.suspend import SuspendService
from reference_impl.settings import Settings
from reference_impl.store import Transaction
from reference_impl.store.rows import LeaseRow, SessionRow, TurnRow
from tests.mutants import app_with_service, mutant, reference_app, rewrite_responses
from tests.mutants.sessions import rewrite_requests


@mutant("LEASE-EXPIRY-001", select=("state_matrix.leases",),
        description="A write naming an expired lease is accepted while no one else holds the session")
def expired_lease_still_writes(settings: Settings) -> ASGIApp:
    class Service(Access):
        def check_writer(self, lease: LeaseRow | None, session_id: str, lease_id: str | None) -> None:
            if lease is not None and lease_id == lease.lease_id:
                return None  # the id matches: its expiry is never looked at
            super().check_writer(lease, session_id, lease_id)

    return app_with_service(settings, Service)


@mutant("LEASE-ACQUIRE-001", select=("state_matrix.leases",),
        description="Renewing a released lease's id answers 200: the session is taken again, under a new id")
def released_lease_renews(settings: Settings) -> ASGIApp:
    released: set[tuple[str, str]] = set()

    class Service(LeasesService):
        def release_lease(self, principal: str, session_id: str, lease_id: str | None) -> None:
            super().release_lease(principal, session_id, lease_id)
            released.add((session_id, str(lease_id)))

        def acquire_lease(self, principal: str, session_id: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
            renewing = body.get("lease_id")
            if (session_id, renewing) in released:
                _, lease = super().acquire_lease(principal, session_id, {"ttl_seconds": body["ttl_seconds"]})
                return 200, {**lease, "lease_id": renewing}
            return super().acquire_lease(principal, session_id, body)

    return app_with_service(settings, Service)


Finish = Callable[[Transaction, TurnRow, str], dict[str, Any]]


def finish_also_when(settings: Settings, statuses: tuple[str, ...], finish: Finish) -> ASGIApp:
    """The reference, but a finish of a turn in one of `statuses` is answered by `finish`."""

    class Service(SessionsService):
        def finish_turn(
            self, principal: str, session_id: str, turn_id: str, body: dict[str, Any], lease_id: str | None = None
        ) -> dict[str, Any]:
            with self.store.write() as tx:
                turn = steps.writable_turn(self.access, tx, principal, session_id, turn_id, lease_id)
                if turn.status in statuses:
                    return finish(tx, turn, body["status"])
            return super().finish_turn(principal, session_id, turn_id, body, lease_id)

    return app_with_service(settings, Service)


@mutant("SESS-TURN-FINISH-001", select=("state_matrix.turns",),
        description="Finishing a finished turn answers 200 with the new status (nothing is stored)")
def finished_turn_finishes_again(settings: Settings) -> ASGIApp:
    return finish_also_when(settings, ("completed", "failed"), lambda tx, turn, status: views.turn(replace(turn, status=status)))


@mutant("SUSPEND-UNFINISHED-001", select=("state_matrix.suspended_turns",),
        description="A suspended turn can be finished: the finish frees its slot as an abandon would")
def suspended_turn_finishes(settings: Settings) -> ASGIApp:
    def close(tx: Transaction, turn: TurnRow, status: str) -> dict[str, Any]:
        now = timestamp(utcnow())
        end = tx.release_suspended_slot(turn.session_id, turn.turn_id)
        tx.set_turn_state(turn.turn_id, status=status, finished_at=now, end_record_index=end)
        return views.turn(replace(turn, status=status, finished_at=now, end_record_index=end))

    return finish_also_when(settings, ("suspended",), close)


@mutant("SUSPEND-WRITE-001", select=("state_matrix.leases_and_suspended_turns",),
        description="Recovering a suspended turn ignores the writer lease held on its session (suspending respects it)")
def recover_ignores_the_lease(settings: Settings) -> ASGIApp:
    class Service(SuspendService):
        def recover(self, principal: str, session_id: str, turn_id: str, lease_id: str | None = None) -> dict[str, Any]:
            with self.store.read() as tx:
                found = tx.session_for_write(session_id)
            held = found[1] if found else None
            return super().recover(principal, session_id, turn_id, held.lease_id if held is not None else lease_id)

    return app_with_service(settings, Service)


@mutant("REWIND-STATE-001", select=("state_matrix.pending_rewinds",),
        description="A pending action reads in-flight from its session's first turn on, not only while a turn runs")
def rewind_in_flight_after_the_turn(settings: Settings) -> ASGIApp:
    class Service(RewindService):
        @staticmethod
        def state(session: SessionRow) -> str:
            return "in-flight" if session.turn_count > 0 else "pending"

    return app_with_service(settings, Service)


@mutant("IMPORT-IDEMPOTENT-001", select=("state_matrix.legacy_imports",),
        description="Uploading a completely imported history again answers its summary with replayed false")
def import_replay_not_reported(settings: Settings) -> ASGIApp:
    def rewrite(scope: dict[str, Any], status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        if scope["path"] == "/imports" and status == 200:
            summary = json.loads(body)
            if summary.get("replayed") is True:
                body = json.dumps({**summary, "replayed": False}).encode()
        return status, headers, body

    return rewrite_responses(reference_app(settings), rewrite)


@mutant("DEL-PURGE-001", select=("state_matrix.deleted_sessions",),
        description="A purged session's id stays taken: creating a session with it answers 409 session-exists")
def purged_id_stays_taken(settings: Settings) -> ASGIApp:
    purged: set[tuple[str, str]] = set()

    class Deletion(DeletionService):
        def purge_session(self, principal: str, session_id: str) -> None:
            super().purge_session(principal, session_id)
            purged.add((principal, session_id))

    class Sessions(SessionsService):
        def create_session(self, principal: str, body: dict[str, Any]) -> dict[str, Any]:
            if (principal, body.get("session_id")) in purged:
                raise SessionExists(f"session {body['session_id']} exists")
            return super().create_session(principal, body)

    return app_with_service(settings, Deletion, Sessions)


@mutant("SESS-PATCH-001", select=("state_matrix.patch_three_state",),
        description="An empty name or description in a merge patch clears the member instead of setting it")
def patch_empty_clears(settings: Settings) -> ASGIApp:
    def rewrite(scope: dict[str, Any], body: bytes) -> tuple[dict[str, Any], bytes]:
        if scope["method"] == "PATCH" and body:
            data = json.loads(body)
            if isinstance(data, dict):
                body = json.dumps({key: (None if value == "" else value) for key, value in data.items()}).encode()
        return scope, body

    return rewrite_requests(reference_app(settings), rewrite)
