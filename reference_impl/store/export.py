"""Statements of the export chapter: the effective turns of a chain in one statement, and one turn
by its index; the export's turns and records as JSON documents built by the database
(store/documents.py writes their SQL).

A streamed export fetches the documents row by row (`turn_documents`, `record_documents`); one read
whole gets them joined (`whole_documents`), or with the chain in the same statement
(`chain_with_documents`) when nothing in the chain was reverted.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import lru_cache
from typing import Any, NamedTuple

import orjson
from sqlalchemy import select, text
from sqlalchemy.engine import Connection, Result
from sqlalchemy.sql.elements import TextClause
from sqlalchemy.sql.selectable import TextualSelect

from reference_impl import diagnostics
from reference_impl.principals import public_id
from reference_impl.store import tables as t
from reference_impl.store.common import TURN_SELECT, TURNS_WITH_SESSION, Statements, sid_sql, turn_from
from reference_impl.store.documents import chain_documents_sql, record_documents_sql, turn_documents_sql, whole_sql
from reference_impl.store.rows import ChainLink, Segment, TurnRow
from reference_impl.store.transcript import CHAIN_NAMES, chain_links

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


def _token(n: int, keys: str) -> str:
    """SQL for the token of span or segment n's session (a subquery the database runs once)."""
    return f"(SELECT token FROM {keys} WHERE session_id = :s{n})"


class GuessRow(NamedTuple):
    """One chain row's part of a `Guess`: the session, the turn and record bounds the statement
    used, and the counts and joined documents it built (None when it built none)."""

    session_id: str
    tb: int
    rb: int
    tn: int | None
    td: str | None
    rn: int | None
    rd: str | None


class Guess(NamedTuple):
    """The documents `chain_documents_sql` built with the chain, a row per session, root first."""

    rows: list[GuessRow]

    def whole(self, spans: Sequence[tuple[str, int, int]], segments: Sequence[Segment]) -> Whole | None:
        """The export's documents, if the guess read exactly these spans and segments (and found
        every row in them); None when it did not, and the documents must be read. Asked once the
        caller may read the chain: the records the guess read count as examined from then on (an
        unreadable session's answer must not tell them)."""
        if any(row.tn is None for row in self.rows):
            return None
        diagnostics.count_records_examined(sum(row.rn or 0 for row in self.rows))
        guessed_spans = [(row.session_id, 0, row.tb) for row in self.rows if row.tb >= 0]
        guessed_segments = [(row.session_id, -1, row.rb) for row in self.rows if row.rb >= 0]
        if guessed_spans != list(spans) or guessed_segments != [(s.session_id, s.after, s.upto) for s in segments]:
            return None
        turn_count = sum(row.tn or 0 for row in self.rows)
        record_count = sum(row.rn or 0 for row in self.rows)
        if turn_count != sum(last - first + 1 for _, first, last in spans):
            return None
        if record_count != sum((s.upto or 0) - s.after for s in segments):
            return None
        return Whole(
            turn_count, ",".join(row.td for row in self.rows if row.td),
            record_count, ",".join(row.rd for row in self.rows if row.rd),
        )


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

    def chain_with_documents(
        self, session_id: str, max_hops: int, viewer: str, most: int, limit: int
    ) -> tuple[list[ChainLink], Guess | None]:
        """The chain (as `chain`), and with it the export's documents guessed for a chain nothing
        in was reverted, of up to `limit` turns and `limit` records and `most` of both
        (`chain_documents_sql`): one statement.
        No guess (None) when a session of the chain is named in another project than the one read:
        the statement names them all as that one's."""
        _, start = self.document_naming(session_id)
        params = {"session_id": session_id, "max_hops": max_hops, "viewer": viewer, "k": start, "most": most, "limit": limit}
        result = self.conn.execute(self.chain_documents_query(), params)
        width = len(CHAIN_NAMES)
        rows = sorted(result.all(), key=lambda row: -row[0])  # root first: by hops, the first column
        links = chain_links([dict(zip(CHAIN_NAMES, row[:width])) for row in rows], viewer, self.tokens)
        guess = Guess([GuessRow(row[4], *row[width:]) for row in rows])  # row[4]: the session id
        if any(self.document_naming(link.session.session_id)[1] != start for link in links):
            return links, None
        return links, guess

    def chain_documents_query(self) -> TextualSelect:
        """The statement of `chain_with_documents`."""
        return chain_documents_sql(self.conn.dialect.name)

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
        query = turn_documents_sql(conn.dialect.name, len(spans))
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
            return whole_sql(self.conn.dialect.name, spans, 0)
        if part == "records":
            return whole_sql(self.records_conn.dialect.name, 0, segments, self.record_keys.name)
        return whole_sql(self.conn.dialect.name, spans, segments)

    def record_documents(self, segments: Sequence[Segment], batch: int = 0) -> Documents:
        """Every record of the bounded segments as a JSON document, in segment then index order:
        one statement of index range scans. Each range's records are counted as examined when the
        statement is sent (the rows it will produce: indexes are dense within a session)."""
        params = self.segment_params(segments)
        conn = self.stream_conn if batch and not self.records_apart else self.records_conn
        query = record_documents_sql(conn.dialect.name, len(segments), self.record_keys.name)
        documents = Documents(_execute(conn, query, params, batch), batch or 10**9)
        diagnostics.count_records_examined(sum(max(segment.upto - segment.after, 0) for segment in segments if segment.upto is not None))
        return documents


def _execute(conn: Connection, query: TextualSelect, params: dict[str, Any], batch: int) -> Result[Any]:
    """Send the statement; with a `batch` its rows stay in the database until fetched (a server-side
    cursor on PostgreSQL; SQLite steps its statement as rows are fetched)."""
    if batch and conn.dialect.name == "postgresql":
        return conn.execute(query, params, execution_options={"stream_results": True, "max_row_buffer": batch})
    return conn.execute(query, params)
