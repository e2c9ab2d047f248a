"""Bounded model context against the reference: what the suite cannot reach.

- CONTEXT-MALFORMED-001 (deployment): unreadable stored records are skipped and counted, never
  fatal; the API cannot write one, so the tests damage stored rows directly.
- The records statement returns a superset of the context computed from a lower bound of each
  record's size (store/context.py); random transcripts with multi-byte content show the answer is
  exactly what the rule computes from the whole transcript.
- Round trips at depths 0, 1, 5 and max on SQLite and PostgreSQL; two stores, and a lagging
  records store (503, never a short context).
"""

from __future__ import annotations

import json
import random
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from conformance.embedded import serve_app
from reference_impl.canonical import canonical, utf8_prefix
from reference_impl.http.app import build_app, create_app
from reference_impl.services import build_services
from reference_impl.settings import Limits, Settings
from reference_impl.store import Store, Transaction
from reference_impl.store.context import StoredRecord
from reference_impl.store.engine import make_engine, migrate

TOKENS = {"ctx-alice": "alice", "ctx-bob": "bob"}
AUTH = {"Authorization": "Bearer ctx-alice"}
SMALL = Limits(max_context_bytes=400, max_context_record_bytes=64)


def turn(http: httpx.Client, sid: str, contents: list[dict[str, Any]], finish: bool = True) -> str:
    turn_id = http.post(f"/sessions/{sid}/turns", json={"role": "user"}).json()["turn_id"]
    if contents:
        answer = http.post(f"/sessions/{sid}/turns/{turn_id}/records", json={"records": [{"type": "m", "content": c} for c in contents]})
        assert answer.status_code == 201, answer.text
    if finish:
        http.post(f"/sessions/{sid}/turns/{turn_id}/finish", json={"status": "completed"})
    return turn_id


def expected_context(transcript: list[dict[str, Any]], budget: int, cap: int) -> tuple[list[list[str]], int]:
    """The rule, computed from the whole transcript: record ids per turn, and the bytes."""
    turns: list[tuple[str, list[str], int]] = []
    for record in transcript:
        data = canonical(record["content"]).encode()
        size = len(data) if len(data) <= cap else len(utf8_prefix(data, cap))
        if not turns or turns[-1][0] != record["turn_id"]:
            turns.append((record["turn_id"], [], 0))
        tid, ids, total = turns[-1]
        turns[-1] = (tid, ids + [record["record_id"]], total + size)
    chosen: list[tuple[str, list[str], int]] = []
    total = 0
    for item in reversed(turns):
        if chosen and total + item[2] > budget:
            break
        chosen.insert(0, item)
        total += item[2]
    return [ids for _, ids, _ in chosen], total


def walk(http: httpx.Client, sid: str) -> list[dict[str, Any]]:
    records, cursor = [], None
    while True:
        page = http.get(f"/sessions/{sid}/transcript", params={"cursor": cursor, "limit": 200} if cursor else {"limit": 200}).json()
        records += page["records"]
        if not page["has_more"]:
            return records
        cursor = page["next_cursor"]


def given(body: dict[str, Any]) -> list[list[str]]:
    return [[r["record_id"] for r in t["records"]] for t in body["turns"]]


# ---------------------------------------------------------------- CONTEXT-MALFORMED-001
@pytest.mark.parametrize("engine", ["sqlite", "postgres"])
def test_malformed_stored_records_are_skipped_and_counted_never_fatal(engine: str, tmp_path, request) -> None:
    """CONTEXT-MALFORMED-001: a record whose stored content is not JSON, or not an object, is left
    out and counted; the read answers 200 and every other record is there."""
    url = f"sqlite:///{tmp_path / 'ctx.db'}" if engine == "sqlite" else request.getfixturevalue("postgres_url")
    settings = Settings(database_url=url, tokens=TOKENS, limits=SMALL)
    with serve_app(create_app(settings)) as server, httpx.Client(base_url=server.url, headers=AUTH) as http:
        sid = http.post("/sessions", json={}).json()["session_id"]
        turn(http, sid, [{"a": 1}, {"b": 2}])
        last = turn(http, sid, [{"c": 3}, {"d": 4}, {"e": 5}])
        records = walk(http, sid)
        db = make_engine(url)
        with db.begin() as conn:  # the database holds this one session: a record is its index
            conn.execute(text("UPDATE records SET content = :c WHERE record_index = :i"), {"c": '{"d": 4', "i": records[3]["index"]})
            conn.execute(text("UPDATE records SET content = :c WHERE record_index = :i"), {"c": "[1, 2]", "i": records[0]["index"]})
        db.dispose()
        answer = http.get(f"/sessions/{sid}/context")
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["skipped_records"] == 2
        assert given(body) == [[records[1]["record_id"]], [records[2]["record_id"], records[4]["record_id"]]]
        assert body["turns"][-1]["turn_id"] == last and body["omitted_turns"] == 0


def test_a_turn_of_malformed_records_only_counts_at_most_the_cap_each(tmp_path) -> None:
    """CONTEXT-MALFORMED-001: a damaged record counts against the budget with at most the cap."""
    url = f"sqlite:///{tmp_path / 'ctx.db'}"
    settings = Settings(database_url=url, tokens=TOKENS, limits=SMALL)
    with serve_app(create_app(settings)) as server, httpx.Client(base_url=server.url, headers=AUTH) as http:
        sid = http.post("/sessions", json={}).json()["session_id"]
        turn(http, sid, [{"a": 1}])
        turn(http, sid, [{"b": "x" * 300}])  # turn 1, damaged below
        turn(http, sid, [{"c": 3}])
        db = make_engine(url)
        with db.begin() as conn:
            conn.execute(text("UPDATE records SET content = 'garbage' || content WHERE turn_index = 1"))  # one session here
        db.dispose()
        body = http.get(f"/sessions/{sid}/context").json()
        assert body["skipped_records"] == 1
        assert body["bytes"] <= SMALL.max_context_bytes
        for item in body["turns"]:
            assert item["bytes"] <= SMALL.max_context_record_bytes


# ---------------------------------------------------------------- exactness of the superset
@pytest.mark.parametrize("seed", range(6))
def test_context_is_exactly_the_rule_over_random_lineages(seed: int, tmp_path) -> None:
    rng = random.Random(seed)
    alphabet = ["a", "b", "é", "€", "😀", "\n", '"', "ü"]
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'ctx.db'}", tokens=TOKENS, limits=SMALL)
    with serve_app(create_app(settings)) as server, httpx.Client(base_url=server.url, headers=AUTH) as http:
        sid = http.post("/sessions", json={}).json()["session_id"]
        sessions = [sid]
        for step in range(14):
            where = rng.choice(sessions)
            if rng.random() < 0.2:
                child = http.post(f"/sessions/{where}/fork", json={"cut": {"mode": "latest"}}).json()["session"]["session_id"]
                sessions.append(child)
                continue
            contents = [
                {"k": "".join(rng.choice(alphabet) for _ in range(rng.choice([0, 3, 20, 50, 70, 120])))}
                for _ in range(rng.choice([0, 1, 1, 2, 3]))
            ]
            turn(http, where, contents)
        for each in sessions:
            body = http.get(f"/sessions/{each}/context").json()
            ids, total = expected_context(walk(http, each), SMALL.max_context_bytes, SMALL.max_context_record_bytes)
            assert given(body) == ids, (seed, each)
            assert body["bytes"] == total
            for item in body["turns"]:
                for record in item["records"]:
                    if record["truncated"]:
                        raw = record["text"].encode()
                        assert SMALL.max_context_record_bytes - 3 <= len(raw) <= SMALL.max_context_record_bytes


def test_canonical_json_follows_rfc_8785_for_numbers_and_ordering() -> None:
    assert canonical({"b": 1, "a": [1.5, 1e21, 1e-7, 100.0, -0.0, True, None]}) == '{"a":[1.5,1e+21,1e-7,100,0,true,null],"b":1}'
    assert canonical({"\U0001f600": 1, "\ufb01": 2}) == '{"\U0001f600":1,"\ufb01":2}'  # UTF-16 order: D83D < FB01
    assert canonical({"t": "é\u001f\n"}) == '{"t":"é\\u001f\\n"}'
    assert utf8_prefix("aé".encode(), 2) == b"a"


# ---------------------------------------------------------------- round trips (CONTEXT-COST-001)
def _costs_by_depth(url: str) -> dict[int, int]:
    settings = Settings(database_url=url, tokens=TOKENS)
    maximum = settings.limits.max_lineage_depth
    with serve_app(create_app(settings)) as server, httpx.Client(base_url=server.url, headers=AUTH) as http:
        ids = [http.post("/sessions", json={}).json()["session_id"]]
        turn(http, ids[0], [{"n": 0}])
        for depth in range(1, maximum + 1):
            child = http.post(f"/sessions/{ids[-1]}/fork", json={"cut": {"mode": "latest"}}).json()["session"]["session_id"]
            turn(http, child, [{"n": depth}])
            ids.append(child)
        costs = {}
        for depth in (0, 1, 5, maximum):
            answer = http.get(f"/sessions/{ids[depth]}/context")
            assert answer.status_code == 200 and len(answer.json()["turns"]) == depth + 1
            costs[depth] = int(answer.headers["Storage-Round-Trips"])
        return costs


def test_context_round_trips_at_depths_0_1_5_and_max_on_sqlite(tmp_path) -> None:
    costs = _costs_by_depth(f"sqlite:///{tmp_path / 'ctx.db'}")
    assert costs == {0: 2, 1: 2, 5: 2, 16: 2}, costs


@pytest.mark.postgres
def test_context_round_trips_at_depths_0_1_5_and_max_on_postgres(postgres_url: str) -> None:
    costs = _costs_by_depth(postgres_url)
    assert costs == {0: 2, 1: 2, 5: 2, 16: 2}, costs


# ---------------------------------------------------------------- two stores
def _two_store_app(tmp_path, transaction: type[Transaction] = Transaction) -> Any:
    core, records = make_engine(f"sqlite:///{tmp_path / 'core.db'}"), make_engine(f"sqlite:///{tmp_path / 'records.db'}")
    migrate(core)
    migrate(records, records_only=True)
    settings = Settings(tokens=TOKENS, limits=SMALL)
    return build_app(build_services(Store(core, records, transaction), settings), settings)


def test_context_with_records_in_a_second_store(tmp_path) -> None:
    with serve_app(_two_store_app(tmp_path)) as server, httpx.Client(base_url=server.url, headers=AUTH) as http:
        sid = http.post("/sessions", json={}).json()["session_id"]
        turn(http, sid, [{"a": "é" * 10}])
        child = http.post(f"/sessions/{sid}/fork", json={"cut": {"mode": "latest"}}).json()["session"]["session_id"]
        turn(http, child, [{"b": 2}, {"c": "x" * 100}])
        answer = http.get(f"/sessions/{child}/context")
        assert answer.status_code == 200, answer.text
        ids, total = expected_context(walk(http, child), SMALL.max_context_bytes, SMALL.max_context_record_bytes)
        assert given(answer.json()) == ids and answer.json()["bytes"] == total
        assert answer.headers["Storage-Round-Trips"] == "2"


class LaggingRecords(Transaction):
    """A records replica without the newest record of every session."""

    def context_records(self, segments: Any, budget: int, record_cap: int) -> list[StoredRecord]:
        rows = super().context_records(segments, budget, record_cap)
        newest = {}
        for row in rows:
            newest[row.session_id] = max(newest.get(row.session_id, -1), row.record_index)
        return [row for row in rows if row.record_index != newest[row.session_id]]


def test_lagging_records_store_answers_503_never_a_short_context(tmp_path) -> None:
    with serve_app(_two_store_app(tmp_path, LaggingRecords)) as server, httpx.Client(base_url=server.url, headers=AUTH) as http:
        sid = http.post("/sessions", json={}).json()["session_id"]
        turn(http, sid, [{"a": 1}, {"b": 2}])
        answer = http.get(f"/sessions/{sid}/context")
        assert answer.status_code == 503, answer.text
        assert answer.json()["type"] == "urn:session-lineage:problem:records-unavailable"
        assert answer.headers["Retry-After"] == "1"
        empty = http.post("/sessions", json={}).json()["session_id"]
        assert http.get(f"/sessions/{empty}/context").json()["turns"] == []
