"""Chapter: whole-transcript export and turns by position (capabilities `transcript-export` and
`turn-by-position`).

Both read the lineage chain first (one statement, with the caller's grants): it gives, for every
ancestor, the last turn and record the session inherits from it, and the session's own counts, so
the effective turn and record counts are known before anything else is read.

- An export then reads every effective turn and every record. The database writes each turn and
  record as its JSON document (store/documents.py). An export of up to `stream_above` turns and
  records is read whole: the database also joins the documents, and one statement brings the
  turns and the records (two round trips in all; three with records in a second store). With one
  store the chain statement also builds the documents of an unreverted chain (`Guess`), and they
  serve when they are of exactly the spans and segments the chain gives: one round trip. A longer
  one reads the turns in one statement and the records in one more (three round trips), and over
  HTTP streams them as they are fetched, so its memory does not grow with the transcript. Either
  way the cost does not grow with depth or length. A transcript over `max_export_records` records
  or turns is refused after the chain alone, before any record is read.
- A turn by position finds the session holding effective turn p and its index there from the
  chain, then reads that turn (one statement) and its first records (one more, only the turn's
  index range): three round trips at any depth and position.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import orjson

from reference_impl import cursors, views
from reference_impl.errors import ExportTooLarge, NotFound, RecordsUnavailable
from reference_impl.principals import public_id
from reference_impl.services.common import ChapterService
from reference_impl.segments import turn_ranges
from reference_impl.services.transcript import TranscriptService, effective_segments
from reference_impl.store import Transaction
from reference_impl.store.export import Guess
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


class ExportDocument:
    """An export as JSON bytes, produced chunk by chunk: the document's head, the turns, the records.

    The head (session id and both counts) is known from the chain alone; the turns and records are
    the JSON documents the database built for them, joined as they are fetched. `close` ends the
    read transaction if the chunks are not consumed to the end.
    """

    def __init__(self, parts: Iterator[bytes], close: Callable[[], None] = lambda: None, whole: bytes | None = None) -> None:
        self._parts = parts
        self._close = close
        self.whole = whole  # the whole document when it was read before it was returned

    @classmethod
    def of(cls, body: dict[str, Any]) -> ExportDocument:
        """A document already in hand (for example one a test built)."""
        whole = orjson.dumps(body)
        return cls(iter([whole]), whole=whole)

    def chunks(self) -> Iterator[bytes]:
        try:
            yield from self._parts
        finally:
            self._close()

    def read(self) -> bytes:
        return self.whole if self.whole is not None else b"".join(self.chunks())

    def materialised(self) -> ExportDocument:
        """The document with every chunk read now (the read transaction ends here)."""
        whole = self.read()
        return ExportDocument(iter([whole]), whole=whole)

    def as_json(self) -> dict[str, Any]:
        document: dict[str, Any] = orjson.loads(self.read())
        return document


def _joined(rows: list[Any], first: bool) -> bytes:
    text = ",".join(row[2] for row in rows)
    return (text if first else "," + text).encode()


class ExportService(ChapterService):
    chapter = "export"
    capabilities = ("transcript-export",)

    # Rows fetched at a time when an export streams (a server-side cursor on PostgreSQL), and the
    # turns and records above which it streams (a shorter one is read whole: one response body).
    stream_batch = 1_000
    stream_above = 2_000
    chunk_bytes = 256 * 1024  # pieces are sent together up to this size: each chunk is a thread hop

    def advertised_limits(self) -> dict[str, Any]:
        return {"max_export_records": self.limits.max_export_records}

    def export(self, principal: str, session_id: str) -> dict[str, Any]:
        """The whole effective transcript: every effective turn and every record (2 statements, the
        documents joined by the database; 3 with records in a second store)."""
        return self._document(principal, session_id, stream=False).as_json()

    def document(self, principal: str, session_id: str) -> ExportDocument:
        """The export as a document whose chunks stream (3 statements, all sent before this returns;
        one up to `stream_above` turns and records is read whole, in 2):
        the read transaction stays open until the chunks are consumed or closed. With records in a
        second store the document is read whole first, so a lagging records store is a 503."""
        return self._document(principal, session_id, stream=not self.store.split, small=self.stream_above)

    def _document(self, principal: str, session_id: str, stream: bool, small: int = 0) -> ExportDocument:
        limit = self.limits.max_export_records
        stack = ExitStack()
        try:
            tx = stack.enter_context(self.store.read())
            guess = None
            if self.store.split:  # the records are in a second store: no statement reads them with the chain
                chain = self.access.visible_chain(tx, principal, session_id)
            else:  # the chain and, unless something in it was reverted, the documents: one statement
                most = small if stream else 2 * limit  # a streamed export reads longer ones apart; else the limits bound it
                found, guess = tx.chain_with_documents(session_id, self.limits.max_lineage_depth, principal, most, limit)
                chain = self.access.visible(principal, session_id, found)
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
            head = b'{"session_id":%s,"turn_count":%d,"record_count":%d,"turns":[' % (
                orjson.dumps(public_id(session_id)), turn_total, record_total,
            )
            ranges = [(span.session_id, span.first, span.last) for span in spans]
            if not (stream and turn_total + record_total > small):
                with stack:  # read whole: the transaction ends here
                    return self._whole(tx, session_id, head, ranges, segments, turn_total, record_total, guess)
            turns = tx.turn_documents(ranges, self.stream_batch) if spans else None
            records = tx.record_documents(segments, self.stream_batch) if record_total else None
        except BaseException:
            stack.close()
            raise

        def parts() -> Iterator[bytes]:
            yield head
            seen = 0
            if turns is not None:
                for rows in turns.batches():
                    yield _joined(rows, seen == 0)
                    seen += len(rows)
            if seen != turn_total:  # the chain counted them in the same snapshot: only a purge race
                raise RecordsUnavailable(f"session {session_id} lost effective turns while it was read")
            yield b'],"records":['
            position = _positions(segments)
            seen = 0
            if records is not None:
                for rows in records.batches():
                    # The rows come in (ordinal, index) order, each within its segment's range and
                    # unique (the key): the batch holds exactly the next expected records if its
                    # last row is the one expected at its place. Else the first row out of place
                    # is named.
                    last = seen + len(rows) - 1
                    if last >= record_total or tuple(rows[-1][:2]) != position(last):
                        raise _out_of_place(segments, rows, seen, position)
                    yield _joined(rows, seen == 0)
                    seen += len(rows)
            if seen != record_total:
                raise _missing(segments, None, None)
            yield b"]}"

        return ExportDocument(_coalesced(parts(), self.chunk_bytes), stack.close)

    @staticmethod
    def _whole(
        tx: Transaction, session_id: str, head: bytes, ranges: list[tuple[str, int, int]], segments: list[Segment],
        turn_total: int, record_total: int, guess: Guess | None = None,
    ) -> ExportDocument:
        """An export read whole: the documents joined by the database, checked by their counts. The
        rows come from ranges of unique keys within the transcript's bounds, so a count equal to the
        chain's means exactly the expected ones. The documents read with the chain serve when they
        are of exactly these ranges (`Guess.whole`); else one statement reads them (two with two
        stores)."""
        whole = (guess.whole(ranges, segments) if guess is not None else None) or tx.whole_documents(ranges, segments)
        if whole.turn_count != turn_total:  # the chain counted them in the same snapshot: only a purge race
            raise RecordsUnavailable(f"session {session_id} lost effective turns while it was read")
        if whole.record_count != record_total:
            raise _first_missing(tx, segments)
        body = b"".join((head, whole.turns.encode(), b'],"records":[', whole.records.encode(), b"]}"))
        return ExportDocument(iter([body]), whole=body)


def _coalesced(parts: Iterator[bytes], size: int) -> Iterator[bytes]:
    """The parts joined into chunks of at least `size` bytes (the last may be shorter)."""
    pending: list[bytes] = []
    held = 0
    for part in parts:
        pending.append(part)
        held += len(part)
        if held >= size:
            yield b"".join(pending)
            pending, held = [], 0
    if pending:
        yield b"".join(pending)


def _positions(segments: list[Segment]) -> Callable[[int], tuple[int, int]]:
    """(segment ordinal, record index) of the n-th record (from 0) an export of the segments holds."""
    starts = [0]
    for segment in segments:
        assert segment.upto is not None
        starts.append(starts[-1] + segment.upto - segment.after)

    def position(n: int) -> tuple[int, int]:
        ordinal = bisect_right(starts, n) - 1
        return ordinal, segments[ordinal].after + 1 + n - starts[ordinal]

    return position


def _out_of_place(
    segments: list[Segment], rows: list[Any], seen: int, position: Callable[[int], tuple[int, int]]
) -> RecordsUnavailable:
    """The 503 of a batch of records that is not the next expected records: its first row out of place."""
    total = sum(segment.upto - segment.after for segment in segments if segment.upto is not None)
    for offset, (ordinal, index, _) in enumerate(rows):
        if seen + offset >= total or position(seen + offset) != (ordinal, index):
            return _missing(segments, ordinal, index)
    return _missing(segments, None, None)


def _first_missing(tx: Transaction, segments: list[Segment]) -> RecordsUnavailable:
    """The 503 of a whole read whose record count is short: the records read again row by row (one
    statement more, on this failure only) to name the first one out of place."""
    rows = [row for batch in tx.record_documents(segments).batches() for row in batch]
    return _out_of_place(segments, rows, 0, _positions(segments))


def _missing(segments: list[Segment], ordinal: int | None, index: int | None) -> RecordsUnavailable:
    """The 503 of an export whose records store lacks records within the transcript's bounds (with
    two stores: replication lag, a write in flight); never a short transcript."""
    where = "the records store disagrees"
    if ordinal is not None and index is not None:
        where = f"first out of place: {segments[ordinal].session_id} #{index}"
    return RecordsUnavailable(f"records within the transcript's bounds are not readable yet ({where})")


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
