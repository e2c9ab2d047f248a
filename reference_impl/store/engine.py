"""Engine construction and schema migration for SQLite and PostgreSQL."""

from __future__ import annotations

import sqlite3
import threading
import weakref
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import DBAPIError

from reference_impl import diagnostics

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
RECORDS_MIGRATIONS_DIR = Path(__file__).resolve().parent / "records_migrations"
SQLITE_BUSY_TIMEOUT_S = 30  # how long a SQLite statement waits for another writer's lock


class WriterGate:
    """Lets one write transaction of this process into a SQLite database at a time.

    SQLite admits one writer; a `BEGIN IMMEDIATE` that finds the database locked sleeps in SQLite's
    busy handler (1, 2, 5, 10 ms and longer), and keeps sleeping after the lock is free. Writers of
    this process wait here instead, and the next one starts as soon as the one before it ends.
    Writers in other processes still meet the busy timeout; a writer that waits here longer than
    that timeout goes on to meet it too, so a stuck writer ends in the same error as without the gate.
    """

    def __init__(self, timeout: float = SQLITE_BUSY_TIMEOUT_S) -> None:
        self.timeout = timeout
        self.waiting = 0  # writers waiting for the one inside to end
        self._lock = threading.Lock()
        self._count = threading.Lock()
        self._held = threading.local()

    def __enter__(self) -> WriterGate:
        with self._count:
            self.waiting += 1
        try:
            self._held.value = self._lock.acquire(timeout=self.timeout)
        finally:
            with self._count:
                self.waiting -= 1
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._held.value:
            self._lock.release()


_GATES: weakref.WeakKeyDictionary[Engine, WriterGate] = weakref.WeakKeyDictionary()


def writer_gate(engine: Engine) -> AbstractContextManager[object]:
    """What a write transaction on `engine` enters first: the engine's `WriterGate` on SQLite;
    nothing on PostgreSQL, whose writers take row locks, not the whole database."""
    return _GATES.get(engine) or nullcontext()


def make_engine(database_url: str) -> Engine:
    """An engine whose transactions give the isolation the store relies on.

    SQLite: WAL journal, a busy timeout, `BEGIN IMMEDIATE` for write transactions so that
    concurrent writers queue instead of failing on lock upgrade (behind a `WriterGate` within this
    process), and `BEGIN` (a snapshot) for reads.
    """
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite":
        engine = create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S, "check_same_thread": False})
        _configure_sqlite(engine)
        _GATES[engine] = WriterGate()
    elif url.get_backend_name() == "postgresql":
        if url.drivername == "postgresql":
            url = url.set(drivername="postgresql+psycopg")  # psycopg 3, not the psycopg2 default
        # No pre-ping: it is a round trip on every checkout. A connection the database dropped
        # while idle fails its next statement (a 503), and the pool then replaces its contemporaries.
        engine = create_engine(url, pool_size=10, max_overflow=20)
    else:
        raise ValueError(f"unsupported database {url.get_backend_name()!r}: use sqlite or postgresql")
    diagnostics.instrument(engine)
    return engine


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we issue BEGIN ourselves
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        if conn.get_execution_options().get("write", False):
            # Through SQLAlchemy: a writer that meets the lock past the busy timeout fails with its
            # storage error (a 503), never a bare driver error.
            conn.exec_driver_sql("BEGIN IMMEDIATE")
            return
        # A read's deferred BEGIN takes no lock. It goes straight to the DB-API connection:
        # transaction control is no counted statement (diagnostics.py), and SQLAlchemy's statement
        # path cost about 12 us of every read. A driver error is still raised as SQLAlchemy's.
        try:
            conn.connection.driver_connection.execute("BEGIN")
        except sqlite3.Error as exc:
            raise DBAPIError.instance("BEGIN", None, exc, sqlite3.Error, dialect=conn.dialect) from exc


def migrate(engine: Engine, records_only: bool = False) -> None:
    """Upgrade the database to the newest Alembic revision (of the records store, if asked)."""
    config = Config()
    config.set_main_option("script_location", str(RECORDS_MIGRATIONS_DIR if records_only else MIGRATIONS_DIR))
    with writer_gate(engine), engine.connect().execution_options(write=True) as connection, connection.begin():
        # SQLite: BEGIN IMMEDIATE, so a second process waits and then finds the schema current.
        if engine.dialect.name == "postgresql":
            # Several server processes may start together: one migrates, the others wait.
            connection.exec_driver_sql("SELECT pg_advisory_xact_lock(7368291)")
        config.attributes["connection"] = connection
        command.upgrade(config, "head")
