"""The domain rules: sessions, turns, fork and cut resolution, transcripts, authorization.

No SQL here: every statement is a method of `store.Transaction`, and every transaction boundary
is chosen by this module.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from reference_impl import cursors, views
from reference_impl.errors import (
    DepthExceeded,
    IdempotencyKeyReused,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    RecordsUnavailable,
    StorageUnavailable,
    SessionExists,
    TargetConflict,
    TurnExists,
    TurnIncomplete,
    TurnInProgress,
    TurnNotRunning,
    UnknownTurn,
    WriterConflict,
)
from reference_impl.settings import Limits
from reference_impl.store import Store, Transaction
from reference_impl.store.rows import ChainLink, LeaseRow, LineageRow, Segment, SessionRow, TurnRow
from reference_impl.store.store import IntegrityError, StorageError

SPEC_CAPABILITIES = ("fork", "effective-transcript", "lineage", "idempotency", "writer-lease")


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def timestamp(moment: datetime) -> str:
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


def new_id() -> str:
    return str(uuid.uuid4())


@dataclass(frozen=True)
class Page:
    session_id: str
    records: list[dict[str, Any]]
    has_more: bool
    next_cursor: str | None

    def as_json(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "records": self.records,
            "has_more": self.has_more,
            "next_cursor": self.next_cursor,
        }


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


class LineageService:
    """Applies the spec's rules on top of a store."""

    def __init__(self, store: Store, limits: Limits, query_count_diagnostics: bool = True) -> None:
        self.store = store
        self.limits = limits
        self.query_count_diagnostics = query_count_diagnostics

    # ---------------------------------------------------------------- capabilities
    def capabilities(self, spec_version: str) -> dict[str, Any]:
        names = list(SPEC_CAPABILITIES)
        diagnostics: dict[str, Any] = {"query_count": self.query_count_diagnostics}
        if self.query_count_diagnostics:
            names.append("diagnostics.query-count")
            diagnostics["query_count_header"] = "Storage-Round-Trips"
        limits = self.limits
        return {
            "spec_version": spec_version,
            "capabilities": names,
            "limits": {
                "max_lineage_depth": limits.max_lineage_depth,
                "max_page_size": limits.max_page_size,
                "default_page_size": limits.default_page_size,
                "max_record_bytes": limits.max_record_bytes,
                "max_records_per_append": limits.max_records_per_append,
                "max_request_bytes": limits.max_request_bytes,
                "idempotency_key_lifetime_seconds": limits.idempotency_key_lifetime_seconds,
                "max_lease_seconds": limits.max_lease_seconds,
            },
            "diagnostics": diagnostics,
        }

    # ---------------------------------------------------------------- authorization
    @staticmethod
    def can_read(principal: str, session: SessionRow) -> bool:
        return session.owner == principal

    def _writable_session(
        self, tx: Transaction, principal: str, session_id: str, lease_id: str | None
    ) -> SessionRow:
        """The session a write goes to, after visibility and writer-lease checks (one statement)."""
        found = tx.session_for_write(session_id)
        if found is None or not self.can_read(principal, found[0]):
            raise NotFound(f"session {session_id!r} not found")
        self._check_writer(found[1], session_id, lease_id)
        return found[0]

    def _visible_session(self, tx: Transaction, principal: str, session_id: str) -> SessionRow:
        session = tx.session(session_id)
        if session is None or not self.can_read(principal, session):
            raise NotFound(f"session {session_id!r} not found")
        return session

    def _visible_chain(self, tx: Transaction, principal: str, session_id: str) -> list[ChainLink]:
        """The chain root first; 404 unless the caller may read every session in it."""
        chain = tx.chain(session_id, max_hops=self.limits.max_lineage_depth)
        if not chain or not all(self.can_read(principal, link.session) for link in chain):
            raise NotFound(f"session {session_id!r} not found")
        return chain

    # ---------------------------------------------------------------- sessions
    def create_session(self, principal: str, body: dict[str, Any]) -> dict[str, Any]:
        row: dict[str, Any] = {
            "session_id": body.get("session_id") or new_id(),
            "owner": principal,
            "name": body.get("name"),
            "description": body.get("description"),
            "created_at": timestamp(utcnow()),
            "depth": 0,
            "turn_count": 0,
            "record_count": 0,
            "running_turn_id": None,
        }
        try:
            with self.store.write() as tx:
                tx.insert_session(row)
        except IntegrityError as exc:
            raise SessionExists(f"session {row['session_id']!r} already exists") from exc
        return views.session(SessionRow(lineage=None, **row))

    def get_session(self, principal: str, session_id: str) -> dict[str, Any]:
        with self.store.read() as tx:
            return views.session(self._visible_session(tx, principal, session_id))

    # ---------------------------------------------------------------- turns and records
    def start_turn(
        self, principal: str, session_id: str, body: dict[str, Any], lease_id: str | None = None
    ) -> dict[str, Any]:
        turn_id = body.get("turn_id") or new_id()
        try:
            with self.store.write() as tx:
                self._writable_session(tx, principal, session_id, lease_id)
                slot = tx.claim_turn_slot(session_id, turn_id)
                if slot is None:
                    raise TurnInProgress(f"session {session_id!r} already has a running turn")
                turn_index, first_record_index = slot
                row = {
                    "turn_id": turn_id,
                    "session_id": session_id,
                    "turn_index": turn_index,
                    "role": body["role"],
                    "status": "running",
                    "first_record_index": first_record_index,
                    "end_record_index": None,
                    "created_at": timestamp(utcnow()),
                    "finished_at": None,
                }
                tx.insert_turn(row)
        except IntegrityError as exc:
            raise TurnExists(f"turn {turn_id!r} already exists") from exc
        return views.turn(TurnRow(**row))

    def _own_turn(self, tx: Transaction, session_id: str, turn_id: str) -> TurnRow:
        turn = tx.turn(turn_id)
        if turn is None or turn.session_id != session_id:
            raise NotFound(f"turn {turn_id!r} not found in session {session_id!r}")
        return turn

    def append_records(
        self,
        principal: str,
        session_id: str,
        turn_id: str,
        body: dict[str, Any],
        lease_id: str | None = None,
    ) -> dict[str, Any]:
        inputs = body["records"]
        if len(inputs) > self.limits.max_records_per_append:
            raise PayloadTooLarge(
                f"{len(inputs)} records exceed max_records_per_append "
                f"({self.limits.max_records_per_append})"
            )
        encoded = [json.dumps(item["content"], separators=(",", ":")) for item in inputs]
        for position, content in enumerate(encoded):
            if len(content.encode()) > self.limits.max_record_bytes:
                raise PayloadTooLarge(
                    f"record {position} exceeds max_record_bytes ({self.limits.max_record_bytes})"
                )
        created_at = timestamp(utcnow())
        with self.store.write() as tx:
            self._writable_session(tx, principal, session_id, lease_id)
            turn = self._own_turn(tx, session_id, turn_id)
            if turn.status != "running":
                raise TurnNotRunning(f"turn {turn_id!r} is {turn.status}")
            first = tx.reserve_record_indexes(session_id, turn_id, len(inputs))
            if first is None:
                raise TurnNotRunning(f"turn {turn_id!r} is not running")
            rows = [
                {
                    "record_id": new_id(),
                    "session_id": session_id,
                    "record_index": first + offset,
                    "turn_id": turn_id,
                    "turn_index": turn.turn_index,
                    "record_type": item["type"],
                    "content": encoded[offset],
                    "created_at": created_at,
                }
                for offset, item in enumerate(inputs)
            ]
            if not self.store.split:
                tx.insert_records(rows)  # one store: reservation and records commit together
        if self.store.split:
            self._write_reserved_records(session_id, turn_id, first, rows)
        return {
            "records": [
                {
                    "record_id": row["record_id"],
                    "session_id": session_id,
                    "turn_id": turn_id,
                    "index": row["record_index"],
                    "type": row["record_type"],
                    "content": item["content"],
                    "created_at": created_at,
                }
                for row, item in zip(rows, inputs)
            ]
        }

    def _write_reserved_records(
        self, session_id: str, turn_id: str, first: int, rows: list[dict[str, Any]]
    ) -> None:
        """Two stores: the core has reserved the indexes; now the records store takes the rows.

        If that write fails, the reservation is given back when no later append followed it, so
        no gap is left; otherwise reads over the gap answer 503 `records-unavailable`.
        """
        try:
            with self.store.write_records() as records_tx:
                records_tx.insert_records(rows)
        except StorageError as exc:
            with self.store.write() as tx:
                released = tx.release_record_indexes(session_id, turn_id, first, len(rows))
            raise StorageUnavailable(
                "the records store did not take the records; nothing was appended"
                + ("" if released else " and a later append holds the indexes after them")
            ) from exc

    def finish_turn(
        self,
        principal: str,
        session_id: str,
        turn_id: str,
        body: dict[str, Any],
        lease_id: str | None = None,
    ) -> dict[str, Any]:
        finished_at = timestamp(utcnow())
        with self.store.write() as tx:
            self._writable_session(tx, principal, session_id, lease_id)
            turn = self._own_turn(tx, session_id, turn_id)
            if turn.status != "running":
                raise TurnNotRunning(f"turn {turn_id!r} is {turn.status}")
            end = tx.finish_turn(turn_id, body["status"], finished_at)
            if end is None:
                raise TurnNotRunning(f"turn {turn_id!r} is not running")
        return views.turn(
            TurnRow(
                turn_id=turn.turn_id,
                session_id=turn.session_id,
                turn_index=turn.turn_index,
                role=turn.role,
                status=body["status"],
                first_record_index=turn.first_record_index,
                end_record_index=end,
                created_at=turn.created_at,
                finished_at=finished_at,
            )
        )

    # ---------------------------------------------------------------- writer leases
    def _check_writer(self, lease: LeaseRow | None, session_id: str, lease_id: str | None) -> None:
        """While a lease is held only its holder writes; a named lease must still be held."""
        active = lease is not None and lease.expires_at > timestamp(utcnow())
        if lease_id is None:
            if active:
                raise WriterConflict(f"another writer holds the lease of session {session_id!r}")
        elif not active or lease is None or lease.lease_id != lease_id:
            raise WriterConflict(f"lease {lease_id!r} does not hold session {session_id!r}")

    def acquire_lease(
        self, principal: str, session_id: str, body: dict[str, Any]
    ) -> tuple[int, dict[str, Any]]:
        """Take the session's writer lease (201) or renew the caller's own (200)."""
        ttl = body["ttl_seconds"]
        if ttl > self.limits.max_lease_seconds:
            raise InvalidRequest(f"ttl_seconds must not exceed {self.limits.max_lease_seconds}")
        now = utcnow()
        expires_at = timestamp(now + timedelta(seconds=ttl))
        try:
            with self.store.write() as tx:
                self._visible_session(tx, principal, session_id)
                renewing = body.get("lease_id")
                if renewing is not None:
                    if not tx.renew_lease(session_id, renewing, expires_at, timestamp(now)):
                        raise WriterConflict(f"lease {renewing!r} does not hold session {session_id!r}")
                    return 200, {"session_id": session_id, "lease_id": renewing, "expires_at": expires_at}
                lease = {"lease_id": new_id(), "principal": principal, "expires_at": expires_at}
                if not tx.take_expired_lease(session_id, lease, timestamp(now)):
                    tx.insert_lease({"session_id": session_id, **lease})
        except IntegrityError as exc:
            raise WriterConflict(f"another writer holds the lease of session {session_id!r}") from exc
        return 201, {"session_id": session_id, "lease_id": lease["lease_id"], "expires_at": expires_at}

    def release_lease(self, principal: str, session_id: str, lease_id: str | None) -> None:
        with self.store.write() as tx:
            self._visible_session(tx, principal, session_id)
            if lease_id is None or not tx.delete_lease(session_id, lease_id, timestamp(utcnow())):
                raise WriterConflict(f"lease {lease_id!r} does not hold session {session_id!r}")

    # ---------------------------------------------------------------- fork
    def fork(
        self, principal: str, source_id: str, body: dict[str, Any], idempotency_key: str | None
    ) -> ForkOutcome:
        """Create the child, its lineage and its idempotency record in one transaction.

        A concurrent request that commits first makes our insert fail on a unique constraint;
        the fork is then evaluated again and replays or conflicts, as a retry would.
        """
        fingerprint = _fingerprint(source_id, body)
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
                    raise IdempotencyKeyReused(
                        "this Idempotency-Key was used with a different request"
                    )
                return ForkOutcome(stored.response_status, json.loads(stored.response_body), True)
            if stored is not None:
                tx.delete_idempotency(principal, key)

        chain = self._visible_chain(tx, principal, source_id)
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
                f"the child would have depth {depth}; max_lineage_depth is "
                f"{self.limits.max_lineage_depth}"
            )
        cutoff = self._resolve_cut(tx, chain, cut)
        header = body.get("header", {})
        child_id = target_id or new_id()
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
        tx.insert_session(session_row)
        tx.insert_lineage(lineage_row)
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
            and self.can_read(principal, existing)
            and lineage.parent_session_id == chain[-1].session.session_id
            and lineage.cut_mode == cut["mode"]
            and lineage.cut_turn_id == cut.get("turn_id")
        )
        if not same_fork:
            raise TargetConflict(
                f"target session {target_id!r} already exists with a different lineage"
            )
        return ForkOutcome(201, views.fork_result(existing), True)

    def _resolve_cut(
        self, tx: Transaction, chain: Sequence[ChainLink], cut: dict[str, Any]
    ) -> Cutoff:
        source = chain[-1]
        mode = cut["mode"]
        if mode == "latest":
            last = tx.last_finished_turn(source.session.session_id)
            if last is None:
                return _cutoff_at(chain, source, -1, -1)
            assert last.end_record_index is not None
            return _cutoff_at(chain, source, last.turn_index, last.end_record_index - 1)

        turn = tx.turn(cut["turn_id"])
        link = next(
            (item for item in chain if turn is not None and item.session.session_id == turn.session_id),
            None,
        )
        if turn is None or link is None or (
            link.turn_bound is not None and turn.turn_index > link.turn_bound
        ):
            raise UnknownTurn(f"turn {cut['turn_id']!r} is not in the source's effective transcript")
        if mode == "through":
            if turn.status == "running" or turn.end_record_index is None:
                raise TurnIncomplete(f"turn {turn.turn_id!r} is still running")
            return _cutoff_at(chain, link, turn.turn_index, turn.end_record_index - 1)
        return _cutoff_at(chain, link, turn.turn_index - 1, turn.first_record_index - 1)

    # ---------------------------------------------------------------- reads
    def transcript(
        self, principal: str, session_id: str, cursor: str | None, limit: int | None
    ) -> Page:
        size = self._page_size(limit)
        with self.store.read() as tx:
            chain = self._visible_chain(tx, principal, session_id)
            segments = [
                Segment(link.session.session_id, -1, link.record_bound)
                for link in chain
                if link.record_bound != -1
            ]
            if cursor is not None:
                position = cursors.decode(cursor, "transcript", session_id)
                order = [link.session.session_id for link in chain]
                if position.session_id not in order:
                    raise cursors.InvalidCursor("the cursor does not point into this transcript")
                rank = order.index(position.session_id)
                segments = [
                    Segment(s.session_id, position.index, s.upto)
                    if s.session_id == position.session_id
                    else s
                    for s in segments
                    if order.index(s.session_id) >= rank
                ]
            rows = tx.records(segments, size + 1)
            own_count = chain[-1].session.record_count
        self._require_complete(rows, segments, own_count, size + 1)
        return self._page("transcript", session_id, rows, size, cursor)

    def own_records(
        self, principal: str, session_id: str, cursor: str | None, limit: int | None
    ) -> Page:
        size = self._page_size(limit)
        with self.store.read() as tx:
            session = self._visible_session(tx, principal, session_id)
            after = -1
            if cursor is not None:
                position = cursors.decode(cursor, "records", session_id)
                if position.session_id != session_id:
                    raise cursors.InvalidCursor("the cursor does not point into this session")
                after = position.index
            segments = [Segment(session_id, after, None)]
            rows = tx.records(segments, size + 1)
        self._require_complete(rows, segments, session.record_count, size + 1)
        return self._page("records", session_id, rows, size, cursor)

    def _page_size(self, limit: int | None) -> int:
        if limit is None:
            return self.limits.default_page_size
        if limit < 1 or limit > self.limits.max_page_size:
            raise InvalidRequest(f"limit must be between 1 and {self.limits.max_page_size}")
        return limit

    @staticmethod
    def _page(kind: str, session_id: str, rows: list[Any], size: int, cursor: str | None) -> Page:
        has_more = len(rows) > size
        rows = rows[:size]
        next_cursor = cursor
        if rows:
            last = rows[-1]
            next_cursor = cursors.encode(
                cursors.Position(kind, session_id, last.session_id, last.record_index)
            )
        return Page(session_id, [views.record(row) for row in rows], has_more, next_cursor)

    @staticmethod
    def _require_complete(rows: Sequence[Any], segments: Sequence[Segment], own_count: int, wanted: int) -> None:
        """A page holds every record the core store says lies within its bounds, or it is refused.

        With records in a second store, lineage and counts can be visible before the records are
        (replication lag, a write in flight); the answer is then 503, never a short transcript.
        """
        expected: list[tuple[str, int]] = []
        for segment in segments:
            upper = segment.upto if segment.upto is not None else own_count - 1
            for index in range(segment.after + 1, upper + 1):
                if len(expected) == wanted:
                    break
                expected.append((segment.session_id, index))
        got = [(row.session_id, row.record_index) for row in rows]
        if got != expected:
            present = set(got)
            missing = next((key for key in expected if key not in present), None)
            where = f"first missing: {missing[0]} #{missing[1]}" if missing else "the records store disagrees"
            raise RecordsUnavailable(f"records within the transcript's bounds are not readable yet ({where})")

    def lineage(self, principal: str, session_id: str) -> dict[str, Any]:
        with self.store.read() as tx:
            chain = self._visible_chain(tx, principal, session_id)
        ancestors = []
        for upper, lower in zip(chain, chain[1:]):
            assert lower.session.lineage is not None
            ancestors.append(
                {
                    "session_id": upper.session.session_id,
                    "depth": upper.session.depth,
                    "inherited_turn_count": lower.session.lineage.inherited_turn_count,
                }
            )
        return {
            "session_id": session_id,
            "root_session_id": chain[0].session.session_id,
            "depth": chain[-1].session.depth,
            "ancestors": ancestors,
        }


def _cutoff_at(
    chain: Sequence[ChainLink], link: ChainLink, turn_index: int, record_index: int
) -> Cutoff:
    """The cutoff in `link`'s session, with the effective turns inherited through it."""
    inherited = sum(
        max(upper.turn_bound + 1, 0)
        for upper in chain
        if upper.hops > link.hops and upper.turn_bound is not None
    )
    return Cutoff(link.session.session_id, turn_index, record_index, inherited + turn_index + 1)


def _fingerprint(source_id: str, body: dict[str, Any]) -> str:
    canonical = json.dumps({"source": source_id, "body": body}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()
