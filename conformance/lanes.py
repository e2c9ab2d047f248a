"""Second processes beside the suite's own (`LANES` of them, "lanes"): each runs the checks marked
`apart` (the Schemathesis checks) while any is left, then takes checks from the end of the run's
queue until none is left.

The Schemathesis checks spend the suite's CPU generating input while the server idles, and the
others mostly wait for the server: in one process they hold one interpreter lock in turn; in
several, each process waits for the server while another works. Sharing the queue keeps all busy
to the end: a process that finishes first takes what the others have not started. A check run in
a lane is judged exactly as at home: the same `Target` code, seed, claim and expected failures, its
reproducer built where it ran. Only what it creates comes back beside its result, so the run's
cleanup purges it. A lane that breaks is the suite's error on the check it was running, never the
target's failure; the checks to run apart that no lane took, the suite runs itself.

The lane is `python -m conformance.lanes`, started with `subprocess` (no multiprocessing machinery
in a process whose threads hold many sockets): the run's settings arrive pickled on standard input,
then one check name at a time, each sent when the previous result came back; each result leaves
pickled on standard output as soon as its check ends, and the lane stops when its input closes.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable
from typing import Any, BinaryIO

from conformance.config import Config, ExpectedFailure
from conformance.registry import Check, all_checks
from conformance.results import CheckResult, Outcome
from conformance.target import Target, check_result

Created = list[tuple[str, str | None]]  # (session id, creator) pairs, as CreatedSessions keeps them


class Queue:
    """The checks either process may run, in the run's order: the suite takes from the front, the
    lane from the back, so each check runs once and the two meet in the middle."""

    def __init__(self, items: list[Check]) -> None:
        self._items = deque(items)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def front(self) -> Check | None:
        with self._lock:
            return self._items.popleft() if self._items else None

    def back(self, accept: Callable[[Check], bool] = lambda item: True) -> Check | None:
        """The last check, when `accept` takes it; else None, and it stays for the front."""
        with self._lock:
            return self._items.pop() if self._items and accept(self._items[-1]) else None


def shareable(item: Check, config: Config) -> bool:
    """Whether the lane can run a check the suite might run itself: one it finds by name in the
    registry, and not while the run's OTLP receiver (which lives in this process) counts spans."""
    return not getattr(config, "otlp_receiver", None) and item in all_checks()


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


LANES = 2  # second processes per run (see `start_lanes`)
_early: list[subprocess.Popen[bytes]] = []  # lanes' processes started before the run needed them


def _spawn() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "conformance.lanes"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def start_early(count: int = LANES) -> None:
    """Start the lanes' processes now, before the run needs them: they import the checks and read
    the OpenAPI document while the embedded server starts and preflight runs, which otherwise
    delays a lane's first check by about 1.4 s. Each next `Lane` takes one; `stop_early` ends
    those none took."""
    while len(_early) < count:
        _early.append(_spawn())


def stop_early() -> None:
    """End the processes `start_early` started that no `Lane` took (a serial run, a failed preflight)."""
    while _early:
        process = _early.pop()
        process.kill()
        process.wait()


def _take_process() -> subprocess.Popen[bytes]:
    while _early:
        process = _early.pop(0)
        if process.poll() is None:
            return process
    return _spawn()


def start_lanes(
    config: Config,
    capabilities: dict[str, Any],
    expected: dict[str, ExpectedFailure],
    apart: Queue,
    rest: Queue,
    catalogue: dict[str, dict[str, Any]],
    done: Callable[[Check, CheckResult, Created], None] | None = None,
) -> list[Lane]:
    """Lanes sharing the run's work (`LANES`, or one per check to run apart when there are fewer):
    each takes the next check to run apart, then the last check of the rest while the suite takes
    the first.

    Two lanes, not one: on 2 cores, three client processes keep the server busier than two. In
    interleaved `check --embedded` runs the report's duration was 34.4 s against 35.4 s with one
    lane (4 pairs), 31.7 s against 33.1 s (5 pairs); three lanes were slower than one. The apart
    checks (Schemathesis's) then run two at a time instead of one after another.
    """

    def more() -> Check | None:
        return apart.front() or rest.back(lambda item: shareable(item, config))

    count = min(LANES, len(apart))  # each lane starts on a check to run apart: no more lanes than those
    return [Lane(config, capabilities, expected, [], catalogue, done, more) for _ in range(count)]


class Lane:
    """Checks running one after another in a second process, started at once: `items` first, then
    whatever `more` hands out (None: nothing left). `done` hears of each result, with the sessions
    its check created, as it arrives."""

    def __init__(
        self,
        config: Config,
        capabilities: dict[str, Any],
        expected: dict[str, ExpectedFailure],
        items: list[Check],
        catalogue: dict[str, dict[str, Any]],
        done: Callable[[Check, CheckResult, Created], None] | None = None,
        more: Callable[[], Check | None] | None = None,
    ) -> None:
        self.catalogue = catalogue
        self._own = deque(items)
        self._more = more
        self._items: list[Check] = []  # every check sent, in the order sent
        self._done = done
        self._outcomes: dict[int, tuple[CheckResult, Created]] = {}
        self._ended: str | None = None
        self._process = _take_process()
        assert self._process.stdin is not None and self._process.stdout is not None
        self._input = self._process.stdin
        try:
            pickle.dump((config, capabilities, expected), self._input)
            self._send_next()
        except OSError as exc:  # it died before it read its job
            self._ended = f"{exc.__class__.__name__}: {exc}"
        self._reader = threading.Thread(target=self._read, args=(self._process.stdout,), name="lane-results", daemon=True)
        self._reader.start()

    def _send_next(self) -> None:
        """Hand the lane its next check, or close its input when there is none."""
        item = self._own.popleft() if self._own else (self._more() if self._more else None)
        if item is None:
            self._input.close()
            return
        self._items.append(item)
        pickle.dump(item.name, self._input)
        self._input.flush()

    def _read(self, stream: BinaryIO) -> None:
        try:
            while True:
                n, outcome, error = pickle.load(stream)
                if outcome is None:
                    outcome = self._broken(self._items[n], error)
                self._outcomes[n] = outcome
                if self._done is not None:
                    self._done(self._items[n], *outcome)
                self._send_next()
        except EOFError:
            pass
        except Exception as exc:  # a result that would not unpickle, a broken pipe
            self._ended = f"{exc.__class__.__name__}: {exc}"

    def results(self) -> list[tuple[Check, CheckResult, Created]]:
        """Every check sent to the lane, in the order sent, once all have finished."""
        self._reader.join()
        status = self._process.wait()
        why = self._ended or f"it exited with status {status}"
        items = [*self._items, *self._own]  # checks of its own never sent: it broke first
        return [(item, *self._outcomes.get(n, self._broken(item, why))) for n, item in enumerate(items)]

    def close(self) -> None:
        if self._process.poll() is None:
            self._process.kill()
        self._process.wait()
        self._reader.join(timeout=5)

    def _broken(self, item: Check, why: str) -> tuple[CheckResult, Created]:
        message = f"suite defect: the second process running {item.name} gave no result: {why}"
        return check_result(item, self.catalogue, Outcome.ERROR, message), []


def _warm_up() -> None:
    """What the lane's checks need before their first request, loaded before its settings arrive
    (they arrive later when the process was started early). A part that fails to load is left for
    its check to report."""
    all_checks()
    try:
        from conformance.checks import fuzz

        fuzz.warm_up()
    except Exception:  # noqa: BLE001 - the check meets the same error and reports it
        pass


def main() -> int:
    """The lane's process: the run's settings, then one check name at a time until the input closes;
    one pickled result per check."""
    source = sys.stdin.buffer
    _warm_up()
    try:
        config, capabilities, expected = pickle.load(source)
    except EOFError:  # started early, and the run ended without needing it
        return 0
    out = sys.stdout.buffer
    sys.stdout = sys.stderr  # whatever a check prints must not corrupt the results
    n = 0
    while True:
        try:
            name = pickle.load(source)
        except EOFError:
            return 0
        try:
            outcome, error = run_apart(config, capabilities, expected, name), None
        except Exception as exc:  # no such check here: the parent reports the suite's error
            outcome, error = None, f"{exc.__class__.__name__}: {exc}"
        pickle.dump((n, outcome, error), out)
        out.flush()
        n += 1


if __name__ == "__main__":
    raise SystemExit(main())
