"""Storage layouts probe: what the storage scenario would cost under other table layouts.

The storage comparison (4) measures the reference's real schema. When that misses its target, this
probe says what would meet it: it writes the same shape of data (a parent of N turns and its
branches of one turn each, every turn with its records, the same content, ids and timestamps as
the reference writes) into plain tables of three layouts, on a fresh database of the same engine,
and measures their bytes the same way. One layout is the reference's own (`REFERENCE`), so the probe
can be checked against the real measurement taken in the same run.

- `text ids` (the reference before migration 0008): every record and turn row carries the session
  id and its own uuid as text; turns are keyed by uuid, with a unique index on (session, index).
- `integer session keys` (the reference now): turns and records keyed by the session's integer
  key and their index; each row still stores its uuid(s).
- `integer session keys, derived ids`: a turn id and a record id derived from a per-session token
  and the index, nothing stored per row; the nullable id columns and the partial index a migration
  would keep for ids made before are there, so the probe does not flatter it.
"""

from __future__ import annotations

import secrets
import uuid
from typing import Any

from sqlalchemy import text

from benchmarks.backend import Backend
from benchmarks.config import Config

STAMP = "2026-12-05T01:11:39.420042Z"  # the reference's timestamps: microseconds, UTC

_TEXT_RECORDS = (
    "CREATE TABLE probe_records (record_id VARCHAR(64) NOT NULL, session_id VARCHAR(256) NOT NULL, "
    "record_index INTEGER NOT NULL, turn_id VARCHAR(256) NOT NULL, turn_index INTEGER NOT NULL, "
    "record_type VARCHAR(64) NOT NULL, content TEXT NOT NULL, created_at VARCHAR(40) NOT NULL, "
    "PRIMARY KEY (session_id, record_index)) {no_rowid}"
)


def _keyed(ids: str) -> tuple[str, ...]:
    """Turns and records keyed by (sid, index); `ids`: NOT NULL (stored) or NULL (derived)."""
    return (
        "CREATE TABLE probe_records (sid BIGINT NOT NULL, record_index INTEGER NOT NULL, "
        f"record_id VARCHAR(64) {ids}, turn_id VARCHAR(256) {ids}, turn_index INTEGER NOT NULL, "
        "record_type VARCHAR(64) NOT NULL, content TEXT NOT NULL, created_at VARCHAR(40) NOT NULL, "
        "PRIMARY KEY (sid, record_index)) {no_rowid}",
        "CREATE TABLE probe_turns (sid BIGINT NOT NULL, turn_index INTEGER NOT NULL, "
        f"turn_id VARCHAR(256) {ids}, role VARCHAR(16) NOT NULL, status VARCHAR(16) NOT NULL, "
        "first_record_index INTEGER NOT NULL, end_record_index INTEGER, created_at VARCHAR(40) NOT NULL, "
        "finished_at VARCHAR(40), PRIMARY KEY (sid, turn_index)) {no_rowid}",
        "CREATE UNIQUE INDEX probe_turns_turn_id ON probe_turns (turn_id)"
        + (" WHERE turn_id IS NOT NULL" if ids == "NULL" else ""),
    )


LAYOUTS: dict[str, tuple[str, ...]] = {
    "text ids": (
        _TEXT_RECORDS,
        "CREATE TABLE probe_turns (turn_id VARCHAR(256) NOT NULL PRIMARY KEY, session_id VARCHAR(256) NOT NULL, "
        "turn_index INTEGER NOT NULL, role VARCHAR(16) NOT NULL, status VARCHAR(16) NOT NULL, "
        "first_record_index INTEGER NOT NULL, end_record_index INTEGER, created_at VARCHAR(40) NOT NULL, "
        "finished_at VARCHAR(40))",
        "CREATE UNIQUE INDEX probe_turns_session_index ON probe_turns (session_id, turn_index)",
    ),
    "integer session keys": _keyed("NOT NULL"),
    "integer session keys, derived ids": _keyed("NULL"),
}
# The layout the reference has now (migration 0008_session_keys): comparing the probe's figure for
# it with comparison 4's, taken in the same run, checks the probe.
REFERENCE = "integer session keys, derived ids"


def _rows(layout: str, config: Config) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int]:
    """The storage scenario's turns and records for `layout`, and their content bytes."""
    body = secrets.token_hex(config.record_content_bytes)
    prefix = '{"text":"'
    content = prefix + body[: config.record_content_bytes - len(prefix) - 2] + '"}'
    derived = "derived" in layout
    turns: list[dict[str, Any]] = []
    records: list[dict[str, Any]] = []
    sizes = [config.storage_parent_turns] + [1] * config.storage_branches
    for number, size in enumerate(sizes, start=1):
        session: dict[str, Any] = {"sid": number} if "integer" in layout else {"session_id": str(uuid.uuid4())}
        for index in range(size):
            turn_id = None if derived else str(uuid.uuid4())
            first = index * config.records_per_turn
            turns.append({
                **session, "turn_id": turn_id, "turn_index": index, "role": ("user", "assistant")[index % 2],
                "status": "completed", "first_record_index": first,
                "end_record_index": first + config.records_per_turn, "created_at": STAMP, "finished_at": STAMP,
            })
            for offset in range(config.records_per_turn):
                records.append({
                    **session, "record_index": first + offset, "record_id": None if derived else str(uuid.uuid4()),
                    "turn_id": turn_id, "turn_index": index, "record_type": "message", "content": content,
                    "created_at": STAMP,
                })
    return turns, records, len(content) * len(records)


def probe(backend: Backend, config: Config) -> dict[str, Any]:
    """Bytes per content byte of the storage scenario under each layout, on `backend`'s engine."""
    results = []
    for layout, statements in LAYOUTS.items():
        turns, records, content = _rows(layout, config)
        with backend.database(config.limits) as db:
            no_rowid = "WITHOUT ROWID" if db.kind == "sqlite" else ""
            with db.engine.begin() as conn:
                for statement in statements:
                    conn.execute(text(statement.format(no_rowid=no_rowid)))
            baseline = db.size_bytes()
            with db.engine.begin() as conn:
                for table, rows in (("probe_turns", turns), ("probe_records", records)):
                    columns = list(rows[0])
                    insert = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join(':' + c for c in columns)})"
                    conn.execute(text(insert), rows)
            grown = db.size_bytes() - baseline
        results.append({
            "layout": layout,
            "reference": layout == REFERENCE,
            "records": len(records),
            "content_bytes": content,
            "bytes": grown,
            "bytes_per_content_byte": grown / content,
        })
    return {"layouts": results}
