"""A second process for the checks marked `apart` (the Schemathesis checks), run beside the others.

Those checks spend the suite's CPU generating input while the server idles, and the others mostly
wait for the server: in one process they hold one interpreter lock in turn; in two, a run takes
about a sixth less on 2 cores. A check run apart is judged exactly as at home: the same
`Target` code, seed, claim and expected failures, its reproducer built where it ran. Only what
it creates comes back beside its result, so the run's cleanup purges it. A lane that breaks is
the suite's error on its checks, never the target's failure.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

from conformance.config import Config, ExpectedFailure
from conformance.registry import Check, all_checks
from conformance.results import CheckResult, Outcome
from conformance.target import Target, check_result

Created = list[tuple[str, str | None]]  # (session id, creator) pairs, as CreatedSessions keeps them


def run_apart(
    config: Config, capabilities: dict[str, Any], expected: dict[str, ExpectedFailure], name: str
) -> tuple[CheckResult, Created]:
    """One check in the lane's process: its result and the sessions it created."""
    item = next((c for c in all_checks() if c.name == name), None)
    if item is None:
        raise LookupError(f"no check named {name} in the second process")
    target = Target(config, capabilities, expected)
    try:
        return target.run_check(item), target.created.pairs
    finally:
        target.close()


class Lane:
    """Checks running one after another in a second process, started at once."""

    def __init__(
        self,
        config: Config,
        capabilities: dict[str, Any],
        expected: dict[str, ExpectedFailure],
        items: list[Check],
        catalogue: dict[str, dict[str, Any]],
        done: Callable[[Check, CheckResult], None] | None = None,
    ) -> None:
        self.catalogue = catalogue
        # spawn, not fork: the suite's process runs threads (progress, a trace receiver)
        self._pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
        self._items = items
        self._futures: list[Future[tuple[CheckResult, Created]]] = []
        for item in items:
            future = self._pool.submit(run_apart, config, capabilities, expected, item.name)
            if done is not None:
                future.add_done_callback(lambda f, item=item: done(item, self._outcome(item, f)[0]))
            self._futures.append(future)

    def results(self) -> list[tuple[Check, CheckResult, Created]]:
        """Every check's result, in the order given, once all have finished."""
        try:
            return [(item, *self._outcome(item, future)) for item, future in zip(self._items, self._futures)]
        finally:
            self.close()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _outcome(self, item: Check, future: Future[tuple[CheckResult, Created]]) -> tuple[CheckResult, Created]:
        try:
            return future.result()
        except BaseException as exc:  # the lane broke (its process died, a result would not pickle)
            message = f"suite defect: the second process running {item.name} ended: {exc.__class__.__name__}: {exc}"
            return check_result(item, self.catalogue, Outcome.ERROR, message), []
