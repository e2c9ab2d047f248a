"""A fork is all-or-nothing under faults: a crash or a lost database link leaves nothing behind.

The fork counts itself in on its source, then writes the child session, its lineage and its
idempotency record, in one transaction. These tests stop that transaction at each step
(tests/fault_server.py), then read the database directly: a half-written fork would be a child
without lineage, a source counting a child that does not exist (so it could never be purged), or a
stored idempotency answer for a child that does not exist, and a retry with the same key would then
fail or replay garbage. The source holds an attachment: a fork gives its child access to it
without writing a row for it, so there is nothing of it to leave half-written, and the child of
the retry reads it.
"""

from __future__ import annotations

import signal
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from tests.fault_server import DROP_CONNECTION, KILL_FAILPOINTS
from tests.servers import ServerProcess, server_processes

pytestmark = pytest.mark.postgres

ALICE = {"Authorization": "Bearer proc-alice-token"}
FAULT_MODULE = "tests.fault_server"
UNAVAILABLE = "urn:session-lineage:problem:unavailable"
ATTACHMENT = b"\x89PNG\r\n\x1a\n fault-safety attachment"


@dataclass(frozen=True)
class Fork:
    """One fork request, repeated verbatim by every retry."""

    source_id: str
    turn_id: str
    target_id: str
    key: str
    attachment_id: str = ""

    def send(self, client: httpx.Client, base_url: str) -> httpx.Response:
        return client.post(
            f"{base_url}/sessions/{self.source_id}/fork",
            headers={**ALICE, "Idempotency-Key": self.key},
            json={"cut": {"mode": "through", "turn_id": self.turn_id}, "target_session_id": self.target_id},
        )


@dataclass(frozen=True)
class DbState:
    """Row counts of the whole database and of the rows this fork would write."""

    sessions: int
    lineage: int
    idempotency: int
    turns: int
    records: int
    target_sessions: int
    target_lineage: int
    key_rows: int
    children_of_source: int
    attachments: int
    source_child_count: int

    @property
    def fork_rows(self) -> tuple[int, int, int]:
        return (self.target_sessions, self.target_lineage, self.key_rows)


def read_state(database_url: str, fork: Fork) -> DbState:
    """Count rows with a fresh connection, as another process would see them."""
    url = make_url(database_url)
    if url.drivername == "postgresql":
        url = url.set(drivername="postgresql+psycopg")
    engine = create_engine(url)
    params = {"target": fork.target_id, "key": fork.key, "source": fork.source_id}
    queries = {
        "sessions": "SELECT count(*) FROM sessions",
        "lineage": "SELECT count(*) FROM session_lineage",
        "idempotency": "SELECT count(*) FROM idempotency_keys",
        "turns": "SELECT count(*) FROM turns",
        "records": "SELECT count(*) FROM records",
        "target_sessions": "SELECT count(*) FROM sessions WHERE session_id = :target",
        "target_lineage": "SELECT count(*) FROM session_lineage WHERE session_id = :target",
        "key_rows": "SELECT count(*) FROM idempotency_keys WHERE idempotency_key = :key",
        "children_of_source": "SELECT count(*) FROM session_lineage WHERE parent_session_id = :source",
        "attachments": "SELECT count(*) FROM attachments",
        "source_child_count": "SELECT child_count FROM sessions WHERE session_id = :source",
    }
    try:
        with engine.connect() as conn:
            counts = {name: int(conn.execute(text(sql), params).scalar_one()) for name, sql in queries.items()}
    finally:
        engine.dispose()
    return DbState(**counts)


def make_source(client: httpx.Client, base_url: str) -> Fork:
    """A root session with one finished turn of two records, and a fork request for it."""
    created = client.post(f"{base_url}/sessions", headers=ALICE, json={"name": "fault source"})
    assert created.status_code == 201, created.text
    source_id = created.json()["session_id"]
    turn = client.post(f"{base_url}/sessions/{source_id}/turns", headers=ALICE, json={"role": "user"})
    assert turn.status_code == 201, turn.text
    turn_id = turn.json()["turn_id"]
    attached = client.post(
        f"{base_url}/sessions/{source_id}/attachments", headers={**ALICE, "Content-Type": "image/png"}, content=ATTACHMENT
    )
    assert attached.status_code == 201, attached.text
    records = [{"type": "message", "content": {"text": "hello"}}, {"type": "message", "content": {"text": "again"}}]
    appended = client.post(
        f"{base_url}/sessions/{source_id}/turns/{turn_id}/records", headers=ALICE, json={"records": records}
    )
    assert appended.status_code == 201, appended.text
    finished = client.post(
        f"{base_url}/sessions/{source_id}/turns/{turn_id}/finish", headers=ALICE, json={"status": "completed"}
    )
    assert finished.status_code == 200, finished.text
    return Fork(
        source_id, turn_id, target_id=f"child-{uuid.uuid4().hex}", key=f"fault-{uuid.uuid4().hex}",
        attachment_id=attached.json()["attachment_id"],
    )


def assert_untouched(state: DbState) -> None:
    """Only the source exists: no child, no lineage, no stored idempotency answer."""
    assert state.fork_rows == (0, 0, 0), state
    assert (state.sessions, state.lineage, state.idempotency) == (1, 0, 0), state
    assert (state.turns, state.records, state.children_of_source) == (1, 2, 0), state
    assert (state.attachments, state.source_child_count) == (1, 0), state


def assert_retry_completes(client: httpx.Client, base_url: str, fork: Fork, database_url: str, failpoint: str) -> None:
    """The same request and key create the child once (201), then replay that very answer."""
    first = fork.send(client, base_url)
    assert first.status_code == 201, first.text
    assert first.headers.get("Idempotency-Replayed") != "true"
    assert first.json()["session"]["session_id"] == fork.target_id
    assert first.json()["lineage"]["parent_session_id"] == fork.source_id

    replay = fork.send(client, base_url)
    assert replay.status_code == 201, replay.text
    assert replay.headers.get("Idempotency-Replayed") == "true"
    assert replay.json() == first.json()

    state = read_state(database_url, fork)
    report(failpoint, "after retry", state)
    assert state.fork_rows == (1, 1, 1), state
    assert (state.sessions, state.lineage, state.idempotency, state.children_of_source) == (2, 1, 1, 1), state
    assert (state.attachments, state.source_child_count) == (1, 1), state  # access, not a copy
    inherited = client.get(f"{base_url}/sessions/{fork.target_id}/attachments/{fork.attachment_id}", headers=ALICE)
    assert inherited.status_code == 200 and inherited.content == ATTACHMENT, inherited.text


def report(failpoint: str, stage: str, state: DbState, **facts: Any) -> None:
    """Show what a fault left in the database: visible with `pytest -s`, and with any failure."""
    counts = " ".join(f"{name}={count}" for name, count in asdict(state).items())
    extra = "".join(f" {name}={value}" for name, value in facts.items())
    print(f"\n[{failpoint}] {stage}: {counts}{extra}")


@contextmanager
def normal_and_faulty(
    database_url: str, directory: Path, failpoint: str
) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    """A reference server and a fault server on one database, started side by side to shorten the wait."""
    managers: list[AbstractContextManager[list[ServerProcess]]] = []
    for name, env, module in (("normal", None, "conformance.cli"), ("faulty", {"FAILPOINT": failpoint}, FAULT_MODULE)):
        (directory / name).mkdir()  # one tokens file each: both are written at once
        managers.append(server_processes(database_url, directory / name, count=1, extra_env=env, module=module))
    with ExitStack() as stack:
        with ThreadPoolExecutor(max_workers=len(managers)) as pool:
            futures = [pool.submit(manager.__enter__) for manager in managers]
        started: list[ServerProcess] = []
        for manager, future in zip(managers, futures):
            if future.exception() is None:
                stack.push(manager)
                started.extend(future.result())
        for future in futures:
            if (error := future.exception()) is not None:
                raise error
        normal, faulty = started
        yield normal, faulty


def stderr_of(server: ServerProcess) -> str:
    """Everything a finished server process wrote to stderr."""
    assert server.process.poll() is not None and server.process.stderr is not None
    return server.process.stderr.read().decode(errors="replace")


@pytest.mark.parametrize("failpoint", KILL_FAILPOINTS)
def test_process_killed_mid_fork_leaves_nothing(failpoint: str, postgres_url: str, tmp_path: Path) -> None:
    """SIGKILL at any step before commit: nothing of the fork is visible, and a retry completes."""
    with normal_and_faulty(postgres_url, tmp_path, failpoint) as (normal, faulty), httpx.Client(timeout=30) as client:
        fork = make_source(client, normal.url)
        with pytest.raises(httpx.TransportError) as died:
            fork.send(client, faulty.url)
        exit_code = faulty.process.wait(timeout=10)
        after_fault = read_state(postgres_url, fork)
        report(failpoint, "after fault", after_fault, client_error=type(died.value).__name__, exit_code=exit_code)
        assert exit_code == -signal.SIGKILL
        assert f"failpoint {failpoint} reached" in stderr_of(faulty)
        assert_untouched(after_fault)

        assert_retry_completes(client, normal.url, fork, postgres_url, failpoint)


def test_connection_dropped_mid_fork_answers_503_and_recovers(postgres_url: str, tmp_path: Path) -> None:
    """A lost database link is a retryable 503, rolls the fork back, and the process keeps serving."""
    with (
        server_processes(postgres_url, tmp_path, count=1, extra_env={"FAILPOINT": DROP_CONNECTION},
                         module=FAULT_MODULE) as (faulty,),
        httpx.Client(timeout=30) as client,
    ):
        fork = make_source(client, faulty.url)
        failed = fork.send(client, faulty.url)
        after_fault = read_state(postgres_url, fork)
        report(DROP_CONNECTION, "after fault", after_fault, status=failed.status_code,
               content_type=failed.headers.get("content-type"), retry_after=failed.headers.get("Retry-After"))
        assert failed.status_code == 503, failed.text
        assert failed.headers["content-type"].split(";")[0].strip() == "application/problem+json"
        assert failed.json()["type"] == UNAVAILABLE
        assert failed.json()["status"] == 503
        assert_untouched(after_fault)

        assert_retry_completes(client, faulty.url, fork, postgres_url, DROP_CONNECTION)
        assert faulty.process.poll() is None, "the server process must survive a lost database link"
        faulty.process.terminate()
        faulty.process.wait(timeout=10)
        assert stderr_of(faulty).count(f"failpoint {DROP_CONNECTION} reached") == 1


def test_connections_the_database_dropped_while_idle_answer_503_once_then_serve(postgres_url: str) -> None:
    """The reference checks no connection before use (no ping: a round trip on every request). A
    connection the database ended while it sat in the pool (a restart, a failover) fails its next
    statement: that request answers a retryable 503 problem, the pool drops every connection as old
    as that one, and the next request is served."""
    from conformance.embedded import serve_app
    from reference_impl.http import create_app
    from reference_impl.settings import Settings
    from reference_impl.store.engine import make_engine

    app = create_app(Settings(database_url=postgres_url))
    with serve_app(app) as server, httpx.Client(base_url=server.url, headers=ALICE, timeout=30) as client:
        session_id = client.post("/sessions", json={"name": "idle"}).json()["session_id"]
        with ThreadPoolExecutor(4) as pool:  # several pooled connections, all idle afterwards
            assert {r.status_code for r in pool.map(lambda _: client.get(f"/sessions/{session_id}"), range(8))} == {200}
        admin = make_engine(postgres_url)  # the reference's own engine: psycopg 3 for a postgresql:// URL
        try:
            with admin.begin() as conn:
                ended = conn.execute(text(
                    "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )).scalar_one()
        finally:
            admin.dispose()
        assert ended >= 1
        failed = client.get(f"/sessions/{session_id}")
        assert failed.status_code == 503, failed.text
        assert failed.headers["content-type"].split(";")[0].strip() == "application/problem+json"
        assert failed.json()["type"] == UNAVAILABLE
        assert failed.headers["Retry-After"]
        assert [client.get(f"/sessions/{session_id}").status_code for _ in range(8)] == [200] * 8
