"""Mutants: bounded model context (capability `model-context`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from starlette.types import ASGIApp

from reference_impl.canonical import canonical
from reference_impl.services.context import ContextService, ContextTurn
from reference_impl.settings import Settings
from reference_impl.store import Transaction
from reference_impl.store.context import StoredRecord
from reference_impl.store.rows import Segment
from tests.mutants import app_with_service, app_with_transaction, mutant


# ---------------------------------------------------------------- limits
class OversizedCap(ContextService):
    """Advertises (and applies) a record cap above max_record_bytes / 8."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.limits = replace(self.limits, max_context_record_bytes=self.limits.max_record_bytes // 4)


@mutant("CONTEXT-LIMITS-001", description="advertises a record cap of max_record_bytes / 4")
def context_cap_too_large(settings: Settings) -> ASGIApp:
    return app_with_service(settings, OversizedCap)


# ---------------------------------------------------------------- the read
class OwnRecordsOnly(ContextService):
    """Forgets what the session inherits: only its own records make the context."""

    def context(self, principal: str, session_id: str) -> dict[str, Any]:
        body = super().context(principal, session_id)
        body["turns"] = [turn for turn in body["turns"] if turn["session_id"] == body["session_id"]]
        body["bytes"] = sum(turn["bytes"] for turn in body["turns"])
        return body


@mutant("CONTEXT-READ-001", description="the context leaves out inherited turns")
def context_own_records_only(settings: Settings) -> ASGIApp:
    return app_with_service(settings, OwnRecordsOnly)


class FinishedTurnsOnly(ContextService):
    """Leaves out the records of a running turn."""

    def context(self, principal: str, session_id: str) -> dict[str, Any]:
        with self.store.read() as tx:
            session = tx.session(session_id)
            running = session.running_turn_id if session else None
        body = super().context(principal, session_id)
        if running is not None:
            kept = [turn for turn in body["turns"] if turn["turn_id"] != running]
            body["turns"], body["bytes"] = kept, sum(turn["bytes"] for turn in kept)
        return body


@mutant("CONTEXT-READ-001", description="the context leaves out the running turn's records")
def context_without_running_turn(settings: Settings) -> ASGIApp:
    return app_with_service(settings, FinishedTurnsOnly)


# ---------------------------------------------------------------- the budget
class StrictBudget(ContextService):
    """Treats a sum of exactly the budget as over it."""

    @staticmethod
    def choose_turns(turns: list[ContextTurn], budget: int) -> list[ContextTurn]:
        return ContextService.choose_turns(turns, budget - 1)


@mutant("CONTEXT-BUDGET-001", description="a sum of exactly max_context_bytes is treated as over the budget")
def context_budget_strict(settings: Settings) -> ASGIApp:
    return app_with_service(settings, StrictBudget)


class LooseBudget(ContextService):
    """Lets one byte too many through."""

    @staticmethod
    def choose_turns(turns: list[ContextTurn], budget: int) -> list[ContextTurn]:
        return ContextService.choose_turns(turns, budget + 1)


@mutant("CONTEXT-BUDGET-001", description="a sum of max_context_bytes + 1 still fits")
def context_budget_loose(settings: Settings) -> ASGIApp:
    return app_with_service(settings, LooseBudget)


class SkipsOver(ContextService):
    """Goes on past a turn that does not fit and takes smaller, older ones."""

    @staticmethod
    def choose_turns(turns: list[ContextTurn], budget: int) -> list[ContextTurn]:
        chosen: list[ContextTurn] = []
        total = 0
        for turn in reversed(turns):
            if chosen and total + turn.size > budget:
                continue
            chosen.append(turn)
            total += turn.size
        return list(reversed(chosen))


@mutant("CONTEXT-BUDGET-001", description="older turns that fit are added after a turn that did not")
def context_skips_over(settings: Settings) -> ASGIApp:
    return app_with_service(settings, SkipsOver)


class PartialTurns(ContextService):
    """Fills the budget record by record, cutting into the oldest turn it reaches."""

    @staticmethod
    def choose_turns(turns: list[ContextTurn], budget: int) -> list[ContextTurn]:
        chosen = ContextService.choose_turns(turns, budget)
        left = budget - sum(turn.size for turn in chosen)
        older = turns[: len(turns) - len(chosen)]
        if older and left > 0:
            turn = older[-1]
            part = ContextTurn(turn.session_id, turn.turn_id, turn.turn_index)
            for record in reversed(turn.records):
                size = record["content_bytes"] if not record["truncated"] else len(record["text"].encode())
                if size > left:
                    break
                part.records.insert(0, record)
                part.size += size
                left -= size
            if part.records:
                chosen.insert(0, part)
        return chosen


@mutant("CONTEXT-BUDGET-001", description="the turn that does not fit is cut to the records that do")
def context_partial_turns(settings: Settings) -> ASGIApp:
    return app_with_service(settings, PartialTurns)


# ---------------------------------------------------------------- the record cap
class CapsCharacters(ContextService):
    """Caps a record at max_context_record_bytes characters instead of bytes."""

    def capped(self, row: StoredRecord, cap: int) -> tuple[dict[str, Any] | None, int]:
        entry, size = super().capped(row, cap)
        if entry is not None and entry["truncated"]:
            text = canonical(ContextService.parsed(row))[:cap]
            entry["text"], size = text, len(text.encode())
        return entry, size


@mutant("CONTEXT-RECORD-CAP-001", description="records capped in characters, not UTF-8 bytes")
def context_cap_in_characters(settings: Settings) -> ASGIApp:
    return app_with_service(settings, CapsCharacters)


class SplitsCharacters(ContextService):
    """Cuts at exactly the cap and drops the broken tail character's bytes silently (as `errors='ignore'`)...
    but counts the cap, not what it kept."""

    def capped(self, row: StoredRecord, cap: int) -> tuple[dict[str, Any] | None, int]:
        entry, size = super().capped(row, cap)
        if entry is not None and entry["truncated"]:
            data = canonical(ContextService.parsed(row)).encode()
            entry["text"] = data[:cap].decode("utf-8", "replace")  # a split character becomes U+FFFD
            size = cap
        return entry, size


@mutant("CONTEXT-RECORD-CAP-001", description="a character straddling the cap is split (replaced by U+FFFD)")
def context_cap_splits_characters(settings: Settings) -> ASGIApp:
    return app_with_service(settings, SplitsCharacters)


class CapOffByOne(ContextService):
    """Truncates a record of exactly the cap."""

    def capped(self, row: StoredRecord, cap: int) -> tuple[dict[str, Any] | None, int]:
        return super().capped(row, cap - 1)


@mutant("CONTEXT-RECORD-CAP-001", description="a record of exactly max_context_record_bytes is truncated")
def context_cap_off_by_one(settings: Settings) -> ASGIApp:
    return app_with_service(settings, CapOffByOne)


class Marker(ContextService):
    """Replaces an over-long record by a marker instead of truncating it."""

    def capped(self, row: StoredRecord, cap: int) -> tuple[dict[str, Any] | None, int]:
        entry, size = super().capped(row, cap)
        if entry is not None and entry["truncated"]:
            entry["text"] = "[record truncated]"
            size = len(entry["text"])
        return entry, size


@mutant("CONTEXT-RECORD-CAP-001", description="an over-long record is replaced by a marker")
def context_marker(settings: Settings) -> ASGIApp:
    return app_with_service(settings, Marker)


# ---------------------------------------------------------------- a large last turn
class DropsLargeTurn(ContextService):
    """Gives nothing when even the last turn exceeds the budget."""

    @staticmethod
    def choose_turns(turns: list[ContextTurn], budget: int) -> list[ContextTurn]:
        chosen = ContextService.choose_turns(turns, budget)
        return [] if chosen and chosen[-1].size > budget else chosen


@mutant("CONTEXT-LARGE-TURN-001", description="a last turn larger than the budget is left out")
def context_drops_large_turn(settings: Settings) -> ASGIApp:
    return app_with_service(settings, DropsLargeTurn)


class TrimsLargeTurn(ContextService):
    """Gives a large last turn only as many records as fit the budget."""

    @staticmethod
    def choose_turns(turns: list[ContextTurn], budget: int) -> list[ContextTurn]:
        chosen = ContextService.choose_turns(turns, budget)
        if chosen and chosen[-1].size > budget:
            turn = chosen[-1]
            while turn.records and turn.size > budget:
                dropped = turn.records.pop(0)
                turn.size -= len(dropped["text"].encode()) if dropped["truncated"] else dropped["content_bytes"]
        return chosen


@mutant("CONTEXT-LARGE-TURN-001", description="a last turn larger than the budget loses its first records")
def context_trims_large_turn(settings: Settings) -> ASGIApp:
    return app_with_service(settings, TrimsLargeTurn)


# ---------------------------------------------------------------- cost
class PerAncestorReads(Transaction):
    """Reads each segment's session before the records: one more round trip per ancestor."""

    def context_records(self, segments: Sequence[Segment], budget: int, record_cap: int) -> list[StoredRecord]:
        for segment in segments[:-1]:
            self.session(segment.session_id)
        return super().context_records(segments, budget, record_cap)


@mutant("CONTEXT-COST-001", description="a context read costs one more round trip per ancestor")
def context_reads_per_ancestor(settings: Settings) -> ASGIApp:
    return app_with_transaction(settings, PerAncestorReads)
