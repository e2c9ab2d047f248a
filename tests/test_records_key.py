"""Records keyed by (session_id, record_index) (migrations 0007_records_key and r0003): a database
made before them migrates with its records intact, on both engines and in both stores.

Later migrations change the layout again (0008_session_keys and r0004 key records by `sid`:
tests/test_session_keys_migration.py), so these upgrade only as far as 0007_records_key / r0003."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import inspect, text
from sqlalchemy.engine import Engine

from reference_impl.store.engine import MIGRATIONS_DIR, RECORDS_MIGRATIONS_DIR, make_engine
from reference_impl.store.records_key import COLUMNS

BEFORE = {"core": (MIGRATIONS_DIR, "0004_history_a"), "records": (RECORDS_MIGRATIONS_DIR, "r0002")}
# The migrations under test: the records keyed by position, not yet by sid.
KEYED = {"core": (MIGRATIONS_DIR, "0007_records_key"), "records": (RECORDS_MIGRATIONS_DIR, "r0003")}
ROWS = [
    {"record_id": f"r-{index}", "session_id": "s-1", "record_index": index, "turn_id": "t-1", "turn_index": 0,
     "record_type": "message", "content": f'{{"n":{index}}}', "created_at": "2026-12-03T00:00:00.000000Z"}
    for index in range(3)
]


def _migrate_to(engine: Engine, store: str, step: dict[str, tuple[Path, str]]) -> None:
    """Upgrade (in one write transaction, as `migrate` does) to the revision `step` gives the store."""
    location, revision = step[store]
    config = Config()
    config.set_main_option("script_location", str(location))
    with engine.connect().execution_options(write=True) as connection, connection.begin():
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


def _old_database(engine: Engine, store: str) -> None:
    """The schema as it was before the records were keyed by position, with records in it."""
    _migrate_to(engine, store, BEFORE)
    with engine.begin() as conn:
        if store == "core":
            conn.execute(text(
                "INSERT INTO sessions (session_id, owner, created_at, depth, turn_count, record_count) "
                "VALUES ('s-1', 'alice', '2026-12-03T00:00:00.000000Z', 0, 1, 3)"
            ))
        columns = ", ".join(COLUMNS)
        conn.execute(text(f"INSERT INTO records ({columns}) VALUES ({', '.join(':' + c for c in COLUMNS)})"), ROWS)


def _assert_keyed(engine: Engine) -> None:
    inspector = inspect(engine)
    assert inspector.get_pk_constraint("records")["constrained_columns"] == ["session_id", "record_index"]
    assert inspector.get_indexes("records") == []  # no index on record_id, no second one on the key
    with engine.connect() as conn:
        kept = [dict(row) for row in conn.execute(text(f"SELECT {', '.join(COLUMNS)} FROM records ORDER BY record_index")).mappings()]
        if engine.dialect.name == "sqlite":
            sql = conn.execute(text("SELECT sql FROM sqlite_schema WHERE name = 'records'")).scalar_one()
            assert "WITHOUT ROWID" in sql
    assert kept == ROWS


def _check(url: str, store: str) -> None:
    engine = make_engine(url)
    try:
        _old_database(engine, store)
        _migrate_to(engine, store, KEYED)
        _assert_keyed(engine)
    finally:
        engine.dispose()


@pytest.mark.parametrize("store", ["core", "records"])
def test_an_existing_sqlite_database_migrates_with_its_records(store: str, tmp_path: Any) -> None:
    _check(f"sqlite:///{tmp_path / 'old.db'}", store)


@pytest.mark.postgres
@pytest.mark.parametrize("store", ["core", "records"])
def test_an_existing_postgres_database_migrates_with_its_records(store: str, postgres_url: str) -> None:
    _check(postgres_url, store)
