"""Mutants: fork creation and cuts (root and lineage, cut modes, unknown and running turns, copying)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from sqlalchemy import update
from starlette.types import ASGIApp

from reference_impl.errors import NotFound, TurnIncomplete, UnknownTurn
from reference_impl.services.common import new_id
from reference_impl.services.fork import Cutoff, ForkOutcome, ForkService, cutoff_at
from reference_impl.settings import Settings
from reference_impl.store import Transaction
from reference_impl.store import tables as t
from reference_impl.store.rows import ChainLink, Segment
from tests.mutants import app_with_layers, app_with_service, app_with_transaction, mutant


def _cut_turn(tx: Transaction, chain: Sequence[ChainLink], cut: dict[str, Any]) -> tuple[Any, ChainLink | None]:
    """The turn a cut names and the chain link of the session holding it (None: outside the chain)."""
    turn = tx.turn(cut["turn_id"])
    link = next((item for item in chain if turn is not None and item.session.session_id == turn.session_id), None)
    return turn, link


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
