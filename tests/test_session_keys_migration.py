"""Turns and records keyed by the integer session key `sid` (migrations 0008_session_keys and
r0004, reference_impl/store/session_keys.py): a database made at the revision before them migrates
to head with every value intact, on both engines and in both stores, and a new database made from
scratch has the same layout."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.engine import Engine

from reference_impl.store import tables
from reference_impl.store.engine import MIGRATIONS_DIR, RECORDS_MIGRATIONS_DIR, make_engine, migrate

BEFORE = {"core": (MIGRATIONS_DIR, "0007_records_key"), "records": (RECORDS_MIGRATIONS_DIR, "r0003")}
T = [f"2026-12-03T00:00:0{n}.000000Z" for n in range(6)]
ROOT, CHILD, EMPTY = "proj~sess-z-root", "proj~sess-a-child", "proj~sess-b-empty"
# Numbered by (created_at, session_id): not the order of the ids, nor the order they were inserted.
CORE_SIDS = {ROOT: 1, CHILD: 2, EMPTY: 3}
# A records store numbers its sessions by their first record, then by id.
RECORDS_SIDS = {ROOT: 1, CHILD: 2}

SESSION = dict.fromkeys(
    ("name", "description", "running_turn_id", "deleted_at", "own_segments", "suspended_turn_id")
)
SESSIONS = [  # inserted in this order
    {**SESSION, "session_id": CHILD, "owner": "alice", "created_at": T[1], "depth": 1, "turn_count": 2,
     "record_count": 4, "child_count": 0, "version": 3, "revision": 0},
    {**SESSION, "session_id": EMPTY, "owner": "bob", "name": "empty", "description": "soft-deleted, no turns",
     "created_at": T[1], "depth": 0, "turn_count": 0, "record_count": 0, "deleted_at": T[4], "child_count": 0,
     "version": 1, "revision": 0},
    {**SESSION, "session_id": ROOT, "owner": "alice", "name": "root ✓", "created_at": T[0], "depth": 0,
     "turn_count": 2, "record_count": 3, "running_turn_id": "proj~t-root-1", "child_count": 1, "version": 7,
     "revision": 1, "own_segments": '[[0, 3]]'},
]
LINEAGE = [
    {"session_id": CHILD, "parent_session_id": ROOT, "root_session_id": ROOT, "depth": 1, "inherited_turn_count": 1,
     "cut_mode": "after_turn", "cut_turn_id": "proj~t-root-0", "cutoff_session_id": ROOT, "cutoff_turn_index": 0,
     "cutoff_record_index": 1, "created_at": T[1], "cutoff_segments": None},
]
TURNS = [
    {"turn_id": "proj~t-child-1", "session_id": CHILD, "turn_index": 1, "role": "user", "status": "completed",
     "first_record_index": 2, "end_record_index": 4, "created_at": T[2], "finished_at": T[3]},
    {"turn_id": "proj~t-root-0", "session_id": ROOT, "turn_index": 0, "role": "user", "status": "completed",
     "first_record_index": 0, "end_record_index": 2, "created_at": T[0], "finished_at": T[0]},
    {"turn_id": "proj~t-root-1", "session_id": ROOT, "turn_index": 1, "role": "agent", "status": "running",
     "first_record_index": 2, "end_record_index": None, "created_at": T[3], "finished_at": None},
]
RECORDS = [
    {"record_id": f"rec-{session[-4:]}-{index}", "session_id": session, "record_index": index, "turn_id": turn,
     "turn_index": turn_index, "record_type": kind, "content": content, "created_at": created_at}
    for session, index, turn, turn_index, kind, content, created_at in [
        (CHILD, 3, "proj~t-child-1", 1, "message", '{"text":"second"}', T[3]),
        (CHILD, 2, "proj~t-child-1", 1, "message", '{"text":"héllo \\"quoted\\" ✓"}', T[2]),
        (ROOT, 0, "proj~t-root-0", 0, "message", '{"text":"first"}', T[0]),
        (ROOT, 1, "proj~t-root-0", 0, "tool_call", '{"name":"x","args":{}}', T[0]),
        (ROOT, 2, "proj~t-root-1", 1, "message", "{}", T[3]),
    ]
]
# Tables that reference sessions by session_id, unchanged by the migration.
OTHERS = {
    "session_lineage": LINEAGE,
    "session_grants": [
        {"session_id": CHILD, "principal": "bob", "role": "viewer", "granted_at": T[2]},
        {"session_id": ROOT, "principal": "carol", "role": "editor", "granted_at": T[1]},
    ],
    "session_leases": [{"session_id": ROOT, "lease_id": "lease-1", "principal": "alice", "expires_at": T[5]}],
    "turn_inputs": [
        {"input_id": "in-1", "session_id": ROOT, "turn_id": "proj~t-root-1", "input_index": 0, "status": "pending",
         "content": '{"text":"more"}', "queued_at": T[4], "record_id": None, "settled_at": None},
    ],
    "attachments": [
        {"session_id": ROOT, "attachment_id": "att-1", "position": 2, "media_type": "application/octet-stream",
         "size": 4, "sha256": "0" * 64, "content": b"\x00\x01\xfe\xff", "created_at": T[2]},
    ],
}
OLD_SESSION_COLUMNS = tuple(SESSIONS[0])
TURN_COLUMNS = ["sid", "turn_index", "turn_id", "role", "status", "first_record_index", "end_record_index",
                "created_at", "finished_at"]
RECORD_COLUMNS = ["sid", "record_index", "record_id", "turn_id", "turn_index", "record_type", "content", "created_at"]


def _upgrade(engine: Engine, location: Path, revision: str) -> None:
    """Upgrade to `revision` in one write transaction, as `migrate` does."""
    config = Config()
    config.set_main_option("script_location", str(location))
    with engine.connect().execution_options(write=True) as connection, connection.begin():
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


def _insert(conn: sa.Connection, table: str, rows: list[dict[str, Any]]) -> None:
    columns = list(rows[0])
    conn.execute(text(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join(':' + c for c in columns)})"),
                 rows)


def _rows(conn: sa.Connection, sql: str) -> list[dict[str, Any]]:
    """The rows in an order that does not depend on the engine or the table's key."""
    found = [{key: bytes(value) if isinstance(value, memoryview) else value for key, value in row.items()}
             for row in conn.execute(text(sql)).mappings()]
    return sorted(found, key=lambda row: repr(sorted(row.items())))


def _old_database(engine: Engine, store: str) -> None:
    """A database at the revision before sid, with realistic rows."""
    _upgrade(engine, *BEFORE[store])
    with engine.begin() as conn:
        if store == "core":
            _insert(conn, "sessions", SESSIONS)
            for table, rows in OTHERS.items():
                _insert(conn, table, rows)
            _insert(conn, "turns", TURNS)
        _insert(conn, "records", RECORDS)


def _expected(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda row: repr(sorted(row.items())))


def _unique_on(inspector: Any, table: str, column: str) -> set[str]:
    """Names of the unique constraints and unique indexes on exactly (column)."""
    names = {u["name"] for u in inspector.get_unique_constraints(table) if u["column_names"] == [column]}
    return names | {i["name"] for i in inspector.get_indexes(table) if i["unique"] and i["column_names"] == [column]}


def _unique_on_sid(inspector: Any, table: str) -> set[str]:
    return _unique_on(inspector, table, "sid")


def _assert_keyed(engine: Engine, inspector: Any, table: str, key: str, columns: list[str]) -> None:
    postgres = engine.dialect.name == "postgresql"
    assert [c["name"] for c in inspector.get_columns(table)] == columns
    assert list(tables.metadata.tables[table].columns.keys()) == columns  # the store's queries agree
    pk = inspector.get_pk_constraint(table)
    assert pk["constrained_columns"] == ["sid", key]
    if postgres:
        assert pk["name"] == f"{table}_pkey"
        assert isinstance({c["name"]: c["type"] for c in inspector.get_columns(table)}["sid"], sa.BigInteger)
    else:
        with engine.connect() as conn:
            sql = conn.execute(text("SELECT sql FROM sqlite_schema WHERE name = :t"), {"t": table}).scalar_one()
        assert "WITHOUT ROWID" in sql


def _assert_layout(engine: Engine, store: str) -> None:
    """The schema of head: sid keys, the indexes and foreign keys the target names, nothing left over."""
    postgres = engine.dialect.name == "postgresql"
    inspector = inspect(engine)
    _assert_keyed(engine, inspector, "records", "record_index", RECORD_COLUMNS)
    assert inspector.get_indexes("records") == []  # no index beyond the key
    records_fks = [(fk["constrained_columns"], fk["referred_table"], fk["referred_columns"])
                   for fk in inspector.get_foreign_keys("records")]
    if store == "records":
        assert set(inspector.get_table_names()) == {"alembic_version_records", "records", "record_sessions"}
        assert records_fks == []
        assert [c["name"] for c in inspector.get_columns("record_sessions")] == ["session_id", "sid", "token"]
        assert inspector.get_pk_constraint("record_sessions")["constrained_columns"] == ["session_id"]
        assert _unique_on_sid(inspector, "record_sessions") == {"uq_record_sessions_sid"}
        sid = {c["name"]: c for c in inspector.get_columns("record_sessions")}["sid"]
        assert sid["nullable"] is False
        if postgres:
            assert sid.get("identity") is not None
        return
    assert set(inspector.get_table_names()) == set(tables.metadata.tables) - {"record_sessions"} | {"alembic_version"}
    assert records_fks == [(["sid"], "sessions", ["sid"])]
    _assert_keyed(engine, inspector, "turns", "turn_index", TURN_COLUMNS)
    assert [(i["name"], i["unique"], i["column_names"]) for i in inspector.get_indexes("turns")] == [
        ("uq_turns_turn_id", True, ["turn_id"])  # partial: only stored ids (store/ids.py)
    ]
    columns = {table: {c["name"]: c for c in inspector.get_columns(table)} for table in ("turns", "records")}
    assert [columns["turns"]["turn_id"]["nullable"], columns["records"]["record_id"]["nullable"],
            columns["records"]["turn_id"]["nullable"]] == [True, True, True]
    fks = inspector.get_foreign_keys("turns")
    assert [(fk["constrained_columns"], fk["referred_table"], fk["referred_columns"]) for fk in fks] == [
        (["sid"], "sessions", ["sid"])
    ]
    assert set(c["name"] for c in inspector.get_columns("sessions")) == set(tables.sessions.columns.keys())
    assert inspector.get_pk_constraint("sessions")["constrained_columns"] == ["session_id"]
    assert _unique_on_sid(inspector, "sessions") == {"uq_sessions_sid"}
    assert _unique_on(inspector, "sessions", "token") == {"uq_sessions_token"}
    if postgres:
        assert fks[0]["name"] == "turns_sid_fkey"
        sid = {c["name"]: c for c in inspector.get_columns("sessions")}["sid"]
        assert sid["nullable"] is False and sid.get("identity") is not None
    # The other tables still reference sessions by session_id.
    for table in OTHERS:
        referred = {(fk["referred_table"], tuple(fk["referred_columns"])) for fk in inspector.get_foreign_keys(table)}
        assert referred == {("sessions", ("session_id",))}


def _assert_sids(conn: sa.Connection, table: str, expected: dict[str, int]) -> None:
    assert dict(conn.execute(text(f"SELECT session_id, sid FROM {table}")).all()) == expected
    nulls, distinct, total = conn.execute(
        text(f"SELECT count(*) - count(sid), count(DISTINCT sid), count(*) FROM {table}")
    ).one()
    assert (nulls, distinct) == (0, total)


def _assert_foreign_keys_hold(engine: Engine) -> None:
    """Core store: no row breaks a foreign key, and a turn or record of an unknown sid is refused."""
    if engine.dialect.name == "sqlite":
        with engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA foreign_key_check").all() == []
            assert conn.exec_driver_sql("PRAGMA integrity_check").all() == [("ok",)]
    unknown = {"sid": 999}
    for table, row in (("turns", {**TURNS[0], **unknown, "turn_id": "proj~t-unknown"}),
                       ("records", {**RECORDS[0], **unknown})):
        del row["session_id"]
        with pytest.raises(sa.exc.IntegrityError), engine.begin() as conn:
            _insert(conn, table, [row])


def _assert_identity_continues(engine: Engine, store: str, largest: int) -> None:
    """PostgreSQL: a row inserted without a sid gets one above every existing sid."""
    with engine.begin() as conn:
        if store == "core":
            sid = conn.execute(text(
                "INSERT INTO sessions (session_id, owner, created_at, depth, turn_count, record_count, token) "
                "VALUES ('proj~sess-new', 'dave', :at, 0, 0, 0, 'ffffffffffffffffffffffffffffffff') RETURNING sid"
            ), {"at": T[5]}).scalar_one()
        else:
            sid = conn.execute(text(
                "INSERT INTO record_sessions (session_id) VALUES ('proj~sess-new') RETURNING sid"
            )).scalar_one()
    assert sid == largest + 1


def _check_existing(url: str, store: str) -> None:
    engine = make_engine(url)
    try:
        _old_database(engine, store)
        with engine.connect() as conn:
            before = {"records": _rows(conn, "SELECT * FROM records")}
            if store == "core":
                before["turns"] = _rows(conn, "SELECT * FROM turns")
                before["sessions"] = _rows(conn, f"SELECT {', '.join(OLD_SESSION_COLUMNS)} FROM sessions")
                before |= {table: _rows(conn, f"SELECT * FROM {table}") for table in OTHERS}
        assert before["records"] == _expected(RECORDS)
        if store == "core":
            assert before["turns"] == _expected(TURNS) and before["sessions"] == _expected(SESSIONS)

        migrate(engine, records_only=store == "records")

        _assert_layout(engine, store)
        sessions = "sessions" if store == "core" else "record_sessions"
        with engine.connect() as conn:
            _assert_sids(conn, sessions, CORE_SIDS if store == "core" else RECORDS_SIDS)
            tokens = [row[0] for row in conn.execute(text(f"SELECT token FROM {sessions}"))]
            if store == "core":  # every session gets its token: 32 random hex digits, no two alike
                assert len(set(tokens)) == len(CORE_SIDS) and all(re.fullmatch("[0-9a-f]{32}", t) for t in tokens)
            else:  # the records store learns a session's token from its first write after this
                assert tokens == [None] * len(RECORDS_SIDS)
            records = _rows(conn, "SELECT s.session_id, r.record_index, r.record_id, r.turn_id, r.turn_index, "
                                  f"r.record_type, r.content, r.created_at FROM records r JOIN {sessions} s "
                                  "ON s.sid = r.sid")
            assert records == before["records"]
            if store == "core":
                turns = _rows(conn, "SELECT s.session_id, t.turn_id, t.turn_index, t.role, t.status, "
                                    "t.first_record_index, t.end_record_index, t.created_at, t.finished_at "
                                    "FROM turns t JOIN sessions s ON s.sid = t.sid")
                assert turns == before["turns"]
                assert _rows(conn, f"SELECT {', '.join(OLD_SESSION_COLUMNS)} FROM sessions") == before["sessions"]
                for table in OTHERS:
                    assert _rows(conn, f"SELECT * FROM {table}") == before[table], table
        if store == "core":
            _assert_foreign_keys_hold(engine)
        if engine.dialect.name == "postgresql":
            _assert_identity_continues(engine, store, largest=len(CORE_SIDS if store == "core" else RECORDS_SIDS))
    finally:
        engine.dispose()


def _check_fresh(url: str, store: str) -> None:
    engine = make_engine(url)
    try:
        migrate(engine, records_only=store == "records")
        _assert_layout(engine, store)
        with engine.connect() as conn:
            for table in ("turns", "records", "sessions") if store == "core" else ("records", "record_sessions"):
                assert conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one() == 0
        if store == "core":
            _assert_foreign_keys_hold(engine)
        if engine.dialect.name == "postgresql":
            _assert_identity_continues(engine, store, largest=0)
        migrate(engine, records_only=store == "records")  # at head already: nothing to do
        _assert_layout(engine, store)
    finally:
        engine.dispose()


@pytest.mark.parametrize("store", ["core", "records"])
def test_an_existing_sqlite_database_migrates_with_every_value(store: str, tmp_path: Path) -> None:
    _check_existing(f"sqlite:///{tmp_path / 'old.db'}", store)


@pytest.mark.postgres
@pytest.mark.parametrize("store", ["core", "records"])
def test_an_existing_postgres_database_migrates_with_every_value(store: str, postgres_url: str) -> None:
    _check_existing(postgres_url, store)


@pytest.mark.parametrize("store", ["core", "records"])
def test_a_new_sqlite_database_has_the_sid_layout(store: str, tmp_path: Path) -> None:
    _check_fresh(f"sqlite:///{tmp_path / 'new.db'}", store)


@pytest.mark.postgres
@pytest.mark.parametrize("store", ["core", "records"])
def test_a_new_postgres_database_has_the_sid_layout(store: str, postgres_url: str) -> None:
    _check_fresh(postgres_url, store)


def test_a_record_without_its_session_stops_the_migration_and_changes_nothing(tmp_path: Path) -> None:
    """A core-store record whose session is gone (written with foreign keys off) is not dropped by
    the copy: the migration fails and rolls back, the database left at 0007_records_key."""
    url = f"sqlite:///{tmp_path / 'orphan.db'}"
    engine = make_engine(url)
    try:
        _old_database(engine, "core")
    finally:
        engine.dispose()
    unchecked = create_engine(url)  # no PRAGMA foreign_keys: SQLite's default, off
    try:
        with unchecked.begin() as conn:
            _insert(conn, "records", [{**RECORDS[0], "session_id": "proj~sess-gone", "record_id": "rec-gone-0"}])
    finally:
        unchecked.dispose()
    engine = make_engine(url)
    try:
        with pytest.raises(RuntimeError, match="1 rows of records have no session"):
            migrate(engine)
        with engine.connect() as conn:
            assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar_one() == "0007_records_key"
            assert conn.execute(text("SELECT count(*) FROM records")).scalar_one() == len(RECORDS) + 1
            assert "sid" not in {c["name"] for c in inspect(conn).get_columns("sessions")}
    finally:
        engine.dispose()
