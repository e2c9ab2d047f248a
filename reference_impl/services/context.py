"""Chapter: bounded model context (capability `model-context`).

What a model would be given for the next turn: whole turns from the end of the effective
transcript backwards while their total size stays within `max_context_bytes`, each record capped
at `max_context_record_bytes` (canonical JSON, UTF-8, cut on a character boundary). The last turn
is always given, capped, however large. Two statements at any depth: the lineage chain, then one
records statement that returns a superset of the answer (store/context.py), computed exactly here.
A stored record that cannot be read (content that is not a JSON object) is skipped and counted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from reference_impl.canonical import canonical_bytes, utf8_prefix
from reference_impl.errors import RecordsUnavailable
from reference_impl.principals import public_id
from reference_impl.services.common import ChapterService
from reference_impl.store.context import StoredRecord
from reference_impl.services.transcript import effective_segments
from reference_impl.store.rows import Segment


@dataclass
class ContextTurn:
    session_id: str
    turn_id: str
    turn_index: int
    records: list[dict[str, Any]] = field(default_factory=list)
    size: int = 0


class ContextService(ChapterService):
    chapter = "context"
    capabilities = ("model-context",)

    def advertised_limits(self) -> dict[str, Any]:
        return {
            "max_context_bytes": self.limits.max_context_bytes,
            "max_context_record_bytes": self.limits.max_context_record_bytes,
        }

    def context(self, principal: str, session_id: str) -> dict[str, Any]:
        budget, cap = self.limits.max_context_bytes, self.limits.max_context_record_bytes
        with self.store.read() as tx:
            chain = self.access.visible_chain(tx, principal, session_id)
            own = chain[-1].session
            # Every ancestor's effective segments up to its bound, then the session's own effective
            # segments (a reverted session's exclude what it reverted), the open one closed here.
            segments = [
                segment if segment.upto is not None else Segment(segment.session_id, segment.after, own.record_count - 1)
                for segment in effective_segments(chain)
            ]
            segments = [segment for segment in segments if segment.upto is not None and segment.upto > segment.after]
            rows = tx.context_records(segments, budget, cap)
        self._require_suffix(rows, segments)
        turns: list[ContextTurn] = []
        skipped = 0
        for row in rows:
            if not turns or (turns[-1].session_id, turns[-1].turn_index) != (row.session_id, row.turn_index):
                turns.append(ContextTurn(row.session_id, row.turn_id, row.turn_index))
            entry, size = self.capped(row, cap)
            turns[-1].size += size
            if entry is None:
                skipped += 1
            else:
                turns[-1].records.append(entry)
        chosen = self.choose_turns(turns, budget)
        total = sum(turn.size for turn in chosen)
        turn_total = rows[0].turn_total if rows else 0
        return {
            "session_id": public_id(session_id),
            "max_context_bytes": budget,
            "max_context_record_bytes": cap,
            "bytes": total,
            "turns": [
                {
                    "turn_id": public_id(turn.turn_id),
                    "session_id": public_id(turn.session_id),
                    "index": turn.turn_index,
                    "bytes": turn.size,
                    "records": turn.records,
                }
                for turn in chosen
            ],
            "omitted_turns": turn_total - len(chosen),
            "skipped_records": skipped,
        }

    @staticmethod
    def choose_turns(turns: list[ContextTurn], budget: int) -> list[ContextTurn]:
        """The last turn, and the turns just before it while the sum stays within the budget."""
        chosen: list[ContextTurn] = []
        total = 0
        for turn in reversed(turns):
            if chosen and total + turn.size > budget:
                break
            chosen.append(turn)
            total += turn.size
        chosen.reverse()
        return chosen

    @staticmethod
    def parsed(row: StoredRecord) -> Any:
        return json.loads(row.content) if row.content is not None else None

    @staticmethod
    def lower_bound(row: StoredRecord, cap: int) -> int:
        """What the records statement assumes at least (store/context.py); a skipped record counts this."""
        return min((len(row.content or "") + 2) // 3, max(cap - 3, 0))

    def capped(self, row: StoredRecord, cap: int) -> tuple[dict[str, Any] | None, int]:
        """The record as the context gives it and the bytes it counts; None for a malformed record."""
        try:
            content = self.parsed(row)
            if not isinstance(content, dict) or not isinstance(row.record_type, str):
                raise ValueError("not a record")
            data = canonical_bytes(content)
        except (ValueError, TypeError, RecursionError):
            return None, self.lower_bound(row, cap)
        entry: dict[str, Any] = {
            "record_id": row.record_id,
            "session_id": public_id(row.session_id),
            "turn_id": public_id(row.turn_id),
            "index": row.record_index,
            "type": row.record_type,
            "created_at": row.created_at,
            "content_bytes": len(data),
        }
        if len(data) <= cap:
            entry["truncated"] = False
            entry["content"] = content
            return entry, len(data)
        prefix = utf8_prefix(data, cap)
        entry["truncated"] = True
        entry["text"] = prefix.decode("utf-8")
        return entry, len(prefix)

    @staticmethod
    def _require_suffix(rows: list[StoredRecord], segments: list[Segment]) -> None:
        """The rows are the last records of the effective transcript, none missing; else 503
        `records-unavailable` (a records store behind the core store), never a short context."""
        expected = [
            (segment.session_id, index)
            for segment in segments
            for index in range(segment.after + 1, (segment.upto if segment.upto is not None else -1) + 1)
        ]
        got = [(row.session_id, row.record_index) for row in rows]
        if (expected and not got) or got != expected[len(expected) - len(got):]:
            raise RecordsUnavailable("records at the end of the effective transcript are not readable yet")
