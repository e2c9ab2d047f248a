"""What a check gets: clients for each principal, the capabilities, ids and setup helpers.

Setup helpers assert as they go: when the target fails a setup step, the check fails citing the
requirement that step relies on, instead of failing later for a confusing reason. Each is marked
`@setup_step(RULE)` with the rules it may cite (registry.py says what a check may cite).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterable
from typing import Any

from conformance import timing
from conformance.client import ApiClient
from conformance.config import Config
from conformance.errors import CheckFailed, Unsupported
from conformance.registry import setup_step
from conformance.response import _MISSING, Response, describe

MAX_WALK_PAGES = 10_000


class AdvertisedLimits(dict):  # type: ignore[type-arg]
    """The capability document's `limits`. A limit a check needs that is missing, or is not a
    whole number, fails the check citing CAP-DOC-001 instead of crashing the suite."""

    def __getitem__(self, name: str) -> int:
        value = self.get(name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise CheckFailed(
                f"the capability document's limits give {name} as {value!r}; the check needs it as a "
                "whole number to size its requests",
                ["CAP-DOC-001"],
            )
        return value


class CheckContext:
    def __init__(
        self,
        config: Config,
        capabilities: dict[str, Any],
        replicas: list[list[ApiClient]],
        anonymous: ApiClient,
        seed: int,
    ) -> None:
        self.config = config
        self.capabilities = capabilities
        self.replicas = replicas
        clients = [group[0] for group in replicas]
        self.clients = clients
        self.roles = config.role_index()
        self.alice = clients[self.roles.get("owner", 0)]
        self.bob = clients[self.roles.get("stranger", 1)]
        # Data a check publishes beside its outcome (for example the authorization matrix).
        self.details: dict[str, Any] = {}
        self._principal_ids: dict[int, str] = {}
        self.anonymous = anonymous
        self.seed = seed
        self.rng = random.Random(seed)
        self._counter = itertools.count(1)

    def principals(self, *roles: str) -> list[ApiClient]:
        """The clients playing `roles` (config.ROLES); a check that needs more principals than
        the configuration gives fails as not testable, naming what to configure."""
        missing = [role for role in roles if role not in self.roles]
        if missing:
            raise CheckFailed(
                f"not testable: needs {len(roles)} principals ({', '.join(roles)}); the configuration "
                f"gives {len(self.clients)} and none for {', '.join(missing)}: add their tokens"
            )
        return [self.clients[self.roles[role]] for role in roles]

    @setup_step("AUTH-PRINCIPAL-001")
    def principal_id(self, client: ApiClient) -> str:
        """The principal id the target knows a client by (`GET /me`, capability `sharing`)."""
        if id(client) not in self._principal_ids:
            response = client.get("/me")
            self.expect_status(response, 200, None, "AUTH-PRINCIPAL-001")
            self._principal_ids[id(client)] = response.json()["principal_id"]
        return self._principal_ids[id(client)]

    def spread(self, principal: int = 0) -> list[ApiClient]:
        """One client per base URL of the deployment for a principal; concurrent requests rotate."""
        return self.replicas[principal]

    # ---------------------------------------------------------------- facts about the target
    @property
    def limits(self) -> AdvertisedLimits:
        limits = self.capabilities.get("limits")
        return AdvertisedLimits(limits if isinstance(limits, dict) else {})

    def has(self, capability: str) -> bool:
        return capability in self.capabilities.get("capabilities", [])

    def require(self, capability: str) -> None:
        if not self.has(capability):
            raise Unsupported(f"the target does not advertise '{capability}'")

    wait_until = staticmethod(timing.wait_until)

    # ---------------------------------------------------------------- assertions
    def new_id(self, label: str) -> str:
        """A fresh id carrying the run's prefix, so every id the suite creates is traceable."""
        return f"{self.config.id_prefix}{label}-{next(self._counter)}-{self.rng.randrange(16**6):06x}"

    @staticmethod
    def expect(condition: bool, message: str, *requirements: str) -> None:
        if not condition:
            raise CheckFailed(message, list(requirements))

    def ok(self, response: Response, status: int | Iterable[int], *requirements: str) -> Any:
        """The body of a response that must have `status` (a setup step, or the check's own)."""
        self.expect_status(response, status, None, *requirements)
        return response.json()

    @staticmethod
    def expect_status(
        response: Response, status: int | Iterable[int], kind: str | None = None, *requirements: str
    ) -> None:
        allowed = {status} if isinstance(status, int) else set(status)
        what = f"{response.exchange.method} {response.exchange.url}"
        if response.status not in allowed:
            detail = response.content[:300].decode("utf-8", "replace")
            raise CheckFailed(
                f"{describe(response.exchange)}: expected HTTP {'/'.join(map(str, sorted(allowed)))}"
                f"{f' ({kind})' if kind else ''}: {detail}",
                list(requirements),
            )
        if kind is not None:
            expected = f"urn:session-lineage:problem:{kind}"
            if response.problem_type != expected:
                raise CheckFailed(
                    f"{what}: expected problem type {expected}, got {response.problem_type}",
                    list(requirements) + ["ERR-TYPE-001"],
                    also_check=not requirements,
                )

    # ---------------------------------------------------------------- setup helpers
    @setup_step("SESS-CREATE-001")
    def create_session(self, client: ApiClient | None = None, **fields: Any) -> dict[str, Any]:
        client = client or self.alice
        fields.setdefault("session_id", self.new_id("s"))
        response = client.post("/sessions", json=fields)
        self.expect_status(response, 201, None, "SESS-CREATE-001")
        return response.json()

    def start_turn(
        self, session_id: str, role: str = "user", client: ApiClient | None = None, **fields: Any
    ) -> dict[str, Any]:
        client = client or self.alice
        return self.started(client.post(f"/sessions/{session_id}/turns", json={"role": role, **fields}))

    @setup_step("SESS-TURN-001")
    def started(self, response: Response) -> dict[str, Any]:
        """The answer of a turn start that must succeed: a set-up step, whoever sent it."""
        self.expect_status(response, 201, None, "SESS-TURN-001")
        return response.json()  # type: ignore[no-any-return]

    @setup_step("SESS-RECORD-APPEND-001")
    def append(
        self,
        session_id: str,
        turn_id: str,
        count: int = 1,
        client: ApiClient | None = None,
        label: str = "r",
    ) -> list[dict[str, Any]]:
        """Append `count` records, in as many requests as the advertised batch limit needs."""
        client = client or self.alice
        records = [
            {"type": "message", "content": {"text": f"{label}-{n}", "nonce": self.rng.randrange(10**9)}}
            for n in range(count)
        ]
        batch = max(self.limits["max_records_per_append"], 1)
        written: list[dict[str, Any]] = []
        for start in range(0, count, batch):
            response = client.post(
                f"/sessions/{session_id}/turns/{turn_id}/records", json={"records": records[start : start + batch]}
            )
            written.extend(self.ok(response, 201, "SESS-RECORD-APPEND-001")["records"])
        return written

    @setup_step("SESS-TURN-FINISH-001")
    def finish(
        self, session_id: str, turn_id: str, status: str = "completed", client: ApiClient | None = None
    ) -> dict[str, Any]:
        client = client or self.alice
        response = client.post(
            f"/sessions/{session_id}/turns/{turn_id}/finish", json={"status": status}
        )
        self.expect_status(response, 200, None, "SESS-TURN-FINISH-001")
        return response.json()

    def run_turn(
        self,
        session_id: str,
        role: str = "user",
        records: int = 2,
        status: str = "completed",
        client: ApiClient | None = None,
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Start a turn, append records, finish it; returns the turn and its records."""
        turn = self.start_turn(session_id, role, client)
        written = self.append(session_id, turn["turn_id"], records, client) if records else []
        if status != "running":
            turn = self.finish(session_id, turn["turn_id"], status, client)
        return turn, written

    def conversation(
        self, turns: int, records_per_turn: int = 2, client: ApiClient | None = None, **fields: Any
    ) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
        """A root session with `turns` finished turns alternating user/assistant."""
        session = self.create_session(client, **fields)
        turn_list, records = [], []
        for n in range(turns):
            turn, written = self.run_turn(
                session["session_id"], "user" if n % 2 == 0 else "assistant", records_per_turn, client=client
            )
            turn_list.append(turn)
            records.extend(written)
        return session, turn_list, records

    def fork(
        self,
        source_id: str,
        cut: dict[str, Any] | None = None,
        *,
        key: str | None = None,
        target: str | None = None,
        header: Any = _MISSING,
        client: ApiClient | None = None,
    ) -> Response:
        client = client or self.alice
        body: dict[str, Any] = {"cut": cut or {"mode": "latest"}}
        if target is not None:
            body["target_session_id"] = target
        if header is not _MISSING:
            body["header"] = header
        headers = {"Idempotency-Key": f'"{key}"'} if key is not None else None
        return client.post(f"/sessions/{source_id}/fork", json=body, headers=headers)

    def fork_ok(self, source_id: str, cut: dict[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
        return self.forked(self.fork(source_id, cut, **kwargs))

    @setup_step("FORK-CREATE-001")
    def forked(self, response: Response) -> dict[str, Any]:
        """The answer of a fork that must succeed: a set-up step, whoever sent the fork."""
        self.expect_status(response, 201, None, "FORK-CREATE-001")
        return response.json()  # type: ignore[no-any-return]

    @setup_step("XS-EFFECTIVE-001", "XS-ROOT-001", "XS-PAGE-001")
    def walk(
        self,
        session_id: str,
        kind: str = "transcript",
        limit: int | None = None,
        client: ApiClient | None = None,
        on_page: Callable[[Response], None] | None = None,
    ) -> list[dict[str, Any]]:
        """Every record of a transcript (or own records), following cursors to the end."""
        client = client or self.alice
        records: list[dict[str, Any]] = []
        cursor = None
        for _ in range(MAX_WALK_PAGES):
            response = client.get(
                f"/sessions/{session_id}/{kind}", params={"cursor": cursor, "limit": limit}
            )
            self.expect_status(response, 200, None, "XS-EFFECTIVE-001" if kind == "transcript" else "XS-ROOT-001")
            if on_page is not None:
                on_page(response)
            page = response.json()
            records.extend(page["records"])
            if not page["has_more"]:
                return records
            if not page["records"] or page["next_cursor"] is None:
                raise CheckFailed(
                    "a page with has_more=true must hold records and a next_cursor", ["XS-PAGE-001"]
                )
            cursor = page["next_cursor"]
        raise CheckFailed(f"pagination did not end within {MAX_WALK_PAGES} pages", ["XS-PAGE-001"])

    def chain(self, depth: int, turns_per_session: int = 1, records_per_turn: int = 1) -> list[str]:
        """A root and `depth` descendants, each forked at its parent's latest turn."""
        session, _, _ = self.conversation(turns_per_session, records_per_turn)
        ids = [session["session_id"]]
        for _ in range(depth):
            child = self.fork_ok(ids[-1], {"mode": "latest"})["session"]["session_id"]
            for _ in range(turns_per_session):
                self.run_turn(child, "user", records_per_turn)
            ids.append(child)
        return ids

    @staticmethod
    def known(value: Any, expected: Any) -> Any:
        """`value` with only the members `expected` has, at every level: responses are open
        (VERSION-OPEN-RESPONSE-001), so members of a later minor version never fail a comparison."""
        if isinstance(value, dict) and isinstance(expected, dict):
            return {k: CheckContext.known(v, expected[k]) for k, v in value.items() if k in expected}
        if isinstance(value, list) and isinstance(expected, list) and len(value) == len(expected):
            return [CheckContext.known(v, e) for v, e in zip(value, expected)]
        return value

    @staticmethod
    def keys(records: Iterable[dict[str, Any]]) -> list[tuple[str, int]]:
        return [(record["session_id"], record["index"]) for record in records]
