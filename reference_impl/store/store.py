"""All SQL of the reference implementation, including the recursive lineage-chain query."""

from __future__ import annotations

import json
from functools import lru_cache
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any

from sqlalchemy import delete, insert, select, text, update
from sqlalchemy.sql.elements import TextClause
from sqlalchemy.engine import Connection, Engine, RowMapping
from sqlalchemy.exc import DBAPIError as StorageError
from sqlalchemy.exc import IntegrityError

from reference_impl.store import tables as t
from reference_impl.store.rows import (
    ChainLink,
    IdempotencyRow,
    LeaseRow,
    LineageRow,
    RecordRow,
    Segment,
    SessionRow,
    TurnRow,
)

__all__ = ["Store", "Transaction", "IntegrityError", "StorageError"]

# One statement reads the whole chain, whatever its depth. Walking up from the session, each
# lineage edge carries a pending cutoff (session, turn index, record index): ancestors below the
# cutoff session inherit nothing (-1), the cutoff session is bounded by it, and from there on the
# cutoff session's own edge applies.
CHAIN_SQL = text(
    """
WITH RECURSIVE chain(session_id, hops, turn_bound, record_bound,
                     pend_session, pend_turn, pend_record, parent_id) AS (
    SELECT s.session_id, 0, CAST(NULL AS INTEGER), CAST(NULL AS INTEGER),
           l.cutoff_session_id, l.cutoff_turn_index, l.cutoff_record_index, l.parent_session_id
    FROM sessions s LEFT JOIN session_lineage l ON l.session_id = s.session_id
    WHERE s.session_id = :session_id
  UNION ALL
    SELECT c.parent_id, c.hops + 1,
           CASE WHEN c.pend_session = c.parent_id THEN c.pend_turn ELSE -1 END,
           CASE WHEN c.pend_session = c.parent_id THEN c.pend_record ELSE -1 END,
           CASE WHEN c.pend_session = c.parent_id THEN l.cutoff_session_id ELSE c.pend_session END,
           CASE WHEN c.pend_session = c.parent_id THEN l.cutoff_turn_index ELSE c.pend_turn END,
           CASE WHEN c.pend_session = c.parent_id THEN l.cutoff_record_index ELSE c.pend_record END,
           l.parent_session_id
    FROM chain c LEFT JOIN session_lineage l ON l.session_id = c.parent_id
    WHERE c.parent_id IS NOT NULL AND c.hops < :max_hops
)
SELECT c.hops, c.turn_bound, c.record_bound,
       s.session_id, s.owner, s.name, s.description, s.created_at, s.depth,
       s.turn_count, s.record_count, s.running_turn_id,
       l.parent_session_id AS l_parent_session_id, l.root_session_id AS l_root_session_id,
       l.depth AS l_depth, l.inherited_turn_count AS l_inherited_turn_count,
       l.cut_mode AS l_cut_mode, l.cut_turn_id AS l_cut_turn_id,
       l.cutoff_session_id AS l_cutoff_session_id, l.cutoff_turn_index AS l_cutoff_turn_index,
       l.cutoff_record_index AS l_cutoff_record_index, l.created_at AS l_created_at
FROM chain c
JOIN sessions s ON s.session_id = c.session_id
LEFT JOIN session_lineage l ON l.session_id = c.session_id
ORDER BY c.hops DESC
"""
)

RECORD_COLUMNS = "record_id, session_id, record_index, turn_id, turn_index, record_type, content, created_at"


@lru_cache(maxsize=256)
def _records_sql(bounded: tuple[bool, ...]) -> TextClause:
    """One statement for a page over segments; `bounded[n]` says whether segment n has an upper bound."""
    parts = []
    for n, has_upper in enumerate(bounded):
        upper = f" AND record_index <= :u{n}" if has_upper else ""
        parts.append(
            f"SELECT * FROM (SELECT {RECORD_COLUMNS}, {n} AS segment_ordinal FROM records "
            f"WHERE session_id = :s{n} AND record_index > :a{n}{upper} "
            f"ORDER BY record_index LIMIT :limit) AS segment_{n}"
        )
    return text(" UNION ALL ".join(parts) + " ORDER BY segment_ordinal, record_index LIMIT :limit")


_SESSION_COLUMNS: list[Any] = [
    t.sessions,
    t.session_lineage.c.parent_session_id.label("l_parent_session_id"),
    t.session_lineage.c.root_session_id.label("l_root_session_id"),
    t.session_lineage.c.depth.label("l_depth"),
    t.session_lineage.c.inherited_turn_count.label("l_inherited_turn_count"),
    t.session_lineage.c.cut_mode.label("l_cut_mode"),
    t.session_lineage.c.cut_turn_id.label("l_cut_turn_id"),
    t.session_lineage.c.cutoff_session_id.label("l_cutoff_session_id"),
    t.session_lineage.c.cutoff_turn_index.label("l_cutoff_turn_index"),
    t.session_lineage.c.cutoff_record_index.label("l_cutoff_record_index"),
    t.session_lineage.c.created_at.label("l_created_at"),
]


def _session_from(row: RowMapping) -> SessionRow:
    lineage = None
    if row["l_parent_session_id"] is not None:
        lineage = LineageRow(
            session_id=row["session_id"],
            parent_session_id=row["l_parent_session_id"],
            root_session_id=row["l_root_session_id"],
            depth=row["l_depth"],
            inherited_turn_count=row["l_inherited_turn_count"],
            cut_mode=row["l_cut_mode"],
            cut_turn_id=row["l_cut_turn_id"],
            cutoff_session_id=row["l_cutoff_session_id"],
            cutoff_turn_index=row["l_cutoff_turn_index"],
            cutoff_record_index=row["l_cutoff_record_index"],
            created_at=row["l_created_at"],
        )
    return SessionRow(
        session_id=row["session_id"],
        owner=row["owner"],
        name=row["name"],
        description=row["description"],
        created_at=row["created_at"],
        depth=row["depth"],
        turn_count=row["turn_count"],
        record_count=row["record_count"],
        running_turn_id=row["running_turn_id"],
        lineage=lineage,
    )


def _turn_from(row: RowMapping) -> TurnRow:
    return TurnRow(**{key: row[key] for key in TurnRow.__dataclass_fields__})


def _record_from(row: RowMapping) -> RecordRow:
    return RecordRow(
        record_id=row["record_id"],
        session_id=row["session_id"],
        record_index=row["record_index"],
        turn_id=row["turn_id"],
        turn_index=row["turn_index"],
        record_type=row["record_type"],
        content=json.loads(row["content"]),
        created_at=row["created_at"],
    )


class Transaction:
    """The statements available inside one read or write transaction.

    Record statements go to `records_conn`: the same connection with one store, a connection to
    the records store (opened on first use, in its own transaction) with two.
    """

    def __init__(self, conn: Connection, records_conn: Callable[[], Connection] | Connection | None = None) -> None:
        self.conn = conn
        self._records_conn = records_conn

    @property
    def records_conn(self) -> Connection:
        if self._records_conn is None:
            return self.conn
        if callable(self._records_conn) and not isinstance(self._records_conn, Connection):
            self._records_conn = self._records_conn()
        return self._records_conn

    # ---------------------------------------------------------------- reads
    def chain(self, session_id: str, max_hops: int) -> list[ChainLink]:
        """The session and its ancestors, root first, with inherited bounds: one statement."""
        rows = self.conn.execute(
            CHAIN_SQL, {"session_id": session_id, "max_hops": max_hops}
        ).mappings()
        return [
            ChainLink(
                session=_session_from(row),
                hops=row["hops"],
                turn_bound=row["turn_bound"],
                record_bound=row["record_bound"],
            )
            for row in rows
        ]

    def session(self, session_id: str) -> SessionRow | None:
        query = (
            select(*_SESSION_COLUMNS)
            .select_from(
                t.sessions.outerjoin(
                    t.session_lineage,
                    t.session_lineage.c.session_id == t.sessions.c.session_id,
                )
            )
            .where(t.sessions.c.session_id == session_id)
        )
        row = self.conn.execute(query).mappings().first()
        return _session_from(row) if row else None

    def session_for_write(self, session_id: str) -> tuple[SessionRow, LeaseRow | None] | None:
        """The session and its writer lease (held or expired), in the one statement a write needs."""
        leases = t.session_leases
        query = (
            select(
                *_SESSION_COLUMNS,
                leases.c.lease_id.label("w_lease_id"),
                leases.c.principal.label("w_principal"),
                leases.c.expires_at.label("w_expires_at"),
            )
            .select_from(
                t.sessions.outerjoin(
                    t.session_lineage, t.session_lineage.c.session_id == t.sessions.c.session_id
                ).outerjoin(leases, leases.c.session_id == t.sessions.c.session_id)
            )
            .where(t.sessions.c.session_id == session_id)
        )
        row = self.conn.execute(query).mappings().first()
        if row is None:
            return None
        lease = None
        if row["w_lease_id"] is not None:
            lease = LeaseRow(session_id, row["w_lease_id"], row["w_principal"], row["w_expires_at"])
        return _session_from(row), lease

    def turn(self, turn_id: str) -> TurnRow | None:
        row = self.conn.execute(select(t.turns).where(t.turns.c.turn_id == turn_id)).mappings()
        first = row.first()
        return _turn_from(first) if first else None

    def last_finished_turn(self, session_id: str) -> TurnRow | None:
        query = (
            select(t.turns)
            .where(t.turns.c.session_id == session_id, t.turns.c.status != "running")
            .order_by(t.turns.c.turn_index.desc())
            .limit(1)
        )
        row = self.conn.execute(query).mappings().first()
        return _turn_from(row) if row else None

    def records(self, segments: Sequence[Segment], limit: int) -> list[RecordRow]:
        """Up to `limit` records of the segments, in segment order: one statement.

        Each segment is a bounded index range scan of at most `limit` rows, so the cost of a page
        depends neither on its position nor on the size of the sessions.
        """
        if not segments:
            return []
        params: dict[str, Any] = {"limit": limit}
        for n, segment in enumerate(segments):
            params[f"s{n}"], params[f"a{n}"] = segment.session_id, segment.after
            if segment.upto is not None:
                params[f"u{n}"] = segment.upto
        query = _records_sql(tuple(segment.upto is not None for segment in segments))
        return [_record_from(row) for row in self.records_conn.execute(query, params).mappings()]

    def idempotency(self, principal: str, key: str) -> IdempotencyRow | None:
        query = select(t.idempotency_keys).where(
            t.idempotency_keys.c.principal == principal,
            t.idempotency_keys.c.idempotency_key == key,
        )
        row = self.conn.execute(query).mappings().first()
        return IdempotencyRow(**row) if row else None

    # ---------------------------------------------------------------- writes
    def insert_session(self, row: dict[str, Any]) -> None:
        self.conn.execute(insert(t.sessions).values(**row))

    def insert_lineage(self, row: dict[str, Any]) -> None:
        self.conn.execute(insert(t.session_lineage).values(**row))

    def insert_idempotency(self, row: dict[str, Any]) -> None:
        self.conn.execute(insert(t.idempotency_keys).values(**row))

    def delete_idempotency(self, principal: str, key: str) -> None:
        self.conn.execute(
            delete(t.idempotency_keys).where(
                t.idempotency_keys.c.principal == principal,
                t.idempotency_keys.c.idempotency_key == key,
            )
        )

    def claim_turn_slot(self, session_id: str, turn_id: str) -> tuple[int, int] | None:
        """Mark the session as running `turn_id`; (turn index, first record index) or None."""
        query = (
            update(t.sessions)
            .where(t.sessions.c.session_id == session_id, t.sessions.c.running_turn_id.is_(None))
            .values(running_turn_id=turn_id, turn_count=t.sessions.c.turn_count + 1)
            .returning(t.sessions.c.turn_count, t.sessions.c.record_count)
        )
        row = self.conn.execute(query).first()
        return (row[0] - 1, row[1]) if row else None

    def insert_turn(self, row: dict[str, Any]) -> None:
        self.conn.execute(insert(t.turns).values(**row))

    def finish_turn(self, turn_id: str, status: str, finished_at: str) -> int | None:
        """Close a running turn; returns its end record index (exclusive) or None."""
        release = (
            update(t.sessions)
            .where(t.sessions.c.running_turn_id == turn_id)
            .values(running_turn_id=None)
            .returning(t.sessions.c.record_count)
        )
        row = self.conn.execute(release).first()
        if row is None:
            return None
        self.conn.execute(
            update(t.turns)
            .where(t.turns.c.turn_id == turn_id)
            .values(status=status, finished_at=finished_at, end_record_index=row[0])
        )
        return int(row[0])

    def reserve_record_indexes(self, session_id: str, turn_id: str, count: int) -> int | None:
        """Reserve `count` record indexes for the running turn; the first index, or None."""
        query = (
            update(t.sessions)
            .where(t.sessions.c.session_id == session_id, t.sessions.c.running_turn_id == turn_id)
            .values(record_count=t.sessions.c.record_count + count)
            .returning(t.sessions.c.record_count)
        )
        row = self.conn.execute(query).first()
        return int(row[0]) - count if row else None

    def insert_records(self, rows: list[dict[str, Any]]) -> None:
        self.records_conn.execute(insert(t.records), rows)

    def release_record_indexes(self, session_id: str, turn_id: str, first: int, count: int) -> bool:
        """Give back indexes reserved for records that were never written, if no one came after."""
        result = self.conn.execute(
            update(t.sessions)
            .where(
                t.sessions.c.session_id == session_id,
                t.sessions.c.running_turn_id == turn_id,
                t.sessions.c.record_count == first + count,
            )
            .values(record_count=first)
        )
        return result.rowcount == 1

    # ---------------------------------------------------------------- writer leases
    def take_expired_lease(self, session_id: str, lease: dict[str, Any], now: str) -> bool:
        """Take over a lease whose holder let it expire; False when none expired."""
        result = self.conn.execute(
            update(t.session_leases)
            .where(t.session_leases.c.session_id == session_id, t.session_leases.c.expires_at <= now)
            .values(**lease)
        )
        return result.rowcount == 1

    def insert_lease(self, row: dict[str, Any]) -> None:
        """Raises IntegrityError when another writer holds the session's lease."""
        self.conn.execute(insert(t.session_leases).values(**row))

    def renew_lease(self, session_id: str, lease_id: str, expires_at: str, now: str) -> bool:
        result = self.conn.execute(
            update(t.session_leases)
            .where(
                t.session_leases.c.session_id == session_id,
                t.session_leases.c.lease_id == lease_id,
                t.session_leases.c.expires_at > now,
            )
            .values(expires_at=expires_at)
        )
        return result.rowcount == 1

    def delete_lease(self, session_id: str, lease_id: str, now: str) -> bool:
        result = self.conn.execute(
            delete(t.session_leases).where(
                t.session_leases.c.session_id == session_id,
                t.session_leases.c.lease_id == lease_id,
                t.session_leases.c.expires_at > now,
            )
        )
        return result.rowcount == 1


class Store:
    """Opens transactions; the service layer decides what happens inside them.

    With `records_engine`, records live in a second store: reads open it on first use, and
    record writes go through `write_records()`, a transaction of their own. `transaction_class`
    lets tests substitute the statements (for example, to inject faults).
    """

    def __init__(
        self,
        engine: Engine,
        records_engine: Engine | None = None,
        transaction_class: type[Transaction] = Transaction,
    ) -> None:
        self.engine = engine
        self.records_engine = records_engine
        self.transaction_class = transaction_class

    @property
    def split(self) -> bool:
        return self.records_engine is not None

    @contextmanager
    def read(self) -> Iterator[Transaction]:
        with ExitStack() as stack:
            conn = stack.enter_context(self.engine.connect())
            stack.enter_context(conn.begin())
            yield self.transaction_class(conn, self._records_opener(stack))

    @contextmanager
    def write(self) -> Iterator[Transaction]:
        with self.engine.connect().execution_options(write=True) as conn, conn.begin():
            yield self.transaction_class(conn)

    @contextmanager
    def write_records(self) -> Iterator[Transaction]:
        """A transaction on the records store (the core store when there is only one)."""
        engine = self.records_engine or self.engine
        with engine.connect().execution_options(write=True) as conn, conn.begin():
            yield self.transaction_class(conn, conn)

    def _records_opener(self, stack: ExitStack) -> Callable[[], Connection] | None:
        if self.records_engine is None:
            return None
        engine = self.records_engine

        def open_records() -> Connection:
            conn = stack.enter_context(engine.connect())
            stack.enter_context(conn.begin())
            return conn

        return open_records
