"""A small typed client for Session Lineage servers, on httpx.

It reads the capability document first and takes the right path against both kinds of server
(COMPAT-FALLBACK-001):

- a **lineage** server (lists `fork` and `lineage`): a branch is a fork; the child's first turn
  sends only the new turn, never the records it inherits;
- a **legacy** server (profile `legacy`: lists `replay-history`, not `fork`): a branch is a new
  session whose first turn carries the retained records as `replay_history`, from which the server
  rebuilds the context;
- neither: `ForkUnsupported`, instead of silently dropping the retained records.

Responses are read as open (VERSION-OPEN-RESPONSE-001): members the client does not know are
ignored (kept in `extra`), and enumeration values it does not know (a turn `status`, a pending
action `state`) are kept as opaque strings. Requests name the capabilities they rely on in
`Requires-Capabilities` (NEGOTIATE-HEADER-001), so a server lacking one answers 412 instead of
guessing.

    client = LineageClient("http://127.0.0.1:8080", token="...")
    branch = client.branch(source_id, cut={"mode": "before", "turn_id": t}, retained=records)
    client.run_first_turn(branch, "user", [{"type": "message", "content": {"text": "edited"}}])
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any, Literal

import httpx

__all__ = [
    "ApiError",
    "Branch",
    "Capabilities",
    "CapabilityMissing",
    "ForkUnsupported",
    "LineageClient",
    "PendingAction",
    "Record",
    "Session",
    "Turn",
    "replay_history_removable",
]

ServerMode = Literal["lineage", "legacy", "none"]
KNOWN_TURN_STATUSES = ("running", "completed", "failed")  # others are opaque (a later minor version)


class ApiError(Exception):
    """A problem+json answer (RFC 9457)."""

    def __init__(self, status: int, problem: Mapping[str, Any]) -> None:
        self.status = status
        self.problem = dict(problem)
        self.type = str(problem.get("type", ""))
        self.kind = self.type.rsplit(":", 1)[-1]
        self.detail = str(problem.get("detail", ""))
        super().__init__(f"{status} {self.kind}: {self.detail}")


class CapabilityMissing(ApiError):
    """412 `capability-missing`: the server lacks what the request relied on."""

    @property
    def missing(self) -> list[str]:
        return [str(name) for name in self.problem.get("missing_capabilities", [])]


class ForkUnsupported(Exception):
    """The server neither forks nor accepts replay history: a branch would lose the retained records."""


def _pick(data: Mapping[str, Any], known: Iterable[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    names = set(known)
    return {k: v for k, v in data.items() if k in names}, {k: v for k, v in data.items() if k not in names}


@dataclass(frozen=True)
class Capabilities:
    spec_version: str
    names: frozenset[str]
    limits: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Capabilities":
        known, extra = _pick(data, ("spec_version", "capabilities", "limits"))
        return cls(
            spec_version=str(known.get("spec_version", "0.0.0")),
            names=frozenset(str(n) for n in known.get("capabilities", [])),
            limits=dict(known.get("limits", {})),
            extra=extra,
        )

    @property
    def major(self) -> int:
        return int(self.spec_version.split(".", 1)[0] or 0)

    @property
    def mode(self) -> ServerMode:
        if {"fork", "lineage"} <= self.names:
            return "lineage"
        if "replay-history" in self.names:
            return "legacy"
        return "none"


@dataclass(frozen=True)
class Session:
    session_id: str
    name: str | None
    lineage: dict[str, Any] | None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Session":
        known, extra = _pick(data, ("session_id", "name", "lineage"))
        return cls(str(known["session_id"]), known.get("name"), known.get("lineage"), extra)


@dataclass(frozen=True)
class Turn:
    turn_id: str
    session_id: str
    role: str
    index: int
    status: str  # "running", "completed", "failed" - or a value of a later version, kept as it is
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Turn":
        known, extra = _pick(data, ("turn_id", "session_id", "role", "index", "status"))
        return cls(str(known["turn_id"]), str(known["session_id"]), str(known["role"]), int(known["index"]),
                   str(known["status"]), extra)

    @property
    def finished(self) -> bool | None:
        """True or False for the known statuses; None for one this client does not know (opaque)."""
        if self.status not in KNOWN_TURN_STATUSES:
            return None
        return self.status != "running"


@dataclass(frozen=True)
class Record:
    record_id: str
    session_id: str
    index: int
    type: str
    content: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Record":
        known, extra = _pick(data, ("record_id", "session_id", "index", "type", "content"))
        return cls(str(known["record_id"]), str(known["session_id"]), int(known["index"]), str(known["type"]),
                   dict(known["content"]), extra)

    def as_replay(self) -> dict[str, Any]:
        return {"record_id": self.record_id, "type": self.type, "content": self.content}


@dataclass(frozen=True)
class PendingAction:
    mode: str
    draft: str | None
    state: str  # "pending" or "in-flight"; another value is opaque
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "PendingAction":
        known, extra = _pick(data, ("mode", "draft", "state"))
        return cls(str(known["mode"]), known.get("draft"), str(known["state"]), extra)


@dataclass(frozen=True)
class Branch:
    """A new session continuing another: `replay` is the history its first turn must carry (legacy
    servers only; None on a lineage server)."""

    session: Session
    mode: ServerMode
    replay: list[dict[str, Any]] | None


class LineageClient:
    def __init__(self, base_url: str, token: str, *, timeout: float = 10.0, client: httpx.Client | None = None) -> None:
        self.http = client or httpx.Client(base_url=base_url.rstrip("/"), timeout=timeout)
        self.token = token
        self._capabilities: Capabilities | None = None
        self.last_response: httpx.Response | None = None

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> "LineageClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- transport
    def _request(self, method: str, path: str, *, json: Any = None, params: Mapping[str, Any] | None = None,
                 requires: Sequence[str] = ()) -> Any:
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json, application/problem+json"}
        if requires:
            headers["Requires-Capabilities"] = ", ".join(requires)
        response = self.http.request(method, path, json=json, params=params, headers=headers)
        self.last_response = response
        if response.status_code >= 400:
            try:
                problem = response.json()
            except ValueError:
                problem = {"type": "about:blank", "detail": response.text[:200]}
            if not isinstance(problem, dict):
                problem = {"type": "about:blank"}
            error = CapabilityMissing if response.status_code == 412 else ApiError
            raise error(response.status_code, problem)
        return response.json() if response.content else None

    # ---------------------------------------------------------------- negotiation
    def capabilities(self, refresh: bool = False) -> Capabilities:
        if self._capabilities is None or refresh:
            document = Capabilities.from_json(self._request("GET", "/capabilities"))
            if document.major != 1:
                raise ApiError(0, {"type": "about:blank", "detail": f"spec_version {document.spec_version}: this client speaks 1.x"})
            self._capabilities = document
        return self._capabilities

    @property
    def mode(self) -> ServerMode:
        return self.capabilities().mode

    # ---------------------------------------------------------------- sessions and turns
    def create_session(self, session_id: str | None = None, **fields: Any) -> Session:
        body = {k: v for k, v in {"session_id": session_id, **fields}.items() if v is not None}
        return Session.from_json(self._request("POST", "/sessions", json=body))

    def start_turn(self, session_id: str, role: str = "user", *, replay_history: list[dict[str, Any]] | None = None,
                   turn_id: str | None = None) -> Turn:
        body: dict[str, Any] = {"role": role}
        if turn_id is not None:
            body["turn_id"] = turn_id
        requires: tuple[str, ...] = ()
        if replay_history is not None:
            body["replay_history"] = replay_history
            requires = ("replay-history",)
        return Turn.from_json(self._request("POST", f"/sessions/{session_id}/turns", json=body, requires=requires))

    def append(self, session_id: str, turn_id: str, records: Sequence[Mapping[str, Any]]) -> list[Record]:
        batch = int(self.capabilities().limits.get("max_records_per_append", 1) or 1)
        written: list[Record] = []
        for start in range(0, len(records), batch):
            page = self._request("POST", f"/sessions/{session_id}/turns/{turn_id}/records",
                                 json={"records": [dict(r) for r in records[start:start + batch]]})
            written += [Record.from_json(item) for item in page["records"]]
        return written

    def finish(self, session_id: str, turn_id: str, status: str = "completed") -> Turn:
        return Turn.from_json(self._request("POST", f"/sessions/{session_id}/turns/{turn_id}/finish", json={"status": status}))

    def transcript(self, session_id: str) -> list[Record]:
        records: list[Record] = []
        cursor = None
        while True:
            page = self._request("GET", f"/sessions/{session_id}/transcript", params={"cursor": cursor} if cursor else None)
            records += [Record.from_json(item) for item in page["records"]]
            if not page.get("has_more"):
                return records
            cursor = page["next_cursor"]

    # ---------------------------------------------------------------- branching
    def fork(self, source_id: str, cut: Mapping[str, Any], *, rewind: Mapping[str, Any] | None = None,
             idempotency_key: str | None = None) -> Session:
        body: dict[str, Any] = {"cut": dict(cut)}
        requires = ["fork"]
        if rewind is not None:
            body["rewind"] = dict(rewind)
            requires.append("rewind")
        headers_key = {"Idempotency-Key": f'"{idempotency_key}"'} if idempotency_key else None
        if headers_key:
            self.http.headers.update(headers_key)
        try:
            result = self._request("POST", f"/sessions/{source_id}/fork", json=body, requires=requires)
        finally:
            if headers_key:
                self.http.headers.pop("Idempotency-Key", None)
        return Session.from_json(result["session"])

    def branch(self, source_id: str, cut: Mapping[str, Any], retained: Sequence[Record], *,
               rewind: Mapping[str, Any] | None = None) -> Branch:
        """Continue `source_id` from a cut. `retained`: the records the client shows before the cut
        (used only against a legacy server, as replay history)."""
        mode = self.mode
        if mode == "lineage":
            use_rewind = rewind if rewind is not None and "rewind" in self.capabilities().names else None
            return Branch(self.fork(source_id, cut, rewind=use_rewind), mode, None)
        if mode == "legacy":
            return Branch(self.create_session(), mode, [record.as_replay() for record in retained])
        raise ForkUnsupported("the server lists neither fork and lineage nor replay-history")

    def run_first_turn(self, branch: Branch, role: str, records: Sequence[Mapping[str, Any]],
                       status: str = "completed") -> tuple[Turn, list[Record]]:
        """The branch's first turn: on a legacy server it carries the replay history."""
        turn = self.start_turn(branch.session.session_id, role, replay_history=branch.replay)
        written = self.append(branch.session.session_id, turn.turn_id, records) if records else []
        return self.finish(branch.session.session_id, turn.turn_id, status), written

    def pending_action(self, session_id: str) -> PendingAction | None:
        data = self._request("GET", f"/sessions/{session_id}/pending-action", requires=("rewind",))
        action = (data or {}).get("pending_action")
        return PendingAction.from_json(action) if action else None


def replay_history_removable(documents: Iterable[Mapping[str, Any]], sunset: str | None = None,
                             now: datetime | None = None) -> dict[str, bool]:
    """The removal condition of `replay_history` (COMPAT-REMOVAL-001), as a tool checks it.

    `documents`: the capability document of every server of a deployment; `sunset`: the `Sunset`
    header its servers answer replay history with. `clients` - clients may stop sending the field
    (every server lists `fork` and `lineage`); `servers` - servers may stop accepting it (that, and
    the Sunset date has passed).
    """
    names = [Capabilities.from_json(document).names for document in documents]
    clients = bool(names) and all({"fork", "lineage"} <= found for found in names)
    moment = now or datetime.now(timezone.utc)
    passed = False
    if sunset:
        try:
            passed = parsedate_to_datetime(sunset) <= moment
        except (TypeError, ValueError, IndexError):
            passed = False
    return {"clients": clients, "servers": clients and passed}
