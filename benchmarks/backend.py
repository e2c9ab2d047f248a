"""Fresh databases for each comparison: SQLite files in a temporary directory, or PostgreSQL."""

from __future__ import annotations

import secrets
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from reference_impl.services import Services, build_services
from reference_impl.settings import Settings
from reference_impl.settings import Limits
from reference_impl.store import Store
from reference_impl.store.engine import make_engine, migrate
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import OperationalError

from benchmarks import meter

PRINCIPAL = "bench"


@dataclass
class Database:
    """One migrated database with the reference service on top of it."""

    kind: str
    url: str
    engine: Engine
    store: Store
    services: Services
    limits: Limits

    def size_bytes(self) -> int:
        """Bytes the data occupies: SQLite pages after a checkpoint, or PostgreSQL relations."""
        with self.engine.connect() as conn:
            if self.kind == "sqlite":
                conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
                pages = conn.exec_driver_sql("PRAGMA page_count").scalar_one()
                free = conn.exec_driver_sql("PRAGMA freelist_count").scalar_one()
                page_size = conn.exec_driver_sql("PRAGMA page_size").scalar_one()
                return int((pages - free) * page_size)
            size = conn.execute(
                text(
                    "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                    "JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "WHERE n.nspname = current_schema() AND c.relkind = 'r'"
                )
            ).scalar_one()
            return int(size)

    def object_bytes(self) -> dict[tuple[str, str], int]:
        """Bytes per (table, object): the table itself (SQLite: its b-tree; PostgreSQL: heap,
        TOAST and maps) and each of its indexes by name, to show which structure costs what."""
        with self.engine.connect() as conn:
            if self.kind == "sqlite":
                conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
                try:
                    rows = conn.exec_driver_sql(
                        "SELECT s.tbl_name, s.name, SUM(d.pgsize) FROM dbstat d "
                        "JOIN sqlite_schema s ON s.name = d.name GROUP BY s.tbl_name, s.name"
                    ).all()
                except OperationalError:
                    return {}  # SQLite built without the dbstat table
                finally:
                    conn.rollback()
            else:
                rows = conn.execute(
                    text(
                        "SELECT t.relname, t.relname, pg_total_relation_size(t.oid) - pg_indexes_size(t.oid) "
                        "FROM pg_class t JOIN pg_namespace n ON n.oid = t.relnamespace "
                        "WHERE n.nspname = current_schema() AND t.relkind = 'r' "
                        "UNION ALL "
                        "SELECT t.relname, i.relname, pg_relation_size(i.oid) FROM pg_index x "
                        "JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid "
                        "JOIN pg_namespace n ON n.oid = t.relnamespace WHERE n.nspname = current_schema()"
                    )
                ).all()
        return {(str(table), str(name)): int(size) for table, name, size in rows}


@dataclass(frozen=True)
class Backend:
    """Where databases are made: `sqlite` in a temporary directory or a PostgreSQL server URL."""

    kind: str
    server_url: str | None = None

    @property
    def label(self) -> str:
        return "SQLite" if self.kind == "sqlite" else "PostgreSQL"

    @contextmanager
    def database(self, limits: Limits) -> Iterator[Database]:
        """A fresh, migrated database, removed afterwards."""
        if self.kind == "sqlite":
            with (
                tempfile.TemporaryDirectory(prefix="lineage-bench-") as folder,
                _open(self.kind, f"sqlite:///{Path(folder) / 'bench.db'}", limits) as db,
            ):
                yield db
            return
        assert self.server_url is not None
        with _postgres_database(self.server_url) as url, _open(self.kind, url, limits) as db:
            yield db


@contextmanager
def _open(kind: str, url: str, limits: Limits) -> Iterator[Database]:
    engine = make_engine(url)
    try:
        migrate(engine)
        meter.instrument(engine)
        store = Store(engine)
        yield Database(kind, url, engine, store, build_services(store, Settings(limits=limits)), limits)
    finally:
        engine.dispose()


def _psycopg(url: str) -> str:
    parsed = make_url(url)
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


@contextmanager
def _postgres_database(server_url: str) -> Iterator[str]:
    """Create a database of our own on the server and drop it afterwards, whatever happens."""
    name = f"lineage_bench_{secrets.token_hex(4)}"
    admin = create_engine(_psycopg(server_url), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        try:
            yield make_url(server_url).set(database=name).render_as_string(hide_password=False)
        finally:
            with admin.connect() as conn:
                conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        admin.dispose()


def server_version(backend: Backend) -> str | None:
    """The PostgreSQL server version, for the machine section of the report."""
    if backend.kind != "postgresql" or backend.server_url is None:
        return None
    engine = create_engine(_psycopg(backend.server_url))
    try:
        with engine.connect() as conn:
            return str(conn.exec_driver_sql("SHOW server_version").scalar_one())
    finally:
        engine.dispose()
