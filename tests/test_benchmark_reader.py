"""The benchmark's HTTP clients (benchmarks/reader.py) read the same answers from a served reference,
and libcurl's keeps reading when the server closed the connection it kept alive."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from benchmarks import TINY
from benchmarks.backend import Backend
from benchmarks.reader import CurlReader, StdlibReader
from benchmarks.versus import Reference, served


@pytest.fixture(scope="module")
def reads() -> Iterator[tuple[Reference, Any, str]]:
    """A served reference with a two-turn session, and its reader (libcurl, the standard library's beside it)."""
    with Backend("sqlite").database(TINY.versus_limits()) as db:
        reference = Reference(db)
        session_id = reference.new_session()
        for number in range(2):
            reference.pair(session_id, number)
        with served(db) as http_read:
            yield reference, http_read, session_id


def test_both_clients_read_what_the_reference_holds(reads: tuple[Reference, Any, str]) -> None:
    reference, curl, session_id = reads
    assert isinstance(curl, CurlReader) and "libcurl" in curl.client
    plain = curl.plain
    assert isinstance(plain, StdlibReader)
    expected = reference.read_all(session_id)
    assert len(expected) == 4
    assert curl(session_id) == plain(session_id) == expected
    body = curl.body(f"/sessions/{session_id}/export")
    assert body == plain.body(f"/sessions/{session_id}/export")
    assert curl.stream(session_id) == plain.stream(session_id) == len(body)
    assert curl.floor() == plain.floor() > 0
    assert curl.page(session_id, None, 3) == plain.page(session_id, None, 3)
    records, cursor = curl.page(session_id, None, 3)
    assert records == 3 and cursor is not None
    assert curl.page(session_id, cursor, 3)[0] == plain.page(session_id, cursor, 3)[0] == 1


@pytest.mark.parametrize("client", ["curl", "plain"])
def test_an_answer_other_than_200_is_an_error_naming_it(reads: tuple[Reference, Any, str], client: str) -> None:
    _, curl, _ = reads
    chosen = curl if client == "curl" else curl.plain
    with pytest.raises(RuntimeError, match="answered 404"):
        chosen.body("/sessions/no-such-session/export")
    with pytest.raises(RuntimeError, match="answered 404"):
        chosen.stream("no-such-session")


def test_curl_opens_a_new_connection_when_the_server_closed_the_kept_one() -> None:
    """As uvicorn does when its keep-alive timeout passes while the benchmark builds a scenario:
    the server answers on a connection and closes it without saying so."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    connections = []

    def serve() -> None:
        for number in range(2):
            conn, _ = listener.accept()
            connections.append(number)
            request = b""
            while b"\r\n\r\n" not in request:
                request += conn.recv(4096)
            body = b'{"n": %d}' % number
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            conn.close()  # no "Connection: close": the client finds out when it reuses the connection

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    curl = CurlReader("127.0.0.1", port, "token")
    try:
        assert curl.body("/capabilities") == b'{"n": 0}'
        assert curl.body("/capabilities") == b'{"n": 1}'
    finally:
        curl.close()
        listener.close()
    thread.join(timeout=5)
    assert connections == [0, 1]
