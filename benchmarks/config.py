"""The sizes each comparison runs at: full, quick (a CI-sized run) and tiny (the tests)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from reference_impl.settings import Limits


@dataclass(frozen=True)
class Config:
    """One benchmark configuration; every comparison reads its sizes from here."""

    name: str
    fork_source_turns: tuple[int, ...] = (10, 100, 1_000)
    transcript_depths: tuple[int, ...] = (0, 1, 5, 16)
    turns_per_chain_session: int = 2
    page_transcript_records: int = 10_000
    page_chain_depth: int = 3
    page_size: int = 100
    page_records_per_turn: int = 50
    storage_parent_turns: int = 1_000  # large enough that page and relation minimums are small
    storage_branches: int = 10
    records_per_turn: int = 2
    record_content_bytes: int = 190
    repeats: int = 15
    versus_turns: tuple[int, ...] = (100, 200)  # the whole scenario against LangGraph
    # The full read only, of a session of this many turns (see benchmarks/versus.py); the scenario's
    # read is of its branch, T/2 + 1 turns, so 100 and 200 are read whole here too.
    versus_read_turns: tuple[int, ...] = (100, 200, 1_000, 10_000)
    limits: Limits = field(default_factory=Limits)

    def versus_limits(self) -> Limits:
        """The limits of the database the LangGraph comparison runs on: an export as long as its
        longest read (`max_export_records` raised when the default is shorter)."""
        longest = 2 * max((*self.versus_turns, *self.versus_read_turns), default=0) + 2
        return replace(self.limits, max_export_records=max(self.limits.max_export_records, longest))

    def as_json(self) -> dict[str, Any]:
        """The configuration as plain JSON, for the results file."""
        data = asdict(self)
        data["fork_source_turns"] = list(self.fork_source_turns)
        data["transcript_depths"] = list(self.transcript_depths)
        data["versus_turns"] = list(self.versus_turns)
        data["versus_read_turns"] = list(self.versus_read_turns)
        return data


FULL = Config(name="full")

QUICK = Config(
    name="quick",
    fork_source_turns=(10, 100),
    page_transcript_records=2_000,
    storage_parent_turns=30,
    storage_branches=3,
    repeats=7,
    versus_turns=(20, 50),
    versus_read_turns=(200,),
)

TINY = Config(
    name="tiny",
    fork_source_turns=(3, 12),
    page_transcript_records=400,
    page_size=20,
    page_records_per_turn=20,
    storage_parent_turns=6,
    storage_branches=2,
    repeats=1,
    versus_turns=(4,),
    versus_read_turns=(6,),
)
