"""Statements of the transcript chapter: the recursive lineage-chain query and the records query."""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from sqlalchemy import column, text
from sqlalchemy.engine import RowMapping
from sqlalchemy.sql.elements import TextClause

from reference_impl import diagnostics
from reference_impl.store import ids
from reference_impl.store.common import Statements, session_from, sid_sql
from reference_impl.store.rows import ChainLink, RecordRow, Segment

# One statement reads the whole chain, whatever its depth. Walking up from the session, each
# lineage edge carries a pending cutoff (session, turn index, record index): ancestors below the
# cutoff session inherit nothing (-1), the cutoff session is bounded by it, and from there on the
# cutoff session's own edge applies.
CHAIN_CTE = """
WITH RECURSIVE chain(session_id, hops, turn_bound, record_bound, segs,
                     pend_session, pend_turn, pend_record, pend_segs, parent_id) AS (
    SELECT s.session_id, 0, CAST(NULL AS INTEGER), CAST(NULL AS INTEGER), CAST(NULL AS TEXT),
           l.cutoff_session_id, l.cutoff_turn_index, l.cutoff_record_index, l.cutoff_segments,
           l.parent_session_id
    FROM sessions s LEFT JOIN session_lineage l ON l.session_id = s.session_id
    WHERE s.session_id = :session_id
  UNION ALL
    SELECT c.parent_id, c.hops + 1,
           CASE WHEN c.pend_session = c.parent_id THEN c.pend_turn ELSE -1 END,
           CASE WHEN c.pend_session = c.parent_id THEN c.pend_record ELSE -1 END,
           CASE WHEN c.pend_session = c.parent_id THEN c.pend_segs ELSE NULL END,
           CASE WHEN c.pend_session = c.parent_id THEN l.cutoff_session_id ELSE c.pend_session END,
           CASE WHEN c.pend_session = c.parent_id THEN l.cutoff_turn_index ELSE c.pend_turn END,
           CASE WHEN c.pend_session = c.parent_id THEN l.cutoff_record_index ELSE c.pend_record END,
           CASE WHEN c.pend_session = c.parent_id THEN l.cutoff_segments ELSE c.pend_segs END,
           l.parent_session_id
    FROM chain c LEFT JOIN session_lineage l ON l.session_id = c.parent_id
    WHERE c.parent_id IS NOT NULL AND c.hops < :max_hops
)"""
# The chain's columns, and the rows they come from: `CHAIN_SQL`, and the export's statement that
# also builds the documents (store/export.py), select them.
CHAIN_COLUMNS_SQL = """c.hops, c.turn_bound, c.record_bound,
       CASE WHEN c.hops = 0 THEN s.own_segments ELSE c.segs END AS segments,
       s.session_id, s.owner, s.name, s.description, s.created_at, s.depth,
       s.turn_count, s.record_count, s.running_turn_id, s.deleted_at, s.child_count,
       s.version, s.revision, s.own_segments, s.suspended_turn_id, s.token,
       g.role AS g_role,
       l.parent_session_id AS l_parent_session_id, l.root_session_id AS l_root_session_id,
       l.depth AS l_depth, l.inherited_turn_count AS l_inherited_turn_count,
       l.cutoff_session_id AS l_cutoff_session_id, l.cutoff_turn_index AS l_cutoff_turn_index,
       l.cutoff_record_index AS l_cutoff_record_index, l.created_at AS l_created_at,
       l.cutoff_segments AS l_cutoff_segments,
       l.cut_mode AS l_cut_mode, l.cut_turn_id AS l_cut_turn_id"""
CHAIN_FROM = """FROM chain c
JOIN sessions s ON s.session_id = c.session_id
LEFT JOIN session_lineage l ON l.session_id = c.session_id
LEFT JOIN session_grants g ON g.session_id = c.session_id AND g.principal = :viewer"""
CHAIN_NAMES = (
    "hops turn_bound record_bound segments session_id owner name description created_at depth "
    "turn_count record_count running_turn_id deleted_at child_count version revision own_segments suspended_turn_id token "
    "g_role l_parent_session_id l_root_session_id l_depth l_inherited_turn_count l_cutoff_session_id "
    "l_cutoff_turn_index l_cutoff_record_index l_created_at l_cutoff_segments l_cut_mode l_cut_turn_id"
).split()
# Its columns declared in order: SQLAlchemy builds the result's metadata once, not per execution.
CHAIN_SQL = text(f"{CHAIN_CTE}\nSELECT {CHAIN_COLUMNS_SQL}\n{CHAIN_FROM}\nORDER BY c.hops DESC\n").columns(
    *(column(name) for name in CHAIN_NAMES)
)

# A record's session id is its segment's (`:s<n>`), filled in by `read_records`: records hold the
# session's integer key only.
RECORD_COLUMNS = "record_id, record_index, turn_id, turn_index, record_type, content, created_at"


@lru_cache(maxsize=512)
def _records_sql(bounded: tuple[bool, ...], keys: str = "sessions") -> TextClause:
    """One statement for a page over segments; `bounded[n]` says whether segment n has an upper bound.

    Each branch has a limit of its own (`:l<n>`): the rows the page still needs from that segment.
    """
    parts = []
    for n, has_upper in enumerate(bounded):
        upper = f" AND record_index <= :u{n}" if has_upper else ""
        parts.append(
            f"SELECT * FROM (SELECT {RECORD_COLUMNS}, {n} AS segment_ordinal, "
            f"(SELECT token FROM {keys} WHERE session_id = :s{n}) AS token FROM records "
            f"WHERE sid = {sid_sql(f's{n}', keys)} AND record_index > :a{n}{upper} "
            f"ORDER BY record_index LIMIT :l{n}) AS segment_{n}"
        )
    return text(" UNION ALL ".join(parts) + " ORDER BY segment_ordinal, record_index")


def page_plan(segments: Sequence[Segment], limit: int) -> list[tuple[Segment, int]]:
    """The segments a page of `limit` rows reaches, each with the exact number of rows it gives.

    A bounded segment holds `upto - after` records (indexes are dense); only the last, unbounded
    segment (the session's own records) is open-ended. So a page examines at most `limit` rows
    at any depth, instead of up to `limit` rows per segment.
    """
    plan: list[tuple[Segment, int]] = []
    remaining = limit
    for segment in segments:
        if remaining <= 0:
            break
        available = remaining if segment.upto is None else max(segment.upto - segment.after, 0)
        take = min(available, remaining)
        if take > 0:
            plan.append((segment, take))
            remaining -= take
    return plan


def _record_from(row: RowMapping, session_id: str) -> RecordRow:
    """A record; ids its columns leave NULL are derived from its session's token (store/ids.py)."""
    token, index = row["token"], row["record_index"]
    return RecordRow(
        record_id=row["record_id"] or ids.record_id(token, index),
        session_id=session_id,
        record_index=index,
        turn_id=row["turn_id"] or ids.turn_key(session_id, token, row["turn_index"]),
        turn_index=row["turn_index"],
        record_type=row["record_type"],
        content=json.loads(row["content"]),
        created_at=row["created_at"],
    )



def chain_links(rows: list[dict[str, Any]], viewer: str | None, tokens: dict[str, str]) -> list[ChainLink]:
    """The chain of rows holding the chain's columns (`CHAIN_NAMES`), root first; each session's
    token kept in `tokens` (`Statements.tokens`)."""
    tokens.update((row["session_id"], row["token"]) for row in rows)
    return [
        ChainLink(
            session=session_from(row, viewer),
            hops=row["hops"],
            turn_bound=row["turn_bound"],
            record_bound=row["record_bound"],
            segments=row["segments"],
        )
        for row in rows
    ]


class TranscriptStatements(Statements):
    def chain(self, session_id: str, max_hops: int, viewer: str | None = None) -> list[ChainLink]:
        """The session and its ancestors, root first, with inherited bounds and the grant the
        viewer holds on each: one statement."""
        result = self.conn.execute(CHAIN_SQL, {"session_id": session_id, "max_hops": max_hops, "viewer": viewer or ""})
        # Each row as a dict, fetched at once: a dict's lookups cost a fraction of a RowMapping's, and
        # a chain at depth 16 reads 17 rows of 31 columns for every page and export.
        names = list(result.keys())
        return chain_links([dict(zip(names, row)) for row in result.all()], viewer, self.tokens)

    def records(self, segments: Sequence[Segment], limit: int) -> list[RecordRow]:
        """Up to `limit` records of the segments, in segment order: one statement.

        Only the segments the page reaches are read, each an index range scan limited to the rows
        the page takes from it, so a page examines at most `limit` rows whatever its depth and
        position.
        """
        plan = page_plan(segments, limit)
        if not plan:
            return []
        params: dict[str, Any] = {}
        for n, (segment, take) in enumerate(plan):
            params[f"s{n}"], params[f"a{n}"], params[f"l{n}"] = segment.session_id, segment.after, take
            if segment.upto is not None:
                params[f"u{n}"] = segment.upto
        query = _records_sql(tuple(segment.upto is not None for segment, _ in plan), self.record_keys.name)
        return self.read_records(query, params)

    def read_records(self, query: Any, params: dict[str, Any]) -> list[RecordRow]:
        """Run a records statement (`_records_sql`) and count every row it produces as a record
        examined (`Storage-Records-Examined`): records statements never read rows only to discard them."""
        result = self.records_conn.execute(query, params).mappings()
        rows = [_record_from(row, params[f"s{row['segment_ordinal']}"]) for row in result]
        diagnostics.count_records_examined(len(rows))
        return rows
