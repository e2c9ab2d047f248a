"""Statements of the export chapter: the effective turns of a chain in one statement, and one turn
by its index; the export's turns and records as JSON documents built by the database.

An export's data statements write each turn and each record as the JSON object the response
holds, by concatenating the stored columns (the record's `content` is stored as compact JSON and
goes in as it is): the server joins the documents and never parses or re-serialises a record.
Strings a client chose (turn ids, record types) are quoted by the database (`json_quote` on SQLite,
`to_json` on PostgreSQL); strings the server wrote (record ids, timestamps, statuses, roles) need no
escaping; the public session id of each span is quoted once, in Python, and passed as a parameter.

A streamed export fetches the documents row by row (`turn_documents`, `record_documents`). An
export read whole lets the database join them too (`whole_documents`): one statement returns, for
each span of turns and each segment of records, its documents as one text with their count, so no
row reaches Python. On 400 records, SQLite built and joined them in about a third less time than it
took to return them as rows.
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


def _turn_id_json(dialect: str, n: int) -> str:
    """SQL for a turn id as a JSON string: the stored one (a client's, quoted) or, when the column is
    NULL, the one derived from the session's token (`:t<n>`) and the turn index (store/ids.py)."""
    stored = f"substr(turn_id, CAST(:k{n} AS INTEGER))"
    quoted = f"json_quote({stored})" if dialect == "sqlite" else _quote(dialect, stored)
    return f"""CASE WHEN turn_id IS NULL THEN '"' || :t{n} || 't' || CAST(turn_index AS TEXT) || '"' ELSE {quoted} END"""


def _record_id(n: int) -> str:
    """SQL for a record id: the stored one, or the one derived from the token (`:t<n>`) and the index."""
    return f"COALESCE(record_id, :t{n} || 'r' || CAST(record_index AS TEXT))"


# The columns of a documents statement, declared so SQLAlchemy builds its result metadata once.
DOCUMENT_COLUMNS = (column("o"), column("i"), column("doc"))


def _turn_selects(dialect: str, spans: int) -> list[str]:
    """One SELECT per (session, first, last) span of turns as (o, i, doc)."""
    if dialect == "sqlite":  # one printf call per row: a third faster than a chain of `||`
        # A derived turn id (the column NULL) is written by the format itself, without building it
        # first: that is most turns, and about a seventh of the time.
        doc = lambda n: (  # noqa: E731
            "CASE WHEN turn_id IS NULL THEN "
            """printf('{"turn_id":"%st%d","session_id":%s,"role":"%s","index":%d,"status":"%s","""
            """"created_at":"%s","finished_at":%s}', """
            f":t{n}, turn_index, :p{n}, role, turn_index, status, created_at, "
            f"""COALESCE('"' || finished_at || '"', 'null')) ELSE """
            """printf('{"turn_id":%s,"session_id":%s,"role":"%s","index":%d,"status":"%s","""
            """"created_at":"%s","finished_at":%s}', """
            f"{_turn_id_json(dialect, n)}, :p{n}, role, turn_index, status, created_at, "
            f"""COALESCE('"' || finished_at || '"', 'null')) END"""
        )
    else:
        doc = lambda n: (  # noqa: E731
            f"""'{{"turn_id":' || {_turn_id_json(dialect, n)} || ',"session_id":' || :p{n} || """
            f"""',"role":' || {_plain("role")} || ',"index":' || CAST(turn_index AS TEXT) || """
            f"""',"status":' || {_plain("status")} || ',"created_at":' || {_plain("created_at")} || """
            f"""',"finished_at":' || COALESCE({_plain("finished_at")}, 'null') || '}}'"""
        )
    return [
        f"SELECT {n} AS o, turn_index AS i, {doc(n)} AS doc FROM turns "
        f"WHERE sid = {sid_sql(f's{n}')} AND turn_index >= :f{n} AND turn_index <= :u{n}"
        for n in range(spans)
    ]


def _turn_branches(dialect: str, spans: int) -> str:
    """The spans' SELECTs (`_turn_selects`) joined by UNION ALL."""
    return " UNION ALL ".join(_turn_selects(dialect, spans))


@lru_cache(maxsize=64)
def _turn_documents_sql(dialect: str, spans: int) -> TextualSelect:
    """The turns of `spans` (session, first, last) ranges as JSON documents (views.turn), in order."""
    return text(f"SELECT o, i, doc FROM ({_turn_branches(dialect, spans)}) AS spans ORDER BY o, i").columns(*DOCUMENT_COLUMNS)


def _record_selects(dialect: str, segments: int, keys: str = "sessions", prefix: str = "") -> list[str]:
    """One SELECT per bounded segment of records as (o, i, doc); `prefix` renames the parameters
    (:s0 becomes :rs0) so the text can share a statement with the turns'."""
    if dialect == "sqlite":  # one printf call per row, with derived ids written by the format, as for the turns
        doc = lambda n: (  # noqa: E731
            "CASE WHEN record_id IS NULL AND turn_id IS NULL THEN "
            """printf('{"record_id":"%sr%d","session_id":%s,"turn_id":"%st%d","index":%d,"type":%s,"content":%s,"""
            """"created_at":"%s"}', """
            f":t{n}, record_index, :p{n}, :t{n}, turn_index, record_index, json_quote(record_type), content, created_at) ELSE "
            """printf('{"record_id":"%s","session_id":%s,"turn_id":%s,"index":%d,"type":%s,"content":%s,"""
            """"created_at":"%s"}', """
            f"{_record_id(n)}, :p{n}, {_turn_id_json(dialect, n)}, record_index, "
            "json_quote(record_type), content, created_at) END"
        )
    else:
        q = lambda expression: _quote(dialect, expression)  # noqa: E731
        doc = lambda n: (  # noqa: E731
            f"""'{{"record_id":' || {_plain(_record_id(n))} || ',"session_id":' || :p{n} || """
            f"""',"turn_id":' || {_turn_id_json(dialect, n)} || ',"index":' || CAST(record_index AS TEXT) || """
            f"""',"type":' || {q("record_type")} || ',"content":' || content || """
            f"""',"created_at":' || {_plain("created_at")} || '}}'"""
        )
    selects = [
        f"SELECT {n} AS o, record_index AS i, {doc(n)} AS doc FROM records "
        f"WHERE sid = {sid_sql(f's{n}', keys)} AND record_index > :a{n} AND record_index <= :u{n}"
        for n in range(segments)
    ]
    if prefix == "":
        return selects
    return [re.sub(r"(?<![\w:]):([spuakt])(\d+)\b", rf":{prefix}\1\2", select) for select in selects]


def _record_branches(dialect: str, segments: int, keys: str = "sessions") -> str:
    """The segments' SELECTs (`_record_selects`) joined by UNION ALL."""
    return " UNION ALL ".join(_record_selects(dialect, segments, keys))


@lru_cache(maxsize=128)
def _record_documents_sql(dialect: str, segments: int, keys: str = "sessions") -> TextualSelect:
    """The records of `segments` bounded ranges as JSON documents (views.record), in order."""
    branches = _record_branches(dialect, segments, keys)
    return text(f"SELECT o, i, doc FROM ({branches}) AS segments ORDER BY o, i").columns(*DOCUMENT_COLUMNS)


def _aggregate(dialect: str, select: str) -> str:
    """A one-row SELECT of (n, d) over one branch (`_turn_selects`, `_record_selects`): how many
    documents it produces and the documents joined by commas in index order (d is NULL when there
    are none). PostgreSQL orders the aggregate's input by ORDER BY. SQLite before 3.44 has no such
    clause; its aggregate takes the rows in the order of a subquery with ORDER BY (such a subquery
    is never flattened into an aggregate query), which the export's order tests hold. A branch is
    one index range scan, so its ORDER BY costs no sort (a sort of the whole union did: a quarter
    of the statement's time on 153 documents)."""
    if dialect == "postgresql":
        return f"SELECT count(*) AS n, string_agg(doc, ',' ORDER BY i) AS d FROM ({select}) AS b"
    return f"SELECT count(*) AS n, group_concat(doc, ',') AS d FROM ({select} ORDER BY i)"


def _aggregates(dialect: str, selects: list[str]) -> TextualSelect:
    """One row of every branch's (n, d) in branch order: n0, d0, n1, d1, ..."""
    names = [name for b in range(len(selects)) for name in (f"n{b}", f"d{b}")]
    tables = ", ".join(f"({_aggregate(dialect, select)}) AS b{b}" for b, select in enumerate(selects))
    listed = ", ".join(f"b{b}.n AS n{b}, b{b}.d AS d{b}" for b in range(len(selects)))
    return text(f"SELECT {listed} FROM {tables}").columns(*(column(name) for name in names))


@lru_cache(maxsize=128)
def _whole_sql(dialect: str, spans: int, segments: int, keys: str = "sessions") -> TextualSelect:
    """Every turn and every record of an export in one statement: a row of each span's and then
    each segment's (count, documents joined) (either part may be empty: spans or segments 0)."""
    return _aggregates(dialect, [*_turn_selects(dialect, spans), *_record_selects(dialect, segments, keys, "r")])


def _joined_parts(row: Sequence[Any]) -> tuple[int, str]:
    """The (count, documents) pairs of a row of `_aggregates`, summed and joined in order."""
    counts, docs = row[0::2], row[1::2]
    return sum(int(n) for n in counts), ",".join(d for d in docs if d)


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

    def document_token(self, session_id: str) -> str:
        """The session's token, which the documents' derived ids are made of: read by the chain
        earlier in this transaction (an export reads the chain first). A parameter, not a subquery
        in the statement: SQLite built the documents about a sixth faster so."""
        try:
            return self.tokens[session_id]
        except KeyError:
            raise LookupError(f"the chain naming session {session_id} was not read in this transaction") from None

    def span_params(self, spans: Sequence[tuple[str, int, int]]) -> dict[str, Any]:
        """The parameters of the documents statements' turn branches: each span's session, range,
        naming and token."""
        params: dict[str, Any] = {}
        for n, (session_id, first, upto) in enumerate(spans):
            params[f"s{n}"], params[f"f{n}"], params[f"u{n}"] = session_id, first, upto
            params[f"p{n}"], params[f"k{n}"] = self.document_naming(session_id)
            params[f"t{n}"] = self.document_token(session_id)
        return params

    def segment_params(self, segments: Sequence[Segment], prefix: str = "") -> dict[str, Any]:
        """The parameters of the record branches (`prefix` as `_record_selects` names them)."""
        params: dict[str, Any] = {}
        for n, segment in enumerate(segments):
            assert segment.upto is not None
            params[f"{prefix}s{n}"], params[f"{prefix}a{n}"], params[f"{prefix}u{n}"] = segment.session_id, segment.after, segment.upto
            params[f"{prefix}p{n}"], params[f"{prefix}k{n}"] = self.document_naming(segment.session_id)
            params[f"{prefix}t{n}"] = self.document_token(segment.session_id)
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
            turns = tuple(self.conn.execute(self.whole_query("turns", len(spans), 0), params).one()) if spans else ()
            records = tuple(self.records_conn.execute(self.whole_query("records", 0, len(segments)), params).one())
            row = (*turns, *records)
        else:
            row = tuple(self.conn.execute(self.whole_query("both", len(spans), len(segments)), params).one())
        diagnostics.count_records_examined(sum(max(segment.upto - segment.after, 0) for segment in segments if segment.upto is not None))
        turn_count, turn_docs = _joined_parts(row[: 2 * len(spans)])
        record_count, record_docs = _joined_parts(row[2 * len(spans):])
        return Whole(turn_count, turn_docs, record_count, record_docs)

    def whole_query(self, part: str, spans: int, segments: int) -> TextualSelect:
        """The statement of `whole_documents` for `spans` turn ranges and `segments` record ranges:
        `both` in one statement, or the `turns` or the `records` alone (records kept apart)."""
        if part == "turns":
            return _whole_sql(self.conn.dialect.name, spans, 0)
        if part == "records":
            return _whole_sql(self.records_conn.dialect.name, 0, segments, self.record_keys.name)
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
