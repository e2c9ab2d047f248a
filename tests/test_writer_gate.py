"""SQLite write transactions of one process queue at the store's writer gate, not in SQLite's busy
handler, which sleeps in growing steps and keeps sleeping after the lock is free. With the busy
timeout at 0 here, a writer that reached `BEGIN IMMEDIATE` while another held the database would
fail at once: these tests see that it waits instead, and what happens when the gate gives up."""

from __future__ import annotations

import threading
import time
from typing import Any

from sqlalchemy import event

from reference_impl.store import Store
from reference_impl.store.store import StorageError
from reference_impl.store import engine as engine_module
from reference_impl.store.engine import WriterGate, make_engine


def _engine_without_busy_wait(tmp_path: Any) -> Any:
    engine = make_engine(f"sqlite:///{tmp_path / 'gate.db'}")

    @event.listens_for(engine, "connect")
    def _no_busy_wait(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.execute("PRAGMA busy_timeout = 0")

    return engine


def _second_writer(store: Store) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def write() -> None:
        try:
            with store.write() as tx:
                tx.conn.exec_driver_sql("SELECT 1")
        except BaseException as exc:  # noqa: BLE001 - the test reports it
            errors.append(exc)

    thread = threading.Thread(target=write)
    thread.start()
    return thread, errors


def test_a_second_writer_waits_for_the_first_instead_of_meeting_the_lock(tmp_path) -> None:
    engine = _engine_without_busy_wait(tmp_path)
    store, gate = Store(engine), engine_module._GATES[engine]
    with store.write():
        thread, errors = _second_writer(store)
        deadline = time.monotonic() + 30
        while gate.waiting == 0 and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.001)
        assert gate.waiting == 1 and thread.is_alive(), f"the second writer did not wait at the gate: {errors}"
    thread.join(30)
    assert not thread.is_alive() and errors == []


def test_a_writer_that_waits_past_the_timeout_meets_sqlites_lock_as_before(tmp_path) -> None:
    engine = _engine_without_busy_wait(tmp_path)
    store = Store(engine)
    engine_module._GATES[engine] = WriterGate(timeout=0.05)
    with store.write():
        thread, errors = _second_writer(store)
        thread.join(30)
    assert len(errors) == 1 and isinstance(errors[0], StorageError) and "locked" in str(errors[0])
    thread, errors = _second_writer(store)  # the gate is free again: the writer that gave up held nothing
    thread.join(30)
    assert errors == []


def test_concurrent_writers_all_commit(tmp_path) -> None:
    writers = 8
    engine = _engine_without_busy_wait(tmp_path)
    store = Store(engine)
    with store.write() as tx:
        tx.conn.exec_driver_sql("CREATE TABLE t (n INTEGER)")
    start = threading.Barrier(writers)
    errors: list[BaseException] = []

    def write(n: int) -> None:
        start.wait()
        try:
            for _ in range(20):
                with store.write() as tx:
                    tx.conn.exec_driver_sql(f"INSERT INTO t VALUES ({n})")
        except BaseException as exc:  # noqa: BLE001 - the test reports it
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    with store.read() as tx:
        count = tx.conn.exec_driver_sql("SELECT count(*) FROM t").scalar()
    assert errors == [] and count == writers * 20


def test_a_read_whose_begin_fails_raises_the_storage_error(tmp_path) -> None:
    """A read's BEGIN goes straight to the DB-API connection (store/engine.py); a driver error there
    is still SQLAlchemy's storage error, which the HTTP layer answers with a 503, never a 500."""
    engine = make_engine(f"sqlite:///{tmp_path / 'begin.db'}")
    with engine.connect() as conn:
        conn.connection.driver_connection.execute("BEGIN")  # a transaction already open: the next BEGIN fails
        try:
            conn.begin()
        except StorageError as exc:
            assert "within a transaction" in str(exc.orig)
        else:
            raise AssertionError("BEGIN inside a transaction did not fail")
