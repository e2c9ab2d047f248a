"""Where a service call runs (reference_impl/http/threads.py): a read of a SQLite store on the event
loop, every write and every read of a PostgreSQL store on a worker thread. Observed by wrapping the
store's transactions and asking, inside each, whether this thread runs an event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from conformance.embedded import serve_app
from reference_impl.http.app import create_app
from reference_impl.settings import Settings
from reference_impl.store import Store

AUTH = {"Authorization": "Bearer lr-alice"}


def _on_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _watch(store: Store, seen: list[tuple[str, bool]]) -> None:
    """Record, for every read and write transaction the store opens, whether it ran on the loop."""
    for kind in ("read", "write", "write_records"):
        opened = getattr(store, kind)

        @contextmanager
        def watched(*args: Any, _opened: Any = opened, _kind: str = kind, **kwargs: Any) -> Iterator[Any]:
            seen.append((_kind, _on_loop()))
            with _opened(*args, **kwargs) as tx:
                yield tx

        setattr(store, kind, watched)


def _traffic(url: str) -> None:
    """Writes (a session, a turn with records, a fork) and the reads that follow them."""
    with httpx.Client(base_url=url, headers=AUTH) as http:
        sid = http.post("/sessions", json={}).json()["session_id"]
        turn = http.post(f"/sessions/{sid}/turns", json={"role": "user"}).json()["turn_id"]
        assert http.post(f"/sessions/{sid}/turns/{turn}/records", json={"records": [{"type": "m", "content": {"n": 1}}]}).status_code == 201
        assert http.post(f"/sessions/{sid}/turns/{turn}/finish", json={"status": "completed"}).status_code == 200
        child = http.post(f"/sessions/{sid}/fork", json={"cut": {"mode": "latest"}}).json()["session"]["session_id"]
        for path in (f"/sessions/{child}", f"/sessions/{child}/transcript", f"/sessions/{child}/export", f"/sessions/{child}/lineage"):
            assert http.get(path).status_code == 200, path


@pytest.mark.parametrize("engine", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_reads_run_on_the_loop_only_on_sqlite_and_writes_never(engine: str, tmp_path: Any, request: pytest.FixtureRequest) -> None:
    url = f"sqlite:///{tmp_path / 'reads.db'}" if engine == "sqlite" else request.getfixturevalue("postgres_url")
    app = create_app(Settings(database_url=url, tokens={"lr-alice": "alice"}))
    store = app.state.services.sessions.store
    assert store.local_reads is (engine == "sqlite")
    seen: list[tuple[str, bool]] = []
    _watch(store, seen)
    with serve_app(app) as server:
        _traffic(server.url)
    reads = [on_loop for kind, on_loop in seen if kind == "read"]
    writes = [on_loop for kind, on_loop in seen if kind != "read"]
    assert reads and writes
    assert not any(writes), "a write ran on the event loop"
    if engine == "sqlite":
        assert all(reads), f"a read of a SQLite store went to a thread: {seen}"
    else:
        assert not any(reads), f"a read of a PostgreSQL store ran on the event loop: {seen}"


@pytest.mark.postgres
def test_a_second_store_on_postgresql_sends_reads_to_a_thread(tmp_path: Any, postgres_url: str) -> None:
    app = create_app(Settings(database_url=f"sqlite:///{tmp_path / 'core.db'}", records_database_url=postgres_url, tokens={"lr-alice": "alice"}))
    assert app.state.services.sessions.store.local_reads is False
