"""Revert and session patch: restarts, two stores, PostgreSQL with two processes, round trips by
depth, and the state machine catching revert and idempotency bugs on its own (REVERT-*,
SESS-PATCH-*, TURN-IDEM-001)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from conformance.config import load
from conformance.embedded import reference_server, serve_app
from conformance.results import Outcome
from conformance.runner import run
from reference_impl.http import create_app
from reference_impl.settings import Settings
from tests.mutants import MUTANTS, all_mutants
from tests.servers import TOKENS, server_processes
from tests.test_layers import failed_requirements, settings

all_mutants()
HEADERS = {"Authorization": "Bearer revert-alice"}
PAIR = [{"type": "message", "content": {"text": "q"}}, {"type": "message", "content": {"text": "a"}}]


def turn(http: httpx.Client, sid: str) -> str:
    answer = http.post(f"/sessions/{sid}/turns", json={"role": "user", "records": PAIR, "status": "completed"})
    assert answer.status_code == 201, answer.text
    return str(answer.json()["turn_id"])


def revert(http: httpx.Client, sid: str, turn_id: str) -> httpx.Response:
    tag = http.get(f"/sessions/{sid}").headers["ETag"]
    return http.post(f"/sessions/{sid}/revert", json={"turn_id": turn_id}, headers={"If-Match": tag})


def indexes(http: httpx.Client, sid: str) -> list[tuple[str, int]]:
    page = http.get(f"/sessions/{sid}/transcript", params={"limit": 200})
    assert page.status_code == 200, page.text
    return [(r["session_id"], r["index"]) for r in page.json()["records"]]


def test_reverted_records_stay_out_after_a_restart(tmp_path) -> None:
    """REVERT-EFFECTIVE-001: the effective segments are stored, not kept in process memory."""
    url = f"sqlite:///{tmp_path / 'restart.db'}"
    server_settings = Settings(database_url=url, tokens={"revert-alice": "alice"})
    with serve_app(create_app(server_settings)) as server, httpx.Client(base_url=server.url, headers=HEADERS) as http:
        sid = http.post("/sessions", json={}).json()["session_id"]
        turns = [turn(http, sid) for _ in range(3)]
        child = http.post(f"/sessions/{sid}/fork", json={"cut": {"mode": "latest"}}).json()["session"]["session_id"]
        assert revert(http, sid, turns[1]).status_code == 200
        before = (indexes(http, sid), indexes(http, child))
    with serve_app(create_app(server_settings)) as server, httpx.Client(base_url=server.url, headers=HEADERS) as http:
        assert (indexes(http, sid), indexes(http, child)) == before
        assert indexes(http, sid) == [(sid, 0), (sid, 1)] and len(indexes(http, child)) == 6
        latest = http.post(f"/sessions/{sid}/fork", json={"cut": {"mode": "latest"}}).json()
        assert latest["lineage"]["inherited_turn_count"] == 1
        assert indexes(http, latest["session"]["session_id"]) == [(sid, 0), (sid, 1)]


def round_trips_by_depth(database_url: str, records_url: str | None = None) -> dict[str, Any]:
    """Transcript page, revert and session read round trips at depths 0, 1, 5 and max, on a chain
    whose every session was reverted once before its child was forked."""
    with reference_server(database_url, records_database_url=records_url) as server:
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {server.tokens[0]}"}) as http:
            maximum = http.get("/capabilities").json()["limits"]["max_lineage_depth"]
            ids = [http.post("/sessions", json={}).json()["session_id"]]
            reverts = []
            for depth in range(maximum + 1):
                sid = ids[-1]
                turn(http, sid)
                extra = turn(http, sid)
                turn(http, sid)
                answer = revert(http, sid, extra)
                assert answer.status_code == 200, answer.text
                reverts.append(int(answer.headers["Storage-Round-Trips"]))
                if depth < maximum:
                    child = http.post(f"/sessions/{sid}/fork", json={"cut": {"mode": "latest"}})
                    ids.append(child.json()["session"]["session_id"])
            pages = {}
            for depth in (0, 1, 5, maximum):
                pages[depth] = int(http.get(f"/sessions/{ids[depth]}/transcript").headers["Storage-Round-Trips"])
                assert len(indexes(http, ids[depth])) == 2 * (depth + 1)  # 1 turn of 2 records kept per session
            return {"page": pages, "revert": sorted(set(reverts)),
                    "session": int(http.get(f"/sessions/{ids[-1]}").headers["Storage-Round-Trips"])}


def test_round_trips_of_reverted_chains(tmp_path) -> None:
    costs = round_trips_by_depth(f"sqlite:///{tmp_path / 'depth.db'}")
    print(f"reverted chain round trips: {costs}")
    assert set(costs["page"].values()) == {2} and costs["revert"] == [4] and costs["session"] == 1


def test_round_trips_of_reverted_chains_with_two_stores(tmp_path) -> None:
    costs = round_trips_by_depth(f"sqlite:///{tmp_path / 'core.db'}", f"sqlite:///{tmp_path / 'records.db'}")
    assert set(costs["page"].values()) == {2} and costs["revert"] == [4]


@pytest.mark.postgres
def test_round_trips_of_reverted_chains_are_the_same_on_postgres(postgres_url: str, tmp_path) -> None:
    assert round_trips_by_depth(postgres_url) == round_trips_by_depth(f"sqlite:///{tmp_path / 'depth.db'}")


def test_revert_and_patch_checks_pass_with_records_in_a_second_store(tmp_path) -> None:
    with reference_server(records_database_url=f"sqlite:///{tmp_path / 'records.db'}") as server:
        result = run(load(overrides={"target": server.url, "tokens": list(server.tokens), "seed": 13,
                                     "select": ["revert", "session_patch", "stateful", "context"]}, environ={}))
    assert all(c.outcome is Outcome.PASS for c in result.checks), [c.message for c in result.checks if c.outcome is not Outcome.PASS]


@pytest.mark.postgres
@pytest.mark.deep  # quick: tests/test_postgres.py runs this chapter on two PostgreSQL processes
def test_revert_and_patch_checks_pass_on_two_processes_sharing_postgres(postgres_url: str, tmp_path) -> None:
    """REVERT-CONCURRENT-001 with the contenders spread over two replicas, on PostgreSQL."""
    with server_processes(postgres_url, tmp_path, count=2) as servers:
        urls = [server.url for server in servers]
        config = load(overrides={"target": urls[0], "replicas": urls[1:], "tokens": list(TOKENS), "seed": 5,
                                 "select": ["revert", "session_patch", "stateful"]}, environ={})
        result = run(config)
    assert all(c.outcome is Outcome.PASS for c in result.checks), [c.message for c in result.checks if c.outcome is not Outcome.PASS]


@pytest.mark.deep
def test_state_machine_alone_catches_reverts_reaching_earlier_forks(tmp_path) -> None:
    app = MUTANTS["forks_follow_later_reverts"].build(settings(tmp_path))
    assert failed_requirements(app, "stateful") & {"REVERT-FORKS-001", "XS-EFFECTIVE-001"}


@pytest.mark.deep
def test_state_machine_alone_catches_forks_forgetting_reverts(tmp_path) -> None:
    app = MUTANTS["fork_forgets_reverted_segments"].build(settings(tmp_path))
    assert failed_requirements(app, "stateful") & {"REVERT-EFFECTIVE-001", "XS-EFFECTIVE-001"}


def test_state_machine_alone_catches_retried_starts_that_start_twice(tmp_path) -> None:
    app = MUTANTS["turn_start_retry_creates_second_turn"].build(settings(tmp_path))
    assert "TURN-IDEM-001" in failed_requirements(app, "stateful")


def test_revert_meets_suspend_and_model_context(tmp_path) -> None:
    """A suspended turn is unfinished: a revert answers 409 turn-in-progress (REVERT-001), and
    suspending changes the ETag (REVERT-ETAG-001); the model context reads the effective transcript,
    so reverted records never reach a model either (REVERT-EFFECTIVE-001)."""
    with reference_server(f"sqlite:///{tmp_path / 'cross.db'}") as server:
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {server.tokens[0]}"}) as http:
            sid = http.post("/sessions", json={}).json()["session_id"]
            first, second = turn(http, sid), turn(http, sid)
            running = http.post(f"/sessions/{sid}/turns", json={"role": "user", "records": PAIR}).json()["turn_id"]
            before = http.get(f"/sessions/{sid}").headers["ETag"]
            assert http.post(f"/sessions/{sid}/turns/{running}/suspend", json={}).status_code in (200, 201)
            after = http.get(f"/sessions/{sid}").headers["ETag"]
            assert after != before
            refused = http.post(f"/sessions/{sid}/revert", json={"turn_id": second}, headers={"If-Match": after})
            assert refused.status_code == 409 and refused.json()["type"].endswith(":turn-in-progress"), refused.text
            assert http.post(f"/sessions/{sid}/turns/{running}/abandon", json={}).status_code in (200, 201)
            assert revert(http, sid, second).status_code == 200
            context = http.get(f"/sessions/{sid}/context").json()
            assert [t["turn_id"] for t in context["turns"]] == [first]
            assert [r["index"] for t in context["turns"] for r in t["records"]] == [0, 1]
