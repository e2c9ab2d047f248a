"""Records in a second store: write order, no short transcripts, one query per store.

Covers DEPLOY-TWO-STORE-ORDER-001 and XS-COMPLETE-001, which only a deployment can check.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from sqlalchemy.exc import OperationalError

from conformance.config import load
from conformance.embedded import reference_server, serve_app
from conformance.results import Outcome, Verdict
from conformance.runner import run
from reference_impl.http.app import build_app
from reference_impl.services import build_services, part_name
from reference_impl.services.transcript import TranscriptService
from reference_impl.settings import Settings
from reference_impl.store import Store, Transaction
from reference_impl.store.engine import make_engine, migrate
from reference_impl.store.rows import RecordRow

TOKENS = {"two-alice": "alice", "two-bob": "bob"}
AUTH = {"Authorization": "Bearer two-alice"}


def two_store_app(tmp_path, transaction: type[Transaction] = Transaction, *service_parts: type) -> Any:
    core, records = make_engine(f"sqlite:///{tmp_path / 'core.db'}"), make_engine(f"sqlite:///{tmp_path / 'records.db'}")
    migrate(core)
    migrate(records, records_only=True)

    settings = Settings(tokens=TOKENS)
    overrides = {part_name(cls): cls for cls in service_parts}
    return build_app(build_services(Store(core, records, transaction), settings, overrides), settings)


def conversation(http: httpx.Client, turns: int = 2) -> str:
    sid = http.post("/sessions", json={}).json()["session_id"]
    for _ in range(turns):
        turn = http.post(f"/sessions/{sid}/turns", json={"role": "user"}).json()
        http.post(f"/sessions/{sid}/turns/{turn['turn_id']}/records", json={"records": [{"type": "m", "content": {}}] * 3})
        http.post(f"/sessions/{sid}/turns/{turn['turn_id']}/finish", json={"status": "completed"})
    return sid


@pytest.mark.deep
def test_whole_suite_passes_with_records_in_a_second_database(tmp_path) -> None:
    with reference_server(records_database_url=f"sqlite:///{tmp_path / 'records.db'}") as server:
        result = run(load(overrides={"target": server.url, "tokens": list(server.tokens), "seed": 9}, environ={}))
    assert result.verdict is Verdict.CONFORMANT, [c.message for c in result.checks if c.outcome is not Outcome.PASS]


class LaggingRecords(Transaction):
    """A records replica that has not yet received the newest records of any session."""

    def records(self, segments: Any, limit: int) -> list[RecordRow]:
        return [row for row in super().records(segments, limit) if row.record_index < 4]


def test_lagging_records_store_answers_503_never_a_short_transcript(tmp_path) -> None:
    with serve_app(two_store_app(tmp_path, LaggingRecords)) as server, httpx.Client(base_url=server.url, headers=AUTH) as http:
        sid = conversation(http)
        child = http.post(f"/sessions/{sid}/fork", json={"cut": {"mode": "latest"}}).json()["session"]["session_id"]
        for path in (f"/sessions/{child}/transcript", f"/sessions/{sid}/transcript", f"/sessions/{sid}/records"):
            answer = http.get(path)
            assert answer.status_code == 503, (path, answer.text)
            assert answer.headers["content-type"] == "application/problem+json"
            assert answer.json()["type"] == "urn:session-lineage:problem:records-unavailable"
            assert answer.headers["Retry-After"] == "1"
        first_page = http.get(f"/sessions/{child}/transcript", params={"limit": 3})
        assert first_page.status_code == 200 and first_page.json()["has_more"]  # what is readable is served
        assert [r["index"] for r in first_page.json()["records"]] == [0, 1, 2]


def test_the_lag_test_catches_a_server_that_serves_short_transcripts(tmp_path) -> None:
    class TrustingService(TranscriptService):
        @staticmethod
        def _require_complete(*args: Any) -> None:
            return None

    with serve_app(two_store_app(tmp_path, LaggingRecords, TrustingService)) as server, httpx.Client(base_url=server.url, headers=AUTH) as http:
        sid = conversation(http)
        answer = http.get(f"/sessions/{sid}/transcript")
        assert answer.status_code == 200 and len(answer.json()["records"]) == 4  # 6 were written: short


class RefusingRecords(Transaction):
    """A records store that refuses writes while `refusing` is set."""

    refusing = True

    def insert_records(self, rows: list[dict[str, Any]]) -> None:
        if RefusingRecords.refusing:
            raise OperationalError("INSERT INTO records", {}, Exception("records store is down"))
        super().insert_records(rows)


def test_failed_records_write_answers_503_and_gives_the_indexes_back(tmp_path) -> None:
    RefusingRecords.refusing = True
    with serve_app(two_store_app(tmp_path, RefusingRecords)) as server, httpx.Client(base_url=server.url, headers=AUTH) as http:
        sid = http.post("/sessions", json={}).json()["session_id"]
        turn = http.post(f"/sessions/{sid}/turns", json={"role": "user"}).json()["turn_id"]
        refused = http.post(f"/sessions/{sid}/turns/{turn}/records", json={"records": [{"type": "m", "content": {}}] * 2})
        assert refused.status_code == 503 and refused.json()["type"] == "urn:session-lineage:problem:unavailable"
        assert http.get(f"/sessions/{sid}/records").json()["records"] == []
        RefusingRecords.refusing = False
        accepted = http.post(f"/sessions/{sid}/turns/{turn}/records", json={"records": [{"type": "m", "content": {}}]})
        assert accepted.status_code == 201 and accepted.json()["records"][0]["index"] == 0  # no gap left
        page = http.get(f"/sessions/{sid}/records")
        assert page.status_code == 200 and [r["index"] for r in page.json()["records"]] == [0]


def test_one_query_per_store_whatever_the_depth(tmp_path) -> None:
    with serve_app(two_store_app(tmp_path)) as server, httpx.Client(base_url=server.url, headers=AUTH) as http:
        ids = [conversation(http, 1)]
        for _ in range(16):
            ids.append(http.post(f"/sessions/{ids[-1]}/fork", json={"cut": {"mode": "latest"}}).json()["session"]["session_id"])
        costs = {depth: int(http.get(f"/sessions/{ids[depth]}/transcript").headers["Storage-Round-Trips"]) for depth in (0, 1, 5, 16)}
    assert costs == {0: 2, 1: 2, 5: 2, 16: 2}


@pytest.mark.postgres
@pytest.mark.deep
def test_whole_suite_passes_on_postgres_with_records_in_a_second_postgres_database(postgres_url: str, tmp_path) -> None:
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    records_url = make_url(postgres_url).set(database=make_url(postgres_url).database + "_records")
    admin = create_engine(make_url(postgres_url).set(drivername="postgresql+psycopg"), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{records_url.database}"'))
    try:
        with reference_server(postgres_url, records_database_url=records_url.render_as_string(hide_password=False)) as server:
            result = run(load(overrides={"target": server.url, "tokens": list(server.tokens), "seed": 9}, environ={}))
        assert result.verdict is Verdict.CONFORMANT, [c.message for c in result.checks if c.outcome is not Outcome.PASS]
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{records_url.database}" WITH (FORCE)'))
        admin.dispose()
