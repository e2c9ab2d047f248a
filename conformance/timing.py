"""Judging expiries from what the suite can know, never from when it sent.

A server starts a clock (a lease, a key lifetime) somewhere between when the suite sent the request
and when the answer arrived, and handles a later probe somewhere between that probe's own send and
answer. So a probe proves "still held" only if its answer arrived before the earliest possible
edge, and it shows the window held for at least the time from the start's answer to the probe's
send; "after the edge" only if it was sent after the latest possible edge. A probe that cannot show
at least SHOWN_FRACTION of the window (under load, behind a slow proxy) proves too little to tell a
window that ends early from one that does not: the check then says so (`NotVerified`), it never
fails a correct server and never passes one whose window ends before SHOWN_FRACTION of its length.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from conformance.errors import NotVerified

EXPIRY_MARGIN = 0.05  # seconds kept between a probe and the edge it probes
SHOWN_FRACTION = 0.6  # of a window a "still held" probe must show: a window ending by half is caught
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
    only if its answer arrived before the edge and it was sent at least SHOWN_FRACTION of the window
    after the start's answer; otherwise None: the margin could not be established.
    """
    wait_until(start.sent + lifetime - 2 * start.trip - EXPIRY_MARGIN)
    answer, stamp = timed(send)
    if stamp.answered >= start.sent + lifetime or stamp.sent - start.answered < SHOWN_FRACTION * lifetime:
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
        f"so no probe could be proven to reach the server after {SHOWN_FRACTION:.0%} of the window and before "
        "its earliest end"
    )
