"""Races, run so that a broken server loses them every time.

A round releases its contenders together (a barrier), each on its own connection and spread over
every base URL of the deployment. A race window can be missed by chance, so rounds repeat, on
fresh state, until one shows a violation or the bound is reached: a correct server pays for every
round, a broken one is caught in the first round that hits its window.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from conformance.client import ApiClient
from conformance.context import CheckContext

T = TypeVar("T")
State = TypeVar("State")
ROUNDS = 6  # a race a broken server loses half the time is then missed once in 64 runs
MAX_CONTENDERS = 16


def contenders(ctx: CheckContext) -> int:
    """How many requests race in a round: enough to hit a window, no more than the suite allows."""
    return max(2, min(ctx.config.concurrency, MAX_CONTENDERS))


def race(ctx: CheckContext, count: int, attempt: Callable[[int, ApiClient], T]) -> list[T]:
    """Run `attempt(n, client)` for n in range(count), all released at once by a barrier."""
    barrier = threading.Barrier(count)
    clients = ctx.spread()

    def one(n: int) -> T:
        barrier.wait(timeout=60)
        return attempt(n, clients[n % len(clients)])

    with ThreadPoolExecutor(max_workers=count) as pool:
        return list(pool.map(one, range(count)))


def rounds(
    ctx: CheckContext,
    prepare: Callable[[], State],
    attempt: Callable[[State, int, ApiClient], T],
    judge: Callable[[State, list[T]], None],
    count: int | None = None,
    limit: int = ROUNDS,
) -> None:
    """Up to `limit` rounds: fresh state from `prepare`, one race, then `judge`, which fails the check
    (raises) on a violation. A passing round says nothing about the next, so all rounds run."""
    size = count or contenders(ctx)
    for _ in range(limit):
        state = prepare()
        answers = race(ctx, size, lambda n, client: attempt(state, n, client))
        judge(state, answers)
