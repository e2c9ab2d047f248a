"""Chapter: effective transcript and lineage reads.

A page costs one chain query and one records query at any depth and any position: the chain
query yields every ancestor's inherited bound, and the records query reads each segment as a
bounded index range.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from reference_impl import cursors, views
from reference_impl.errors import CursorReverted, InvalidCursor, InvalidRequest, PageSizeExceeded, RecordsUnavailable
from reference_impl.principals import public_id
from reference_impl.services.common import ChapterService
from reference_impl.segments import record_segments
from reference_impl.store.rows import ChainLink, Segment


def effective_segments(chain: Sequence[ChainLink]) -> list[Segment]:
    """The record ranges of a session's effective transcript, root first: each ancestor's effective
    segments up to the bound its descendant inherits, then the session's own effective segments.
    Every read of the effective transcript (and every chapter that reads it) starts here."""
    found: list[Segment] = []
    for link in chain:
        found.extend(record_segments(link.session.session_id, link.segments, link.record_bound))
    return found


def segments_after(segments: Sequence[Segment], session_id: str, index: int) -> list[Segment]:
    """The segments that remain after the record `index` of `session_id` (a cursor's position)."""
    for number, segment in enumerate(segments):
        if segment.session_id == session_id and segment.after <= index and (segment.upto is None or index <= segment.upto):
            return [Segment(session_id, index, segment.upto), *segments[number + 1 :]]
    raise InvalidCursor("the cursor does not point into this transcript")


@dataclass(frozen=True)
class Page:
    session_id: str
    records: list[dict[str, Any]]
    has_more: bool
    next_cursor: str | None

    def as_json(self) -> dict[str, Any]:
        return {
            "session_id": public_id(self.session_id),
            "records": self.records,
            "has_more": self.has_more,
            "next_cursor": self.next_cursor,
        }


class TranscriptService(ChapterService):
    chapter = "transcript"
    capabilities = ("effective-transcript", "lineage")

    def advertised_limits(self) -> dict[str, Any]:
        return {
            "max_lineage_depth": self.limits.max_lineage_depth,
            "max_page_size": self.limits.max_page_size,
            "default_page_size": self.limits.default_page_size,
        }

    def transcript(self, principal: str, session_id: str, cursor: str | None, limit: int | None) -> Page:
        size = self._page_size(limit)
        with self.store.read() as tx:
            chain = self.access.visible_chain(tx, principal, session_id)
            segments = effective_segments(chain)
            revision = chain[-1].session.revision
            if cursor is not None:
                position = cursors.decode(cursor, "transcript", session_id)
                if position.revision != revision:
                    raise CursorReverted(
                        f"session {session_id} was reverted after this cursor was issued; read from the first page"
                    )
                segments = segments_after(segments, position.session_id, position.index)
            rows = tx.records(segments, size + 1)
            own_count = chain[-1].session.record_count
        self._require_complete(rows, segments, own_count, size + 1)
        return self._page("transcript", session_id, rows, size, cursor, revision)

    def own_records(self, principal: str, session_id: str, cursor: str | None, limit: int | None) -> Page:
        size = self._page_size(limit)
        with self.store.read() as tx:
            session = self.access.visible_session(tx, principal, session_id)
            after = -1
            if cursor is not None:
                position = cursors.decode(cursor, "records", session_id)
                if position.session_id != session_id:
                    raise cursors.InvalidCursor("the cursor does not point into this session")
                after = position.index
            segments = [Segment(session_id, after, None)]
            rows = tx.records(segments, size + 1)
        self._require_complete(rows, segments, session.record_count, size + 1)
        return self._page("records", session_id, rows, size, cursor)

    def lineage(self, principal: str, session_id: str) -> dict[str, Any]:
        with self.store.read() as tx:
            chain = self.access.visible_chain(tx, principal, session_id)
        ancestors = []
        for upper, lower in zip(chain, chain[1:]):
            assert lower.session.lineage is not None
            ancestors.append(
                {
                    "session_id": public_id(upper.session.session_id),
                    "depth": upper.session.depth,
                    "inherited_turn_count": lower.session.lineage.inherited_turn_count,
                }
            )
        return {
            "session_id": public_id(session_id),
            "root_session_id": public_id(chain[0].session.session_id),
            "depth": chain[-1].session.depth,
            "ancestors": ancestors,
        }

    def _page_size(self, limit: int | None) -> int:
        if limit is None:
            return self.limits.default_page_size
        if limit < 1:
            raise InvalidRequest(f"limit {limit} is out of range: give 1 to {self.limits.max_page_size}")
        if limit > self.limits.max_page_size:
            raise PageSizeExceeded(f"limit {limit} is above max_page_size: give 1 to {self.limits.max_page_size}")
        return limit

    @staticmethod
    def _page(kind: str, session_id: str, rows: list[Any], size: int, cursor: str | None, revision: int = 0) -> Page:
        has_more = len(rows) > size
        rows = rows[:size]
        next_cursor = cursor
        if rows:
            last = rows[-1]
            next_cursor = cursors.encode(cursors.Position(kind, session_id, last.session_id, last.record_index, revision))
        return Page(session_id, [views.record(row) for row in rows], has_more, next_cursor)

    @staticmethod
    def _require_complete(rows: Sequence[Any], segments: Sequence[Segment], own_count: int, wanted: int) -> None:
        """A page holds every record the core store says lies within its bounds, or it is refused.

        With records in a second store, lineage and counts can be visible before the records are
        (replication lag, a write in flight); the answer is then 503, never a short transcript.
        """
        expected: list[tuple[str, int]] = []
        for segment in segments:
            upper = segment.upto if segment.upto is not None else own_count - 1
            for index in range(segment.after + 1, upper + 1):
                if len(expected) == wanted:
                    break
                expected.append((segment.session_id, index))
        got = [(row.session_id, row.record_index) for row in rows]
        if got != expected:
            present = set(got)
            missing = next((key for key in expected if key not in present), None)
            where = f"first missing: {missing[0]} #{missing[1]}" if missing else "the records store disagrees"
            raise RecordsUnavailable(f"records within the transcript's bounds are not readable yet ({where})")
