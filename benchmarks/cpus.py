"""Timing on one CPU: the run's process, and every thread it starts, on a single CPU.

On a machine of few (virtual) CPUs, a thread that blocks leaves its CPU idle, and the work that
runs next on a CPU woken from idle starts slow. A measurement on this benchmark's 2-CPU machine,
the 51-turn export in-process on SQLite, median of 210 rounds each:

- run right after a busy loop: 0.59 ms; right after a 1.5 ms sleep: 1.05 ms;
- so in an interleaved series, whichever operation follows a blocking one (a read over HTTP, whose
  client waits for the server) paid for the wait, and the one after a busy operation did not;
- a read over HTTP hands the request from the client thread to the server thread and back, and
  on two CPUs each hand-off woke the other, idle CPU: 1.99 ms a read, against 1.14 ms on one CPU.

On one CPU no operation leaves its CPU idle for the next (the server thread runs while the client
waits), so every time measures the work and none measures the machine's wake-up. Database server
processes (PostgreSQL) are not this process: they run where the system puts them, for the reference
and its peer alike.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def one_cpu() -> Iterator[int | None]:
    """Run the block on the lowest-numbered CPU this process may use, then allow them all again.

    Threads started inside the block stay on that CPU (a thread inherits its creator's CPUs).
    Yields the CPU, or None where the system cannot pin a process (no `sched_setaffinity`)."""
    if not hasattr(os, "sched_setaffinity"):
        yield None
        return
    allowed = os.sched_getaffinity(0)
    chosen = min(allowed)
    os.sched_setaffinity(0, {chosen})
    try:
        yield chosen
    finally:
        os.sched_setaffinity(0, allowed)
