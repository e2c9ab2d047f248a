"""Run a server in-process on a free loopback port, for `check --embedded` and the tests.

The one module of conformance/ that imports reference_impl, and only inside functions, so the suite
runs against any server without it; `session-lineage serve` goes through `serve_main` too.
"""

from __future__ import annotations

import os
import secrets
import socket
import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn
from starlette.types import ASGIApp


@dataclass(frozen=True)
class RunningServer:
    url: str
    tokens: tuple[str, ...]
    log: str | None = None  # the file the server logs to, when not the console


def _log_config(log_file: str | os.PathLike[str]) -> dict[str, Any]:
    """uvicorn's loggers into a file: the suite's own protocol probes make the server warn
    ("Invalid HTTP request received"), which belongs in the server's log, not in the run's output."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
        "handlers": {"file": {"class": "logging.FileHandler", "filename": str(log_file), "formatter": "plain", "encoding": "utf-8"}},
        "loggers": {
            "uvicorn": {"handlers": ["file"], "level": "INFO", "propagate": False},
            "uvicorn.error": {"handlers": [], "level": "INFO", "propagate": True},
            "uvicorn.access": {"handlers": ["file"], "level": "WARNING", "propagate": False},
        },
    }


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def serve_app(
    app: ASGIApp, tokens: tuple[str, ...] = (), log_file: str | os.PathLike[str] | None = None
) -> Iterator[RunningServer]:
    """Serve an ASGI app with uvicorn on a background thread until the block ends; its log goes
    to `log_file` when given (else warnings to the console, as uvicorn does)."""
    port = free_port()
    logging_config = {"log_config": _log_config(log_file)} if log_file is not None else {}
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off", **logging_config)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name=f"embedded-server-{port}", daemon=True)
    thread.start()
    started = threading.Event()
    while thread.is_alive() and not server.started:
        started.wait(0.01)  # uvicorn offers no readiness callback; poll its flag briefly
    if not server.started:
        raise RuntimeError("the embedded server did not start")
    try:
        yield RunningServer(f"http://127.0.0.1:{port}", tokens, str(log_file) if log_file is not None else None)
    finally:
        server.should_exit = True
        # uvicorn notices within its 0.1 s tick and then sleeps 0.1 s more before it stops: every
        # answer has been read by now, so only a server writing a log the caller may read is waited
        # for (a test run starts hundreds of servers; the daemon thread ends on its own).
        if log_file is not None:
            thread.join(timeout=10)


# The principals `check --embedded` creates, in the order a plain token list fills the suite's
# roles (conformance/config.py ROLES): four in one project, the outsider in another.
EMBEDDED_PRINCIPALS = (
    ("alice", "acme"),
    ("bob", "acme"),
    ("carol", "acme"),
    ("dave", "acme"),
    ("erin", "globex"),
)


def trace_endpoint(config: Any) -> str | None:
    """Where the embedded reference exports its spans: the run's OTLP receiver (`otlp_receiver`), or
    None without one. A configuration error when the reference cannot trace (no `[otel]` extra)."""
    from conformance.config import ConfigError
    from conformance.otlp import receiver_url

    url = receiver_url(config)
    if url is None:
        return None
    try:
        import reference_impl.telemetry  # noqa: F401 (imported to learn whether the extra is there)
    except ImportError as exc:
        raise ConfigError(
            f"otlp_receiver: the embedded reference exports its spans only with the OpenTelemetry extra "
            f"({exc.name or exc} is missing): pip install -e '.[otel]'"
        ) from None
    return url


@contextmanager
def reference_server(
    database_url: str | None = None, log_file: str | os.PathLike[str] | None = None, **settings_overrides: object
) -> Iterator[RunningServer]:
    """The reference server on a temporary SQLite database with a token for each suite role; its
    log goes to `log_file` when given. With `otlp_endpoint=URL` (see `trace_endpoint`) it exports
    its spans there, the last of them before the block ends."""
    from reference_impl.http import create_app
    from reference_impl.settings import Settings

    tokens = tuple(f"{name}-{secrets.token_hex(8)}" for name, _ in EMBEDDED_PRINCIPALS)
    with tempfile.TemporaryDirectory(prefix="session-lineage-") as workdir:
        url = database_url or f"sqlite:///{Path(workdir) / 'embedded.db'}"
        settings = Settings(
            database_url=url,
            tokens={token: name for token, (name, _) in zip(tokens, EMBEDDED_PRINCIPALS)},
            projects=dict(EMBEDDED_PRINCIPALS),
            **settings_overrides,  # type: ignore[arg-type]
        )
        app = create_app(settings)
        try:
            with serve_app(app, tokens, log_file) as running:
                yield running
        finally:
            app.state.stop_tracing()


def embedded_log() -> Path:
    """A fresh file for the embedded server's log, kept after the run (in the temporary directory)."""
    handle, name = tempfile.mkstemp(prefix="session-lineage-embedded-", suffix=".log")
    os.close(handle)
    return Path(name)


def serve_main(argv: Sequence[str]) -> int:
    """`session-lineage serve ...`: the reference server's own command line (reference_impl/cli.py)."""
    from reference_impl.cli import main

    return main(argv, prog="session-lineage serve")
