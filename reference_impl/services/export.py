"""Chapter: whole-transcript export and turns by position (capabilities `transcript-export` and
`turn-by-position`).

Both read the lineage chain first (one statement, with the caller's grants): it gives, for every
ancestor, the last turn and record the session inherits from it, and the session's own counts, so
the effective turn and record counts are known before anything else is read.

- An export then reads every effective turn in one statement and every record in one more: three
  round trips at any depth and length. A transcript over `max_export_records` records or turns is
  refused after the chain alone, before any record is read.
- A turn by position finds the session holding effective turn p and its index there from the
  chain, then reads that turn (one statement) and its first records (one more, only the turn's
  index range): three round trips at any depth and position.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reference_impl import cursors, views
from reference_impl.errors import ExportTooLarge, NotFound
from reference_impl.principals import public_id
from reference_impl.services.common import ChapterService
from reference_impl.segments import turn_ranges
from reference_impl.services.transcript import TranscriptService, effective_segments
from reference_impl.store import Transaction
from reference_impl.store.rows import ChainLink, Segment


@dataclass(frozen=True)
class Span:
    """A contiguous range of one session's turns the read session sees: indexes `first` to `last`."""

    session_id: str
    first: int
    last: int

    @property
    def turns(self) -> int:
        return self.last - self.first + 1


def spans_of(chain: list[ChainLink]) -> list[Span]:
    """The effective turn ranges of a chain, root first: each session's effective segments
    (segments.py; one unless it was reverted) up to the turn its descendant inherits, then the
    session's own effective segments up to its current turn count."""
    spans = []
    for link in chain:
        bound = link.turn_bound if link.turn_bound is not None else link.session.turn_count - 1
        for low, high in turn_ranges(link.segments):
            upper = bound if high is None else min(high - 1, bound)
            if upper >= low:
                spans.append(Span(link.session.session_id, low, upper))
    return spans


def record_segments_of(chain: list[ChainLink]) -> list[Segment]:
    """The effective transcript's record ranges, each bounded (the open one by the record count the
    chain read), so a read never returns records written after the chain was read."""
    own = chain[-1].session
    bounded = []
    for segment in effective_segments(chain):
        upto = segment.upto if segment.upto is not None else own.record_count - 1
        if upto > segment.after:
            bounded.append(Segment(segment.session_id, segment.after, upto))
    return bounded


class ExportService(ChapterService):
    chapter = "export"
    capabilities = ("transcript-export",)

    def advertised_limits(self) -> dict[str, Any]:
        return {"max_export_records": self.limits.max_export_records}

    def export(self, principal: str, session_id: str) -> dict[str, Any]:
        """The whole effective transcript: every effective turn and every record (3 statements)."""
        limit = self.limits.max_export_records
        with self.store.read() as tx:
            chain = self.access.visible_chain(tx, principal, session_id)
            spans = spans_of(chain)
            segments = record_segments_of(chain)
            turn_total = sum(span.turns for span in spans)
            record_total = sum(segment.upto - segment.after for segment in segments if segment.upto is not None)
            if record_total > limit or turn_total > limit:
                raise ExportTooLarge(
                    f"the effective transcript of session {session_id} holds {record_total} records and "
                    f"{turn_total} turns; an export returns at most {limit} of each (max_export_records): "
                    "read it page by page"
                )
            turns = tx.effective_turns([(span.session_id, span.first, span.last) for span in spans])
            records = tx.records(segments, record_total) if record_total else []
        TranscriptService._require_complete(records, segments, 0, record_total)
        return {
            "session_id": public_id(session_id),
            "turn_count": len(turns),
            "record_count": len(records),
            "turns": [views.turn(turn) for turn in turns],
            "records": [views.record(record) for record in records],
        }


class TurnPositionService(ChapterService):
    chapter = "turn-positions"
    capabilities = ("turn-by-position",)

    def turn_at(self, principal: str, session_id: str, n: int) -> dict[str, Any]:
        """Effective turn `n` (1-based) of the session with its first records (3 statements)."""
        size = self.limits.max_page_size
        with self.store.read() as tx:
            chain = self.access.visible_chain(tx, principal, session_id)
            spans = spans_of(chain)
            total = sum(span.turns for span in spans)
            found = self._locate(spans, n)
            if found is None:
                raise NotFound(f"session {session_id} has {total} effective turns; there is no turn at position {n}")
            span, index = found
            turn = self._turn(tx, span.session_id, index)
            own = chain[-1].session
            revision = own.revision
            first = turn.first_record_index
            if turn.end_record_index is not None:
                last = turn.end_record_index - 1
            else:  # an unfinished turn is its session's last: its records so far
                holder = next(link.session for link in chain if link.session.session_id == span.session_id)
                last = holder.record_count - 1
            segment = Segment(span.session_id, first - 1, last)
            rows = tx.records([segment], size + 1) if last >= first else []
        TranscriptService._require_complete(rows, [segment], 0, size + 1)
        has_more = len(rows) > size
        rows = rows[:size]
        next_cursor = None
        if rows:
            tail = rows[-1]
            next_cursor = cursors.encode(
                cursors.Position("transcript", session_id, tail.session_id, tail.record_index, revision)
            )
        return {
            "session_id": public_id(session_id),
            "position": n,
            "turn_count": total,
            "turn": views.turn(turn),
            "records": [views.record(row) for row in rows],
            "has_more": has_more,
            "next_cursor": next_cursor,
        }

    @staticmethod
    def _locate(spans: list[Span], n: int) -> tuple[Span, int] | None:
        """The span holding effective turn `n` and the turn's index in its session."""
        if n < 1:
            return None
        before = 0
        for span in spans:
            if n <= before + span.turns:
                return span, span.first + (n - before - 1)
            before += span.turns
        return None

    @staticmethod
    def _turn(tx: Transaction, session_id: str, index: int) -> Any:
        turn = tx.turn_at_index(session_id, index)
        if turn is None:  # counted in the chain, so it exists: only a purge racing the read removes it
            raise NotFound(f"turn {index} of session {session_id} is gone")
        return turn
