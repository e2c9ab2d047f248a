"""SQL that writes turns and records as the JSON documents an export holds (views.turn,
views.record), for the statements of store/export.py.

Each turn and each record is written as the JSON object the response holds, by concatenating the
stored columns (the record's `content` is stored as compact JSON and goes in as it is): the server
joins the documents and never parses or re-serialises a record. Strings a client chose (turn ids,
record types) are quoted by the database (`json_quote` on SQLite, `to_json` on PostgreSQL); strings
the server wrote (record ids, timestamps, statuses, roles) need no escaping; the public session id
of each span is quoted once, in Python, and passed as a parameter, or, in the statement that reads
the documents with the chain (`chain_documents_sql`), quoted once per session of the chain.

A streamed export fetches the documents row by row (`turn_documents_sql`, `record_documents_sql`).
An export read whole lets the database join them too (`whole_sql`): one statement returns, for each
span of turns and each segment of records, its documents as one text with their count, so no row
reaches Python. On 400 records, SQLite built and joined them in about a third less time than it
took to return them as rows.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import NamedTuple

from sqlalchemy import column, text
from sqlalchemy.sql.selectable import TextualSelect

from reference_impl.store.common import sid_sql
from reference_impl.store.transcript import CHAIN_COLUMNS_SQL, CHAIN_CTE, CHAIN_FROM, CHAIN_NAMES


def _quote(dialect: str, expression: str) -> str:
    """SQL for `expression`, a string a client chose, as a JSON string (JSON null when NULL)."""
    if dialect == "postgresql":
        return f"COALESCE(CAST(to_json(CAST({expression} AS TEXT)) AS TEXT), 'null')"
    return f"json_quote({expression})"


def _plain(expression: str) -> str:
    """SQL for `expression`, a string the server wrote that needs no escaping (a UUID, a
    timestamp, a status or role name), as a JSON string; it must not be NULL."""
    return f"""'"' || {expression} || '"'"""


class Naming(NamedTuple):
    """SQL (parameters or columns) for what a span's or segment's documents are written with: the
    session's token, its public id as a JSON string, and where a key of its project starts its id
    (1-based, for `substr`)."""

    token: str
    public: str
    start: str

    @classmethod
    def of(cls, n: int) -> Naming:
        """Span or segment n's parameters: `:t<n>`, `:p<n>`, `:k<n>`."""
        return cls(f":t{n}", f":p{n}", f":k{n}")


def _turn_id_json(dialect: str, naming: Naming) -> str:
    """SQL for a turn id as a JSON string: the stored one (a client's, quoted) or, when the column is
    NULL, the one derived from the session's token and the turn index (store/ids.py)."""
    stored = f"substr(turn_id, CAST({naming.start} AS INTEGER))"
    quoted = f"json_quote({stored})" if dialect == "sqlite" else _quote(dialect, stored)
    return f"""CASE WHEN turn_id IS NULL THEN '"' || {naming.token} || 't' || CAST(turn_index AS TEXT) || '"' ELSE {quoted} END"""


def _record_id(naming: Naming) -> str:
    """SQL for a record id: the stored one, or the one derived from the token and the index."""
    return f"COALESCE(record_id, {naming.token} || 'r' || CAST(record_index AS TEXT))"


# The columns of a documents statement, declared so SQLAlchemy builds its result metadata once.
DOCUMENT_COLUMNS = (column("o"), column("i"), column("doc"))


def _turn_doc(dialect: str, naming: Naming) -> str:
    """SQL for a row of `turns` as its JSON document (views.turn)."""
    token, public = naming.token, naming.public
    if dialect == "sqlite":  # one printf call per row: a third faster than a chain of `||`
        # A derived turn id (the column NULL) is written by the format itself, without building it
        # first: that is most turns, and about a seventh of the time.
        return (
            "CASE WHEN turn_id IS NULL THEN "
            """printf('{"turn_id":"%st%d","session_id":%s,"role":"%s","index":%d,"status":"%s","""
            """"created_at":"%s","finished_at":%s}', """
            f"{token}, turn_index, {public}, role, turn_index, status, created_at, "
            f"""COALESCE('"' || finished_at || '"', 'null')) ELSE """
            """printf('{"turn_id":%s,"session_id":%s,"role":"%s","index":%d,"status":"%s","""
            """"created_at":"%s","finished_at":%s}', """
            f"{_turn_id_json(dialect, naming)}, {public}, role, turn_index, status, created_at, "
            f"""COALESCE('"' || finished_at || '"', 'null')) END"""
        )
    return (
        f"""'{{"turn_id":' || {_turn_id_json(dialect, naming)} || ',"session_id":' || {public} || """
        f"""',"role":' || {_plain("role")} || ',"index":' || CAST(turn_index AS TEXT) || """
        f"""',"status":' || {_plain("status")} || ',"created_at":' || {_plain("created_at")} || """
        f"""',"finished_at":' || COALESCE({_plain("finished_at")}, 'null') || '}}'"""
    )


def _turn_selects(dialect: str, spans: int) -> list[str]:
    """One SELECT per (session, first, last) span of turns as (o, i, doc)."""
    return [
        f"SELECT {n} AS o, turn_index AS i, {_turn_doc(dialect, Naming.of(n))} AS doc FROM turns "
        f"WHERE sid = {sid_sql(f's{n}')} AND turn_index >= :f{n} AND turn_index <= :u{n}"
        for n in range(spans)
    ]


def _turn_branches(dialect: str, spans: int) -> str:
    """The spans' SELECTs (`_turn_selects`) joined by UNION ALL."""
    return " UNION ALL ".join(_turn_selects(dialect, spans))


@lru_cache(maxsize=64)
def turn_documents_sql(dialect: str, spans: int) -> TextualSelect:
    """The turns of `spans` (session, first, last) ranges as JSON documents (views.turn), in order."""
    return text(f"SELECT o, i, doc FROM ({_turn_branches(dialect, spans)}) AS spans ORDER BY o, i").columns(*DOCUMENT_COLUMNS)


def _record_doc(dialect: str, naming: Naming) -> str:
    """SQL for a row of `records` as its JSON document (views.record)."""
    token, public = naming.token, naming.public
    if dialect == "sqlite":  # one printf call per row, with derived ids written by the format, as for the turns
        return (
            "CASE WHEN record_id IS NULL AND turn_id IS NULL THEN "
            """printf('{"record_id":"%sr%d","session_id":%s,"turn_id":"%st%d","index":%d,"type":%s,"content":%s,"""
            """"created_at":"%s"}', """
            f"{token}, record_index, {public}, {token}, turn_index, record_index, json_quote(record_type), content, created_at) ELSE "
            """printf('{"record_id":"%s","session_id":%s,"turn_id":%s,"index":%d,"type":%s,"content":%s,"""
            """"created_at":"%s"}', """
            f"{_record_id(naming)}, {public}, {_turn_id_json(dialect, naming)}, record_index, "
            "json_quote(record_type), content, created_at) END"
        )
    return (
        f"""'{{"record_id":' || {_plain(_record_id(naming))} || ',"session_id":' || {public} || """
        f"""',"turn_id":' || {_turn_id_json(dialect, naming)} || ',"index":' || CAST(record_index AS TEXT) || """
        f"""',"type":' || {_quote(dialect, "record_type")} || ',"content":' || content || """
        f"""',"created_at":' || {_plain("created_at")} || '}}'"""
    )


def _record_selects(dialect: str, segments: int, keys: str = "sessions", prefix: str = "") -> list[str]:
    """One SELECT per bounded segment of records as (o, i, doc); `prefix` renames the parameters
    (:s0 becomes :rs0) so the text can share a statement with the turns'."""
    selects = [
        f"SELECT {n} AS o, record_index AS i, {_record_doc(dialect, Naming.of(n))} AS doc FROM records "
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
def record_documents_sql(dialect: str, segments: int, keys: str = "sessions") -> TextualSelect:
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
def whole_sql(dialect: str, spans: int, segments: int, keys: str = "sessions") -> TextualSelect:
    """Every turn and every record of an export in one statement: a row of each span's and then
    each segment's (count, documents joined) (either part may be empty: spans or segments 0)."""
    return _aggregates(dialect, [*_turn_selects(dialect, spans), *_record_selects(dialect, segments, keys, "r")])


# The documents each chain row carries in `chain_documents_sql`, after the chain's own columns.
GUESS_NAMES = ("tb", "rb", "tn", "td", "rn", "rd")


def _documents_columns(dialect: str, turns: str, records: str) -> tuple[str, str]:
    """The (tn, td, rn, rd) columns of `chain_documents_sql` (each row's turns and records: how
    many, and their documents joined by commas in index order, as `_aggregate` joins them; NULL
    unless `plan.whole`), and what joins them to each row of `links`. `turns` and `records` select
    (i, doc) rows of the row's session. On PostgreSQL a LATERAL subquery counts and joins in one
    pass; on SQLite, which has none, a scalar subquery counts and another joins."""
    if dialect == "postgresql":
        lateral = " ".join(
            f"LEFT JOIN LATERAL (SELECT count(*) AS n, string_agg(doc, ',' ORDER BY i) AS d FROM ({select} AND plan.whole) AS b) "
            f"AS {name} ON true"
            for name, select in (("tdoc", turns), ("rdoc", records))
        )
        return (
            "CASE WHEN plan.whole THEN tdoc.n END AS tn, tdoc.d AS td, CASE WHEN plan.whole THEN rdoc.n END AS rn, rdoc.d AS rd",
            lateral,
        )
    counted = []
    for name, select in (("t", turns), ("r", records)):
        rows = select.partition(" FROM ")[2]
        counted.append(f"CASE WHEN plan.whole THEN (SELECT count(*) FROM {rows}) END AS {name}n")
        counted.append(f"CASE WHEN plan.whole THEN (SELECT group_concat(doc, ',') FROM ({select} ORDER BY i)) END AS {name}d")
    return ", ".join(counted), ""


# How the documents `chain_documents_sql` builds are named: by each row's session.
CHAIN_NAMING = Naming("links.token", "links.public_json", ":k")


@lru_cache(maxsize=8)
def chain_documents_sql(dialect: str, naming: Naming = CHAIN_NAMING) -> TextualSelect:
    """The chain (`CHAIN_SQL`'s rows, root first), each row with its session's turns and records as
    joined documents with their counts (`_documents_columns`), in no order (the service orders them
    by `hops`: an ORDER BY copied the documents once more, a seventh of the statement on
    PostgreSQL at 1,000 turns), as the effective transcript holds them when no session of
    the chain was reverted: turn indexes 0 to `tb` and record indexes 0 to `rb`, the bounds its
    descendant inherits, or the session's own counts for the session read. One statement in place
    of the chain and the documents.

    It is a guess: the documents are built only when no row of the chain has segments (nothing
    reverted), the viewer owns or holds a grant on every session of the chain and the session read
    is not deleted (the access rules of services/access.py, so that a read the service refuses
    does no more work than the chain: they decide nothing here), and the chain holds at most `:limit` turns, at most `:limit` records, and at most `:most`
    of both (NULL otherwise: an export refused as too large reads no record), and the
    service uses them only where the bounds equal the spans it derives from the chain
    (services/export.py), else it reads the documents as usual. `:k` is where the public id starts
    in a key of the caller's project; the service checks that every session of the chain is named so.
    """
    public = _quote(dialect, "substr(s.session_id, CAST(:k AS INTEGER))") if dialect == "postgresql" else (
        "json_quote(substr(s.session_id, CAST(:k AS INTEGER)))"
    )
    turns = (
        f"SELECT turn_index AS i, {_turn_doc(dialect, naming)} AS doc "
        "FROM turns WHERE turns.sid = links.sid AND turns.turn_index <= links.tb"
    )
    records = (
        f"SELECT record_index AS i, {_record_doc(dialect, naming)} AS doc "
        "FROM records WHERE records.sid = links.sid AND records.record_index <= links.rb"
    )
    documents, joins = _documents_columns(dialect, turns, records)
    return text(
        f"""{CHAIN_CTE},
links AS (
    SELECT {CHAIN_COLUMNS_SQL}, s.sid AS sid, {public} AS public_json,
           COALESCE(c.turn_bound, s.turn_count - 1) AS tb, COALESCE(c.record_bound, s.record_count - 1) AS rb,
           CASE WHEN s.owner = :viewer OR g.role IS NOT NULL THEN 0 ELSE 1 END AS hidden,
           CASE WHEN c.hops = 0 AND s.deleted_at IS NOT NULL THEN 1 ELSE 0 END AS gone
    {CHAIN_FROM}
),
sizes AS (
    SELECT count(segments) AS reverted, sum(hidden) + sum(gone) AS refused,
           COALESCE(sum(CASE WHEN tb >= 0 THEN tb + 1 ELSE 0 END), 0) AS turns,
           COALESCE(sum(CASE WHEN rb >= 0 THEN rb + 1 ELSE 0 END), 0) AS records
    FROM links
),
plan AS (
    SELECT reverted = 0 AND refused = 0 AND turns <= :limit AND records <= :limit AND turns + records <= :most AS whole
    FROM sizes
)
SELECT {", ".join(f"links.{name}" for name in CHAIN_NAMES)}, links.tb, links.rb, {documents}
FROM links CROSS JOIN plan {joins}
"""
    ).columns(*(column(name) for name in (*CHAIN_NAMES, *GUESS_NAMES)))
