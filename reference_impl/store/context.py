"""Statements of the model-context chapter: the end of an effective transcript, whole turns, in
one statement whatever the depth.

The statement reads every segment of the chain (each a bounded index range), groups records into
turns and keeps, from the end backwards, the turns whose running total of a *lower bound* of
their size stays within the budget (and always the last turn). The lower bound of a record is
min(ceil(stored length / 3), cap - 3): stored content is compact JSON with non-ASCII characters
escaped (`\\u00e9`, six characters for at most three UTF-8 bytes; surrogate pairs twelve for
four), so its canonical UTF-8 size is at least a third of its stored length, and a record cut at
the cap keeps at least cap - 3 bytes. The rows returned are therefore a superset (a suffix of
whole turns) of the context, which the service then computes exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from sqlalchemy import text
from sqlalchemy.sql.elements import TextClause

from reference_impl import diagnostics
from reference_impl.store import ids
from reference_impl.store.common import Statements, sid_sql
from reference_impl.store.rows import Segment


@dataclass(frozen=True)
class StoredRecord:
    """A record as stored: `content` is the stored text, not parsed (it may be malformed)."""

    record_id: str
    session_id: str
    record_index: int
    turn_id: str
    turn_index: int
    record_type: str | None
    content: str | None
    created_at: str
    ordinal: int  # the segment the record belongs to, root first
    turn_total: int  # turns (with records) in the whole effective transcript


@lru_cache(maxsize=128)
def _context_sql(segments: int, keys: str = "sessions") -> TextClause:
    branches = " UNION ALL ".join(
        f"SELECT record_id, record_index, turn_id, turn_index, record_type, content, created_at, "
        f"(SELECT token FROM {keys} WHERE session_id = :s{n}) AS token, {n} AS ord FROM records WHERE sid = {sid_sql(f's{n}', keys)} AND record_index > :a{n} AND record_index <= :u{n}"
        for n in range(segments)
    )
    return text(
        f"""
WITH seg AS ({branches}),
sized AS (
    SELECT seg.*, CASE WHEN (LENGTH(content) + 2) / 3 < :lb_cap THEN (LENGTH(content) + 2) / 3
                       ELSE :lb_cap END AS lb
    FROM seg
),
turn_sizes AS (SELECT ord, turn_index, SUM(lb) AS tb FROM sized GROUP BY ord, turn_index),
ranked AS (
    SELECT ord, turn_index,
           SUM(tb) OVER (ORDER BY ord DESC, turn_index DESC ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS cum,
           ROW_NUMBER() OVER (ORDER BY ord DESC, turn_index DESC) AS rn,
           COUNT(*) OVER () AS turn_total
    FROM turn_sizes
)
SELECT sized.record_id, sized.token, sized.record_index, sized.turn_id, sized.turn_index,
       sized.record_type, sized.content, sized.created_at, sized.ord, ranked.turn_total
FROM sized JOIN ranked ON ranked.ord = sized.ord AND ranked.turn_index = sized.turn_index
WHERE ranked.rn = 1 OR ranked.cum <= :budget
ORDER BY sized.ord, sized.record_index
"""
    )


class ContextStatements(Statements):
    def context_records(self, segments: Sequence[Segment], budget: int, record_cap: int) -> list[StoredRecord]:
        """The whole turns at the end of the segments that may fit `budget`: one statement."""
        if not segments:
            return []
        params: dict[str, Any] = {"budget": budget, "lb_cap": max(record_cap - 3, 0)}
        for n, segment in enumerate(segments):
            assert segment.upto is not None
            params[f"s{n}"], params[f"a{n}"], params[f"u{n}"] = segment.session_id, segment.after, segment.upto
        rows = self.records_conn.execute(_context_sql(len(segments), self.record_keys.name), params).mappings()
        # The statement scans every record of every segment (to size the turns) and returns only the
        # last turns: each segment's whole index range is examined (`Storage-Records-Examined`).
        diagnostics.count_records_examined(sum(max(segment.upto - segment.after, 0) for segment in segments))
        return [
            StoredRecord(  # ids left NULL are derived from the session's token (store/ids.py)
                record_id=row["record_id"] or ids.record_id(row["token"], row["record_index"]),
                session_id=segments[row["ord"]].session_id,
                record_index=row["record_index"],
                turn_id=row["turn_id"] or ids.turn_key(segments[row["ord"]].session_id, row["token"], row["turn_index"]),
                turn_index=row["turn_index"],
                record_type=row["record_type"],
                content=row["content"],
                created_at=row["created_at"],
                ordinal=row["ord"],
                turn_total=row["turn_total"],
            )
            for row in rows
        ]
