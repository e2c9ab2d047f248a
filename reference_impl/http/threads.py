"""Service calls on worker threads, awaited from the event loop, and reads that need none.

A handler hands its (synchronous) service call to a thread, so that one slow transaction never
stalls the loop. Starlette's `run_in_threadpool` goes through anyio, whose capacity limiter, cancel
scope and backend lookup cost about a fifth of the loop's time per request here; the event loop's
own `run_in_executor` on a pool of the same size (anyio's default of 40) does the same job. The
call runs in a copy of the caller's context, as with anyio, so per-request context variables (the
diagnostics counters, OpenTelemetry's current span) are seen by the service.

A read on SQLite alone (`Store.local_reads`) runs on the loop instead (`run_read`). It never waits:
WAL readers take no lock a writer holds, and nothing goes over a network. So the thread would only
add its two hand-offs, which cost about 80 µs a request (a 51-turn export over HTTP took 0.85 ms
with them and 0.77 ms without, on one CPU, each read after other work). What the loop gives up is
running other requests' Python while a read's statement steps; the reads are bounded by the
limits (a page, a chain, an export read whole up to 2,000 turns and records; a longer one streams
from threads). Writes, and every read of a PostgreSQL store, still go to a thread.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

WORKERS = 40
_POOL = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="service")


async def run_in_threadpool(func: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`func(*args, **kwargs)` on a worker thread, in a copy of the current context."""
    call = functools.partial(contextvars.copy_context().run, func, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(_POOL, call)


async def run_read(local: bool, func: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """A read's service call: on the loop when the store's reads are `local` (`Store.local_reads`),
    else on a worker thread; in a copy of the current context either way."""
    if local:
        return contextvars.copy_context().run(func, *args, **kwargs)
    return await run_in_threadpool(func, *args, **kwargs)
