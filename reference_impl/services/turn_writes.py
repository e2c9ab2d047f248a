"""Chapter: idempotent turn writes and the one-request turn write.

Start-turn, append and finish take an `Idempotency-Key`, kept in fork's `idempotency_keys` table
(one primary key per principal and key, so keys are scoped per principal and one key names one
request whatever the operation). The caller's record of the key is read in the same statement as
the session (`session_for_turn_write`), and written in the write's own transaction: a concurrent
duplicate fails on the primary key or on the session's turn slot, and is evaluated again, which
replays the answer that won.

A start-turn body may also carry `records` and a final `status`: the turn is claimed, its indexes
reserved and (with `status`) finished by one conditional UPDATE of the session row, then the turn
row and the records are inserted, in one transaction per store.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from reference_impl import views
from reference_impl.errors import IdempotencyKeyReused, InvalidRequest, TurnExists, TurnInProgress, TurnNotRunning
from reference_impl.services import turn_steps as steps
from reference_impl.services.common import ChapterService, timestamp, utcnow
from reference_impl.store import Transaction
from reference_impl.store.rows import IdempotencyRow, SessionRow, TurnRow
from reference_impl.store.store import IntegrityError

ATTEMPTS = 3


@dataclass(frozen=True)
class WriteOutcome:
    status: int
    body: dict[str, Any]
    replayed: bool


class Replay(Exception):
    """Raised inside a transaction to leave it (rolled back) and answer a stored replay."""

    def __init__(self, outcome: WriteOutcome) -> None:
        super().__init__("replay")
        self.outcome = outcome


def fingerprint_of(operation: str, session_id: str, turn_id: str | None, body: dict[str, Any]) -> str:
    """What makes two turn writes identical: the operation, its path ids and its body."""
    canonical = json.dumps(
        {"op": operation, "session": session_id, "turn": turn_id, "body": body}, sort_keys=True, separators=(",", ":")
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


class TurnWritesService(ChapterService):
    chapter = "turn-writes"
    capabilities = ("idempotent-turns", "turn-write")

    # ---------------------------------------------------------------- shared steps
    def _writable(
        self, tx: Transaction, principal: str, session_id: str, lease_id: str | None, key: str | None, fingerprint: str
    ) -> tuple[SessionRow, IdempotencyRow | None]:
        """The session after role and lease checks; a valid stored answer for the key is replayed."""
        found = tx.session_for_turn_write(session_id, principal, key)
        session = self.access.writable_from(
            principal, found[0] if found else None, found[1] if found else None, session_id, lease_id
        )
        stored = found[2] if found else None
        if stored is not None:
            if stored.expires_at > timestamp(utcnow()):
                raise Replay(self._replay(stored, fingerprint))
            tx.delete_idempotency(principal, stored.idempotency_key)  # expired: forgotten
        return session, stored

    @staticmethod
    def _replay(stored: IdempotencyRow, fingerprint: str) -> WriteOutcome:
        if stored.fingerprint != fingerprint:
            raise IdempotencyKeyReused("this Idempotency-Key was used with a different request")
        return WriteOutcome(stored.response_status, json.loads(stored.response_body), True)

    def _remember(
        self, tx: Transaction, principal: str, key: str | None, fingerprint: str, session_id: str, status: int, body: Any
    ) -> None:
        if key is None:
            return
        expires = utcnow() + timedelta(seconds=self.limits.idempotency_key_lifetime_seconds)
        tx.insert_idempotency(
            {
                "principal": principal,
                "idempotency_key": key,
                "fingerprint": fingerprint,
                "child_session_id": session_id,
                "response_status": status,
                "response_body": json.dumps(body),
                "expires_at": timestamp(expires),
            }
        )

    def _stored_answer(self, principal: str, key: str | None, fingerprint: str) -> WriteOutcome | None:
        """After losing a race: the answer a concurrent identical request committed, if any."""
        if key is None:
            return None
        with self.store.read() as tx:
            stored = tx.idempotency(principal, key)
        if stored is None or stored.expires_at <= timestamp(utcnow()):
            return None
        return self._replay(stored, fingerprint)

    def _run(self, principal: str, key: str | None, fingerprint: str, attempt: Any, conflicts: tuple[type, ...]) -> WriteOutcome:
        """Run `attempt()` with the replay and race handling every idempotent write shares."""
        for number in range(ATTEMPTS):
            try:
                return attempt()
            except Replay as replay:
                return replay.outcome
            except IntegrityError:
                if number == ATTEMPTS - 1:
                    raise
            except conflicts:
                won = self._stored_answer(principal, key, fingerprint)
                if won is not None:
                    return won
                raise
        raise AssertionError("unreachable")

    @staticmethod
    def _forgetting(principal: str, key: str | None, give_back: Callable[[Transaction], bool]) -> Callable[[Transaction], bool]:
        """`give_back` that also forgets the key, so a retry is evaluated again."""

        def undo(tx: Transaction) -> bool:
            given_back = give_back(tx)
            if key is not None:
                tx.delete_idempotency(principal, key)
            return given_back

        return undo

    @staticmethod
    def _clear_pending_on_success(tx: Transaction, session: SessionRow, status: str | None) -> None:
        """A turn finished `completed` (by a keyed finish or written finished) clears the session's
        pending rewind action, as a plain finish does; `failed` keeps it (REWIND-CLEAR-001). Only a
        fork can hold one (a rewind is a fork's), so a root session costs no statement."""
        if status == "completed" and session.lineage is not None:
            tx.clear_pending_action(session.session_id)

    # ---------------------------------------------------------------- start (and the one-request write)
    def start_turn(
        self, principal: str, session_id: str, body: dict[str, Any], lease_id: str | None = None, key: str | None = None
    ) -> WriteOutcome:
        if ("records" in body or "status" in body) and "turn-write" not in self.capabilities:
            raise InvalidRequest("this server does not write a turn in one request (capability turn-write)")
        key = key if "idempotent-turns" in self.capabilities else None  # a server without it ignores the header
        fingerprint = fingerprint_of("startTurn", session_id, None, body)
        inputs = body.get("records") or []
        encoded = steps.encoded_contents(self.limits, inputs)
        chosen = body.get("turn_id")  # None: the store derives the turn's id
        status = body.get("status")
        written: list[tuple[str, int, int, int, list[dict[str, Any]]]] = []
        sessions: list[SessionRow] = []

        def attempt() -> WriteOutcome:
            try:
                with self.store.write() as tx:
                    sessions[:] = [self._writable(tx, principal, session_id, lease_id, key, fingerprint)[0]]
                    claimed = tx.claim_turn_write(session_id, chosen, len(inputs), finish=status is not None)
                    if claimed is None:
                        raise TurnInProgress(f"session {session_id} already has a running turn")
                    turn_index, first, child_count, turn_id, token = claimed
                    now = timestamp(utcnow())
                    end = first + len(inputs) if status else None
                    row = steps.turn_row(turn_id, session_id, turn_index, body["role"], first, now, status or "running", end)
                    tx.insert_turn(row, token)
                    result = views.turn(TurnRow(**row))
                    rows: list[dict[str, Any]] = []
                    if "records" in body:
                        items = [(item["type"], content) for item, content in zip(inputs, encoded)]
                        rows = steps.record_rows(session_id, turn_id, turn_index, first, items, now, token)
                        if rows and not self.store.split:
                            tx.insert_records(rows)
                        result["records"] = steps.record_views(rows, [item["content"] for item in inputs])
                    if not (self.store.split and rows):  # two stores: once the records store took them
                        self._clear_pending_on_success(tx, sessions[0], status)
                    self._remember(tx, principal, key, fingerprint, session_id, 201, result)
                    written[:] = [(turn_id, turn_index, first, child_count, rows)]
            except IntegrityError as exc:
                if key is None and chosen is not None:
                    raise TurnExists(f"turn {chosen} already exists") from exc
                raise  # a concurrent identical request committed first: evaluated again, it replays
            return WriteOutcome(201, result, False)

        try:
            outcome = self._run(principal, key, fingerprint, attempt, (TurnInProgress,))
        except IntegrityError as exc:
            if chosen is None:
                raise
            raise TurnExists(f"turn {chosen} already exists") from exc
        if self.store.split and not outcome.replayed and written and written[0][4]:
            self._write_records_or_undo(principal, key, session_id, *written[0])
            if status == "completed":  # the turn stands only now: a refused records write took it back
                with self.store.write() as tx:
                    self._clear_pending_on_success(tx, sessions[0], status)
        return outcome

    def _write_records_or_undo(
        self, principal: str, key: str | None, session_id: str, turn_id: str, turn_index: int, first: int,
        child_count: int, rows: list[dict[str, Any]],
    ) -> None:
        """Two stores: the core store holds the turn; the records store now takes its records. If it
        refuses, the turn is taken back (unless something came after it) and the answer is 503."""
        def undo(tx: Transaction) -> bool:
            return tx.undo_turn_write(session_id, turn_id, turn_index, first, len(rows), child_count)

        refused = "the records store did not take the records; "
        steps.insert_or_give_back(
            self.store, rows, self._forgetting(principal, key, undo), refused + "nothing was written",
            refused + "the turn stays, and reads over its records answer 503",
        )

    # ---------------------------------------------------------------- append
    def append_records(
        self, principal: str, session_id: str, turn_id: str, body: dict[str, Any], lease_id: str | None = None,
        key: str | None = None,
    ) -> WriteOutcome:
        key = key if "idempotent-turns" in self.capabilities else None
        fingerprint = fingerprint_of("appendRecords", session_id, turn_id, body)
        inputs = body["records"]
        encoded = steps.encoded_contents(self.limits, inputs)
        written: list[tuple[int, list[dict[str, Any]]]] = []

        def attempt() -> WriteOutcome:
            created_at = timestamp(utcnow())
            with self.store.write() as tx:
                self._writable(tx, principal, session_id, lease_id, key, fingerprint)
                turn = steps.require_running(steps.own_turn(tx, session_id, turn_id))
                items = [(item["type"], content) for item, content in zip(inputs, encoded)]
                first, rows = steps.append_rows(self.store, tx, turn, items, created_at)
                result = {"records": steps.record_views(rows, [item["content"] for item in inputs])}
                self._remember(tx, principal, key, fingerprint, session_id, 201, result)
                written[:] = [(first, rows)]
            return WriteOutcome(201, result, False)

        outcome = self._run(principal, key, fingerprint, attempt, (TurnNotRunning,))
        if self.store.split and not outcome.replayed and written:
            first, rows = written[0]
            give_back = self._forgetting(principal, key, steps.release_indexes(session_id, turn_id, first, len(rows)))
            steps.insert_or_give_back(self.store, rows, give_back, steps.NOTHING_APPENDED, steps.INDEXES_HELD)
        return outcome

    # ---------------------------------------------------------------- finish
    def finish_turn(
        self, principal: str, session_id: str, turn_id: str, body: dict[str, Any], lease_id: str | None = None,
        key: str | None = None,
    ) -> WriteOutcome:
        key = key if "idempotent-turns" in self.capabilities else None
        fingerprint = fingerprint_of("finishTurn", session_id, turn_id, body)

        def attempt() -> WriteOutcome:
            finished_at = timestamp(utcnow())
            with self.store.write() as tx:
                session, _ = self._writable(tx, principal, session_id, lease_id, key, fingerprint)
                turn = steps.require_running(steps.own_turn(tx, session_id, turn_id))
                result = views.turn(steps.close_turn(tx, turn, body["status"], finished_at))
                self._clear_pending_on_success(tx, session, body["status"])
                self._remember(tx, principal, key, fingerprint, session_id, 200, result)
            return WriteOutcome(200, result, False)

        return self._run(principal, key, fingerprint, attempt, (TurnNotRunning,))
