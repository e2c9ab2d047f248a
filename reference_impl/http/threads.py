"""Service calls on worker threads, awaited from the event loop.

Every handler hands its (synchronous) service call to a thread, so that one slow transaction never
stalls the loop. Starlette's `run_in_threadpool` goes through anyio, whose capacity limiter, cancel
scope and backend lookup cost about a fifth of the loop's time per request here; the event loop's
own `run_in_executor` on a pool of the same size (anyio's default of 40) does the same job. The
call runs in a copy of the caller's context, as with anyio, so per-request context variables (the
diagnostics counters, OpenTelemetry's current span) are seen by the service.
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
