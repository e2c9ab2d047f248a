"""A session's own effective segments: which of its physically written turns and records are in its
effective transcript (chapter revert).

Records and turns are append-only, with dense indexes. A session never reverted has one open
segment: all its turns and records. A revert before turn T keeps the segments' parts before T and
opens a new segment at the session's current counts, where its next turn and record will be
written; the reverted records stay stored, outside every segment. A segment is
`[turn_lo, turn_hi, record_lo, record_hi]`, half-open, `None` as the upper bounds of the open
(last) one. Stored as JSON; `None` (SQL NULL) stands for the single open segment.

A fork stores its cutoff session's segments (`session_lineage.cutoff_segments`), so a revert of
the source later never changes what the child inherits.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from reference_impl.store.rows import Segment

Seg = tuple[int, "int | None", int, "int | None"]
WHOLE: list[Seg] = [(0, None, 0, None)]


def parse(text: str | None) -> list[Seg]:
    if text is None:
        return list(WHOLE)
    return [(int(a), None if b is None else int(b), int(c), None if d is None else int(d)) for a, b, c, d in json.loads(text)]


def dump(segments: Sequence[Seg]) -> str:
    return json.dumps([list(segment) for segment in segments], separators=(",", ":"))


def record_segments(session_id: str, text: str | None, record_bound: int | None) -> list[Segment]:
    """The record ranges of `session_id` a read includes, in order, up to `record_bound` (None: all)."""
    if record_bound == -1:
        return []
    found: list[Segment] = []
    for _, _, low, high in parse(text):
        upto = None if high is None else high - 1
        if record_bound is not None:
            if low > record_bound:
                continue
            upto = record_bound if upto is None else min(upto, record_bound)
        if upto is not None and upto < low:
            continue
        found.append(Segment(session_id, low - 1, upto))
    return found


def holds_turn(text: str | None, turn_index: int) -> bool:
    return any(low <= turn_index and (high is None or turn_index < high) for low, high, _, _ in parse(text))


def turns_through(text: str | None, turn_bound: int) -> int:
    """How many effective turns have an index at most `turn_bound`."""
    return sum(
        max(0, (turn_bound + 1 if high is None else min(high, turn_bound + 1)) - low) for low, high, _, _ in parse(text)
    )


def turn_ranges(text: str | None) -> list[tuple[int, int | None]]:
    return [(low, high) for low, high, _, _ in parse(text)]


def revert(text: str | None, turn_index: int, first_record: int, turn_count: int, record_count: int) -> tuple[list[Seg], int, int]:
    """The segments after reverting to just before turn `turn_index` (whose first record is
    `first_record`), with the session at `turn_count` turns and `record_count` records; and how many
    effective turns and records it takes out."""
    kept: list[Seg] = []
    turns_out = records_out = 0
    for low, high, record_low, record_high in parse(text):
        high_now = turn_count if high is None else high
        record_high_now = record_count if record_high is None else record_high
        keep_high = min(high_now, turn_index)
        keep_record_high = min(record_high_now, first_record)
        if keep_high > low:
            kept.append((low, keep_high, record_low, keep_record_high))
        turns_out += high_now - max(low, keep_high)
        records_out += record_high_now - max(record_low, keep_record_high)
    kept.append((turn_count, None, record_count, None))
    return kept, turns_out, records_out


def closed(text: str | None, turn_count: int, record_count: int) -> list[Seg]:
    """The segments with the open one closed at the given counts (what a revert takes out of)."""
    return [
        (low, turn_count if high is None else high, record_low, record_count if record_high is None else record_high)
        for low, high, record_low, record_high in parse(text)
    ]
