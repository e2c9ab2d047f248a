"""The approaches peers use, written plainly on the reference schema so costs compare directly.

- `CopyOnForkPeer`: a fork copies every inherited turn and record into the child.
- `PerAncestorReader`: a transcript read walks parents one query at a time, then reads each
  ancestor's records in its own query (the N+1 pattern).
- `OffsetPager`: transcript pages by LIMIT/OFFSET over the same effective transcript.
- `HistoryScanFinder`: finds a fork point by walking the history back from the newest turn, one
  step per query, as a state-history iterator does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from reference_impl.errors import NotFound, UnknownTurn
from reference_impl.services.common import new_id
from reference_impl.store import Store
from sqlalchemy import text

_SESSION = text(
    "SELECT s.session_id, s.owner, s.name, s.description, l.parent_session_id, "
    "l.cutoff_session_id, l.cutoff_record_index "
    "FROM sessions s LEFT JOIN session_lineage l ON l.session_id = s.session_id "
    "WHERE s.session_id = :session_id"
)

_NO_BOUND = 2**62
# Records hold their session's integer key (`sid`), not its id: each read names the id it asked for.
# Ids the reference derived from the session's token are not stored (reference_impl/store/ids.py).
_TOKEN = "(SELECT token FROM sessions WHERE session_id = :{param})"
_RECORD_COLUMNS = (
    "COALESCE(record_id, " + _TOKEN + " || 'r' || CAST(record_index AS VARCHAR(20))) AS record_id, "
    "CAST(:{param} AS VARCHAR(256)) AS session_id, record_index, turn_id, turn_index, record_type, content"
)
_SID = "(SELECT sid FROM sessions WHERE session_id = :{param})"
_TURN_ID = "COALESCE(turn_id, " + _TOKEN + " || 't' || CAST(turn_index AS VARCHAR(20)))"



_COPY_TURNS = text(
    """
INSERT INTO turns (turn_id, sid, turn_index, role, status, first_record_index,
                   end_record_index, created_at, finished_at)
SELECT CAST(:child AS VARCHAR) || ':' || turn_index, (SELECT sid FROM sessions WHERE session_id = :child), turn_index,
       role, status, first_record_index, end_record_index, created_at, finished_at
FROM turns WHERE sid = (SELECT sid FROM sessions WHERE session_id = :source) AND turn_index <= :last_turn
"""
)

_COPY_RECORDS = text(
    """
INSERT INTO records (record_id, sid, record_index, turn_id, turn_index, record_type,
                     content, created_at)
SELECT CAST(:child AS VARCHAR) || ':' || record_index, (SELECT sid FROM sessions WHERE session_id = :child), record_index,
       CAST(:child AS VARCHAR) || ':' || turn_index, turn_index, record_type, content, created_at
FROM records WHERE sid = (SELECT sid FROM sessions WHERE session_id = :source) AND record_index <= :last_record
"""
)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class PeerRecord:
    """A record as the peers return it: enough to compare with the reference transcript."""

    record_id: str
    session_id: str
    record_index: int
    content: str


def _record(row: Any) -> PeerRecord:
    return PeerRecord(row.record_id, row.session_id, row.record_index, _canonical(row.content))


def _canonical(content: str) -> str:
    return json.dumps(json.loads(content), separators=(",", ":"))


class CopyOnForkPeer:
    """Fork by copying: the child is a plain session holding its own copy of the prefix.

    Copies get new record and turn ids (ids are primary keys), which is one of the ways copying
    breaks references into the history; the statements are as few as copying allows (INSERT ...
    SELECT), so what grows with the source is rows written and time, not round trips.
    """

    def __init__(self, store: Store) -> None:
        self.store = store

    def fork(self, principal: str, source_id: str, cut: dict[str, Any]) -> str:
        """Create the child and copy the inherited turns and records in one transaction."""
        child_id = new_id()
        with self.store.write() as tx:
            conn = tx.conn
            source = conn.execute(_SESSION, {"session_id": source_id}).first()
            if source is None or source.owner != principal:
                raise NotFound(f"session {source_id!r} not found")
            last_turn, last_record = self._cutoff(conn, source_id, cut)
            tx.insert_session(  # the same one statement as the reference's (its integer key included)
                {
                    "session_id": child_id,
                    "owner": principal,
                    "name": source.name,
                    "description": source.description,
                    "created_at": _now(),
                    "depth": 0,
                    "turn_count": last_turn + 1,
                    "record_count": last_record + 1,
                    "running_turn_id": None,
                }
            )
            copy = {"child": child_id, "source": source_id}
            conn.execute(_COPY_TURNS, {**copy, "last_turn": last_turn})
            conn.execute(_COPY_RECORDS, {**copy, "last_record": last_record})
        return child_id

    @staticmethod
    def _cutoff(conn: Any, source_id: str, cut: dict[str, Any]) -> tuple[int, int]:
        """(last turn index, last record index) to copy, for `latest` or `through` a turn id."""
        if cut["mode"] == "latest":
            row = conn.execute(
                text(
                    f"SELECT turn_index, end_record_index FROM turns WHERE sid = {_SID.format(param='source')} "
                    "AND status != 'running' ORDER BY turn_index DESC LIMIT 1"
                ),
                {"source": source_id},
            ).first()
            return (-1, -1) if row is None else (row.turn_index, row.end_record_index - 1)
        row = conn.execute(
            text(
                "SELECT turn_index, end_record_index FROM turns "
                f"WHERE {_TURN_ID.format(param='source')} = :turn_id AND sid = {_SID.format(param='source')}"
            ),
            {"turn_id": cut["turn_id"], "source": source_id},
        ).first()
        if row is None or row.end_record_index is None:
            raise UnknownTurn(f"turn {cut['turn_id']!r} is not a completed turn of the source")
        return row.turn_index, row.end_record_index - 1


class PerAncestorReader:
    """The effective transcript read one ancestor at a time: 2 statements per chain session."""

    def __init__(self, store: Store, max_depth: int) -> None:
        self.store = store
        self.max_depth = max_depth

    def read(self, principal: str, session_id: str) -> list[PeerRecord]:
        """Every record of the effective transcript, root first; same bounds as the reference."""
        with self.store.read() as tx:
            segments = self._segments(tx.conn, principal, session_id)
            records: list[PeerRecord] = []
            for segment_id, upto in segments:
                rows = tx.conn.execute(
                    text(
                        f"SELECT {_RECORD_COLUMNS.format(param='session_id')} FROM records "
                        f"WHERE sid = {_SID.format(param='session_id')} "
                        "AND record_index <= :upto ORDER BY record_index"
                    ),
                    {"session_id": segment_id, "upto": _NO_BOUND if upto is None else upto},
                )
                records.extend(_record(row) for row in rows)
        return records

    def _segments(self, conn: Any, principal: str, session_id: str) -> list[tuple[str, int | None]]:
        """Walk up one parent per query, carrying the cutoff the way the reference's CTE does."""
        row = self._visible(conn, principal, session_id)
        segments: list[tuple[str, int | None]] = [(session_id, None)]
        pending = (row.cutoff_session_id, row.cutoff_record_index)
        parent = row.parent_session_id
        while parent is not None and len(segments) <= self.max_depth:
            row = self._visible(conn, principal, parent)
            if pending[0] == parent:
                segments.append((parent, pending[1]))
                pending = (row.cutoff_session_id, row.cutoff_record_index)
            parent = row.parent_session_id
        segments.reverse()
        return segments

    @staticmethod
    def _visible(conn: Any, principal: str, session_id: str) -> Any:
        row = conn.execute(_SESSION, {"session_id": session_id}).first()
        if row is None or row.owner != principal:
            raise NotFound(f"session {session_id!r} not found")
        return row


class OffsetPager:
    """Transcript pages by LIMIT/OFFSET: the chain in one query, the page in a second one.

    Same two round trips as the reference; the difference is that the database must produce and
    skip every record before the page.
    """

    def __init__(self, store: Store, max_depth: int) -> None:
        self.store = store
        self.max_depth = max_depth

    def page(self, principal: str, session_id: str, offset: int, limit: int) -> list[PeerRecord]:
        """Records [offset, offset + limit) of the effective transcript."""
        with self.store.read() as tx:
            chain = tx.chain(session_id, max_hops=self.max_depth)
            if not chain or any(link.session.owner != principal for link in chain):
                raise NotFound(f"session {session_id!r} not found")
            parts = []
            params: dict[str, Any] = {"limit": limit, "offset": offset}
            for ordinal, link in enumerate(chain):
                if link.record_bound == -1:
                    continue
                params[f"s{ordinal}"] = link.session.session_id
                bound = ""
                if link.record_bound is not None:
                    params[f"u{ordinal}"] = link.record_bound
                    bound = f" AND record_index <= :u{ordinal}"
                parts.append(
                    f"SELECT {_RECORD_COLUMNS.format(param=f's{ordinal}')}, {ordinal} AS segment_ordinal FROM records "
                    f"WHERE sid = {_SID.format(param=f's{ordinal}')}{bound}"
                )
            sql = (
                f"SELECT * FROM ({' UNION ALL '.join(parts)}) AS effective "
                "ORDER BY segment_ordinal, record_index LIMIT :limit OFFSET :offset"
            )
            return [_record(row) for row in tx.conn.execute(text(sql), params)]


class HistoryScanFinder:
    """Find a turn by walking the history back from the newest turn, one query per step."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def find(self, session_id: str, turn_id: str) -> tuple[int, int]:
        """(turn index, steps walked) of `turn_id` in the session's history."""
        step = text(
            f"SELECT {_TURN_ID.format(param='session_id')} AS turn_id, turn_index FROM turns "
            f"WHERE sid = {_SID.format(param='session_id')} "
            "AND turn_index < :before ORDER BY turn_index DESC LIMIT 1"
        )
        before = _NO_BOUND
        steps = 0
        with self.store.read() as tx:
            while True:
                row = tx.conn.execute(step, {"session_id": session_id, "before": before}).first()
                steps += 1
                if row is None:
                    raise UnknownTurn(f"turn {turn_id!r} is not in session {session_id!r}")
                if row.turn_id == turn_id:
                    return int(row.turn_index), steps
                before = row.turn_index
