"""Mutants: the child a fork creates (headers, target ids, cycles, missing sources, atomicity)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sqlalchemy import update
from starlette.types import ASGIApp

from reference_impl.errors import DomainError, InvalidRequest
from reference_impl.http.problems import problem
from reference_impl.services.common import timestamp, utcnow
from reference_impl.services.fork import ForkOutcome, ForkService, fingerprint_of
from reference_impl.settings import Settings
from reference_impl.store import Transaction
from reference_impl.store import tables as t
from tests.mutants import app_with_layers, app_with_service, mutant


# ---------------------------------------------------------------- FORK-HEADER-001
@mutant("FORK-HEADER-001", select=("fork.header_three_state",), description="A null header field is treated as absent and copies the source's value instead of clearing it")
def header_null_copies_source(settings: Settings) -> ASGIApp:
    class Service(ForkService):
        def _fork_in(self, tx: Transaction, principal: str, source_id: str, body: dict[str, Any], *rest: Any) -> ForkOutcome:
            header = {k: v for k, v in body.get("header", {}).items() if v is not None}
            return super()._fork_in(tx, principal, source_id, {**body, "header": header}, *rest)

    return app_with_service(settings, Service)


@mutant("FORK-HEADER-001", select=("fork.header_three_state",), description="An absent header field clears the child's value instead of copying the source's")
def header_absent_clears_field(settings: Settings) -> ASGIApp:
    class Service(ForkService):
        def _fork_in(self, tx: Transaction, principal: str, source_id: str, body: dict[str, Any], *rest: Any) -> ForkOutcome:
            header = {"name": None, "description": None, **body.get("header", {})}
            return super()._fork_in(tx, principal, source_id, {**body, "header": header}, *rest)

    return app_with_service(settings, Service)


@mutant("FORK-HEADER-001", select=("fork.header_three_state",), description="The header is applied to the fork answer but the stored child keeps the source's name and description")
def header_not_stored(settings: Settings) -> ASGIApp:
    class Service(ForkService):
        def _fork_in(self, tx: Transaction, principal: str, source_id: str, body: dict[str, Any], *rest: Any) -> ForkOutcome:
            outcome = super()._fork_in(tx, principal, source_id, {k: v for k, v in body.items() if k != "header"}, *rest)
            if outcome.replayed:
                return outcome
            session = {**outcome.body["session"], **body.get("header", {})}
            return replace(outcome, body={**outcome.body, "session": session})

    return app_with_service(settings, Service)


# ---------------------------------------------------------------- FORK-TARGET-001
@mutant("FORK-TARGET-001", select=("fork.target_session_id",), description="target_session_id is ignored and the child gets a server-chosen id")
def target_session_id_ignored(settings: Settings) -> ASGIApp:
    class Service(ForkService):
        def _fork_in(self, tx: Transaction, principal: str, source_id: str, body: dict[str, Any], *rest: Any) -> ForkOutcome:
            return super()._fork_in(tx, principal, source_id, {k: v for k, v in body.items() if k != "target_session_id"}, *rest)

    return app_with_service(settings, Service)


@mutant("FORK-TARGET-001", select=("fork.target_session_id",), description="Repeating a fork to the same target returns the child without Idempotency-Replayed: true")
def target_replay_not_flagged(settings: Settings) -> ASGIApp:
    class Service(ForkService):
        def _existing_target(self, *args: Any) -> ForkOutcome | None:
            outcome = super()._existing_target(*args)
            return replace(outcome, replayed=False) if outcome is not None else None

    return app_with_service(settings, Service)


@mutant("FORK-TARGET-001", select=("fork.target_session_id",), description="A target naming a child of the same source replays it even when the cut differs")
def target_replay_ignores_cut(settings: Settings) -> ASGIApp:
    class Service(ForkService):
        def _existing_target(self, tx: Transaction, principal: str, chain: Any, target_id: str, cut: dict[str, Any]) -> ForkOutcome | None:
            existing = tx.session(target_id)
            if existing is not None and existing.lineage is not None:
                cut = {"mode": existing.lineage.cut_mode}
                if existing.lineage.cut_turn_id is not None:
                    cut["turn_id"] = existing.lineage.cut_turn_id
            return super()._existing_target(tx, principal, chain, target_id, cut)

    return app_with_service(settings, Service)


# ---------------------------------------------------------------- FORK-CYCLE-001
@mutant("FORK-CYCLE-001", "FORK-TARGET-001", select=("fork.no_cycles", "fork.target_session_id"), description="A taken target id is adopted as the child (upsert), so a session can become its own ancestor")
def taken_target_adopted(settings: Settings) -> ASGIApp:
    class Tx(Transaction):
        def insert_session(self, row: dict[str, Any]) -> None:
            if self.session(row["session_id"]) is None:
                super().insert_session(row)

        def insert_lineage(self, row: dict[str, Any]) -> None:
            self.conn.execute(
                t.session_lineage.delete().where(t.session_lineage.c.session_id == row["session_id"])
            )
            super().insert_lineage(row)

    class Service(ForkService):
        def _existing_target(self, *args: Any) -> ForkOutcome | None:
            try:
                return super()._existing_target(*args)
            except DomainError:
                return None

    return app_with_layers(settings, Service, transaction_class=Tx)


# ---------------------------------------------------------------- FORK-SOURCE-MISSING-001
@mutant("FORK-SOURCE-MISSING-001", select=("fork.unknown_source",), description="Forking a missing session answers 422 invalid-request instead of 404 not-found")
def missing_source_answers_invalid_request(settings: Settings) -> ASGIApp:
    class Service(ForkService):
        def _fork_in(self, tx: Transaction, principal: str, source_id: str, *rest: Any) -> ForkOutcome:
            if tx.session(source_id) is None:
                raise InvalidRequest(f"/: source session {source_id!r} does not exist")
            return super()._fork_in(tx, principal, source_id, *rest)

    return app_with_service(settings, Service)


# ---------------------------------------------------------------- FORK-ATOMIC-001
@mutant("FORK-ATOMIC-001", select=("fork.refused_fork_leaves_no_trace", "fork.fork_through_running_turn"), description="The child session row is committed before the fork is validated, so a refused fork leaves it behind")
def child_committed_before_lineage(settings: Settings) -> ASGIApp:
    reserved: set[str] = set()

    class Tx(Transaction):
        def insert_session(self, row: dict[str, Any]) -> None:
            if row["session_id"] in reserved and self.session(row["session_id"]) is not None:
                values = {k: v for k, v in row.items() if k != "session_id"}
                self.conn.execute(update(t.sessions).where(t.sessions.c.session_id == row["session_id"]).values(**values))
                return
            super().insert_session(row)

    class Service(ForkService):
        def fork(self, principal: str, source_id: str, body: dict[str, Any], idempotency_key: str | None) -> ForkOutcome:
            target = body.get("target_session_id")
            if target is not None:
                with self.store.write() as tx:
                    if tx.session(target) is None:
                        tx.insert_session(
                            {
                                "session_id": target,
                                "owner": principal,
                                "name": None,
                                "description": None,
                                "created_at": timestamp(utcnow()),
                                "depth": 0,
                                "turn_count": 0,
                                "record_count": 0,
                                "running_turn_id": None,
                            }
                        )
                        reserved.add(target)
            return super().fork(principal, source_id, body, idempotency_key)

        def _existing_target(self, tx: Transaction, principal: str, chain: Any, target_id: str, cut: dict[str, Any]) -> ForkOutcome | None:
            existing = tx.session(target_id)
            if existing is not None and existing.lineage is None and target_id in reserved:
                return None
            return super()._existing_target(tx, principal, chain, target_id, cut)

    return app_with_layers(settings, Service, transaction_class=Tx)


@mutant("FORK-ATOMIC-001", select=("fork.refused_fork_leaves_no_trace",), description="A refused fork stores its error answer under the Idempotency-Key, so the corrected retry is refused")
def refused_fork_consumes_key(settings: Settings) -> ASGIApp:
    class Service(ForkService):
        def fork(self, principal: str, source_id: str, body: dict[str, Any], idempotency_key: str | None) -> ForkOutcome:
            try:
                return super().fork(principal, source_id, body, idempotency_key)
            except DomainError as exc:
                if idempotency_key is not None:
                    answer = problem(exc.kind, exc.detail)
                    with self.store.write() as tx:
                        if tx.idempotency(principal, idempotency_key) is None:
                            tx.insert_idempotency(
                                {
                                    "principal": principal,
                                    "idempotency_key": idempotency_key,
                                    "fingerprint": fingerprint_of(source_id, body),
                                    "child_session_id": "",
                                    "response_status": answer.status_code,
                                    "response_body": bytes(answer.body).decode(),
                                    "expires_at": "9999-12-31T00:00:00.000000Z",
                                }
                            )
                raise

    return app_with_service(settings, Service)


# ---------------------------------------------------------------- rules made normative in 1.1
@mutant("FORK-TARGET-001", select=("fork.target_session_id",),
        description="A replay of a fork by target id answers 200 instead of the first answer's 201")
def target_replay_answers_200(settings: Settings) -> ASGIApp:
    class Service(ForkService):
        def _existing_target(self, *args: Any) -> ForkOutcome | None:
            outcome = super()._existing_target(*args)
            return replace(outcome, status=200) if outcome is not None else None

    return app_with_service(settings, Service)
