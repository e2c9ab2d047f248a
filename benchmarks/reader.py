"""The benchmark's HTTP client: reads of the served reference, as a client that cares for speed does
them, on one keep-alive connection, with orjson to parse.

Every time over HTTP is the server's work plus this client's, and the targets compare it with
LangGraph's read in-process, so the reader is the leanest well-kept client there is: libcurl, through
pycurl (`pip install -e '.[bench]'`). Where pycurl is not installed, the standard library's
`http.client` reads instead, and the results say which client ran (`Reader.client`). Measured on
this machine (one CPU, interleaved medians of 300, each read right after a LangGraph read): the
capability document took 194 µs with libcurl and 216 µs with `http.client`, whose headers go through
the `email` package's parser, and the 51-turn export on SQLite 0.89–0.92 ms against 0.94–0.97 ms;
httpx took about 0.55 ms where `http.client` took 0.26 ms (an earlier scratch measurement).
"""

from __future__ import annotations

import http.client
import io
from typing import Any
from urllib.parse import urlencode

import orjson

try:
    import pycurl
except ImportError:  # the tests' environment: the standard library's client reads
    pycurl = None

# libcurl's receive buffer, and the standard library reader's read size when it streams: what the
# client holds of a streamed export at a time.
PIECE = 64 * 1024


class Reader:
    """What the benchmark reads over HTTP; a client supplies `body` and `stream_bytes`."""

    client = ""
    plain: Reader | None = None  # the standard library's client on the same server, when this is another

    def body(self, path: str) -> bytes:
        """The body of GET `path`, which must answer 200."""
        raise NotImplementedError

    def stream_bytes(self, path: str) -> int:
        """GET `path` read as it arrives, each piece dropped when counted: the bytes received."""
        raise NotImplementedError

    def close(self) -> None:
        """Close the connection."""

    def __call__(self, session_id: str) -> list[str]:
        """The whole transcript (the export), parsed (the stdlib's json takes longer than the server's answer)."""
        return [record["content"]["text"] for record in orjson.loads(self.body(f"/sessions/{session_id}/export"))["records"]]

    def stream(self, session_id: str) -> int:
        """The export read as it arrives: what the server holds."""
        return self.stream_bytes(f"/sessions/{session_id}/export")

    def floor(self) -> int:
        """The cheapest answer the reference gives (its capability document, no database read): what
        any request over this HTTP stack costs before the export's own work."""
        return len(self.body("/capabilities"))

    def page(self, session_id: str, cursor: str | None, limit: int) -> tuple[int, str | None]:
        """One transcript page, parsed: (records on it, next cursor)."""
        params: dict[str, Any] = {"limit": limit}
        if cursor is not None:
            params["cursor"] = cursor
        page = orjson.loads(self.body(f"/sessions/{session_id}/transcript?{urlencode(params)}"))
        return len(page["records"]), page["next_cursor"]


class CurlReader(Reader):
    """libcurl (pycurl): one easy handle, whose connection libcurl keeps alive and opens again when
    the server closed it (its keep-alive timeout passes while the benchmark builds a scenario)."""

    def __init__(self, host: str, port: int, token: str) -> None:
        assert pycurl is not None
        self.base = f"http://{host}:{port}"
        self.curl = pycurl.Curl()
        self.curl.setopt(pycurl.HTTPHEADER, [f"Authorization: Bearer {token}"])
        self.curl.setopt(pycurl.PROXY, "")  # a loopback server: never through a proxy the environment names
        self.curl.setopt(pycurl.BUFFERSIZE, PIECE)
        self.client = f"libcurl {pycurl.version_info()[1]} (pycurl)"

    def _get(self, path: str, write: Any) -> int:
        self.curl.setopt(pycurl.URL, self.base + path)
        self.curl.setopt(pycurl.WRITEFUNCTION, write)
        self.curl.perform()
        return int(self.curl.getinfo(pycurl.RESPONSE_CODE))

    def body(self, path: str) -> bytes:
        received = io.BytesIO()
        status = self._get(path, received.write)
        if status != 200:
            raise RuntimeError(f"GET {path} answered {status}: {received.getvalue()[:300]!r}")
        return received.getvalue()

    def stream_bytes(self, path: str) -> int:
        received = 0
        first = b""

        def count(piece: bytes) -> None:
            nonlocal received, first
            first = first or piece[:300]
            received += len(piece)

        status = self._get(path, count)
        if status != 200:
            raise RuntimeError(f"GET {path} answered {status}: {first!r}")
        return received

    def close(self) -> None:
        self.curl.close()


class StdlibReader(Reader):
    """The standard library's `http.client` on one keep-alive connection."""

    client = "the standard library's http.client"

    def __init__(self, host: str, port: int, token: str) -> None:
        self.connection = http.client.HTTPConnection(host, port)
        self.headers = {"Authorization": f"Bearer {token}"}

    def _get(self, path: str) -> http.client.HTTPResponse:
        """Send a GET; once more on a new connection if the server had closed the idle one (its
        keep-alive timeout passes while the benchmark builds a scenario)."""
        try:
            self.connection.request("GET", path, headers=self.headers)
            return self.connection.getresponse()
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
            self.connection.close()  # the next request opens a new connection
        self.connection.request("GET", path, headers=self.headers)
        return self.connection.getresponse()

    def body(self, path: str) -> bytes:
        answer = self._get(path)
        body = answer.read()
        if answer.status != 200:
            raise RuntimeError(f"GET {path} answered {answer.status}: {body[:300]!r}")
        return body

    def stream_bytes(self, path: str) -> int:
        answer = self._get(path)
        if answer.status != 200:
            raise RuntimeError(f"GET {path} answered {answer.status}: {answer.read()[:300]!r}")
        received = 0
        while piece := answer.read(PIECE):
            received += len(piece)
        return received

    def close(self) -> None:
        self.connection.close()


def reader(host: str, port: int, token: str) -> Reader:
    """The leanest client installed: libcurl, else the standard library's."""
    if pycurl is not None:
        return CurlReader(host, port, token)
    return StdlibReader(host, port, token)
