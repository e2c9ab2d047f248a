"""Run the reference server on a free loopback port: in a child process for `check --embedded`,
in-process (an ASGI app on a thread) for the tests.

The one module of conformance/ that imports reference_impl, and only inside functions, so the suite
runs against any server without it; `session-lineage serve` goes through `serve_main` too.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
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
    pid: int | None = None  # the server's process, when it runs in a child process


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
    """A loopback port free now; another process may take it before it is bound again, so a
    server this module starts is handed a socket already bound (`bound_socket`) where it can be."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def bound_socket() -> socket.socket:
    """A TCP socket bound to a free loopback port and held: the server it is handed to listens on
    it, so no other process can take the port between choosing it and serving on it."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


@contextmanager
def serve_app(
    app: ASGIApp, tokens: tuple[str, ...] = (), log_file: str | os.PathLike[str] | None = None
) -> Iterator[RunningServer]:
    """Serve an ASGI app with uvicorn on a background thread until the block ends; its log goes
    to `log_file` when given (else warnings to the console, as uvicorn does)."""
    sock = bound_socket()
    port = int(sock.getsockname()[1])
    logging_config = {"log_config": _log_config(log_file)} if log_file is not None else {}
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off", **logging_config)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name=f"embedded-server-{port}", daemon=True)
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


@contextmanager
def reference_process(
    database_url: str | None = None, log_file: str | os.PathLike[str] | None = None, otlp_endpoint: str | None = None,
    timeout: float = 60.0, while_starting: Callable[[], object] | None = None,
) -> Iterator[RunningServer]:
    """The reference server as `reference_server` makes it, run by `python -m reference_impl` in a
    child process: the suite and the server then hold an interpreter lock each, so neither waits
    for the other to hand it back (a second or so of a 30 s run), and the server never competes
    with the checks run apart (lanes.py) for one. `while_starting` runs once the child is started,
    before its first answer is awaited: the caller's own set-up, done while the child starts.

    Its output goes to `log_file` (warnings and errors only; requests are not logged). It stops
    when the block ends, and on its own when this process dies (its standard input closes)."""
    import yaml

    tokens = tuple(f"{name}-{secrets.token_hex(8)}" for name, _ in EMBEDDED_PRINCIPALS)
    with tempfile.TemporaryDirectory(prefix="session-lineage-") as workdir:
        tokens_file = Path(workdir) / "tokens.yaml"
        tokens_file.write_text(
            yaml.safe_dump({token: {"principal": name, "project": project} for token, (name, project) in zip(tokens, EMBEDDED_PRINCIPALS)}),
            encoding="utf-8",
        )
        # The child serves on a socket bound here and inherited (POSIX), so the port cannot be
        # taken by another process in between; elsewhere it binds a port chosen free.
        sock = bound_socket() if os.name == "posix" else None
        port = int(sock.getsockname()[1]) if sock is not None else free_port()
        where = ["--fd", str(sock.fileno())] if sock is not None else ["--host", "127.0.0.1", "--port", str(port)]
        command = [
            sys.executable, "-m", "reference_impl",
            "--database-url", database_url or f"sqlite:///{Path(workdir) / 'embedded.db'}",
            "--tokens-file", str(tokens_file), *where,
            "--log-level", "warning", "--exit-on-stdin-eof",
        ]
        if otlp_endpoint:
            command += ["--otlp-endpoint", otlp_endpoint]
        # The child reads its settings from its arguments only, never from this run's environment.
        environment = {key: value for key, value in os.environ.items() if key not in ("DATABASE_URL", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")}
        with open(log_file if log_file is not None else os.devnull, "ab") as log:
            try:
                process = subprocess.Popen(
                    command, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, env=environment,
                    pass_fds=(sock.fileno(),) if sock is not None else (),
                )
            finally:
                if sock is not None:
                    sock.close()  # the child holds its own copy
        try:
            if while_starting is not None:
                while_starting()
            url = f"http://127.0.0.1:{port}"
            _await_answer(process, url, timeout, log_file)
            yield RunningServer(url, tokens, str(log_file) if log_file is not None else None, process.pid)
        finally:
            _stop(process)


def _await_answer(process: subprocess.Popen[bytes], url: str, timeout: float, log_file: str | os.PathLike[str] | None) -> None:
    """Wait until the child answers its discovery document; a configuration error naming its log
    (and its last lines) if it exits or stays silent for `timeout` seconds."""
    import httpx

    from conformance.client import tls
    from conformance.config import ConfigError

    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise ConfigError(f"the embedded reference server exited with status {process.returncode} before it answered{_tail(log_file)}")
        try:
            if httpx.get(f"{url}/capabilities", timeout=2.0, verify=tls()).status_code < 500:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            _stop(process)
            raise ConfigError(f"the embedded reference server did not answer within {timeout:.0f} s{_tail(log_file)}")
        time.sleep(0.02)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Close its standard input (it stops gracefully: open answers finish, its last spans are
    sent), then SIGTERM, then kill, each after a wait."""
    if process.stdin is not None:
        process.stdin.close()
    for ask in (None, process.terminate, process.kill):
        if ask is not None and process.poll() is None:
            ask()
        try:
            process.wait(timeout=10)
            return
        except subprocess.TimeoutExpired:
            continue


def _tail(log_file: str | os.PathLike[str] | None, lines: int = 8) -> str:
    if log_file is None:
        return ""
    try:
        text = Path(log_file).read_text(encoding="utf-8", errors="replace").splitlines()[-lines:]
    except OSError:
        return f" (its log, {log_file}, cannot be read)"
    shown = "\n  ".join(text) if text else "(empty)"
    return f"; the end of its log, {log_file}:\n  {shown}"


def embedded_log() -> Path:
    """A fresh file for the embedded server's log, kept after the run (in the temporary directory)."""
    handle, name = tempfile.mkstemp(prefix="session-lineage-embedded-", suffix=".log")
    os.close(handle)
    return Path(name)


def serve_main(argv: Sequence[str]) -> int:
    """`session-lineage serve ...`: the reference server's own command line (reference_impl/cli.py)."""
    from reference_impl.cli import main

    return main(argv, prog="session-lineage serve")
