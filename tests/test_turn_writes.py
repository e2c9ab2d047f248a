"""Idempotent and one-request turn writes: the statement budget, two stores, and PostgreSQL with two
server processes (TURN-IDEM-*, TURN-WRITE-*)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from conformance.config import load
from conformance.embedded import reference_server, serve_app
from conformance.results import Outcome
from conformance.runner import run
from tests.servers import TOKENS, server_processes
from tests.test_two_stores import AUTH, RefusingRecords, two_store_app

PAIR = [{"type": "message", "content": {"role": "user", "text": "hi"}},
        {"type": "message", "content": {"role": "assistant", "text": "hello"}}]


def pair_costs(database_url: str) -> dict[str, int]:
    """Round trips of a one-request message pair, without and with a key, and of the three-request path."""
    with reference_server(database_url) as server:
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {server.tokens[0]}"}) as http:
            sid = http.post("/sessions", json={}).json()["session_id"]
            body = {"role": "user", "records": PAIR, "status": "completed"}
            plain = http.post(f"/sessions/{sid}/turns", json=body)
            keyed = http.post(f"/sessions/{sid}/turns", json=body, headers={"Idempotency-Key": '"pair-1"'})
            replay = http.post(f"/sessions/{sid}/turns", json=body, headers={"Idempotency-Key": '"pair-1"'})
            assert plain.status_code == keyed.status_code == replay.status_code == 201
            assert replay.headers["Idempotency-Replayed"] == "true" and replay.json() == keyed.json()
            streamed = 0
            turn = http.post(f"/sessions/{sid}/turns", json={"role": "user"})
            tid = turn.json()["turn_id"]
            appended = http.post(f"/sessions/{sid}/turns/{tid}/records", json={"records": PAIR})
            finished = http.post(f"/sessions/{sid}/turns/{tid}/finish", json={"status": "completed"})
            streamed = sum(int(r.headers["Storage-Round-Trips"]) for r in (turn, appended, finished))
            return {
                "one request": int(plain.headers["Storage-Round-Trips"]),
                "one request with key": int(keyed.headers["Storage-Round-Trips"]),
                "replay": int(replay.headers["Storage-Round-Trips"]),
                "three requests": streamed,
            }


def test_a_message_pair_in_one_request_costs_4_round_trips_and_5_with_a_key(tmp_path) -> None:
    costs = pair_costs(f"sqlite:///{tmp_path / 'pair.db'}")
    print(f"message pair round trips: {costs}")
    assert {name: costs[name] for name in ("one request", "one request with key", "replay")} == {
        "one request": 4, "one request with key": 5, "replay": 1}
    assert costs["three requests"] >= 11  # start, append and finish: 11 when this was written


@pytest.mark.postgres
def test_pair_costs_are_the_same_on_postgres(postgres_url: str, tmp_path) -> None:
    assert pair_costs(postgres_url) == pair_costs(f"sqlite:///{tmp_path / 'pair.db'}")


def test_one_request_turn_with_records_in_a_second_store(tmp_path) -> None:
    RefusingRecords.refusing = False
    with serve_app(two_store_app(tmp_path, RefusingRecords)) as server, httpx.Client(base_url=server.url, headers=AUTH) as http:
        sid = http.post("/sessions", json={}).json()["session_id"]
        body: dict[str, Any] = {"role": "user", "records": PAIR, "status": "completed"}
        written = http.post(f"/sessions/{sid}/turns", json=body, headers={"Idempotency-Key": "k-1"})
        # 5 with one store, and one more here: the records store makes sure the session has its own
        # integer key there before the records go in (reference_impl/README.md, "Session keys").
        assert written.status_code == 201 and written.headers["Storage-Round-Trips"] == "6"
        assert [r["index"] for r in http.get(f"/sessions/{sid}/transcript").json()["records"]] == [0, 1]
        # The records store refuses: 503, the turn is taken back, the key forgotten, no gap left.
        RefusingRecords.refusing = True
        refused = http.post(f"/sessions/{sid}/turns", json=body, headers={"Idempotency-Key": "k-2"})
        assert refused.status_code == 503 and refused.json()["type"] == "urn:session-lineage:problem:unavailable"
        turn = http.post(f"/sessions/{sid}/turns", json={"role": "user"}).json()
        assert turn["index"] == 1  # the refused turn was taken back
        refused_append = http.post(f"/sessions/{sid}/turns/{turn['turn_id']}/records", json={"records": PAIR},
                                   headers={"Idempotency-Key": "k-3"})
        assert refused_append.status_code == 503
        RefusingRecords.refusing = False
        http.post(f"/sessions/{sid}/turns/{turn['turn_id']}/finish", json={"status": "completed"})
        again = http.post(f"/sessions/{sid}/turns", json=body, headers={"Idempotency-Key": "k-2"})
        assert again.status_code == 201 and again.headers["Idempotency-Replayed"] == "false"
        assert [r["index"] for r in again.json()["records"]] == [2, 3]
        page = http.get(f"/sessions/{sid}/transcript")
        assert page.status_code == 200 and [r["index"] for r in page.json()["records"]] == [0, 1, 2, 3]


def test_turn_write_checks_pass_with_records_in_a_second_store(tmp_path) -> None:
    with reference_server(records_database_url=f"sqlite:///{tmp_path / 'records.db'}") as server:
        result = run(load(overrides={"target": server.url, "tokens": list(server.tokens), "seed": 11,
                                     "select": ["turn_writes", "SESS-TURN"]}, environ={}))
    assert all(c.outcome is Outcome.PASS for c in result.checks), [c.message for c in result.checks if c.outcome is not Outcome.PASS]


@pytest.mark.postgres
@pytest.mark.deep  # quick: tests/test_postgres.py runs this chapter on two PostgreSQL processes
def test_turn_write_checks_pass_on_two_processes_sharing_postgres(postgres_url: str, tmp_path) -> None:
    """TURN-IDEM-CONCURRENT-001 and SESS-TURN-SINGLE-001 with the contenders spread over two replicas."""
    with server_processes(postgres_url, tmp_path, count=2) as servers:
        urls = [server.url for server in servers]
        config = load(overrides={"target": urls[0], "replicas": urls[1:], "tokens": list(TOKENS), "seed": 5,
                                 "select": ["turn_writes", "SESS-TURN"]}, environ={})
        result = run(config)
    assert all(c.outcome is Outcome.PASS for c in result.checks), [c.message for c in result.checks if c.outcome is not Outcome.PASS]


def test_a_suspended_turn_holds_the_slot_against_one_request_turns(tmp_path) -> None:
    """SESS-TURN-SINGLE-001 with `suspend`: a suspended turn is unfinished, whatever path starts the next."""
    with reference_server(f"sqlite:///{tmp_path / 'suspend.db'}") as server:
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {server.tokens[0]}"}) as http:
            sid = http.post("/sessions", json={}).json()["session_id"]
            running = http.post(f"/sessions/{sid}/turns", json={"role": "user", "records": PAIR})
            assert running.status_code == 201
            suspended = http.post(f"/sessions/{sid}/turns/{running.json()['turn_id']}/suspend", json={})
            assert suspended.status_code in (200, 201), suspended.text
            for body in ({"role": "user", "records": PAIR, "status": "completed"}, {"role": "user", "status": "failed"}):
                refused = http.post(f"/sessions/{sid}/turns", json=body, headers={"Idempotency-Key": "after-suspend"})
                assert refused.status_code == 409 and refused.json()["type"].endswith(":turn-in-progress"), refused.text
