"""Chapter: fork. A child session points at its source with a cut; nothing is copied.

The cut is resolved to a physical cutoff (the session holding the last inherited turn, that
turn's index and its last record's index) inside the fork's transaction, from finished turns only.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from reference_impl import segments, views
from reference_impl.errors import (
    DepthExceeded,
    IdempotencyKeyReused,
    SessionDeleted,
    TargetConflict,
    TurnIncomplete,
    UnknownTurn,
)
from reference_impl.services.common import ChapterService, new_key, timestamp, utcnow
from reference_impl.services.rewind import RewindService
from reference_impl.store import Transaction
from reference_impl.store.rows import ChainLink, LineageRow, SessionRow
from reference_impl.store.store import IntegrityError


@dataclass(frozen=True)
class ForkOutcome:
    status: int
    body: dict[str, Any]
    replayed: bool


@dataclass(frozen=True)
class Cutoff:
    """Where a fork cuts: the physical position of the last inherited turn and record."""

    session_id: str | None
    turn_index: int
    record_index: int
    inherited_turn_count: int
    segments: str | None = None  # the cutoff session's effective segments (segments.py)


class ForkService(ChapterService):
    chapter = "fork"
    capabilities = ("fork", "idempotency")

    def fork(
        self, principal: str, source_id: str, body: dict[str, Any], idempotency_key: str | None
    ) -> ForkOutcome:
        """Create the child, its lineage and its idempotency record in one transaction.

        A concurrent request that commits first makes our insert fail on a unique constraint;
        the fork is then evaluated again and replays or conflicts, as a retry would.
        """
        fingerprint = fingerprint_of(source_id, body)
        attempts = 3
        for attempt in range(attempts):
            try:
                with self.store.write() as tx:
                    return self._fork_in(tx, principal, source_id, body, idempotency_key, fingerprint)
            except IntegrityError:
                if attempt == attempts - 1:
                    raise
        raise AssertionError("unreachable")

    def _fork_in(
        self,
        tx: Transaction,
        principal: str,
        source_id: str,
        body: dict[str, Any],
        key: str | None,
        fingerprint: str,
    ) -> ForkOutcome:
        now = utcnow()
        if key is not None:
            stored = tx.idempotency(principal, key)
            if stored is not None and stored.expires_at > timestamp(now):
                if stored.fingerprint != fingerprint:
                    raise IdempotencyKeyReused("this Idempotency-Key was used with a different request")
                return ForkOutcome(stored.response_status, json.loads(stored.response_body), True)
            if stored is not None:
                tx.delete_idempotency(principal, key)

        chain = self.access.source_chain(tx, principal, source_id)
        source = chain[-1].session
        cut = body["cut"]
        target_id = body.get("target_session_id")
        if target_id is not None:
            replay = self._existing_target(tx, principal, chain, target_id, cut)
            if replay is not None:
                return replay

        depth = source.depth + 1
        if depth > self.limits.max_lineage_depth:
            raise DepthExceeded(
                f"the child would have depth {depth}; max_lineage_depth is {self.limits.max_lineage_depth}"
            )
        cutoff = self._resolve_cut(tx, chain, cut)
        header = body.get("header", {})
        child_id = target_id or new_key(principal)
        created_at = timestamp(now)
        session_row: dict[str, Any] = {
            "session_id": child_id,
            "owner": principal,
            "name": header["name"] if "name" in header else source.name,
            "description": header["description"] if "description" in header else source.description,
            "created_at": created_at,
            "depth": depth,
            "turn_count": 0,
            "record_count": 0,
            "running_turn_id": None,
        }
        root_id = source.lineage.root_session_id if source.lineage else source.session_id
        lineage_row = {
            "session_id": child_id,
            "parent_session_id": source.session_id,
            "root_session_id": root_id,
            "depth": depth,
            "inherited_turn_count": cutoff.inherited_turn_count,
            "cut_mode": cut["mode"],
            "cut_turn_id": cut.get("turn_id"),
            "cutoff_session_id": cutoff.session_id,
            "cutoff_turn_index": cutoff.turn_index,
            "cutoff_record_index": cutoff.record_index,
            "created_at": created_at,
        }
        if cutoff.segments is not None:  # only a reverted cutoff session stores its segments
            lineage_row["cutoff_segments"] = cutoff.segments
        if not tx.claim_child_slot(source.session_id):  # deleted since we read it
            if source.owner == principal:
                raise SessionDeleted(f"session {source.session_id} is deleted")
            raise self.access.not_found(source.session_id)
        tx.insert_session(session_row)
        tx.insert_lineage(lineage_row)
        RewindService.store_for_fork(tx, child_id, body.get("rewind"))  # REWIND-CREATE-001, same transaction
        child = SessionRow(lineage=LineageRow(**lineage_row), **session_row)
        result = views.fork_result(child)
        if key is not None:
            expires = now + timedelta(seconds=self.limits.idempotency_key_lifetime_seconds)
            tx.insert_idempotency(
                {
                    "principal": principal,
                    "idempotency_key": key,
                    "fingerprint": fingerprint,
                    "child_session_id": child_id,
                    "response_status": 201,
                    "response_body": json.dumps(result),
                    "expires_at": timestamp(expires),
                }
            )
        return ForkOutcome(201, result, False)

    def _existing_target(
        self,
        tx: Transaction,
        principal: str,
        chain: Sequence[ChainLink],
        target_id: str,
        cut: dict[str, Any],
    ) -> ForkOutcome | None:
        """None when the target id is free; a replay when it names this very fork."""
        existing = tx.session(target_id)
        if existing is None:
            return None
        lineage = existing.lineage
        same_fork = (
            lineage is not None
            and self.access.can_read(principal, existing)
            and lineage.parent_session_id == chain[-1].session.session_id
            and lineage.cut_mode == cut["mode"]
            and lineage.cut_turn_id == cut.get("turn_id")
        )
        if not same_fork:
            raise TargetConflict(f"target session {target_id} already exists with a different lineage")
        return ForkOutcome(201, views.fork_result(existing), True)

    def _resolve_cut(self, tx: Transaction, chain: Sequence[ChainLink], cut: dict[str, Any]) -> Cutoff:
        source = chain[-1]
        mode = cut["mode"]
        if mode == "latest":
            last = tx.last_finished_turn(source.session.session_id, segments.turn_ranges(source.segments))
            if last is None:
                return cutoff_at(chain, source, -1, -1)
            assert last.end_record_index is not None
            return cutoff_at(chain, source, last.turn_index, last.end_record_index - 1)

        turn = tx.turn(cut["turn_id"])
        link = next(
            (item for item in chain if turn is not None and item.session.session_id == turn.session_id),
            None,
        )
        if (
            turn is None
            or link is None
            or (link.turn_bound is not None and turn.turn_index > link.turn_bound)
            or not segments.holds_turn(link.segments, turn.turn_index)
        ):
            raise UnknownTurn(f"turn {cut['turn_id']} is not in the source's effective transcript")
        if mode == "through":
            if turn.status == "running" or turn.end_record_index is None:
                raise TurnIncomplete(f"turn {turn.turn_id} is still running")
            return cutoff_at(chain, link, turn.turn_index, turn.end_record_index - 1)
        return cutoff_at(chain, link, turn.turn_index - 1, turn.first_record_index - 1)


def cutoff_at(chain: Sequence[ChainLink], link: ChainLink, turn_index: int, record_index: int) -> Cutoff:
    """The cutoff in `link`'s session, with the effective turns inherited through it."""
    inherited = sum(
        segments.turns_through(upper.segments, upper.turn_bound)
        for upper in chain
        if upper.hops > link.hops and upper.turn_bound is not None and upper.turn_bound >= 0
    )
    own = segments.turns_through(link.segments, turn_index) if turn_index >= 0 else 0
    return Cutoff(link.session.session_id, turn_index, record_index, inherited + own, link.segments)


def fingerprint_of(source_id: str, body: dict[str, Any]) -> str:
    """What makes two fork requests identical: the source and the body, canonically encoded."""
    canonical = json.dumps({"source": source_id, "body": body}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()
