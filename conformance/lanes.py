"""A second process for the checks marked `apart` (the Schemathesis checks), run beside the others.

Those checks spend the suite's CPU generating input while the server idles, and the others mostly
wait for the server: in one process they hold one interpreter lock in turn; in two, a run takes
about a sixth less on 2 cores. A check run apart is judged exactly as at home: the same
`Target` code, seed, claim and expected failures, its reproducer built where it ran. Only what
it creates comes back beside its result, so the run's cleanup purges it. A lane that breaks is
the suite's error on its checks, never the target's failure.

The lane is `python -m conformance.lanes`, started with `subprocess` (no multiprocessing machinery
in a process whose threads hold many sockets): its job arrives pickled on standard input, and each
result leaves pickled on standard output as soon as its check ends.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any, BinaryIO

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
        self._items = items
        self._done = done
        self._outcomes: dict[int, tuple[CheckResult, Created]] = {}
        self._ended: str | None = None
        self._process = subprocess.Popen(
            [sys.executable, "-m", "conformance.lanes"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        assert self._process.stdin is not None and self._process.stdout is not None
        try:
            pickle.dump((config, capabilities, expected, [item.name for item in items]), self._process.stdin)
            self._process.stdin.close()
        except OSError as exc:  # it died before it read its job
            self._ended = f"{exc.__class__.__name__}: {exc}"
        self._reader = threading.Thread(target=self._read, args=(self._process.stdout,), name="lane-results", daemon=True)
        self._reader.start()

    def _read(self, stream: BinaryIO) -> None:
        try:
            while True:
                n, outcome, error = pickle.load(stream)
                if outcome is None:
                    outcome = self._broken(self._items[n], error)
                self._outcomes[n] = outcome
                if self._done is not None:
                    self._done(self._items[n], outcome[0])
        except EOFError:
            pass
        except Exception as exc:  # a result that would not unpickle, a broken pipe
            self._ended = f"{exc.__class__.__name__}: {exc}"

    def results(self) -> list[tuple[Check, CheckResult, Created]]:
        """Every check's result, in the order given, once all have finished."""
        self._reader.join()
        status = self._process.wait()
        why = self._ended or f"it exited with status {status}"
        return [(item, *self._outcomes.get(n, self._broken(item, why))) for n, item in enumerate(self._items)]

    def close(self) -> None:
        if self._process.poll() is None:
            self._process.kill()
        self._process.wait()
        self._reader.join(timeout=5)

    def _broken(self, item: Check, why: str) -> tuple[CheckResult, Created]:
        message = f"suite defect: the second process running {item.name} gave no result: {why}"
        return check_result(item, self.catalogue, Outcome.ERROR, message), []


def main() -> int:
    """The lane's process: run the job read from standard input, one pickled result per check."""
    config, capabilities, expected, names = pickle.load(sys.stdin.buffer)
    out = sys.stdout.buffer
    sys.stdout = sys.stderr  # whatever a check prints must not corrupt the results
    for n, name in enumerate(names):
        try:
            outcome, error = run_apart(config, capabilities, expected, name), None
        except Exception as exc:  # no such check here: the parent reports the suite's error
            outcome, error = None, f"{exc.__class__.__name__}: {exc}"
        pickle.dump((n, outcome, error), out)
        out.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
