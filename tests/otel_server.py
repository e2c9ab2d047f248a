"""A small server written the way another team would: plain `sqlite3`, no SQLAlchemy, no diagnostics
header at all, and traced only by stock OpenTelemetry instrumentation (issue 21).

`python -m tests.otel_server serve --database-url sqlite:///FILE --port N --tokens-file F` serves
discovery, sessions, turns, record appends, forks at the latest turn, effective transcript pages and
lineage: what the cost checks at depths 0, 1, 5 and the maximum need. With `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` set it exports its spans
there and advertises `diagnostics.trace-context`: the suite can then count its round trips only
from the spans (`opentelemetry-instrumentation-sqlite3` makes one per statement).

Each read is one or two statements whatever the depth: a recursive query walks the lineage.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import socket
import sqlite3
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import uvicorn
import yaml
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

SPEC_VERSION = "1.3.0"
LIMITS = {
    "max_record_bytes": 65_536,
    "max_records_per_append": 100,
    "max_request_bytes": 1_048_576,
    "idempotency_key_lifetime_seconds": 86_400,
    "max_lineage_depth": 8,  # a small server may go less deep than the reference (at least 5: CAP-LIMITS-001)
    "max_page_size": 200,
    "default_page_size": 50,
}
SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (id TEXT PRIMARY KEY, name TEXT, description TEXT, created_at TEXT NOT NULL,
  parent_id TEXT, root_id TEXT NOT NULL, depth INTEGER NOT NULL, inherited INTEGER NOT NULL,
  turns INTEGER NOT NULL DEFAULT 0, finished INTEGER NOT NULL DEFAULT 0, records INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS turns (id TEXT PRIMARY KEY, session_id TEXT NOT NULL, idx INTEGER NOT NULL, role TEXT NOT NULL,
  status TEXT NOT NULL, created_at TEXT NOT NULL, finished_at TEXT);
CREATE TABLE IF NOT EXISTS records (id TEXT PRIMARY KEY, session_id TEXT NOT NULL, turn_id TEXT NOT NULL,
  turn_idx INTEGER NOT NULL, idx INTEGER NOT NULL, type TEXT NOT NULL, content TEXT NOT NULL, created_at TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS records_by_position ON records (session_id, turn_idx, idx);
"""
# The lineage of ?1, nearest first: each ancestor with the number of its turns its child inherited.
CHAIN = """
WITH RECURSIVE chain(id, parent_id, cut, inherited, depth) AS (
  SELECT id, parent_id, 9223372036854775807, inherited, depth FROM sessions WHERE id = ?1
  UNION ALL
  SELECT s.id, s.parent_id, c.inherited, s.inherited, s.depth FROM sessions s JOIN chain c ON s.id = c.parent_id
)
"""


class Problem(Exception):
    def __init__(self, status: int, kind: str, detail: str) -> None:
        self.status, self.kind, self.detail = status, kind, detail


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def problem(status: int, kind: str, detail: str) -> Response:
    body = {"type": f"urn:session-lineage:problem:{kind}", "title": kind.replace("-", " "), "status": status, "detail": detail}
    return Response(json.dumps(body), status, media_type="application/problem+json")


def session_view(row: sqlite3.Row) -> dict[str, Any]:
    lineage = None
    if row["parent_id"] is not None:
        lineage = {"root_session_id": row["root_id"], "parent_session_id": row["parent_id"],
                   "inherited_turn_count": row["inherited"], "depth": row["depth"]}
    return {"session_id": row["id"], "name": row["name"], "description": row["description"],
            "created_at": row["created_at"], "lineage": lineage}


def turn_view(row: sqlite3.Row) -> dict[str, Any]:
    return {"turn_id": row["id"], "session_id": row["session_id"], "role": row["role"], "index": row["idx"],
            "status": row["status"], "created_at": row["created_at"], "finished_at": row["finished_at"]}


def record_view(row: sqlite3.Row) -> dict[str, Any]:
    return {"record_id": row["id"], "session_id": row["session_id"], "turn_id": row["turn_id"], "index": row["idx"],
            "type": row["type"], "content": json.loads(row["content"]), "created_at": row["created_at"]}


class Server:
    """The operations, each a few statements on one connection (the event loop runs one at a time)."""

    def __init__(self, database: str) -> None:
        self.db = sqlite3.connect(database, isolation_level=None, check_same_thread=False)
        self.db.row_factory = sqlite3.Row
        self.db.executescript(SCHEMA)

    def cursor(self) -> sqlite3.Cursor:
        """Statements go through cursors: the sqlite3 instrumentation traces `cursor.execute`, not
        the connection's shortcuts."""
        return self.db.cursor()

    def session(self, session_id: str) -> sqlite3.Row:
        row = self.cursor().execute("SELECT * FROM sessions WHERE id = ?", (session_id,)).fetchone()
        if row is None:
            raise Problem(404, "not-found", f"session {session_id} not found")
        return row

    def create_session(self, body: dict[str, Any]) -> dict[str, Any]:
        sid = str(body.get("session_id") or uuid.uuid4())
        row = self.cursor().execute(
            "INSERT INTO sessions (id, name, description, created_at, root_id, depth, inherited) VALUES (?, ?, ?, ?, ?, 0, 0) "
            "ON CONFLICT (id) DO NOTHING RETURNING *",
            (sid, body.get("name"), body.get("description"), now(), sid),
        ).fetchone()
        if row is None:
            raise Problem(409, "session-exists", f"session {sid} already exists")
        return session_view(row)

    def start_turn(self, session_id: str, body: dict[str, Any]) -> dict[str, Any]:
        if body.get("role") not in ("user", "assistant", "system", "tool"):
            raise Problem(422, "validation", "role must be user, assistant, system or tool")
        with self.db:  # BEGIN ... COMMIT: the session's turn count and the turn together
            self.cursor().execute("BEGIN IMMEDIATE")
            session = self.cursor().execute("UPDATE sessions SET turns = turns + 1 WHERE id = ? RETURNING *", (session_id,)).fetchone()
            if session is None:
                raise Problem(404, "not-found", f"session {session_id} not found")
            row = self.cursor().execute(
                "INSERT INTO turns (id, session_id, idx, role, status, created_at) VALUES (?, ?, ?, ?, 'running', ?) RETURNING *",
                (str(uuid.uuid4()), session_id, session["inherited"] + session["turns"] - 1, body["role"], now()),
            ).fetchone()
        return turn_view(row)

    def running_turn(self, session_id: str, turn_id: str) -> sqlite3.Row:
        turn = self.cursor().execute("SELECT * FROM turns WHERE id = ? AND session_id = ?", (turn_id, session_id)).fetchone()
        if turn is None:
            raise Problem(404, "not-found", f"turn {turn_id} not found in session {session_id}")
        if turn["status"] != "running":
            raise Problem(409, "turn-finished", f"turn {turn_id} is {turn['status']}")
        return turn

    def append(self, session_id: str, turn_id: str, body: dict[str, Any]) -> dict[str, Any]:
        records = body.get("records")
        if not isinstance(records, list) or not 0 < len(records) <= LIMITS["max_records_per_append"]:
            raise Problem(422, "validation", "records must be a list of 1 to max_records_per_append records")
        with self.db:
            self.cursor().execute("BEGIN IMMEDIATE")
            turn = self.running_turn(session_id, turn_id)
            first = self.cursor().execute(
                "UPDATE sessions SET records = records + ? WHERE id = ? RETURNING records - ?", (len(records), session_id, len(records))
            ).fetchone()[0]
            created = now()
            rows = [(str(uuid.uuid4()), session_id, turn_id, turn["idx"], first + n, str(r.get("type")), json.dumps(r.get("content")), created)
                    for n, r in enumerate(records)]
            self.cursor().executemany("INSERT INTO records VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
        columns = ("id", "session_id", "turn_id", "turn_idx", "idx", "type", "content", "created_at")
        return {"records": [record_view(dict(zip(columns, row))) for row in rows]}  # type: ignore[arg-type]

    def finish(self, session_id: str, turn_id: str, body: dict[str, Any]) -> dict[str, Any]:
        if body.get("status") not in ("completed", "failed"):
            raise Problem(422, "validation", "status must be completed or failed")
        with self.db:
            self.cursor().execute("BEGIN IMMEDIATE")
            self.running_turn(session_id, turn_id)
            row = self.cursor().execute(
                "UPDATE turns SET status = ?, finished_at = ? WHERE id = ? RETURNING *", (body["status"], now(), turn_id)
            ).fetchone()
            self.cursor().execute("UPDATE sessions SET finished = turns WHERE id = ?", (session_id,))
        return turn_view(row)

    def fork(self, session_id: str, body: dict[str, Any]) -> dict[str, Any]:
        if (body.get("cut") or {}).get("mode", "latest") != "latest":
            raise Problem(422, "validation", "this server forks at the latest turn only")
        with self.db:
            self.cursor().execute("BEGIN IMMEDIATE")
            parent = self.session(session_id)
            if parent["depth"] + 1 > LIMITS["max_lineage_depth"]:
                raise Problem(409, "lineage-too-deep", f"a fork of {session_id} would be deeper than max_lineage_depth")
            child = str(body.get("target_session_id") or uuid.uuid4())
            # The latest cut: every turn up to the last one finished (a fork copies nothing).
            row = self.cursor().execute(
                "INSERT INTO sessions (id, created_at, parent_id, root_id, depth, inherited) VALUES (?, ?, ?, ?, ?, ?) RETURNING *",
                (child, now(), session_id, parent["root_id"], parent["depth"] + 1, parent["inherited"] + parent["finished"]),
            ).fetchone()
        view = session_view(row)
        return {"session": view, "lineage": view["lineage"]}

    def transcript(self, session_id: str, cursor: str | None, limit: str | None) -> dict[str, Any]:
        size = _page_size(limit)
        after = _decode(cursor) if cursor else (-1, -1)
        self.session(session_id)
        # A turn index belongs to one session of the chain (a child's turns follow those it inherited).
        rows = self.cursor().execute(
            CHAIN + "SELECT r.* FROM records r JOIN chain c ON r.session_id = c.id "
            "WHERE r.turn_idx < c.cut AND (r.turn_idx, r.idx) > (?2, ?3) ORDER BY r.turn_idx, r.idx LIMIT ?4",
            (session_id, after[0], after[1], size + 1),
        ).fetchall()
        page = rows[:size]
        last = page[-1] if page else None
        next_cursor = _encode((last["turn_idx"], last["idx"])) if last else cursor
        return {"session_id": session_id, "records": [record_view(r) for r in page], "has_more": len(rows) > size,
                "next_cursor": next_cursor}

    def lineage(self, session_id: str) -> dict[str, Any]:
        rows = self.cursor().execute(CHAIN + "SELECT * FROM chain ORDER BY depth", (session_id,)).fetchall()
        if not rows:
            raise Problem(404, "not-found", f"session {session_id} not found")
        ancestors = [{"session_id": r["id"], "depth": r["depth"], "inherited_turn_count": rows[n + 1]["inherited"]}
                     for n, r in enumerate(rows[:-1])]
        return {"session_id": session_id, "root_session_id": rows[0]["id"], "depth": rows[-1]["depth"], "ancestors": ancestors}


def _page_size(limit: str | None) -> int:
    if limit is None:
        return LIMITS["default_page_size"]
    if not limit.isdigit() or not 1 <= int(limit) <= LIMITS["max_page_size"]:
        raise Problem(400, "invalid-parameter", "limit must be 1 to max_page_size")
    return int(limit)


def _encode(position: tuple[int, int]) -> str:
    return base64.urlsafe_b64encode(json.dumps(position).encode()).decode().rstrip("=")


def _decode(cursor: str) -> tuple[int, int]:
    try:
        turn, index = (int(part) for part in json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))))
    except (ValueError, TypeError):
        raise Problem(400, "invalid-cursor", "the cursor is not one this server issued") from None
    return turn, index


def build(database: str, tokens: frozenset[str], traced: bool) -> Starlette:
    server = Server(database)
    capabilities = ["fork", "effective-transcript", "lineage"] + (["diagnostics.trace-context"] if traced else [])

    def endpoint(handler: Any, status: int = 200, public: bool = False) -> Any:
        async def run(request: Request) -> Response:
            scheme, _, token = request.headers.get("authorization", "").partition(" ")
            if not public and (scheme.lower() != "bearer" or token not in tokens):
                return problem(401, "unauthenticated", "a known bearer token is required")
            try:
                body = await request.json() if request.method == "POST" else {}
                if not isinstance(body, dict):
                    raise Problem(400, "invalid-body", "the body must be a JSON object")
                return JSONResponse(handler(request, body), status)
            except json.JSONDecodeError:
                return problem(400, "invalid-body", "the body is not JSON")
            except Problem as exc:
                return problem(exc.status, exc.kind, exc.detail)

        return run

    p = "/sessions/{session_id}"
    routes = [
        Route("/capabilities", endpoint(lambda r, b: {"spec_version": SPEC_VERSION, "capabilities": capabilities, "limits": LIMITS,
                                                      "diagnostics": {"query_count": False, "write_count": False, "records_examined": False}}, public=True)),
        Route("/sessions", endpoint(lambda r, b: server.create_session(b), 201), methods=["POST"]),
        Route(p, endpoint(lambda r, b: session_view(server.session(r.path_params["session_id"])))),
        Route(f"{p}/turns", endpoint(lambda r, b: server.start_turn(r.path_params["session_id"], b), 201), methods=["POST"]),
        Route(f"{p}/turns/{{turn_id}}/records", endpoint(lambda r, b: server.append(r.path_params["session_id"], r.path_params["turn_id"], b), 201), methods=["POST"]),
        Route(f"{p}/turns/{{turn_id}}/finish", endpoint(lambda r, b: server.finish(r.path_params["session_id"], r.path_params["turn_id"], b)), methods=["POST"]),
        Route(f"{p}/fork", endpoint(lambda r, b: server.fork(r.path_params["session_id"], b), 201), methods=["POST"]),
        Route(f"{p}/transcript", endpoint(lambda r, b: server.transcript(r.path_params["session_id"], r.query_params.get("cursor"), r.query_params.get("limit")))),
        Route(f"{p}/lineage", endpoint(lambda r, b: server.lineage(r.path_params["session_id"]))),
    ]
    return Starlette(routes=routes)


def main() -> None:
    parser = argparse.ArgumentParser()  # as the reference's, so tests/servers.py starts either
    parser.add_argument("command", choices=["serve"])
    parser.add_argument("--database-url", required=True, help="sqlite:///FILE")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--fd", type=int, help="serve on this inherited bound socket instead of --port")
    parser.add_argument("--tokens-file", required=True, help="YAML mapping of bearer token to principal")
    args = parser.parse_args()
    tokens = frozenset(yaml.safe_load(Path(args.tokens_file).read_text(encoding="utf-8")) or {})
    traced = bool(os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
    if traced:  # the stock set-up a team adds; the exporter reads the endpoint from the environment
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.instrumentation.sqlite3 import SQLite3Instrumentor
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        trace.set_tracer_provider(provider := TracerProvider())  # as the README shows
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))  # the endpoint from the environment
        SQLite3Instrumentor().instrument()  # before the server connects
    app: Any = build(args.database_url.removeprefix("sqlite:///"), tokens, traced)
    if traced:
        from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware

        app = OpenTelemetryMiddleware(app)
    uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=args.port, log_level="warning")).run(
        sockets=[socket.socket(fileno=args.fd)] if args.fd is not None else None  # its family: TCP, Nagle off
    )


if __name__ == "__main__":
    main()
