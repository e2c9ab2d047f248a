"""Comparison 6: the reference against the real peer, LangGraph on its own checkpointer.

The scenario, the same on both sides: T turns, each a user message and an assistant reply
(190 bytes of text each); find the point after turn T/2 without any stored id; fork there and
add a turn; read the child's whole conversation (T/2 + 1 turns: 51 of the 100-turn scenario). Statements are exact on both sides (the
reference's own counter; SQLite's trace callback for the peer); times are medians of interleaved
repeats, so drift on a shared machine hits both.

The peer runs in-process, as agents embed it, on the same engine as the reference: its SQLite
checkpointer beside the SQLite backend, its PostgreSQL checkpointer beside PostgreSQL. The reference runs in-process on the backend under
test, driven through its chapter services exactly as its HTTP layer drives them, and its
whole-transcript read is also timed over HTTP (the reference app served on a loopback port).

Building a LangGraph thread turn by turn writes a full copy of the conversation into every
checkpoint, so its cost grows with the square of the length (1.16 GB at 1,000 turns). The sizes in
`Config.versus_turns` run the whole scenario; the read-only size `Config.versus_read_turns` builds
the peer's thread in one state update (one checkpoint holding every message, which is what its read
loads either way) and the reference's by one-request turn writes, and compares the full read only,
of all T turns (100 and 200 too, beside the scenario's branch of T/2 + 1).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson

from benchmarks import langgraph_peer
from benchmarks.backend import PRINCIPAL, Database
from benchmarks.config import Config
from benchmarks.meter import (
    Cost, interleaved_median_seconds, measure, median_seconds, paired_median_seconds, peak_bytes, ratio, replay_seconds,
)
from benchmarks.reader import Reader, StdlibReader, reader

CONTENT_BYTES = 190
TOKEN = "bench-token"
# Untimed rounds before a full read is timed: a running server has sent its statements before, so
# they are prepared (psycopg prepares a statement on its 5th run on a connection, and PostgreSQL
# plans a prepared one afresh its first 5 times); LangGraph's connection prepares on the first.
WARMUP = 10
# Timed rounds of a full read up to 2,000 turns, per run of the other timings: each read takes a
# few milliseconds, so 15 rounds left the median of a sub-millisecond step at the mercy of a few
# slow ones (the ratios moved by a fifth between runs); 7 times as many cost about a second.
READ_ROUNDS = 7


def _message(prefix: str, number: int) -> dict[str, Any]:
    return {"type": "message", "content": {"text": langgraph_peer.text(prefix, number, CONTENT_BYTES)}}


class Reference:
    """The same conversation through the reference's services: one request per step."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.services = db.services

    def new_session(self) -> str:
        return str(self.services.sessions.create_session(PRINCIPAL, {"name": "versus"})["session_id"])

    def pair(self, session_id: str, number: int, key: str | None = None) -> None:
        """A user message and the assistant's reply: one turn written in one request."""
        body = {"role": "user", "records": [_message("u", number), _message("a", number)], "status": "completed"}
        self.services.turn_writes.start_turn(PRINCIPAL, session_id, body, None, key)

    def turn_at(self, session_id: str, position: int) -> dict[str, Any]:
        """The effective turn at `position` (1-based): one request."""
        return self.services.turn_positions.turn_at(PRINCIPAL, session_id, position)

    def fork_after(self, session_id: str, turn_id: str) -> str:
        outcome = self.services.fork.fork(PRINCIPAL, session_id, {"cut": {"mode": "through", "turn_id": turn_id}}, None)
        return str(outcome.body["session"]["session_id"])

    def read_all(self, session_id: str) -> list[str]:
        """The whole effective transcript in one request (the export)."""
        document = self.services.export.export(PRINCIPAL, session_id)
        return [record["content"]["text"] for record in document["records"]]


@contextmanager
def served(db: Database) -> Iterator[Reader]:
    """The reference app on the benchmark's database, served on a loopback port: reads over HTTP by
    the leanest client installed (benchmarks/reader.py), with the standard library's client beside
    it (`plain`) when that is another one, for the context figure."""
    from conformance.embedded import serve_app
    from reference_impl.http import create_app
    from reference_impl.settings import Settings

    app = create_app(Settings(database_url=db.url, tokens={TOKEN: PRINCIPAL}, limits=db.limits))
    with serve_app(app) as server:
        address = urlsplit(server.url)
        host, port = address.hostname or "127.0.0.1", address.port or 80
        http_read = reader(host, port, TOKEN)
        if not isinstance(http_read, StdlibReader):
            http_read.plain = StdlibReader(host, port, TOKEN)
        try:
            yield http_read
        finally:
            http_read.close()
            if http_read.plain is not None:
                http_read.plain.close()


def reference_costs(reference: Reference, sizes: tuple[int, ...]) -> dict[str, Any]:
    """The reference's exact statement counts for each step, at every size: measured whether or
    not LangGraph is installed, so the tests hold them."""
    rows = []
    for turns in sizes:
        session_id = reference.new_session()
        pair_statements = set()
        for number in range(turns):
            _, cost = measure(lambda n=number: reference.pair(session_id, n))
            pair_statements.add(cost.statements)
        _, keyed = measure(lambda: reference.pair(session_id, turns, key=f"costs-{turns}"))
        _, replayed = measure(lambda: reference.pair(session_id, turns, key=f"costs-{turns}"))
        found, lookup = measure(lambda: reference.turn_at(session_id, max(1, turns // 2)))
        texts, read = measure(lambda: reference.read_all(session_id))
        rows.append({
            "turns": turns,
            "pair_statements": sorted(pair_statements),
            "pair_with_key_statements": keyed.statements,
            "pair_replay_statements": replayed.statements,
            "turn_at_statements": lookup.statements,
            "full_read_statements": read.statements,
            "full_read_records": len(texts),
        })
    return {"rows": rows}


def versus_langgraph(db: Database, config: Config) -> dict[str, Any]:
    """The reference's step costs, then the scenario at every size (or why it did not run)."""
    missing = [name for name in ("turn_writes", "export", "turn_positions") if getattr(db.services, name, None) is None]
    if missing:
        return {"skipped": f"the reference runs without {', '.join(missing)} (turn-write, transcript-export, turn-by-position)"}
    reference = Reference(db)
    # Step costs at the scenario sizes and the read-only sizes up to 1,000: they are exact and flat,
    # and building the longest read-only session twice would only add minutes.
    costs = reference_costs(reference, tuple(sorted({*config.versus_turns, *(n for n in config.versus_read_turns if n <= 1_000)})))
    version = langgraph_peer.available()
    if version is None:
        return {"reference_costs": costs, "skipped": "LangGraph is not installed: pip install -e '.[bench]'"}
    rows = []
    with served(db) as http_read:
        for turns in config.versus_turns:
            with tempfile.TemporaryDirectory(prefix="lineage-versus-") as folder:
                rows.append(_scenario(reference, turns, Path(folder), config, http_read))
        reads = []
        for turns in config.versus_read_turns:
            with tempfile.TemporaryDirectory(prefix="lineage-versus-") as folder:
                reads.append(_read_only(reference, turns, Path(folder), config, http_read))
    checkpointer = "SqliteSaver (a SQLite file)" if db.kind == "sqlite" else "PostgresSaver (a database on the same server)"
    return {"reference_costs": costs, "langgraph": version, "checkpointer": checkpointer, "content_bytes_per_message": CONTENT_BYTES, "rows": rows, "reads": reads}


def _scenario(reference: Reference, turns: int, folder: Path, config: Config, http_read: Reader) -> dict[str, Any]:
    with _peer(reference.db, folder) as peer:
        session_id = reference.new_session()
        pair_statements = []
        build_started = time.perf_counter()
        for number in range(turns):
            _, cost = measure(lambda n=number: reference.pair(session_id, n))
            pair_statements.append(cost.statements)
        reference_build = time.perf_counter() - build_started
        _, keyed = measure(lambda: reference.pair(reference.new_session(), 0, key=f"versus-{turns}"))
        peer_statements = []
        build_started = time.perf_counter()
        for number in range(turns):
            with peer.counted() as counted:
                peer.turn(number)
            peer_statements.append(counted.statements)
        peer_build = time.perf_counter() - build_started

        half = turns // 2
        found, lookup = measure(lambda: reference.turn_at(session_id, half))
        with peer.counted() as scan:
            checkpoint = peer.find_turn(half)
        lookup_seconds, scan_seconds = paired_median_seconds(
            lambda: reference.turn_at(session_id, half), lambda: peer.find_turn(half), min(config.repeats, 3)
        )
        child, fork_cost = measure(lambda: reference.fork_after(session_id, found["turn"]["turn_id"]))
        _, child_pair = measure(lambda: reference.pair(child, turns))
        with peer.counted() as peer_fork:
            branch = peer.turn(turns, checkpoint)

        texts, read_cost = measure(lambda: reference.read_all(child))
        with peer.counted() as peer_read:
            messages = peer.read_all(branch)
        empty = reference.new_session()
        rounds = config.repeats * READ_ROUNDS
        read_seconds, peer_read_seconds, http_seconds, plain, floor_seconds = _timed(
            reference, child, lambda: peer.read_all(branch), http_read, empty, rounds, WARMUP
        )
        memory = _peaks(reference, child, http_read, lambda: peer.read_all(branch))
        floors = _floors(reference, child, read_cost, floor_seconds, rounds, len(texts), empty=empty)
        return {
            "turns": turns,
            "same_transcript": texts == messages and http_read(child) == messages,
            "messages_read": len(messages),
            "build_seconds": {"reference": reference_build, "langgraph": peer_build},
            "pair_statements": {
                "reference": max(pair_statements),
                "reference_with_key": keyed.statements,
                "langgraph": max(peer_statements),
            },
            "fork_point": {
                "reference": {"requests": 1, "statements": lookup.statements, "seconds": lookup_seconds},
                "langgraph": {"statements": scan.statements, "seconds": scan_seconds},
                "langgraph_over_reference": ratio(scan_seconds, lookup_seconds),
            },
            "fork_and_turn_statements": {
                "reference": fork_cost.statements + child_pair.statements,
                "langgraph": peer_fork.statements,
            },
            "full_read": _read_row(
                read_cost.statements, read_seconds, http_seconds, peer_read.statements, peer_read_seconds, memory, floors, rounds,
                plain, http_read.client,
            ),
            "storage_bytes": {"reference": reference.db.size_bytes(), "langgraph": peer.size_bytes()},
        }


def _read_only(reference: Reference, turns: int, folder: Path, config: Config, http_read: Reader) -> dict[str, Any]:
    with _peer(reference.db, folder) as peer:
        session_id = reference.new_session()
        for number in range(turns):
            reference.pair(session_id, number)
        peer.load(turns)
        texts, read_cost = measure(lambda: reference.read_all(session_id))
        with peer.counted() as peer_read:
            messages = peer.read_all()
        repeats = config.repeats * READ_ROUNDS if turns <= 2_000 else max(min(config.repeats, 5), 1)
        warmup = WARMUP if turns <= 2_000 else 2
        empty = reference.new_session()
        read_seconds, peer_read_seconds, http_seconds, plain, floor_seconds = _timed(
            reference, session_id, peer.read_all, http_read, empty, repeats, warmup
        )
        memory = _peaks(reference, session_id, http_read, peer.read_all)
        floors = _floors(reference, session_id, read_cost, floor_seconds, repeats, len(texts), warmup, empty)
        return {
            "turns": turns,
            "same_transcript": texts == messages and http_read(session_id) == messages,
            "messages_read": len(messages),
            "full_read": _read_row(
                read_cost.statements, read_seconds, http_seconds, peer_read.statements, peer_read_seconds, memory, floors, repeats,
                plain, http_read.client,
            ),
        }


def _timed(
    reference: Reference, session_id: str, peer_read: Callable[[], Any], http_read: Reader, empty: str, rounds: int, warmup: int
) -> tuple[float, float, float, tuple[float, float] | None, list[float]]:
    """Interleaved medians of the full read in-process, LangGraph's, over HTTP, and the floors' reads
    (the capability document over HTTP, the export of a session with no turns in-process and over
    HTTP); then, when the reader is not the standard library's client, a series of its own of
    LangGraph's read and the read over HTTP with that client: (LangGraph, http.client) medians, for
    context. A series apart leaves the target's series as it was: an extra read in each of its
    rounds would change what every read there follows, and so what the CPU's caches hold for it."""
    medians = interleaved_median_seconds(
        [lambda: reference.read_all(session_id), peer_read, lambda: http_read(session_id),
         http_read.floor, lambda: reference.read_all(empty), lambda: http_read(empty)],
        rounds, warmup,
    )
    plain = http_read.plain
    beside = None
    if plain is not None:
        peer_beside, plain_seconds = interleaved_median_seconds([peer_read, lambda: plain(session_id)], rounds, warmup)
        beside = (peer_beside, plain_seconds)
    return medians[0], medians[1], medians[2], beside, medians[3:6]


def _peaks(reference: Reference, session_id: str, http_read: Reader, peer_read: Callable[[], Any]) -> dict[str, int]:
    """Peak Python memory of each full read (tracemalloc, one untimed run each): the reference
    in-process (the parsed document), over HTTP streamed (server and client in this process; the
    client drops each chunk as it arrives), and LangGraph in-process."""
    return {
        "reference": peak_bytes(lambda: reference.read_all(session_id)),
        "reference_http_streamed": peak_bytes(lambda: http_read.stream(session_id)),
        "langgraph": peak_bytes(peer_read),
    }


@contextmanager
def _peer(db: Database, folder: Path) -> Iterator[langgraph_peer.LangGraphThread]:
    """LangGraph on the same engine as the reference: its SQLite checkpointer in a file, or its
    PostgreSQL checkpointer in a database of its own on the same server."""
    if db.kind == "sqlite":
        peer = langgraph_peer.LangGraphThread(str(folder / "langgraph.db"), CONTENT_BYTES)
        try:
            yield peer
        finally:
            peer.close()
        return
    from benchmarks.backend import _postgres_database

    with _postgres_database(db.url) as url:
        peer = langgraph_peer.LangGraphThread(url, CONTENT_BYTES, engine="postgresql")
        try:
            yield peer
        finally:
            peer.close()


def _floors(
    reference: Reference, session_id: str, read_cost: Any, floor_seconds: list[float], repeats: int, records: int,
    warmup: int = WARMUP, empty: str | None = None,
) -> dict[str, Any]:
    """What bounds a full read from below, measured in the same run: the export's own statements
    sent straight through the DB-API (the database's share, no SQLAlchemy or Python rows); the
    cheapest request over the same HTTP stack (the capability document); the export of a session
    with no turns, in-process and over HTTP (what every export pays before it reads a turn: the read
    transaction and the chain, and over HTTP the hop to the thread the database work runs on); the
    statements that build the documents alone (what reading the turns adds at the least: when the
    statement also reads the chain, less the same statement's time for the session with no turns,
    which the no-turn export already holds); and parsing the document with orjson (what the
    in-process export does to return it, and what the HTTP reader does with the body: LangGraph's
    read returns parsed objects too)."""
    capabilities, empty_seconds, empty_http = floor_seconds
    documents = [(sql, parameters) for sql, parameters in zip(read_cost.sql, read_cost.parameters) if " AS doc" in sql]
    documents_cost = Cost(sql=[sql for sql, _ in documents], parameters=[parameters for _, parameters in documents])
    shared = None
    if empty is not None:
        _, empty_cost = measure(lambda: reference.read_all(empty))
        if empty_cost.sql and all(sql in documents_cost.sql for sql in empty_cost.sql):  # the documents come with the chain
            shared = replay_seconds(reference.db.engine, empty_cost, repeats, warmup)
    body = reference.services.export.document(PRINCIPAL, session_id).read()
    for _ in range(warmup):
        orjson.loads(body)
    return {
        "sql_seconds": replay_seconds(reference.db.engine, read_cost, repeats, warmup),
        "documents_sql_seconds": replay_seconds(reference.db.engine, documents_cost, repeats, warmup),
        # The same statement for the session with no turns, when the documents are read with the
        # chain: its part of documents_sql_seconds is already in the no-turn export (absent before 2026-12-05).
        "documents_shared_sql_seconds": shared,
        "parse_seconds": median_seconds(lambda: orjson.loads(body), repeats),
        "http_seconds": capabilities,
        "empty_export_seconds": empty_seconds,
        "empty_export_http_seconds": empty_http,
        # Over HTTP this export is read whole, by the same statements as in-process (else it streams,
        # by others): a message pair per turn, so half as many turns as records.
        "http_reads_whole": records + records // 2 <= reference.services.export.stream_above,
    }


def _read_row(
    statements: int, seconds: float, http_seconds: float, peer_statements: int, peer_seconds: float, memory: dict[str, int],
    floors: dict[str, float] | None = None, rounds: int | None = None, plain: tuple[float, float] | None = None, client: str = "",
) -> dict[str, Any]:
    return {
        "rounds": rounds,  # timed rounds behind each median (absent in reports before stop 28)
        "floors": floors or {},
        "peak_memory_bytes": memory,
        "reference": {
            "requests": 1, "statements": statements, "seconds": seconds, "http_seconds": http_seconds,
            # The HTTP client, and the same read with the standard library's client when that is
            # another one, with LangGraph's read timed beside it (context; absent in reports before
            # 2026-12-05, whose client was http.client).
            "http_client": client,
            "http_stdlib_seconds": plain[1] if plain else None,
            "http_stdlib_langgraph_seconds": plain[0] if plain else None,
        },
        "langgraph": {"statements": peer_statements, "seconds": peer_seconds},
        "langgraph_over_reference": ratio(peer_seconds, seconds),
        "langgraph_over_reference_http": ratio(peer_seconds, http_seconds),
    }
