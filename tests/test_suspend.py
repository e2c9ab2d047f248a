"""Suspend and recover against the reference, where only a deployment can look.

- SUSPEND-INTERRUPTED-001 (deployment): a turn left running across a restart of the server on the
  same database is reported interrupted, its pending inputs dropped; it holds the session until it
  is recovered or abandoned; a suspended turn stays suspended.
- Two stores: delivered inputs land in the records store; a refused write gives the inputs back.
- PostgreSQL, two replicas: the suspend chapter of the suite, concurrent recovers included.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from sqlalchemy.exc import OperationalError

from conformance.config import load
from conformance.embedded import serve_app
from conformance.results import Outcome
from conformance.runner import run
from reference_impl.http.app import build_app, create_app, start_deployment
from reference_impl.http.factory import ENV, app_from_environment, settings_to_environment
from reference_impl.services import build_services
from reference_impl.settings import Settings
from reference_impl.store import Store, Transaction
from reference_impl.store.engine import make_engine, migrate

TOKENS = {"sus-alice": "alice", "sus-bob": "bob", "sus-carol": "carol", "sus-dave": "dave", "sus-erin": "erin"}
PROJECTS = {"erin": "elsewhere"}
AUTH = {"Authorization": "Bearer sus-alice"}


def running(http: httpx.Client, records: int = 1) -> tuple[str, str]:
    sid = http.post("/sessions", json={}).json()["session_id"]
    tid = http.post(f"/sessions/{sid}/turns", json={"role": "user"}).json()["turn_id"]
    if records:
        http.post(f"/sessions/{sid}/turns/{tid}/records", json={"records": [{"type": "m", "content": {"n": n}} for n in range(records)]})
    return sid, tid


def test_a_worker_starting_late_interrupts_no_turn_another_worker_runs(tmp_path, monkeypatch) -> None:
    """`serve --workers N`: the supervisor reports the turns left running interrupted once, before
    any worker starts (`start_deployment`). A worker that starts after another already serves, or
    that the supervisor restarts, leaves the running turns alone; before, each worker's start
    interrupted them, and a suite run against two workers met its own turn interrupted."""
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'workers.db'}", tokens=TOKENS, projects=PROJECTS)
    monkeypatch.setenv(ENV, "")  # restored after the test; settings_to_environment sets it as serve does
    settings_to_environment(settings)
    start_deployment(settings)
    with serve_app(app_from_environment()) as server, httpx.Client(base_url=server.url, headers=AUTH) as http:
        sid, tid = running(http, 1)
        app_from_environment()  # a second worker starts on the same database
        assert http.get(f"/sessions/{sid}/turns/{tid}").json()["status"] == "running"
        more = http.post(f"/sessions/{sid}/turns/{tid}/records", json={"records": [{"type": "m", "content": {}}]})
        assert more.status_code == 201, more.text
        start_deployment(settings)  # the whole server restarts: now the turn was left running
        assert http.get(f"/sessions/{sid}/turns/{tid}").json()["status"] == "interrupted"


@pytest.mark.parametrize("engine", ["sqlite", "postgres"])
def test_a_turn_left_running_across_a_restart_is_interrupted(engine: str, tmp_path, request) -> None:
    """SUSPEND-INTERRUPTED-001: restart the embedded server on the same database."""
    url = f"sqlite:///{tmp_path / 'restart.db'}" if engine == "sqlite" else request.getfixturevalue("postgres_url")
    settings = Settings(database_url=url, tokens=TOKENS, projects=PROJECTS)
    with serve_app(create_app(settings)) as server, httpx.Client(base_url=server.url, headers=AUTH) as http:
        left, left_turn = running(http, 2)
        http.post(f"/sessions/{left}/turns/{left_turn}/inputs", json={"content": {"pending": 1}})
        held, held_turn = running(http, 1)
        assert http.post(f"/sessions/{held}/turns/{held_turn}/suspend").status_code == 200
        done, done_turn = running(http, 1)
        http.post(f"/sessions/{done}/turns/{done_turn}/finish", json={"status": "completed"})
        spare, spare_turn = running(http, 0)
    # the server stops with turns running; a new one starts on the same database
    with serve_app(create_app(settings)) as server, httpx.Client(base_url=server.url, headers=AUTH) as http:
        turn = http.get(f"/sessions/{left}/turns/{left_turn}").json()
        assert turn["status"] == "interrupted" and turn["finished_at"] is None
        assert [i["status"] for i in http.get(f"/sessions/{left}/turns/{left_turn}/inputs").json()["inputs"]] == ["dropped"]
        assert http.get(f"/sessions/{held}/turns/{held_turn}").json()["status"] == "suspended"
        assert http.get(f"/sessions/{done}/turns/{done_turn}").json()["status"] == "completed"
        # unfinished: no new turn, no writes to it
        assert http.post(f"/sessions/{left}/turns", json={"role": "user"}).json()["type"].endswith("turn-in-progress")
        appended = http.post(f"/sessions/{left}/turns/{left_turn}/records", json={"records": [{"type": "m", "content": {}}]})
        assert appended.status_code == 409 and appended.json()["type"].endswith("turn-not-running")
        through = http.post(f"/sessions/{left}/fork", json={"cut": {"mode": "through", "turn_id": left_turn}})
        assert through.status_code == 409 and through.json()["type"].endswith("turn-incomplete")
        # recovered under the same id, records append to it
        recovered = http.post(f"/sessions/{left}/turns/{left_turn}/recover").json()
        assert (recovered["turn_id"], recovered["status"]) == (left_turn, "running")
        more = http.post(f"/sessions/{left}/turns/{left_turn}/records", json={"records": [{"type": "m", "content": {}}]}).json()
        assert (more["records"][0]["turn_id"], more["records"][0]["index"]) == (left_turn, 2)
        # or abandoned: the session is free again
        assert http.post(f"/sessions/{spare}/turns/{spare_turn}/abandon").json()["status"] == "abandoned"
        assert http.post(f"/sessions/{spare}/turns", json={"role": "user"}).status_code == 201


def _two_store_app(tmp_path, transaction: type[Transaction] = Transaction) -> Any:
    core, records = make_engine(f"sqlite:///{tmp_path / 'core.db'}"), make_engine(f"sqlite:///{tmp_path / 'records.db'}")
    migrate(core)
    migrate(records, records_only=True)
    settings = Settings(tokens=TOKENS, projects=PROJECTS)
    return build_app(build_services(Store(core, records, transaction), settings), settings)


def test_suspend_chapter_passes_with_records_in_a_second_store(tmp_path) -> None:
    with serve_app(_two_store_app(tmp_path)) as server:
        config = load(overrides={"target": server.url, "tokens": list(TOKENS), "select": ["suspend"], "seed": 5}, environ={})
        result = run(config)
    assert all(c.outcome is Outcome.PASS for c in result.checks), [(c.name, c.message) for c in result.checks if c.outcome is not Outcome.PASS]


class RefusingRecordsStore(Transaction):
    """A records store that refuses every write of records."""

    def insert_records(self, rows: list[dict[str, Any]]) -> None:
        if self._records_conn is not None and self.records_conn is self.conn and "records" in str(self.conn.engine.url):
            raise OperationalError("INSERT", {}, Exception("records store down"))
        super().insert_records(rows)


def test_a_refused_delivery_gives_the_inputs_back(tmp_path) -> None:
    """Two stores, DEPLOY-TWO-STORE-ORDER-001 for deliveries: 503, nothing readable, inputs pending again."""
    with serve_app(_two_store_app(tmp_path, RefusingRecordsStore)) as server, httpx.Client(base_url=server.url, headers=AUTH) as http:
        sid, tid = running(http, 0)
        for n in range(2):
            assert http.post(f"/sessions/{sid}/turns/{tid}/inputs", json={"content": {"n": n}}).status_code == 201
        answer = http.post(f"/sessions/{sid}/turns/{tid}/inputs/deliver")
        assert answer.status_code == 503, answer.text
        assert [i["status"] for i in http.get(f"/sessions/{sid}/turns/{tid}/inputs").json()["inputs"]] == ["pending", "pending"]
        assert http.get(f"/sessions/{sid}/records").json()["records"] == []
        suspended = http.post(f"/sessions/{sid}/turns/{tid}/suspend").json()
        assert [i["index"] for i in suspended["dropped_inputs"]] == [0, 1]


@pytest.mark.postgres
def test_suspend_chapter_on_postgres_with_two_replicas(postgres_url: str) -> None:
    """Both replicas serve one PostgreSQL database; concurrent recovers spread over them."""
    settings = Settings(database_url=postgres_url, tokens=TOKENS, projects=PROJECTS)
    with serve_app(create_app(settings)) as first, serve_app(create_app(settings)) as second:
        config = load(
            overrides={"target": first.url, "replicas": [second.url], "tokens": list(TOKENS), "select": ["suspend"], "seed": 6},
            environ={},
        )
        result = run(config)
    assert all(c.outcome is Outcome.PASS for c in result.checks), [(c.name, c.message) for c in result.checks if c.outcome is not Outcome.PASS]
