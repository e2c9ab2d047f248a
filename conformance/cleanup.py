"""What the suite leaves on a target: every session a run causes to exist, and proof that it is gone.

Every id the suite chooses carries the run's prefix. Sessions whose ids the server chose are found
in the recorded exchanges too: forks (first answers and replays), legacy imports (the session and
the parent it was forked from) and root sessions. When the target advertises `sharing` (which
brings purge), `finish` purges them as the principal that created each, children before parents
(a purge of a session with a live descendant answers 409, so those are retried after their children
went). The purge's answers are not trusted: `verify_by_listing` then lists, as every principal, the
sessions it can still see, keeps those of the run (the prefix, a recorded id, or the prefix in a
name or description), purges them once more as their owner and lists again. What that last
listing finds is what the run left behind; the counts the reports print come from it. Without
`sharing` nothing can be listed or purged and the report lists the recorded ids.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any
from urllib.parse import quote

import httpx

import spec
from conformance.client import tls
from conformance.results import Cleanup, Exchange

_CREATES = re.compile(r"^/sessions(?:/[^/]+/fork)?/?$")
_IMPORTS = re.compile(r"^/imports/?$")
MAX_LIST_PAGES = 1_000
PURGE_ROUNDS = 8  # a chain deeper than this is purged over several listings


def _path(url: str) -> str:
    return re.sub(r"^[a-z]+://[^/]+", "", url).split("?", 1)[0]


def created_sessions(exchange: Exchange) -> list[str]:
    """The sessions an exchange shows to exist: a `POST /sessions` answering 201, a fork answering
    201 or replaying 200 (the child, often with an id the server chose), a legacy import answering
    200 or 201 (its session and the parent it was forked from)."""
    if exchange.method.upper() != "POST" or exchange.status not in (200, 201):
        return []
    path = _path(exchange.url)
    imported = bool(_IMPORTS.match(path))
    if not imported and not _CREATES.match(path):
        return []
    if path.rstrip("/") == "/sessions" and exchange.status != 201:
        return []
    try:
        body = json.loads(exchange.response_body)
    except ValueError:
        return []
    if not isinstance(body, dict):
        return []
    if imported:
        ids = [body.get("parent_session_id"), body.get("session_id")]
        return [value for value in ids if isinstance(value, str) and value]
    if isinstance(body.get("session"), dict):
        body = body["session"]  # a fork answers the child inside `session`
    session_id = body.get("session_id")
    return [session_id] if isinstance(session_id, str) else []


def created_session(exchange: Exchange) -> str | None:
    """The id of the (last) session an exchange created, or None."""
    found = created_sessions(exchange)
    return found[-1] if found else None


def deletion_supported() -> bool:
    """Whether the spec this suite checks offers an operation that deletes a session."""
    return "delete" in spec.openapi()["paths"].get("/sessions/{session_id}", {})


Purge = Callable[[str, str | None], "int | None"]
Pair = tuple[str, str | None]


class CreatedSessions:
    """Collects the sessions the run caused to exist, in creation order, with their creators.

    Two principals of different projects may hold sessions with the same id: each (id, creator)
    pair is purged. A finished check's sessions may be purged early (`purge_some`), while the run
    goes on; `finish` then purges only what those purges did not remove. Thread-safe: the second
    process's results and the early purges arrive on other threads."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._pairs: dict[Pair, None] = {}
        self._answered: dict[Pair, int | None] = {}  # the early purges' answers
        self._lock = threading.Lock()

    def add(self, session_ids: Iterable[str], principal: str | None = None) -> None:
        with self._lock:
            for session_id in session_ids:
                if principal is not None and (session_id, None) in self._pairs:
                    del self._pairs[(session_id, None)]  # now we know who made it
                if principal is None and any(sid == session_id for sid, _ in self._pairs):
                    continue
                self._pairs.setdefault((session_id, principal), None)

    def scan(self, exchanges: Iterable[Exchange]) -> None:
        for exchange in exchanges:
            self.add(created_sessions(exchange), exchange.principal)

    def creator(self, session_id: str) -> str | None:
        with self._lock:
            return next((who for sid, who in self._pairs if sid == session_id), None)

    @property
    def pairs(self) -> list[Pair]:
        with self._lock:
            return list(self._pairs)

    @property
    def ids(self) -> list[str]:
        return list(dict.fromkeys(sid for sid, _ in self.pairs))

    def purge_some(self, pairs: Sequence[Pair], purge: Purge) -> None:
        """Purge these sessions now, newest first, a 409 asked once more after the others (a child
        of the same check went first); the answers are kept for `remove`."""
        order = list(reversed(pairs))
        statuses = {pair: purge(*pair) for pair in order}
        for pair in order:
            if statuses[pair] == 409:
                statuses[pair] = purge(*pair)
        with self._lock:
            self._answered.update(statuses)

    def remove(self, purge: Purge, workers: int = 4) -> list[str]:
        """Purge every created session not already removed by `purge_some`, newest first;
        `purge(session_id, creator)` answers a status (None when the target could not be reached).
        Returns the ids whose every purge answered 204 or 404."""
        with self._lock:
            statuses = {pair: status for pair, status in self._answered.items() if status in (204, 404)}
        order = [pair for pair in reversed(self.pairs) if pair not in statuses]
        with ThreadPoolExecutor(max(1, workers)) as pool:
            for pair, status in zip(order, pool.map(lambda p: purge(*p), order)):
                statuses[pair] = status
        for pair in order:  # newest first, after every child had its turn
            if statuses[pair] == 409:
                statuses[pair] = purge(*pair)
        failed = {sid for (sid, _), status in statuses.items() if status not in (204, 404)}
        return [sid for sid in reversed(self.ids) if sid not in failed]

    def finish(self, keep: bool, purge: Purge | None = None, workers: int = 4) -> Cleanup:
        """What becomes of the created sessions: kept with `--keep`, purged when `purge` is given
        (the target advertises `sharing`), otherwise left behind and listed."""
        ids = self.ids
        count = _count(ids, self.prefix)
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
            note = (
                f"left behind: {count}; the target does not advertise `sharing`, which brings purge and "
                "listing, so nothing could be removed or verified (ids in the JSON report)"
            )
        else:
            note = f"left behind: {count}; the API offers no deletion in spec {spec.spec_version()}"
        return Cleanup(prefix=self.prefix, sessions=ids, removed=[], kept=keep, note=note)


class EarlyPurges:
    """Finished checks' sessions purged in the background while the run goes on (two at a time),
    so that the cleanup at the end has little left to do. `end` waits for them; a purge that
    raised leaves its sessions to that cleanup."""

    def __init__(self, created: CreatedSessions, purge: Purge, clients: Sequence[Any] = ()) -> None:
        self._created, self._purge, self._clients = created, purge, clients
        self._pool = ThreadPoolExecutor(2, thread_name_prefix="early-purge")

    def submit(self, pairs: Sequence[Pair]) -> None:
        self._pool.submit(self._created.purge_some, list(pairs), self._purge)

    def end(self) -> None:
        self._pool.shutdown(wait=True)
        for client in self._clients:
            client.close()


def _count(ids: Sequence[str], prefix: str) -> str:
    server_chosen = sum(1 for session in ids if not session.startswith(prefix))
    if server_chosen:
        return (
            f"{len(ids)} sessions ({len(ids) - server_chosen} with prefix {prefix}, "
            f"{server_chosen} with ids the server chose)"
        )
    return f"{len(ids)} session{'s' if len(ids) != 1 else ''} with prefix {prefix}"


# ------------------------------------------------------------------------------ verification
class _Principal:
    def __init__(self, http: httpx.Client, target: str, token: str, name: str) -> None:
        self.http, self.target, self.name = http, target.rstrip("/"), name
        self.headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, application/problem+json"}

    def visible(self, prefix: str, recorded: set[str]) -> dict[str, str]:
        """The run's sessions this principal can list: id -> its access (`owner`, `reader`, ...)."""
        found: dict[str, str] = {}
        cursor = None
        for _ in range(MAX_LIST_PAGES):
            params = {"cursor": cursor} if cursor else {}  # the server's default page size: any limit could exceed its maximum
            answer = self.http.get(f"{self.target}/sessions", params=params, headers=self.headers)
            if answer.status_code != 200:
                raise _ListingFailed(f"GET /sessions as {self.name} answered {answer.status_code}")
            page = answer.json()
            for item in page.get("sessions") or []:
                session = item.get("session") or {}
                sid = session.get("session_id")
                text = f"{session.get('name') or ''} {session.get('description') or ''}"
                if isinstance(sid, str) and (sid.startswith(prefix) or sid in recorded or prefix in text):
                    found[sid] = str(item.get("access") or "")
            cursor = page.get("next_cursor")
            if not page.get("has_more") or not cursor:
                return found
        raise _ListingFailed(f"GET /sessions as {self.name} did not end within {MAX_LIST_PAGES} pages")

    def purge(self, session_id: str) -> int | None:
        try:
            return self.http.post(
                f"{self.target}/sessions/{quote(session_id, safe='')}/purge", headers=self.headers
            ).status_code
        except httpx.HTTPError:
            return None


class _ListingFailed(Exception):
    pass


def _listing(principals: Sequence[_Principal], prefix: str, recorded: set[str]) -> dict[tuple[str, str], str]:
    """(session id, principal name) -> access, for every run session any principal still sees."""
    found: dict[tuple[str, str], str] = {}
    for principal in principals:
        for sid, access in principal.visible(prefix, recorded).items():
            found[(sid, principal.name)] = access
    return found


def verify_by_listing(
    cleanup: Cleanup | None,
    target: str,
    tokens: Sequence[str],
    advertised: Iterable[str],
    timeout: float = 30.0,
) -> Cleanup | None:
    """Check a purge by listing: whatever any principal still sees of the run is purged once more
    as its owner, then listed again; what remains is left behind. Returns the cleanup with counts
    from that listing (unchanged when kept or when the target cannot list: no `sharing`)."""
    if cleanup is None or cleanup.kept or "sharing" not in set(advertised):
        return cleanup
    recorded = set(cleanup.sessions)
    names = [f"principal-{n + 1}" for n in range(len(tokens))]
    try:
        with httpx.Client(timeout=timeout, verify=tls()) as http:
            principals = [_Principal(http, target, token, name) for token, name in zip(tokens, names)]
            found = _listing(principals, cleanup.prefix, recorded)
            seen = list(dict.fromkeys(sid for sid, _ in found))
            by_name = {p.name: p for p in principals}
            for _ in range(PURGE_ROUNDS):  # leaves first: a parent answers 409 until its children went
                owned = [(sid, who) for (sid, who), access in found.items() if access == "owner"]
                if not owned:
                    break
                statuses = [by_name[who].purge(sid) for sid, who in owned]
                found = _listing(principals, cleanup.prefix, recorded)
                if not any(status in (204, 404) for status in statuses):
                    break
    except (_ListingFailed, httpx.HTTPError, ValueError) as exc:
        return replace(cleanup, note=f"{cleanup.note}; not verified: listing failed ({exc})")
    left = list(dict.fromkeys(sid for sid, _ in found))
    sessions = list(dict.fromkeys([*cleanup.sessions, *seen]))
    removed = [sid for sid in sessions if sid not in set(left)]
    listed = f"verified by listing as {len(tokens)} principals"
    if left:
        where = ", ".join(sorted({who for _, who in found}))
        shown = ", ".join(left[:10]) + (f" and {len(left) - 10} more" if len(left) > 10 else "")
        note = (
            f"removed {len(removed)} of {_count(sessions, cleanup.prefix)}; {len(left)} left behind "
            f"({listed}; seen by {where}): {shown}"
        )
    else:
        note = f"removed {len(removed)} of {_count(sessions, cleanup.prefix)}; {listed}: none left"
    return replace(cleanup, sessions=sessions, removed=removed, note=note)


__all__ = ["CreatedSessions", "EarlyPurges", "created_session", "created_sessions", "deletion_supported", "verify_by_listing"]
