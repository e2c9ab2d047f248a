"""Judging expiries from what the suite can know, never from when it sent.

A server starts a clock (a lease, a key lifetime) somewhere between when the suite sent the request
and when the answer arrived, and handles a later probe somewhere between that probe's own send and
answer. So a probe proves "before the edge" only if its answer arrived before the earliest possible
edge, and "after the edge" only if it was sent after the latest possible one. Under load or behind a
slow proxy the first proof may be impossible; the check then says so (`NotVerified`), it never fails.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from conformance.errors import NotVerified

EXPIRY_MARGIN = 0.15  # seconds kept between a probe and the edge it probes
LONGEST_WAIT = 120.0  # seconds: a wait longer than this is a mistake of the check, not a wait

T = TypeVar("T")


@dataclass(frozen=True)
class Stamp:
    """When a request was sent and when its answer arrived, on the suite's monotonic clock."""

    sent: float
    answered: float

    @property
    def trip(self) -> float:
        return self.answered - self.sent


def timed(send: Callable[[], T]) -> tuple[T, Stamp]:
    """Send a request and note when it left and when its answer came back."""
    sent = time.monotonic()
    answer = send()
    return answer, Stamp(sent, time.monotonic())


def wait_until(moment: float) -> None:
    """Sleep until `time.monotonic()` reaches `moment`, however long: a shortened wait would make
    an "after the edge" probe arrive before the edge."""
    delay = moment - time.monotonic()
    if delay > LONGEST_WAIT:
        raise ValueError(f"a wait of {delay:.1f} s is longer than the suite ever waits ({LONGEST_WAIT:.0f} s)")
    if delay > 0:
        threading.Event().wait(delay)


def probe_before(start: Stamp, lifetime: float, send: Callable[[], T]) -> tuple[T, Stamp] | None:
    """Probe as late as can still be proven to precede the edge (`start.sent + lifetime`).

    The probe leaves two round trips (as long as the start's) and a margin before the edge. It counts
    only if its answer arrived before the edge; otherwise None: the margin could not be established.
    """
    wait_until(start.sent + lifetime - 2 * start.trip - EXPIRY_MARGIN)
    answer, stamp = timed(send)
    if stamp.answered >= start.sent + lifetime:
        return None
    return answer, stamp


def probe_after(start: Stamp, lifetime: float, send: Callable[[], T]) -> tuple[T, Stamp]:
    """Probe once the edge has certainly passed: sent after `start.answered + lifetime`."""
    wait_until(start.answered + lifetime + EXPIRY_MARGIN)
    return timed(send)


def margin_not_established(what: str, lifetime: float, start: Stamp, probe: float | None = None) -> NotVerified:
    """The outcome when no probe could be proven to precede the edge."""
    seen = f"; the probe's answer came {probe:.2f} s after the start was sent" if probe is not None else ""
    return NotVerified(
        f"{what}: a {lifetime:g}-second window could not be shown held: the start took {start.trip:.2f} s{seen}, "
        "so no probe could be proven to reach the server before the window's earliest end"
    )
