"""The reference server with failpoints in the fork transaction, for crash-safety tests.

Run `python -m tests.fault_server serve --database-url URL --port P --tokens-file F` with the
environment variable FAILPOINT naming one step of a fork:

- `kill-before-session`, `kill-after-session`, `kill-after-lineage`, `kill-after-idempotency`:
  the process SIGKILLs itself before `insert_session` or after the named insert (after
  `insert_idempotency` is just before commit), so the transaction is never committed.
- `drop-connection-after-session`: right after `insert_session` the transaction's own database
  connection is terminated with `pg_terminate_backend(pg_backend_pid())`, so the next statement
  of the fork fails as it would after a network drop or a database failover (PostgreSQL only).

A failpoint fires once per process: a retry in the same process must then succeed. The failpoints
live in a Transaction subclass, so the reference server itself has no fault hooks; without
FAILPOINT this is the unchanged reference app.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg
import uvicorn
import yaml
from starlette.types import ASGIApp

from reference_impl.cli import inherited_socket
from reference_impl.http import create_app
from reference_impl.principals import TokensFileError, parse_tokens
from reference_impl.settings import Limits, Settings
from reference_impl.store import Transaction
from tests.mutants import app_with_transaction

KILL_FAILPOINTS = ("kill-before-session", "kill-after-session", "kill-after-lineage", "kill-after-idempotency")
DROP_CONNECTION = "drop-connection-after-session"
FAILPOINTS = (*KILL_FAILPOINTS, DROP_CONNECTION)


class Failpoint:
    """One armed step; `reached(step)` is true the first time that step runs, never again."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._armed = True
        self._lock = threading.Lock()  # forks run on the thread pool

    def reached(self, step: str) -> bool:
        with self._lock:
            if not self._armed or step != self.name:
                return False
            self._armed = False
        # The marker lets a test tell "died at the failpoint" from "died for another reason".
        print(f"failpoint {step} reached", file=sys.stderr, flush=True)
        return True


def faulty_transaction(failpoint: Failpoint) -> type[Transaction]:
    """A Transaction whose fork inserts stop at `failpoint`."""

    class FaultyTransaction(Transaction):
        def insert_session(self, row: dict[str, Any]) -> None:
            child = row["depth"] > 0  # only fork writes a session below a root
            if child and failpoint.reached("kill-before-session"):
                _kill_self()
            super().insert_session(row)
            if child and failpoint.reached("kill-after-session"):
                _kill_self()
            if child and failpoint.reached(DROP_CONNECTION):
                self._drop_connection()

        def insert_lineage(self, row: dict[str, Any]) -> None:
            super().insert_lineage(row)
            if failpoint.reached("kill-after-lineage"):
                _kill_self()

        def insert_idempotency(self, row: dict[str, Any]) -> None:
            super().insert_idempotency(row)
            if failpoint.reached("kill-after-idempotency"):
                _kill_self()

        def _drop_connection(self) -> None:
            """End our own backend below SQLAlchemy, which then meets the dead link on its next statement.

            Through SQLAlchemy the terminate statement itself would fail and mark the transaction
            invalid; going through the driver connection models a link lost between statements.
            """
            raw = self.conn.connection.driver_connection
            try:
                with raw.cursor() as cursor:
                    cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")
            except psycopg.OperationalError:
                pass  # expected: the backend ends its own session before answering
            if not raw.closed:
                raise RuntimeError("the connection survived pg_terminate_backend")

    return FaultyTransaction


def _kill_self() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def build(settings: Settings, failpoint: str | None) -> ASGIApp:
    """The reference app, with `failpoint` armed in its store's transactions when given."""
    if failpoint is None:
        return create_app(settings)
    return app_with_transaction(settings, faulty_transaction(Failpoint(failpoint)))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="fault_server", description="The reference server with failpoints in the fork transaction."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the reference server with FAILPOINT armed")
    serve.add_argument("--database-url", default=os.environ.get("DATABASE_URL", "sqlite:///session-lineage.db"))
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8080)
    serve.add_argument("--fd", type=int, help="serve on this inherited bound socket instead of --port")
    serve.add_argument("--tokens-file", help="YAML mapping of bearer token to principal (default: development mode)")
    serve.add_argument("--max-lineage-depth", type=int)
    args = parser.parse_args(argv)

    failpoint = os.environ.get("FAILPOINT") or None
    if failpoint is not None and failpoint not in FAILPOINTS:
        parser.error(f"unknown FAILPOINT {failpoint!r}; choose one of {', '.join(FAILPOINTS)}")
    if failpoint == DROP_CONNECTION and not args.database_url.startswith("postgresql"):
        parser.error(f"FAILPOINT {DROP_CONNECTION} needs a PostgreSQL database")
    tokens: dict[str, str] = {}
    projects: dict[str, str] = {}
    if args.tokens_file:
        data = yaml.safe_load(Path(args.tokens_file).read_text(encoding="utf-8")) or {}
        try:
            tokens, projects = parse_tokens(data)
        except TokensFileError as exc:
            parser.error(f"{args.tokens_file}: {exc}")
    else:
        print("fault_server: development mode: any bearer token names its own principal", file=sys.stderr)
    limits = Limits() if args.max_lineage_depth is None else Limits(max_lineage_depth=args.max_lineage_depth)
    settings = Settings(database_url=args.database_url, tokens=tokens, projects=projects, limits=limits)
    uvicorn.Server(uvicorn.Config(build(settings, failpoint), host=args.host, port=args.port, log_level="info")).run(
        sockets=[inherited_socket(args.fd)] if args.fd is not None else None
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
