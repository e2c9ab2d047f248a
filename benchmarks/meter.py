"""Exact costs (statements, rows written, SQL text) and median wall times of one operation."""

from __future__ import annotations

import contextvars
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from reference_impl import diagnostics
from sqlalchemy import event
from sqlalchemy.engine import Engine

T = TypeVar("T")

_WRITES = ("INSERT", "UPDATE", "DELETE")
_CONTROL = ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE")


@dataclass
class Cost:
    """What one operation sent to the database; deterministic, so tests may assert it."""

    statements: int = 0
    rows_written: int = 0
    records_examined: int | None = None  # the reference's own count (diagnostics.records-examined)
    sql: list[str] = field(default_factory=list)
    parameters: list[Any] = field(default_factory=list)

    def count(self, fragment: str) -> int:
        """Statements whose SQL contains `fragment` (case-insensitive), e.g. 'FROM turns'."""
        needle = " ".join(fragment.lower().split())
        return sum(needle in " ".join(statement.lower().split()) for statement in self.sql)


_active: contextvars.ContextVar[Cost | None] = contextvars.ContextVar("bench_cost", default=None)


def instrument(engine: Engine) -> None:
    """Record rows written and SQL text; statements come from the reference's own counter."""

    @event.listens_for(engine, "after_cursor_execute")
    def _after(conn: Any, cursor: Any, statement: str, parameters: Any, *args: Any) -> None:
        cost = _active.get()
        if cost is None:
            return
        head = statement.lstrip()[:16].upper()
        if head.startswith(_CONTROL):
            return
        cost.sql.append(statement)
        cost.parameters.append(parameters)
        if head.startswith(_WRITES) and cursor.rowcount and cursor.rowcount > 0:
            cost.rows_written += cursor.rowcount


@contextmanager
def metered() -> Iterator[Cost]:
    """Count what the block sends, with `diagnostics.start_counting()` as the statement count."""
    cost = Cost()
    counter = diagnostics.start_counting()
    token = _active.set(cost)
    try:
        yield cost
    finally:
        _active.reset(token)
        cost.statements = counter.statements
        cost.records_examined = getattr(counter, "records_examined", None)


def measure(operation: Callable[[], T]) -> tuple[T, Cost]:
    """Run once, metered: the result and its exact cost."""
    with metered() as cost:
        result = operation()
    return result, cost


def median_seconds(operation: Callable[[], Any], repeats: int) -> float:
    """Median wall time of `repeats` unmetered runs; the median resists a noisy shared machine."""
    samples = []
    for _ in range(max(repeats, 1)):
        started = time.perf_counter()
        operation()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def paired_median_seconds(
    first: Callable[[], Any], second: Callable[[], Any], repeats: int
) -> tuple[float, float]:
    """Median wall times of two operations run alternately: drift on a shared machine hits both."""
    first_samples: list[float] = []
    second_samples: list[float] = []
    for _ in range(max(repeats, 1)):
        for operation, samples in ((first, first_samples), (second, second_samples)):
            started = time.perf_counter()
            operation()
            samples.append(time.perf_counter() - started)
    return statistics.median(first_samples), statistics.median(second_samples)


def replay_seconds(engine: Engine, cost: Cost, repeats: int, warmup: int = 0) -> float:
    """Median time of the same read statements sent straight through the DB-API, after `warmup`
    untimed runs.

    Separates what the database spends from what Python spends building queries and rows.
    """
    with engine.connect() as conn:
        dbapi = conn.connection.dbapi_connection
        assert dbapi is not None

        def replay() -> None:
            cursor = dbapi.cursor()
            try:
                for statement, parameters in zip(cost.sql, cost.parameters):
                    cursor.execute(statement, parameters)
                    cursor.fetchall()
            finally:
                cursor.close()

        for _ in range(warmup):
            replay()
        return median_seconds(replay, repeats)


def ratio(numerator: float, denominator: float) -> float | None:
    """numerator / denominator, or None when the denominator is zero."""
    return numerator / denominator if denominator else None


def interleaved_median_seconds(operations: list[Callable[[], Any]], repeats: int, warmup: int = 0) -> list[float]:
    """Median wall times of several operations run in turn, round after round (as
    `paired_median_seconds`, for more than two), after `warmup` untimed rounds."""
    for _ in range(warmup):
        for operation in operations:
            operation()
    samples: list[list[float]] = [[] for _ in operations]
    for _ in range(max(repeats, 1)):
        for operation, taken in zip(operations, samples):
            started = time.perf_counter()
            operation()
            taken.append(time.perf_counter() - started)
    return [statistics.median(taken) for taken in samples]


def peak_bytes(operation: Callable[[], Any]) -> int:
    """The peak of Python memory allocated while the operation ran, above what was allocated when it
    started (tracemalloc: every thread of the process, so a server thread answering the request
    counts too). What the operation returns is dropped inside the measurement."""
    import gc
    import tracemalloc

    gc.collect()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base, _ = tracemalloc.get_traced_memory()
        result = operation()
        del result
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return max(peak - base, 0)
