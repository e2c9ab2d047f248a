"""Engine construction and schema migration for SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine, make_url

from reference_impl import diagnostics

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
RECORDS_MIGRATIONS_DIR = Path(__file__).resolve().parent / "records_migrations"


def make_engine(database_url: str) -> Engine:
    """An engine whose transactions give the isolation the store relies on.

    SQLite: WAL journal, a busy timeout, `BEGIN IMMEDIATE` for write transactions so that
    concurrent writers queue instead of failing on lock upgrade, and `BEGIN` (a snapshot) for reads.
    """
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite":
        engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})
        _configure_sqlite(engine)
    elif url.get_backend_name() == "postgresql":
        if url.drivername == "postgresql":
            url = url.set(drivername="postgresql+psycopg")  # psycopg 3, not the psycopg2 default
        engine = create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)
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
        write = conn.get_execution_options().get("write", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


def migrate(engine: Engine, records_only: bool = False) -> None:
    """Upgrade the database to the newest Alembic revision (of the records store, if asked)."""
    config = Config()
    config.set_main_option("script_location", str(RECORDS_MIGRATIONS_DIR if records_only else MIGRATIONS_DIR))
    with engine.connect().execution_options(write=True) as connection, connection.begin():
        # SQLite: BEGIN IMMEDIATE, so a second process waits and then finds the schema current.
        if engine.dialect.name == "postgresql":
            # Several server processes may start together: one migrates, the others wait.
            connection.exec_driver_sql("SELECT pg_advisory_xact_lock(7368291)")
        config.attributes["connection"] = connection
        command.upgrade(config, "head")
