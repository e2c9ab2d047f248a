"""Runs every comparison on every backend in one process, so all ratios share one run."""

from __future__ import annotations

import os
import platform
import sqlite3
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy

from benchmarks import layouts, scenarios, versus
from benchmarks.backend import Backend, server_version
from benchmarks.config import Config

Progress = Callable[[str], None]


def _quiet(_message: str) -> None:
    """Default progress sink: the tests need no chatter."""


def machine(backends: Sequence[Backend]) -> dict[str, Any]:
    """What the numbers were measured on; ratios only compare within this one run."""
    info: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "sqlite": sqlite3.sqlite_version,
        "sqlalchemy": sqlalchemy.__version__,
        "cpu_count": os.cpu_count(),
        "load_average_at_start": _load_average(),
        "platform": platform.platform(),
    }
    for backend in backends:
        version = server_version(backend)
        if version is not None:
            info["postgresql"] = version
    return info


def _load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages, where the system reports them: on a shared machine
    they say how noisy the times are."""
    try:
        return [round(value, 2) for value in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def run_backend(backend: Backend, config: Config, progress: Progress = _quiet) -> dict[str, Any]:
    """All five comparisons on one backend; fork cost and fork point share their sources."""
    results: dict[str, Any] = {}
    started = time.perf_counter()
    with backend.database(config.limits) as db:
        progress(f"[{backend.label}] seeding fork sources {list(config.fork_source_turns)} turns")
        sources = scenarios.prepare_sources(db, config)
        progress(f"[{backend.label}] 1. fork cost vs source size")
        results["fork_cost"] = scenarios.fork_cost(db, sources, config)
        progress(f"[{backend.label}] 5. fork point by turn id")
        results["fork_point"] = scenarios.fork_point(db, sources, config)
    with backend.database(config.limits) as db:
        progress(f"[{backend.label}] 2. transcript read vs depth")
        results["transcript_depth"] = scenarios.transcript_depth(db, config)
    with backend.database(config.limits) as db:
        progress(f"[{backend.label}] 3. page cost vs position")
        results["page_position"] = scenarios.page_position(db, config)
    with backend.database(config.limits) as db:
        progress(f"[{backend.label}] 7. records examined per page, depth 0 and {max(config.transcript_depths)}")
        results["rows_per_page"] = scenarios.rows_per_page(db, config)
    progress(f"[{backend.label}] 4. storage")
    results["storage"] = scenarios.storage(backend, config)
    progress(f"[{backend.label}] 4. storage layouts probe")
    results["storage"]["layouts"] = layouts.probe(backend, config)["layouts"]
    with backend.database(config.versus_limits()) as db:
        progress(f"[{backend.label}] 6. against LangGraph, {list(config.versus_turns)} turns, full read at {list(config.versus_read_turns)}")
        results["versus"] = versus.versus_langgraph(db, config)
    results["elapsed_seconds"] = time.perf_counter() - started
    results["load_average_at_end"] = _load_average()
    return results


def run_all(
    config: Config, backends: Sequence[Backend] | None = None, progress: Progress = _quiet
) -> dict[str, Any]:
    """Every comparison on every backend: the whole results document."""
    chosen = list(backends) if backends else [Backend("sqlite")]
    return {
        "machine": machine(chosen),
        "config": config.as_json(),
        "backends": {backend.kind: run_backend(backend, config, progress) for backend in chosen},
    }
