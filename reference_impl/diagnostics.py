"""Counts real storage round trips per request, for the `Storage-Round-Trips` header."""

from __future__ import annotations

import contextvars
from dataclasses import dataclass
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine


@dataclass
class RoundTripCounter:
    statements: int = 0


_current: contextvars.ContextVar[RoundTripCounter | None] = contextvars.ContextVar(
    "storage_round_trips", default=None
)


def start_counting() -> RoundTripCounter:
    """Begin counting for the current request; worker threads inherit the context."""
    counter = RoundTripCounter()
    _current.set(counter)
    return counter


def _is_transaction_control(statement: str) -> bool:
    head = statement.lstrip()[:16].upper()
    return head.startswith(("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE"))


def instrument(engine: Engine) -> None:
    """Count every data statement the engine sends; transaction control is not counted."""

    @event.listens_for(engine, "before_cursor_execute")
    def _count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        counter = _current.get()
        if counter is not None and not _is_transaction_control(statement):
            counter.statements += 1
