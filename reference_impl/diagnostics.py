"""Counts real storage work per request: round trips (`Storage-Round-Trips`), stored items
written (`Storage-Items-Written`) and stored records examined (`Storage-Records-Examined`).

Records examined are counted by the statements that read records (`store/transcript.py` and the
chapters reading through it): every row a records statement produces. Each of them is a set of
index range scans, each with its own `LIMIT` and no limit over their union, so the rows it
produces are the rows the database reads; no statement reads records only to discard them.

Items written are the rows that INSERT, UPDATE and DELETE statements report as affected
(`cursor.rowcount`, summed over every row of an executemany). On SQLite, whose driver learns a
`RETURNING` statement's row count only once its rows are fetched, they are the growth of the
connection's `total_changes` instead. They are held per connection until its transaction ends: a
commit adds them to the request's count, a rollback discards them, so a refused request whose
transaction rolled back reports 0.

Bytes written (`Storage-Bytes-Written`) are the sizes of the values the committed writes stored:
for every row an INSERT or UPDATE wrote, the bound values it was given (a string's UTF-8 bytes, a
byte string's length, 8 for a number, 0 for NULL), the row's key included; a DELETE stores nothing.
A statement of one parameter set that changed several rows wrote its values to each of them. They
are held and committed (or discarded) like the items written. A statement whose values come from a
SELECT (INSERT ... SELECT) has no bound values to measure: the reference sends none, and code that
does adds what it stored with `count_bytes_written`.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine

_PENDING = "diagnostics_pending_writes"  # key in Connection.info: rows written, not yet committed
_BASELINE = "diagnostics_total_changes"  # key in Connection.info: SQLite's total_changes at BEGIN
_PENDING_BYTES = "diagnostics_pending_bytes"  # key in Connection.info: bytes written, not yet committed
_WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE")
_STORES = ("INSERT", "UPDATE", "REPLACE")  # statements that store values (a DELETE stores none)


@dataclass
class StorageCounter:
    statements: int = 0  # round trips: data statements sent and waited for
    items_written: int = 0  # rows created, changed or deleted by committed transactions
    records_examined: int = 0  # stored records read from storage to serve the request
    bytes_written: int = 0  # bytes of the values committed transactions stored


RoundTripCounter = StorageCounter  # the name it had when it counted round trips only

_current: contextvars.ContextVar[StorageCounter | None] = contextvars.ContextVar(
    "storage_round_trips", default=None
)


def start_counting() -> StorageCounter:
    """Begin counting for the current request; worker threads inherit the context."""
    counter = StorageCounter()
    _current.set(counter)
    return counter


def count_records_examined(count: int) -> None:
    """Add `count` stored records a statement read to the current request's count."""
    counter = _current.get()
    if counter is not None:
        counter.records_examined += count


def count_bytes_written(count: int, connection: Any = None) -> None:
    """Add bytes stored by a statement whose values the listener cannot see (INSERT ... SELECT):
    pending on `connection` until its transaction commits, or at once without one."""
    if connection is not None:
        connection.info[_PENDING_BYTES] = connection.info.get(_PENDING_BYTES, 0) + count
        return
    counter = _current.get()
    if counter is not None:
        counter.bytes_written += count


def value_size(value: Any) -> int:
    """The stored size of one value: UTF-8 bytes of text, length of bytes, 8 for a number, 0 for NULL."""
    if value is None:
        return 0
    if isinstance(value, (bytes, bytearray, memoryview)):
        return len(value)
    if isinstance(value, bool):
        return 1
    if isinstance(value, (int, float)):
        return 8
    return len(str(value).encode("utf-8", "surrogatepass"))


def _bytes_stored(statement: str, cursor: Any, parameters: Any, executemany: bool) -> int:
    """Bytes of the values a data-storing statement wrote; 0 for anything else."""
    if not statement.lstrip()[:8].upper().startswith(_STORES):
        return 0
    sets = list(parameters or []) if executemany else [parameters or ()]
    sizes = [sum(value_size(v) for v in (s.values() if isinstance(s, dict) else s)) for s in sets]
    rowcount = getattr(cursor, "rowcount", -1)
    if not executemany and rowcount is not None and rowcount > 1:
        return sizes[0] * rowcount  # one parameter set written to each of several rows
    if not executemany and rowcount == 0:
        return 0
    return sum(sizes)


def _is_transaction_control(statement: str) -> bool:
    head = statement.lstrip()[:16].upper()
    return head.startswith(("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE"))


def _rows_written(statement: str, cursor: Any, context: Any) -> int:
    """Rows a data-changing statement affected; 0 for anything else."""
    if not statement.lstrip()[:8].upper().startswith(_WRITES):
        return 0
    rowcount = getattr(cursor, "rowcount", -1)
    if rowcount is not None and rowcount >= 0:
        return int(rowcount)
    # The driver could not say (rare): each parameter set of the statement wrote one row.
    parameters = getattr(context, "parameters", None) or [()]
    return len(parameters) if getattr(context, "executemany", False) else 1


def instrument(engine: Engine) -> None:
    """Count every data statement the engine sends (transaction control is not counted), and the
    rows written by every transaction that commits."""

    @event.listens_for(engine, "before_cursor_execute")
    def _count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        counter = _current.get()
        if counter is not None and not _is_transaction_control(statement):
            counter.statements += 1

    sqlite = engine.dialect.name == "sqlite"

    @event.listens_for(engine, "after_cursor_execute")
    def _stored(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        size = _bytes_stored(statement, cursor, parameters, executemany)
        if size:
            conn.info[_PENDING_BYTES] = conn.info.get(_PENDING_BYTES, 0) + size

    def total_changes(conn: Any) -> int:
        return int(conn.connection.dbapi_connection.total_changes)

    if not sqlite:

        @event.listens_for(engine, "after_cursor_execute")
        def _written(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
            rows = _rows_written(statement, cursor, context)
            if rows:
                conn.info[_PENDING] = conn.info.get(_PENDING, 0) + rows

    @event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        conn.info[_PENDING] = 0
        conn.info[_PENDING_BYTES] = 0
        if sqlite:
            conn.info[_BASELINE] = total_changes(conn)

    @event.listens_for(engine, "commit")
    def _commit(conn: Any) -> None:
        try:
            rows = conn.info.pop(_PENDING, 0)
            stored = conn.info.pop(_PENDING_BYTES, 0)
            if sqlite:
                rows = total_changes(conn) - conn.info.pop(_BASELINE, total_changes(conn))
        except Exception:  # the link is gone: the commit itself fails next, with a storage error
            return
        counter = _current.get()
        if counter is not None:
            counter.items_written += rows
            counter.bytes_written += stored

    @event.listens_for(engine, "rollback")
    def _rollback(conn: Any) -> None:
        try:
            info = conn.info
        except Exception:  # the link to the database is gone (invalidated): nothing was committed
            return
        info.pop(_PENDING, 0)
        info.pop(_PENDING_BYTES, 0)
        info.pop(_BASELINE, None)
