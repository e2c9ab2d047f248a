"""Mutants: fork (creation, cuts, copying, headers, targets, cycles, atomicity, idempotency)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from sqlalchemy import Index, select, update
from starlette.requests import Request
from starlette.types import ASGIApp

from reference_impl.errors import DomainError, InvalidRequest, NotFound, TurnIncomplete, UnknownTurn
from reference_impl.http.app import build_app
from reference_impl.services import build_services
from reference_impl.http.problems import problem
from reference_impl.http.requests import InvalidIdempotencyKey, idempotency_key
from reference_impl.services.common import new_id, timestamp, utcnow
from reference_impl.services.fork import Cutoff, ForkOutcome, ForkService, cutoff_at, fingerprint_of
from reference_impl.settings import Settings
from reference_impl.store import Transaction
from reference_impl.store import tables as t
from reference_impl.store.rows import ChainLink, IdempotencyRow, Segment
from tests.mutants import app_with_layers, app_with_service, app_with_transaction, mutant, open_store, reference_app
from tests.mutants.sessions import rewrite_requests


def _cut_turn(tx: Transaction, chain: Sequence[ChainLink], cut: dict[str, Any]) -> tuple[Any, ChainLink | None]:
    """The turn a cut names and the chain link of the session holding it (None: outside the chain)."""
    turn = tx.turn(cut["turn_id"])
    link = next((item for item in chain if turn is not None and item.session.session_id == turn.session_id), None)
    return turn, link


def _with_header_key(scope: dict[str, Any], value: bytes | None) -> dict[str, Any]:
    headers = [(k, v) for k, v in scope["headers"] if k.lower() != b"idempotency-key"]
    if value is not None:
        headers.append((b"idempotency-key", value))
    return {**scope, "headers": headers}


# ---------------------------------------------------------------- FORK-CREATE-001
@mutant("FORK-CREATE-001", select=("fork.fork_creates_child",), description="The child's root is recorded as its parent, so a grandchild names the wrong root")
def root_recorded_as_parent(settings: Settings) -> ASGIApp:
    class Tx(Transaction):
        def insert_lineage(self, row: dict[str, Any]) -> None:
            row["root_session_id"] = row["parent_session_id"]
            super().insert_lineage(row)

    return app_with_transaction(settings, Tx)


@mutant("FORK-CREATE-001", select=("fork.fork_creates_child",), description="The fork answer renders the child session before its lineage is attached")
def child_rendered_without_lineage(settings: Settings) -> ASGIApp:
    class Service(ForkService):
        def _fork_in(self, tx: Transaction, *args: Any) -> ForkOutcome:
            outcome = super()._fork_in(tx, *args)
            if outcome.replayed:
                return outcome
            return replace(outcome, body={**outcome.body, "session": {**outcome.body["session"], "lineage": None}})

    return app_with_service(settings, Service)


@mutant("FORK-CREATE-001", select=("fork.fork_creates_child",), description="inherited_turn_count is the index of the last inherited turn instead of a count")
def inherited_count_is_last_index(settings: Settings) -> ASGIApp:
    class Service(ForkService):
        def _resolve_cut(self, tx: Transaction, chain: Any, cut: dict[str, Any]) -> Cutoff:
            cutoff = super()._resolve_cut(tx, chain, cut)
            return replace(cutoff, inherited_turn_count=max(cutoff.inherited_turn_count - 1, 0))

    return app_with_service(settings, Service)


# ---------------------------------------------------------------- FORK-CUT-THROUGH-001
@mutant("FORK-CUT-THROUGH-001", select=("fork.cut_through",), description="A through cut is resolved like a before cut and leaves the named turn out")
def through_treated_as_before(settings: Settings) -> ASGIApp:
    class Service(ForkService):
        def _resolve_cut(self, tx: Transaction, chain: Any, cut: dict[str, Any]) -> Cutoff:
            if cut["mode"] == "through":
                cut = {**cut, "mode": "before"}
            return super()._resolve_cut(tx, chain, cut)

    return app_with_service(settings, Service)


@mutant("FORK-CUT-THROUGH-001", select=("fork.cut_through",), description="A through cut treats the turn's exclusive end index as inclusive and inherits one record too many")
def through_cut_end_inclusive(settings: Settings) -> ASGIApp:
    class Service(ForkService):
        def _resolve_cut(self, tx: Transaction, chain: Any, cut: dict[str, Any]) -> Cutoff:
            cutoff = super()._resolve_cut(tx, chain, cut)
            return replace(cutoff, record_index=cutoff.record_index + 1) if cut["mode"] == "through" else cutoff

    return app_with_service(settings, Service)


@mutant("FORK-CUT-THROUGH-001", "FORK-CUT-BEFORE-001", select=("fork.cut_",), description="Cuts only find turns the source holds itself, not inherited ones.")
def inherited_turn_cut_refused(settings: Settings) -> ASGIApp:
    """A through or before cut only finds turns the source holds itself; inherited turns are unknown."""

    class Service(ForkService):
        def _resolve_cut(self, tx: Transaction, chain: Any, cut: dict[str, Any]) -> Cutoff:
            if cut["mode"] != "latest":
                turn = tx.turn(cut["turn_id"])
                if turn is None or turn.session_id != chain[-1].session.session_id:
                    raise UnknownTurn(f"turn {cut['turn_id']!r} is not a turn of the source")
            return super()._resolve_cut(tx, chain, cut)

    return app_with_service(settings, Service)


# ---------------------------------------------------------------- FORK-CUT-BEFORE-001
@mutant("FORK-CUT-BEFORE-001", select=("fork.cut_before",), description="A before cut is resolved like a through cut and inherits the named turn")
def before_treated_as_through(settings: Settings) -> ASGIApp:
    class Service(ForkService):
        def _resolve_cut(self, tx: Transaction, chain: Any, cut: dict[str, Any]) -> Cutoff:
            if cut["mode"] == "before":
                cut = {**cut, "mode": "through"}
            return super()._resolve_cut(tx, chain, cut)

    return app_with_service(settings, Service)


@mutant("FORK-CUT-BEFORE-001", select=("fork.cut_before",), description="A before cut stops at the named turn's first record instead of just before it")
def before_cut_includes_first_record(settings: Settings) -> ASGIApp:
    class Service(ForkService):
        def _resolve_cut(self, tx: Transaction, chain: Any, cut: dict[str, Any]) -> Cutoff:
            cutoff = super()._resolve_cut(tx, chain, cut)
            return replace(cutoff, record_index=cutoff.record_index + 1) if cut["mode"] == "before" else cutoff

    return app_with_service(settings, Service)


@mutant("FORK-CUT-BEFORE-001", select=("fork.cut_before",), description="A cut before a session's first own turn inherits nothing, ignoring what that session inherited")
def before_first_own_turn_inherits_nothing(settings: Settings) -> ASGIApp:
    class Service(ForkService):
        def _resolve_cut(self, tx: Transaction, chain: Any, cut: dict[str, Any]) -> Cutoff:
            if cut["mode"] == "before":
                turn, link = _cut_turn(tx, chain, cut)
                if turn is not None and link is not None and turn.turn_index == 0:
                    return Cutoff(None, -1, -1, 0)
            return super()._resolve_cut(tx, chain, cut)

    return app_with_service(settings, Service)


# ---------------------------------------------------------------- FORK-CUT-UNKNOWN-001
@mutant("FORK-CUT-UNKNOWN-001", select=("fork.cut_unknown_turn",), description="A cut naming an ancestor's turn after the inherited range is accepted")
def cut_after_ancestor_cutoff_accepted(settings: Settings) -> ASGIApp:
    class Service(ForkService):
        def _resolve_cut(self, tx: Transaction, chain: Any, cut: dict[str, Any]) -> Cutoff:
            try:
                return super()._resolve_cut(tx, chain, cut)
            except UnknownTurn:
                turn, link = _cut_turn(tx, chain, cut)
                if link is None:
                    raise
                unbounded = [replace(item, turn_bound=None) if item is link else item for item in chain]
                return super()._resolve_cut(tx, unbounded, cut)

    return app_with_service(settings, Service)


@mutant("FORK-CUT-UNKNOWN-001", select=("fork.cut_unknown_turn",), description="A cut naming a turn of an unrelated session is accepted and cuts in that session")
def cut_in_unrelated_session_accepted(settings: Settings) -> ASGIApp:
    class Service(ForkService):
        def _resolve_cut(self, tx: Transaction, chain: Any, cut: dict[str, Any]) -> Cutoff:
            try:
                return super()._resolve_cut(tx, chain, cut)
            except UnknownTurn:
                turn, link = _cut_turn(tx, chain, cut)
                if turn is None or link is not None or turn.end_record_index is None:
                    raise
                if cut["mode"] == "through":
                    return Cutoff(turn.session_id, turn.turn_index, turn.end_record_index - 1, turn.turn_index + 1)
                return Cutoff(turn.session_id, turn.turn_index - 1, turn.first_record_index - 1, turn.turn_index)

    return app_with_service(settings, Service)


@mutant("FORK-CUT-UNKNOWN-001", select=("fork.cut_unknown_turn",), description="A cut naming an unknown turn answers 404 not-found instead of 422 unknown-turn")
def unknown_turn_answers_not_found(settings: Settings) -> ASGIApp:
    class Service(ForkService):
        def _resolve_cut(self, tx: Transaction, chain: Any, cut: dict[str, Any]) -> Cutoff:
            try:
                return super()._resolve_cut(tx, chain, cut)
            except UnknownTurn as exc:
                raise NotFound(exc.detail) from exc

    return app_with_service(settings, Service)


# ---------------------------------------------------------------- FORK-INCOMPLETE-001
@mutant("FORK-INCOMPLETE-001", select=("fork.fork_through_running_turn",), description="A cut through a running turn is accepted and inherits the records written so far")
def fork_through_running_turn_allowed(settings: Settings) -> ASGIApp:
    class Service(ForkService):
        def _resolve_cut(self, tx: Transaction, chain: Any, cut: dict[str, Any]) -> Cutoff:
            if cut["mode"] == "through":
                turn, link = _cut_turn(tx, chain, cut)
                if turn is not None and link is not None and turn.status == "running":
                    return cutoff_at(chain, link, turn.turn_index, link.session.record_count - 1)
            return super()._resolve_cut(tx, chain, cut)

    return app_with_service(settings, Service)


@mutant("FORK-INCOMPLETE-001", select=("fork.fork_through_running_turn",), description="A cut through a running turn answers 422 unknown-turn instead of 409 turn-incomplete")
def running_turn_cut_answers_unknown_turn(settings: Settings) -> ASGIApp:
    class Service(ForkService):
        def _resolve_cut(self, tx: Transaction, chain: Any, cut: dict[str, Any]) -> Cutoff:
            try:
                return super()._resolve_cut(tx, chain, cut)
            except TurnIncomplete as exc:
                raise UnknownTurn(exc.detail) from exc

    return app_with_service(settings, Service)


# ---------------------------------------------------------------- FORK-NO-COPY-001
class CopyingTx(Transaction):
    def copy_into(self, child_id: str, rows: list[Any]) -> None:
        """Write `rows` as the child's own records and detach the child from its parent's records."""
        if rows:
            self.insert_records(
                [
                    {
                        "record_id": new_id(),
                        "session_id": child_id,
                        "record_index": index,
                        "turn_id": row.turn_id,
                        "turn_index": row.turn_index,
                        "record_type": row.record_type,
                        "content": json.dumps(row.content, separators=(",", ":")),
                        "created_at": row.created_at,
                    }
                    for index, row in enumerate(rows)
                ]
            )
        self.conn.execute(update(t.sessions).where(t.sessions.c.session_id == child_id).values(record_count=len(rows)))
        self.conn.execute(
            update(t.session_lineage)
            .where(t.session_lineage.c.session_id == child_id)
            .values(cutoff_session_id=None, cutoff_turn_index=-1, cutoff_record_index=-1)
        )


@mutant("FORK-NO-COPY-001", select=("fork.fork_creates_child",), description="A fork copies the inherited records into the child under new record ids, in one bulk insert")
def fork_copies_records_in_one_statement(settings: Settings) -> ASGIApp:
    class Service(ForkService):
        def _fork_in(self, tx: Transaction, *args: Any) -> ForkOutcome:
            outcome = super()._fork_in(tx, *args)
            if outcome.replayed:
                return outcome
            child_id = outcome.body["session"]["session_id"]
            chain = tx.chain(child_id, self.limits.max_lineage_depth)
            segments = [Segment(link.session.session_id, -1, link.record_bound) for link in chain if link.record_bound not in (-1, None)]
            assert isinstance(tx, CopyingTx)
            tx.copy_into(child_id, tx.records(segments, 10**9))
            return outcome

    return app_with_layers(settings, Service, transaction_class=CopyingTx)


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


# ---------------------------------------------------------------- FORK-IDEMPOTENT-MISMATCH-001
@mutant("FORK-IDEMPOTENT-MISMATCH-001", select=("fork.key_reused_differently",), description="The request fingerprint leaves out the header, so a key reused with another header replays")
def fingerprint_ignores_header(settings: Settings) -> ASGIApp:
    class Service(ForkService):
        def fork(self, principal: str, source_id: str, body: dict[str, Any], idempotency_key: str | None) -> ForkOutcome:
            fingerprint = fingerprint_of(source_id, {k: v for k, v in body.items() if k != "header"})
            with self.store.write() as tx:
                return self._fork_in(tx, principal, source_id, body, idempotency_key, fingerprint)

    return app_with_service(settings, Service)


@mutant("FORK-IDEMPOTENT-MISMATCH-001", select=("fork.key_reused_differently",), description="A stored key replays its first answer whatever the new request is")
def reused_key_replays_first_answer(settings: Settings) -> ASGIApp:
    class Service(ForkService):
        def _fork_in(self, tx: Transaction, principal: str, source_id: str, body: dict[str, Any], key: str | None, fingerprint: str) -> ForkOutcome:
            stored = tx.idempotency(principal, key) if key is not None else None
            return super()._fork_in(tx, principal, source_id, body, key, stored.fingerprint if stored else fingerprint)

    return app_with_service(settings, Service)


@mutant("FORK-IDEMPOTENT-MISMATCH-001", select=("fork.key_reused_differently",), description="A key reused with a different request is ignored and a new child is created")
def reused_key_forks_afresh(settings: Settings) -> ASGIApp:
    class Service(ForkService):
        def _fork_in(self, tx: Transaction, principal: str, source_id: str, body: dict[str, Any], key: str | None, fingerprint: str) -> ForkOutcome:
            stored = tx.idempotency(principal, key) if key is not None else None
            if stored is not None and stored.fingerprint != fingerprint:
                key = None
            return super()._fork_in(tx, principal, source_id, body, key, fingerprint)

    return app_with_service(settings, Service)


# ---------------------------------------------------------------- FORK-IDEMPOTENT-KEY-001
@mutant("FORK-IDEMPOTENT-KEY-001", select=("fork.key_syntax",), description="A malformed Idempotency-Key is ignored instead of refused")
def malformed_key_ignored(settings: Settings) -> ASGIApp:
    def drop_malformed_key(scope: dict[str, Any], body: bytes) -> tuple[dict[str, Any], bytes]:
        try:
            idempotency_key(Request(scope))
        except InvalidIdempotencyKey:
            return _with_header_key(scope, None), body
        return scope, body

    return rewrite_requests(reference_app(settings), drop_malformed_key)


@mutant("FORK-IDEMPOTENT-KEY-001", select=("fork.key_syntax",), description="An Idempotency-Key longer than 255 characters is truncated instead of refused")
def long_key_truncated(settings: Settings) -> ASGIApp:
    def truncate_key(scope: dict[str, Any], body: bytes) -> tuple[dict[str, Any], bytes]:
        raw = dict(scope["headers"]).get(b"idempotency-key")
        if raw is None:
            return scope, body
        quoted = raw.startswith(b'"') and raw.endswith(b'"') and len(raw) >= 2
        value = raw[1:-1] if quoted else raw
        if len(value) > 255:
            value = value[:255]
            return _with_header_key(scope, b'"' + value + b'"' if quoted else value), body
        return scope, body

    return rewrite_requests(reference_app(settings), truncate_key)


@mutant("FORK-IDEMPOTENT-KEY-001", select=("fork.key_syntax",), description="Idempotency keys longer than 64 characters are refused.")
def idempotency_key_limited_to_64_characters(settings: Settings) -> ASGIApp:
    """Idempotency keys longer than 64 characters are refused although up to 255 are valid."""

    class Service(ForkService):
        def fork(self, principal: str, source_id: str, body: dict[str, Any], idempotency_key: str | None) -> ForkOutcome:
            if idempotency_key is not None and len(idempotency_key) > 64:
                raise InvalidIdempotencyKey("the key must have 1 to 64 characters")
            return super().fork(principal, source_id, body, idempotency_key)

    return app_with_service(settings, Service)


# ---------------------------------------------------------------- FORK-IDEMPOTENT-SCOPE-001
@mutant(
    "FORK-IDEMPOTENT-SCOPE-001",
    "ERR-NO-5XX-001",
    description="Idempotency keys are unique across principals, so another principal's first use of a key fails with a 5xx",
    select=("fork.key_scope",),
)
def idempotency_key_unique_across_principals(settings: Settings) -> ASGIApp:
    store = open_store(settings)
    with store.engine.begin() as conn:
        Index("uq_mutant_idempotency_key", t.idempotency_keys.c.idempotency_key, unique=True).create(conn, checkfirst=True)
    return build_app(build_services(store, settings), settings)


@mutant("FORK-IDEMPOTENT-SCOPE-001", select=("fork.key_scope",), description="Idempotency keys are looked up without the principal, so another principal's key is matched")
def idempotency_keys_shared_across_principals(settings: Settings) -> ASGIApp:
    class Tx(Transaction):
        def idempotency(self, principal: str, key: str) -> IdempotencyRow | None:
            query = select(t.idempotency_keys).where(t.idempotency_keys.c.idempotency_key == key)
            row = self.conn.execute(query).mappings().first()
            return IdempotencyRow(**row) if row else None

    return app_with_transaction(settings, Tx)


# ---------------------------------------------------------------- rules made normative in 1.1
@mutant("FORK-TARGET-001", select=("fork.target_session_id",),
        description="A replay of a fork by target id answers 200 instead of the first answer's 201")
def target_replay_answers_200(settings: Settings) -> ASGIApp:
    class Service(ForkService):
        def _existing_target(self, *args: Any) -> ForkOutcome | None:
            outcome = super()._existing_target(*args)
            return replace(outcome, status=200) if outcome is not None else None

    return app_with_service(settings, Service)


@mutant("FORK-IDEMPOTENT-KEY-001", select=("fork.key_syntax",),
        description="A quoted Idempotency-Key keeps its quotes, so `\"k\"` and `k` are different keys")
def quoted_key_keeps_its_quotes(settings: Settings) -> ASGIApp:
    def keep_quotes(scope: dict[str, Any], body: bytes) -> tuple[dict[str, Any], bytes]:
        raw = dict(scope["headers"]).get(b"idempotency-key")
        if raw is not None and raw.startswith(b'"') and raw.endswith(b'"') and len(raw) > 2 and b"\\" not in raw:
            return _with_header_key(scope, b"q" + raw[1:-1] + b"q"), body  # a different, still valid key
        return scope, body

    return rewrite_requests(reference_app(settings), keep_quotes)


# ---------------------------------------------------------------- key lifetime
@mutant("FORK-IDEMPOTENT-MISMATCH-001", select=("fork.key_lifetime",),
        description="Idempotency keys are kept forever, though the server advertises a 2-second lifetime")
def idempotency_keys_never_expire(settings: Settings) -> ASGIApp:
    from dataclasses import replace as replaced

    from reference_impl.store.rows import IdempotencyRow

    class Tx(Transaction):
        def idempotency(self, principal: str, key: str) -> IdempotencyRow | None:
            row = super().idempotency(principal, key)
            return None if row is None else replaced(row, expires_at="9999-12-31T23:59:59.999999Z")

    short = replaced(settings, limits=replaced(settings.limits, idempotency_key_lifetime_seconds=2))
    return app_with_transaction(short, Tx)


@mutant("FORK-IDEMPOTENT-001", select=("fork.key_lifetime",),
        description="Idempotency keys are forgotten after half the advertised 2-second lifetime")
def idempotency_keys_expire_early(settings: Settings) -> ASGIApp:
    from dataclasses import replace as replaced
    from datetime import datetime, timedelta

    from reference_impl.store.rows import IdempotencyRow

    class Tx(Transaction):
        def insert_idempotency(self, row: dict[str, Any]) -> None:
            expires = datetime.fromisoformat(row["expires_at"].replace("Z", "+00:00")) - timedelta(seconds=1)
            super().insert_idempotency({**row, "expires_at": expires.isoformat(timespec="microseconds").replace("+00:00", "Z")})

    short = replaced(settings, limits=replaced(settings.limits, idempotency_key_lifetime_seconds=2))
    return app_with_transaction(short, Tx)
