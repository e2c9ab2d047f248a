"""Statements of the export chapter: the effective turns of a chain in one statement, and one turn
by its index; the export's turns and records as JSON documents built by the database.

An export's data statements write each turn and each record as the JSON object the response
holds, by concatenating the stored columns (the record's `content` is stored as compact JSON and
goes in as it is): the server joins the documents and never parses or re-serialises a record.
Strings a client chose (turn ids, record types) are quoted by the database (`json_quote` on SQLite,
`to_json` on PostgreSQL); strings the server wrote (record ids, timestamps, statuses, roles) need no
escaping; the public session id of each span is quoted once, in Python, and passed as a parameter.

A streamed export fetches the documents row by row (`turn_documents`, `record_documents`). An
export read whole lets the database join them too (`whole_documents`): one statement returns the
turns and the records as two texts with their counts, so no row reaches Python. On 400 records,
SQLite built and joined them in about a third less time than it took to return them as rows.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from functools import lru_cache
from typing import Any, NamedTuple

import orjson
from sqlalchemy import column, select, text
from sqlalchemy.engine import Connection, Result
from sqlalchemy.sql.elements import TextClause
from sqlalchemy.sql.selectable import TextualSelect

from reference_impl import diagnostics
from reference_impl.principals import public_id
from reference_impl.store import tables as t
from reference_impl.store.common import TURN_SELECT, TURNS_WITH_SESSION, Statements, sid_sql, turn_from
from reference_impl.store.rows import Segment, TurnRow

TURN_COLUMNS = "turn_id, turn_index, role, status, first_record_index, end_record_index, created_at, finished_at"


@lru_cache(maxsize=64)
def _turns_sql(spans: int) -> TextClause:
    """One statement for the turns of `spans` sessions, each up to an inclusive turn index."""
    branches = " UNION ALL ".join(
        f"SELECT {TURN_COLUMNS}, {n} AS span_ordinal, {_token(n, 'sessions')} AS token FROM turns "
        f"WHERE sid = {sid_sql(f's{n}')} AND turn_index >= :f{n} AND turn_index <= :u{n}"
        for n in range(spans)
    )
    return text(f"SELECT * FROM ({branches}) AS spans ORDER BY span_ordinal, turn_index")


def _quote(dialect: str, expression: str) -> str:
    """SQL for `expression`, a string a client chose, as a JSON string (JSON null when NULL)."""
    if dialect == "postgresql":
        return f"COALESCE(CAST(to_json(CAST({expression} AS TEXT)) AS TEXT), 'null')"
    return f"json_quote({expression})"


def _plain(expression: str) -> str:
    """SQL for `expression`, a string the server wrote that needs no escaping (a UUID, a
    timestamp, a status or role name), as a JSON string; it must not be NULL."""
    return f"""'"' || {expression} || '"'"""


def _token(n: int, keys: str) -> str:
    """SQL for the token of span or segment n's session (a subquery the database runs once)."""
    return f"(SELECT token FROM {keys} WHERE session_id = :s{n})"


def _turn_id_json(dialect: str, n: int, keys: str = "sessions") -> str:
    """SQL for a turn id as a JSON string: the stored one (a client's, quoted) or, when the column is
    NULL, the one derived from the session's token and the turn index (store/ids.py)."""
    stored = f"substr(turn_id, CAST(:k{n} AS INTEGER))"
    quoted = f"json_quote({stored})" if dialect == "sqlite" else _quote(dialect, stored)
    return f"""CASE WHEN turn_id IS NULL THEN '"' || {_token(n, keys)} || 't' || CAST(turn_index AS TEXT) || '"' ELSE {quoted} END"""


def _record_id(n: int, keys: str) -> str:
    """SQL for a record id: the stored one, or the one derived from the token and the index."""
    return f"COALESCE(record_id, {_token(n, keys)} || 'r' || CAST(record_index AS TEXT))"


# The columns of a documents statement, declared so SQLAlchemy builds its result metadata once.
DOCUMENT_COLUMNS = (column("o"), column("i"), column("doc"))


def _turn_branches(dialect: str, spans: int) -> str:
    """One SELECT per (session, first, last) span of turns as (o, i, doc), joined by UNION ALL."""
    if dialect == "sqlite":  # one printf call per row: a third faster than a chain of `||`
        doc = lambda n: (  # noqa: E731
            """printf('{"turn_id":%s,"session_id":%s,"role":"%s","index":%d,"status":"%s","""
            """"created_at":"%s","finished_at":%s}', """
            f"{_turn_id_json(dialect, n)}, :p{n}, role, turn_index, status, created_at, "
            f"""COALESCE('"' || finished_at || '"', 'null'))"""
        )
    else:
        doc = lambda n: (  # noqa: E731
            f"""'{{"turn_id":' || {_turn_id_json(dialect, n)} || ',"session_id":' || :p{n} || """
            f"""',"role":' || {_plain("role")} || ',"index":' || CAST(turn_index AS TEXT) || """
            f"""',"status":' || {_plain("status")} || ',"created_at":' || {_plain("created_at")} || """
            f"""',"finished_at":' || COALESCE({_plain("finished_at")}, 'null') || '}}'"""
        )
    return " UNION ALL ".join(
        f"SELECT {n} AS o, turn_index AS i, {doc(n)} AS doc FROM turns "
        f"WHERE sid = {sid_sql(f's{n}')} AND turn_index >= :f{n} AND turn_index <= :u{n}"
        for n in range(spans)
    )


@lru_cache(maxsize=64)
def _turn_documents_sql(dialect: str, spans: int) -> TextualSelect:
    """The turns of `spans` (session, first, last) ranges as JSON documents (views.turn), in order."""
    return text(f"SELECT o, i, doc FROM ({_turn_branches(dialect, spans)}) AS spans ORDER BY o, i").columns(*DOCUMENT_COLUMNS)


def _record_branches(dialect: str, segments: int, keys: str = "sessions", prefix: str = "") -> str:
    """One SELECT per bounded segment of records as (o, i, doc), joined by UNION ALL; `prefix`
    renames the parameters (:s0 becomes :rs0) so the text can share a statement with the turns'."""
    if dialect == "sqlite":  # one printf call per row, as for the turns
        doc = lambda n: (  # noqa: E731
            """printf('{"record_id":"%s","session_id":%s,"turn_id":%s,"index":%d,"type":%s,"content":%s,"""
            """"created_at":"%s"}', """
            f"{_record_id(n, keys)}, :p{n}, {_turn_id_json(dialect, n, keys)}, record_index, "
            "json_quote(record_type), content, created_at)"
        )
    else:
        q = lambda expression: _quote(dialect, expression)  # noqa: E731
        doc = lambda n: (  # noqa: E731
            f"""'{{"record_id":' || {_plain(_record_id(n, keys))} || ',"session_id":' || :p{n} || """
            f"""',"turn_id":' || {_turn_id_json(dialect, n, keys)} || ',"index":' || CAST(record_index AS TEXT) || """
            f"""',"type":' || {q("record_type")} || ',"content":' || content || """
            f"""',"created_at":' || {_plain("created_at")} || '}}'"""
        )
    branches = " UNION ALL ".join(
        f"SELECT {n} AS o, record_index AS i, {doc(n)} AS doc FROM records "
        f"WHERE sid = {sid_sql(f's{n}', keys)} AND record_index > :a{n} AND record_index <= :u{n}"
        for n in range(segments)
    )
    return branches if prefix == "" else re.sub(r"(?<![\w:]):([spuak])(\d+)\b", rf":{prefix}\1\2", branches)


@lru_cache(maxsize=128)
def _record_documents_sql(dialect: str, segments: int, keys: str = "sessions") -> TextualSelect:
    """The records of `segments` bounded ranges as JSON documents (views.record), in order."""
    branches = _record_branches(dialect, segments, keys)
    return text(f"SELECT o, i, doc FROM ({branches}) AS segments ORDER BY o, i").columns(*DOCUMENT_COLUMNS)


def _aggregate(dialect: str, branches: str | None) -> str:
    """A one-row SELECT of (n, docs): how many documents the branches produce and the documents
    joined by commas in (o, i) order (docs is NULL when there are none). PostgreSQL orders the
    aggregate's input by ORDER BY; SQLite before 3.44 has no such clause, and its aggregate takes
    the rows in the order of a subquery with ORDER BY (such a subquery is never flattened into an
    aggregate query), which the export's order tests hold."""
    if branches is None:
        return "SELECT 0 AS n, NULL AS docs"
    if dialect == "postgresql":
        return f"SELECT count(*) AS n, string_agg(doc, ',' ORDER BY o, i) AS docs FROM ({branches}) AS b"
    return f"SELECT count(*) AS n, group_concat(doc, ',') AS docs FROM (SELECT doc FROM ({branches}) ORDER BY o, i)"


# The columns of a whole-export statement: turns (count, documents), records (count, documents).
WHOLE_COLUMNS = (column("tn"), column("td"), column("rn"), column("rd"))


@lru_cache(maxsize=128)
def _whole_sql(dialect: str, spans: int, segments: int, keys: str = "sessions") -> TextualSelect:
    """Every turn and every record of an export as two joined texts with their counts, in one
    statement: a row of the two aggregates (either part may be empty: spans or segments 0)."""
    turns = _aggregate(dialect, _turn_branches(dialect, spans) if spans else None)
    records = _aggregate(dialect, _record_branches(dialect, segments, keys, "r") if segments else None)
    return text(f"SELECT t.n AS tn, t.docs AS td, r.n AS rn, r.docs AS rd FROM ({turns}) AS t, ({records}) AS r").columns(*WHOLE_COLUMNS)


@lru_cache(maxsize=128)
def _whole_part_sql(dialect: str, kind: str, count: int, keys: str = "sessions") -> TextualSelect:
    """The turns' or the records' aggregate alone, as `_whole_sql` (records kept in a second store)."""
    branches = _turn_branches(dialect, count) if kind == "turns" else _record_branches(dialect, count, keys, "r")
    return text(f"SELECT n, docs FROM ({_aggregate(dialect, branches)}) AS a").columns(column("n"), column("docs"))


class Whole(NamedTuple):
    """An export's documents read whole: the turns and the records, each as its count and the
    documents joined by commas (empty when there are none)."""

    turn_count: int
    turns: str
    record_count: int
    records: str


class Documents:
    """The rows of a documents statement, fetched as they are consumed: (ordinal, index, doc)."""

    def __init__(self, result: Any, batch: int) -> None:
        self.result = result  # anything with fetchmany(n) and close(): a Result, or rows in hand
        self.batch = batch

    @classmethod
    def of(cls, rows: list[Any]) -> Documents:
        """Rows already in hand (a test's substitute statements)."""
        return cls(_Rows(rows), 10**9)

    def batches(self) -> Iterator[list[Any]]:
        try:
            while True:
                rows = self.result.fetchmany(self.batch)
                if not rows:
                    return
                yield rows
        finally:
            self.result.close()


class _Rows:
    def __init__(self, rows: list[Any]) -> None:
        self.rows = rows

    def fetchmany(self, size: int) -> list[Any]:
        taken, self.rows = self.rows[:size], self.rows[size:]
        return taken

    def close(self) -> None:
        self.rows = []


class ExportStatements(Statements):
    @staticmethod
    def document_naming(session_id: str) -> tuple[str, int]:
        """The session's public id as a JSON string, and where a key of its project starts its id
        (1-based, for `substr`): a turn's key has the same project prefix as its session's."""
        public = public_id(session_id)
        return orjson.dumps(public).decode(), len(session_id) - len(public) + 1

    def effective_turns(self, spans: Sequence[tuple[str, int, int]]) -> list[TurnRow]:
        """The turns of each (session, first, last turn index) span, in span then index order: one statement."""
        if not spans:
            return []
        params: dict[str, Any] = {}
        for n, (session_id, first, upto) in enumerate(spans):
            params[f"s{n}"], params[f"f{n}"], params[f"u{n}"] = session_id, first, upto
        rows = self.conn.execute(_turns_sql(len(spans)), params).mappings()
        return [turn_from({**row, "session_id": spans[row["span_ordinal"]][0]}) for row in rows]

    def turn_at_index(self, session_id: str, turn_index: int) -> TurnRow | None:
        """The turn of a session with this index: one statement (the key of both)."""
        query = (
            select(*TURN_SELECT)
            .select_from(TURNS_WITH_SESSION)
            .where(t.sessions.c.session_id == session_id, t.turns.c.turn_index == turn_index)
        )
        row = self.conn.execute(query).mappings().first()
        return turn_from(row) if row else None

    def span_params(self, spans: Sequence[tuple[str, int, int]]) -> dict[str, Any]:
        """The parameters of the documents statements' turn branches: each span's session, range and naming."""
        params: dict[str, Any] = {}
        for n, (session_id, first, upto) in enumerate(spans):
            params[f"s{n}"], params[f"f{n}"], params[f"u{n}"] = session_id, first, upto
            params[f"p{n}"], params[f"k{n}"] = self.document_naming(session_id)
        return params

    def segment_params(self, segments: Sequence[Segment], prefix: str = "") -> dict[str, Any]:
        """The parameters of the record branches (`prefix` as `_record_branches` names them)."""
        params: dict[str, Any] = {}
        for n, segment in enumerate(segments):
            assert segment.upto is not None
            params[f"{prefix}s{n}"], params[f"{prefix}a{n}"], params[f"{prefix}u{n}"] = segment.session_id, segment.after, segment.upto
            params[f"{prefix}p{n}"], params[f"{prefix}k{n}"] = self.document_naming(segment.session_id)
        return params

    def turn_documents(self, spans: Sequence[tuple[str, int, int]], batch: int = 0) -> Documents:
        """The turns of each (session, first, last turn index) span as JSON documents, in span then
        index order: one statement, its rows fetched as they are consumed (`batch` at a time; 0:
        all of them now)."""
        params = self.span_params(spans)
        conn = self.stream_conn if batch else self.conn
        query = _turn_documents_sql(conn.dialect.name, len(spans))
        return Documents(_execute(conn, query, params, batch), batch or 10**9)

    def whole_documents(self, spans: Sequence[tuple[str, int, int]], segments: Sequence[Segment]) -> Whole:
        """Every turn of the spans and every record of the bounded segments as joined JSON documents
        with their counts: one statement (two when the records are kept in a second store). The
        database joins the documents, so no row reaches Python (store/export.py's docstring). With
        nothing to read (a session without turns), no statement is sent."""
        if not spans and not segments:
            return Whole(0, "", 0, "")
        params = {**self.span_params(spans), **self.segment_params(segments, "r")}
        if self.records_apart and segments:
            turns = self.conn.execute(self.whole_query("turns", len(spans), 0), params).one() if spans else (0, None)
            records = self.records_conn.execute(self.whole_query("records", 0, len(segments)), params).one()
            row = (*turns, *records)
        else:
            row = self.conn.execute(self.whole_query("both", len(spans), len(segments)), params).one()
        diagnostics.count_records_examined(sum(max(segment.upto - segment.after, 0) for segment in segments if segment.upto is not None))
        return Whole(int(row[0]), row[1] or "", int(row[2]), row[3] or "")

    def whole_query(self, part: str, spans: int, segments: int) -> TextualSelect:
        """The statement of `whole_documents` for `spans` turn ranges and `segments` record ranges:
        `both` in one statement, or the `turns` or the `records` alone (records kept apart)."""
        if part == "turns":
            return _whole_part_sql(self.conn.dialect.name, "turns", spans)
        if part == "records":
            return _whole_part_sql(self.records_conn.dialect.name, "records", segments, self.record_keys.name)
        return _whole_sql(self.conn.dialect.name, spans, segments)

    def record_documents(self, segments: Sequence[Segment], batch: int = 0) -> Documents:
        """Every record of the bounded segments as a JSON document, in segment then index order:
        one statement of index range scans. Each range's records are counted as examined when the
        statement is sent (the rows it will produce: indexes are dense within a session)."""
        params = self.segment_params(segments)
        conn = self.stream_conn if batch and not self.records_apart else self.records_conn
        query = _record_documents_sql(conn.dialect.name, len(segments), self.record_keys.name)
        documents = Documents(_execute(conn, query, params, batch), batch or 10**9)
        diagnostics.count_records_examined(sum(max(segment.upto - segment.after, 0) for segment in segments if segment.upto is not None))
        return documents


def _execute(conn: Connection, query: TextualSelect, params: dict[str, Any], batch: int) -> Result[Any]:
    """Send the statement; with a `batch` its rows stay in the database until fetched (a server-side
    cursor on PostgreSQL; SQLite steps its statement as rows are fetched)."""
    if batch and conn.dialect.name == "postgresql":
        return conn.execute(query, params, execution_options={"stream_results": True, "max_row_buffer": batch})
    return conn.execute(query, params)
