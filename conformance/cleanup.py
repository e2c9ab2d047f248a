"""What the suite leaves on a target: every session it created, found in the recorded exchanges.

Every id the suite chooses carries the run's prefix; sessions whose ids the server chose (fuzzing
lets it) are listed too. The spec offers no way to delete a session yet, so the report lists them.
When the spec gains `DELETE /sessions/{session_id}`, `finish` removes them here, children before
parents (the reverse order of creation), and accepts 404 as already gone.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

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
        self._ids: dict[str, None] = {}

    def add(self, session_ids: Iterable[str]) -> None:
        for session_id in session_ids:
            self._ids[session_id] = None

    def scan(self, exchanges: Iterable[Exchange]) -> None:
        self.add(session for session in map(created_session, exchanges) if session)

    @property
    def ids(self) -> list[str]:
        return list(self._ids)

    def finish(self, keep: bool) -> Cleanup:
        """What becomes of the created sessions: kept with `--keep`, otherwise left behind for as
        long as the spec offers no deletion."""
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
        elif deletion_supported():  # the spec grew DELETE: deleting here is the small addition left to make
            note = f"left behind: {count}; this suite version does not delete sessions yet"
        else:
            note = f"left behind: {count}; the API offers no deletion in spec {spec.spec_version()}"
        return Cleanup(prefix=self.prefix, sessions=ids, removed=[], kept=keep, note=note)


__all__ = ["CreatedSessions", "created_session", "deletion_supported"]
