"""Legacy import against the reference, where only a deployment can look.

- IMPORT-STREAM-001 (deployment): an oversized line is never held whole; the reader's buffer stays
  within the limit, and a whole upload with a 24 MiB line needs a few MiB at most.
- An upload broken off mid-stream keeps what it committed; the re-upload continues from there.
- Two stores, PostgreSQL with two replicas, and the `session-lineage import` command.
"""

from __future__ import annotations

import json
import threading
import tracemalloc
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.exc import OperationalError

from conformance.cli import main
from conformance.config import load
from conformance.embedded import serve_app
from conformance.results import Outcome
from conformance.runner import run
from reference_impl.http.app import build_app, create_app
from reference_impl.legacy_lines import LineReader
from reference_impl.services import build_services
from reference_impl.settings import Settings
from reference_impl.store import Store, Transaction
from reference_impl.store.engine import make_engine, migrate

TOKENS = {"imp-alice": "alice", "imp-bob": "bob", "imp-carol": "carol", "imp-dave": "dave", "imp-erin": "erin"}
PROJECTS = {"erin": "elsewhere"}
AUTH = {"Authorization": "Bearer imp-alice", "Content-Type": "application/x-ndjson"}
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "import"


def history(legacy_id: str, turns: int, per_turn: int = 3) -> bytes:
    lines = [json.dumps({"type": "session_meta", "payload": {"id": legacy_id}})]
    for t in range(turns):
        for n in range(per_turn):
            lines.append(json.dumps({"type": "message", "turn_id": f"t{t}", "role": "user" if t % 2 == 0 else "assistant",
                                     "payload": {"turn": t, "n": n}}))
    return ("\n".join(lines) + "\n").encode()


def own(http: httpx.Client, sid: str) -> list[tuple[Any, ...]]:
    records, cursor = [], None
    while True:
        page = http.get(f"/sessions/{sid}/records", params={"limit": 200, **({"cursor": cursor} if cursor else {})}).json()
        records += page["records"]
        if not page["has_more"]:
            break
        cursor = page["next_cursor"]
    return [(r["content"]["turn"], r["content"]["n"]) for r in records]


# ---------------------------------------------------------------- IMPORT-STREAM-001
def test_the_line_reader_never_holds_an_oversized_line() -> None:
    """IMPORT-STREAM-001: 64 MiB of one line, fed in 64 KiB chunks, never buffers more than the limit + 1."""
    reader = LineReader(1024)
    chunk = b"x" * 65536
    peak = 0
    for _ in range(1024):
        assert reader.feed(chunk) == []
        peak = max(peak, len(reader.buffer))
    lines = reader.feed(b"\n{}\n")
    assert peak <= 1025
    assert [(line.number, line.data) for line in lines] == [(1, None), (2, b"{}")]


def test_an_upload_with_a_huge_line_needs_little_memory(tmp_path) -> None:
    """IMPORT-STREAM-001 end to end: a 24 MiB line is skipped as oversized while the process's
    traced memory grows by a few MiB at most."""
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'stream.db'}", tokens=TOKENS, projects=PROJECTS)
    head = history("stream-huge", 1)
    big_line_bytes = 24 * 1024 * 1024

    def body() -> Iterator[bytes]:
        yield head
        yield b'{"type":"message","turn_id":"t9","payload":{"pad":"'
        piece = b"y" * 65536
        for _ in range(big_line_bytes // len(piece)):
            yield piece
        yield b'"}}\n'
        yield b'{"type":"message","turn_id":"t9","payload":{"turn":9,"n":0}}\n'

    with serve_app(create_app(settings)) as server, httpx.Client(base_url=server.url, headers=AUTH, timeout=120) as http:
        tracemalloc.start()
        try:
            answer = http.post("/imports", content=body())
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert answer.status_code == 201, answer.text
        summary = answer.json()
        assert summary["skipped"] == [{"line": 5, "reason": "oversized"}]
        assert own(http, summary["session_id"]) == [(0, 0), (0, 1), (0, 2), (9, 0)]
    assert peak < 8 * 1024 * 1024, f"traced peak {peak} bytes for a {big_line_bytes}-byte line"


# ---------------------------------------------------------------- an interrupted upload
def test_a_broken_upload_keeps_its_batches_and_the_next_one_resumes(tmp_path) -> None:
    """IMPORT-RESUME-001: the connection drops after turn 3 of 6; the re-upload reads on from line 11."""
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'resume.db'}", tokens=TOKENS, projects=PROJECTS)
    data = history("broken", 6)
    lines = data.splitlines(keepends=True)
    cut = sum(len(line) for line in lines[:12])  # lines 1-12: turns 0-2 and turn 3's first line
    sent = threading.Event()

    db = make_engine(settings.database_url)

    def broken() -> Iterator[bytes]:
        yield data[:cut]
        sent.set()
        for _ in range(200):  # until the server has committed what it read (turns 0 to 2)
            with db.connect() as conn:
                done = conn.exec_driver_sql("SELECT bytes_done FROM legacy_imports").scalar()
            if done:
                break
            threading.Event().wait(0.05)
        raise ConnectionAbortedError("cable pulled")

    with serve_app(create_app(settings)) as server, httpx.Client(base_url=server.url, headers=AUTH, timeout=30) as http:
        with pytest.raises(Exception):
            http.post("/imports", content=broken())
        answer = http.post("/imports", content=data)
        for _ in range(50):
            if answer.status_code != 409:
                break
            threading.Event().wait(0.1)
            answer = http.post("/imports", content=data)
        assert answer.status_code == 200, answer.text  # the broken upload created the session
        summary = answer.json()
        assert summary["resumed_from_line"] is not None and 5 <= summary["resumed_from_line"] <= 13
        assert own(http, summary["session_id"]) == [(t, n) for t in range(6) for n in range(3)]
        assert summary["imported_turns"] == 6 and summary["imported_records"] == 18
        again = http.post("/imports", content=data).json()
        assert again["replayed"] is True and own(http, summary["session_id"]) == [(t, n) for t in range(6) for n in range(3)]


def test_the_vectors_describe_every_case_the_brief_names() -> None:
    names = {path.name[: -len(".expected.json")] for path in FIXTURES.glob("*.expected.json")}
    assert names == {"valid", "malformed", "oversized", "forked-parent", "forked-child", "empty", "meta-only", "crlf", "truncated"}
    for name in names:
        assert (FIXTURES / f"{name}.jsonl").exists()
    assert b"\r\n" in (FIXTURES / "crlf.jsonl").read_bytes()
    assert not (FIXTURES / "truncated.jsonl").read_bytes().endswith(b"\n")
    assert (FIXTURES / "empty.jsonl").read_bytes() == b""


# ---------------------------------------------------------------- two stores
def _two_store_app(tmp_path, transaction: type[Transaction] = Transaction) -> Any:
    core, records = make_engine(f"sqlite:///{tmp_path / 'core.db'}"), make_engine(f"sqlite:///{tmp_path / 'records.db'}")
    migrate(core)
    migrate(records, records_only=True)
    settings = Settings(tokens=TOKENS, projects=PROJECTS)
    return build_app(build_services(Store(core, records, transaction), settings), settings)


def test_import_chapter_passes_with_records_in_a_second_store(tmp_path) -> None:
    with serve_app(_two_store_app(tmp_path)) as server:
        config = load(overrides={"target": server.url, "tokens": list(TOKENS), "select": ["legacy_import"], "seed": 8}, environ={})
        result = run(config)
    assert all(c.outcome is Outcome.PASS for c in result.checks), [(c.name, c.message) for c in result.checks if c.outcome is not Outcome.PASS]


class ReadBeforeTheOtherFinished(Transaction):
    """The read before a claim returns the row as it was before another upload finished the import
    and let go of it: what PostgreSQL's READ COMMITTED gives when that upload commits between the
    read and the claim (a seeded run against two replicas met it once)."""

    def legacy_import(self, principal: str, legacy_id: str) -> Any:
        row = super().legacy_import(principal, legacy_id)
        if row is None or row.status != "complete":
            return row
        return replace(row, status="partial", fingerprint=None)


def test_an_upload_that_claims_a_history_just_finished_replays_it(tmp_path) -> None:
    """IMPORT-CONCURRENT-001: the row the claim took decides, not the one read before it; else the
    late upload found nothing left to import and answered 200 without `replayed`."""
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'late.db'}", tokens=TOKENS, projects=PROJECTS)
    engine = make_engine(settings.database_url)
    migrate(engine)
    data = history("late", 2)
    with serve_app(create_app(settings)) as server, httpx.Client(base_url=server.url, headers=AUTH) as http:
        first = http.post("/imports", content=data)
        assert first.status_code == 201, first.text
    services = build_services(Store(engine, transaction_class=ReadBeforeTheOtherFinished), settings)
    with serve_app(build_app(services, settings)) as server, httpx.Client(base_url=server.url, headers=AUTH) as http:
        late = http.post("/imports", content=data)
        assert late.status_code == 200 and late.json()["replayed"] is True, late.text
        assert own(http, first.json()["session_id"]) == [(t, n) for t in range(2) for n in range(3)]


class FlakyRecordsStore(Transaction):
    """A records store that refuses the second batch of records it is given, once."""

    refused = {"count": 0, "writes": 0}

    def insert_records(self, rows: list[dict[str, Any]]) -> None:
        if self._records_conn is not None and self.records_conn is self.conn and "records" in str(self.conn.engine.url):
            FlakyRecordsStore.refused["writes"] += 1
            if FlakyRecordsStore.refused["writes"] == 2:
                raise OperationalError("INSERT", {}, Exception("records store down"))
        super().insert_records(rows)


def test_a_refused_batch_is_given_back_and_the_re_upload_completes_once(tmp_path) -> None:
    """Two stores: the records store refuses turn 1's records; the import answers 503 with turn 0
    imported, and the re-upload brings every record exactly once."""
    data = history("two-store", 4)
    with serve_app(_two_store_app(tmp_path, FlakyRecordsStore)) as server, httpx.Client(base_url=server.url, headers=AUTH) as http:
        first = http.post("/imports", content=data)
        assert first.status_code == 503, first.text
        again = http.post("/imports", content=data)
        assert again.status_code == 200, again.text
        summary = again.json()
        assert own(http, summary["session_id"]) == [(t, n) for t in range(4) for n in range(3)]
        assert summary["imported_records"] == 12


# ---------------------------------------------------------------- PostgreSQL, two replicas
@pytest.mark.postgres
def test_import_chapter_on_postgres_with_two_replicas(postgres_url: str) -> None:
    settings = Settings(database_url=postgres_url, tokens=TOKENS, projects=PROJECTS)
    with serve_app(create_app(settings)) as first, serve_app(create_app(settings)) as second:
        config = load(
            overrides={"target": first.url, "replicas": [second.url], "tokens": list(TOKENS), "select": ["legacy_import"], "seed": 12},
            environ={},
        )
        result = run(config)
    assert all(c.outcome is Outcome.PASS for c in result.checks), [(c.name, c.message) for c in result.checks if c.outcome is not Outcome.PASS]


# ---------------------------------------------------------------- the command
def test_the_import_command_imports_a_forked_pair_parent_first(tmp_path, capsys) -> None:
    folder = tmp_path / "histories"
    folder.mkdir()
    for name in ("forked-parent", "forked-child"):
        (folder / f"{name}.jsonl").write_bytes((FIXTURES / f"{name}.jsonl").read_bytes())
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'cli.db'}", tokens=TOKENS, projects=PROJECTS)
    with serve_app(create_app(settings)) as server:
        code = main(["import", str(folder / "forked-child.jsonl"), "--target", server.url, "--token", "imp-alice"])
        assert code == 0
        printed = capsys.readouterr().out
        again = main(["import", str(folder / "forked-child.jsonl"), "--target", server.url, "--token", "imp-alice", "--jsonl"])
        assert again == 0
        replayed = capsys.readouterr()
        refused = main(["import", str(folder / "forked-child.jsonl"), "--target", server.url, "--token", "imp-bob", "--writer-lease", "nope"])
        problem = capsys.readouterr()
    summaries = json.loads(printed)  # one JSON document: an array, parent first
    parent, child = summaries
    assert [json.loads(line)["replayed"] for line in replayed.out.splitlines()] == [True, True]  # JSON Lines
    assert replayed.err == ""
    assert refused == 1 and [item["legacy_id"] for item in json.loads(problem.out)] == ["vec-fork-parent"]  # what was imported
    assert problem.err.startswith(
        "session-lineage import: forked-child.jsonl: the server answered 409 (writer-conflict: lease nope does not hold session "
    ) and problem.err.count("\n") == 1
    assert (parent["legacy_id"], child["legacy_id"]) == ("vec-fork-parent", "vec-fork-child")
    assert child["parent_session_id"] == parent["session_id"] and child["inherited_turns"] == 2
    assert main(["import", str(tmp_path / "missing.jsonl"), "--target", "http://127.0.0.1:9", "--token", "x"]) == 2
