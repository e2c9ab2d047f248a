"""What the suite leaves on a target: every session it created, found in the recorded exchanges.

Every id the suite chooses carries the run's prefix; sessions whose ids the server chose (fuzzing
lets it) are listed too. When the target advertises `sharing` (which brings purge), `finish` purges
them as the principal that created each, children before parents (a purge of a session with a
live descendant answers 409, so those are retried after their children went), and counts 404 as
already gone. Whatever could not be removed, or everything without `sharing`, is listed in the report.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import quote

import spec
from conformance.results import Cleanup, Exchange

_CREATES = re.compile(r"^/sessions(?:/[^/]+/fork)?/?$")


def created_session(exchange: Exchange) -> str | None:
    """The id of the session a `POST /sessions` or `POST /sessions/{id}/fork` answered 201 with."""
    if exchange.method.upper() != "POST" or exchange.status != 201:
        return None
    path = re.sub(r"^[a-z]+://[^/]+", "", exchange.url).split("?", 1)[0]
    if not _CREATES.match(path):
        return None
    try:
        body = json.loads(exchange.response_body)
    except ValueError:
        return None
    if isinstance(body, dict) and isinstance(body.get("session"), dict):
        body = body["session"]  # a fork answers the child inside `session`
    session_id = body.get("session_id") if isinstance(body, dict) else None
    return session_id if isinstance(session_id, str) else None


def deletion_supported() -> bool:
    """Whether the spec this suite checks offers an operation that deletes a session."""
    return "delete" in spec.openapi()["paths"].get("/sessions/{session_id}", {})


class CreatedSessions:
    """Collects the ids of sessions the run created, in creation order."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._ids: dict[str, str | None] = {}  # session id -> the principal that created it

    def add(self, session_ids: Iterable[str], principal: str | None = None) -> None:
        for session_id in session_ids:
            self._ids.setdefault(session_id, principal)

    def scan(self, exchanges: Iterable[Exchange]) -> None:
        for exchange in exchanges:
            session = created_session(exchange)
            if session:
                self.add([session], exchange.principal)

    def creator(self, session_id: str) -> str | None:
        return self._ids.get(session_id)

    @property
    def ids(self) -> list[str]:
        return list(self._ids)

    def remove(self, purge: Callable[[str, str | None], int | None], workers: int = 4) -> list[str]:
        """Purge every created session, newest first; `purge(session_id, creator)` answers a status
        (None when the target could not be reached). Returns the ids that are gone."""
        order = list(reversed(self.ids))
        gone: list[str] = []
        blocked: list[str] = []
        with ThreadPoolExecutor(max(1, workers)) as pool:
            for session_id, status in zip(order, pool.map(lambda s: purge(s, self.creator(s)), order)):
                if status in (204, 404):
                    gone.append(session_id)
                elif status == 409:  # a descendant was still there when it was asked
                    blocked.append(session_id)
        for session_id in blocked:  # newest first, after every child had its turn
            if purge(session_id, self.creator(session_id)) in (204, 404):
                gone.append(session_id)
        return gone

    def finish(self, keep: bool, purge: Callable[[str, str | None], int | None] | None = None, workers: int = 4) -> Cleanup:
        """What becomes of the created sessions: kept with `--keep`, purged when `purge` is given
        (the target advertises `sharing`), otherwise left behind and listed."""
        ids = self.ids
        server_chosen = sum(1 for session in ids if not session.startswith(self.prefix))
        count = f"{len(ids)} session{'s' if len(ids) != 1 else ''} with prefix {self.prefix}"
        if server_chosen:
            count = (
                f"{len(ids)} sessions ({len(ids) - server_chosen} with prefix {self.prefix}, "
                f"{server_chosen} with ids the server chose)"
            )
        if keep:
            note = f"kept (--keep): {count}"
        elif not ids:
            note = "nothing left behind: the run created no session"
        elif purge is not None:
            removed = self.remove(purge, workers)
            left = len(ids) - len(removed)
            note = f"removed {len(removed)} of {count}" + (
                f"; {left} left behind (the purge did not answer 204 or 404; listed in the JSON report)" if left else ""
            )
            return Cleanup(prefix=self.prefix, sessions=ids, removed=removed, kept=False, note=note)
        elif deletion_supported():
            note = f"left behind: {count}; the target does not advertise `sharing`, which brings purge"
        else:
            note = f"left behind: {count}; the API offers no deletion in spec {spec.spec_version()}"
        return Cleanup(prefix=self.prefix, sessions=ids, removed=[], kept=keep, note=note)


__all__ = ["CreatedSessions", "created_session", "deletion_supported"]
