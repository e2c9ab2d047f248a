"""The reference server's command line: `python -m reference_impl`, also `session-lineage serve`.

It lives with the server so that the conformance suite needs none of it: `session-lineage serve`
reaches it through conformance/embedded.py.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

EXIT_USAGE = 2  # as the suite's: a usage or configuration error


class ConfigError(Exception):
    """A configuration the server cannot start with: one message, exit 2."""


class OneLineParser(argparse.ArgumentParser):
    """Usage errors in one line (and exit 2), as every configuration error."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--database-url", default=os.environ.get("DATABASE_URL", "sqlite:///session-lineage.db"))
    parser.add_argument("--records-database-url", help="keep records in this second database (two-store deployment)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument(
        "--fd", type=int, metavar="N",
        help="serve on the bound socket this process inherited as descriptor N, instead of binding "
        "--host and --port: for a program that starts this server as its child on a port it chose",
    )
    parser.add_argument(
        "--tokens-file",
        help="YAML mapping of bearer token to `principal` or to `{principal: p, project: q}` (default: development mode)",
    )
    parser.add_argument("--max-lineage-depth", type=int)
    parser.add_argument("--workers", type=int, default=1, help="server processes sharing the database (use PostgreSQL)")
    parser.add_argument(
        "--otlp-endpoint", default=os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or None, metavar="URL",
        help="export OpenTelemetry traces over OTLP/HTTP to URL, e.g. http://127.0.0.1:4318/v1/traces "
        "(needs pip install -e '.[otel]'; default $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)",
    )
    parser.add_argument(
        "--log-level", default="info", choices=("critical", "error", "warning", "info", "debug"),
        help="uvicorn's log level; below info, requests are not logged (default info)",
    )
    parser.add_argument(
        "--exit-on-stdin-eof", action="store_true",
        help="stop when standard input closes: for a program that starts this server as its child, so "
        "that the server never outlives it",
    )
    parser.add_argument(
        "--legacy", action="store_true",
        help="run a pre-lineage server (profile legacy): no fork or lineage; clients fork by replay history",
    )


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """Parse the arguments and run the server until it stops; 2 on a configuration error."""
    parser = OneLineParser(prog=prog)
    add_arguments(parser)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2, already printed in one line)
        return int(exc.code or 0)
    try:
        return serve(args)
    except ConfigError as exc:
        print(f"session-lineage: configuration error: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _cannot_start(database_url: str, exc: Exception) -> ConfigError:
    """A database URL the server cannot open: one line, not a traceback."""
    first = str(exc).splitlines()[0] if str(exc) else ""
    return ConfigError(f"cannot start on --database-url {database_url!r}: {exc.__class__.__name__}: {first}")


def serve(args: argparse.Namespace) -> int:
    import uvicorn
    import yaml

    from reference_impl.http import create_app
    from reference_impl.settings import Limits, Settings

    if not 0 < args.port < 65536:
        raise ConfigError(f"--port {args.port} is not a TCP port (1 to 65535)")
    if args.fd is not None:
        _require_socket(args.fd)
    if args.workers < 1:
        raise ConfigError(f"--workers {args.workers} must be at least 1")
    if "://" not in args.database_url:
        raise ConfigError(f"--database-url {args.database_url!r} is not a database URL (e.g. sqlite:///file.db, postgresql://...)")
    tokens: dict[str, str] = {}
    projects: dict[str, str] = {}
    if args.tokens_file:
        from reference_impl.principals import TokensFileError, parse_tokens

        path = Path(args.tokens_file)
        if not path.is_file():
            raise ConfigError(f"tokens file {args.tokens_file!r} does not exist (or is not a file)")
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"tokens file {args.tokens_file!r} cannot be read: {getattr(exc, 'strerror', None) or exc}") from None
        except yaml.YAMLError as exc:
            where = getattr(exc, "problem_mark", None)
            line = f" (line {where.line + 1})" if where is not None else ""
            raise ConfigError(f"tokens file {args.tokens_file!r} is not valid YAML{line}") from None
        try:
            tokens, projects = parse_tokens(data)
        except TokensFileError as exc:
            raise ConfigError(f"{args.tokens_file}: {exc}") from None
    else:
        print("session-lineage: development mode: any bearer token names its own principal", file=sys.stderr)
    if args.otlp_endpoint:
        require_tracing(args.otlp_endpoint)
    limits = Limits() if args.max_lineage_depth is None else Limits(max_lineage_depth=args.max_lineage_depth)
    settings = Settings(
        database_url=args.database_url,
        records_database_url=args.records_database_url,
        tokens=tokens,
        projects=projects,
        limits=limits,
        legacy=args.legacy,
        otlp_endpoint=args.otlp_endpoint,
    )
    if args.workers > 1:
        if args.exit_on_stdin_eof:
            _stop_when_stdin_closes(lambda: os.kill(os.getpid(), signal.SIGTERM))  # the supervisor stops its workers
        from reference_impl.http.app import start_deployment
        from reference_impl.http.factory import settings_to_environment

        try:
            start_deployment(settings)  # once, before any worker: a late worker interrupts nothing
        except Exception as exc:
            raise _cannot_start(args.database_url, exc) from None
        settings_to_environment(settings)
        config = uvicorn.Config(
            "reference_impl.http.factory:app_from_environment",
            factory=True,
            host=args.host,
            port=args.port,
            workers=args.workers,
            log_level=args.log_level,
        )
        from uvicorn.supervisors import Multiprocess

        sock = inherited_socket(args.fd) if args.fd is not None else config.bind_socket()
        Multiprocess(config, sockets=[sock]).run()  # as uvicorn.run does with the socket it binds
        return 0
    try:
        app = create_app(settings)
    except Exception as exc:  # a database URL the server cannot open: one line, not a traceback
        raise _cannot_start(args.database_url, exc) from None
    server = uvicorn.Server(uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level))
    if args.exit_on_stdin_eof:
        _stop_when_stdin_closes(lambda: setattr(server, "should_exit", True))
    try:
        server.run(sockets=[inherited_socket(args.fd)] if args.fd is not None else None)
    finally:
        app.state.stop_tracing()  # the last spans leave before the process does
    return 0


def inherited_socket(fd: int) -> socket.socket:
    """The bound socket inherited as descriptor `fd`, of the family it is. Not uvicorn's own `fd`
    setting: that takes every descriptor for a Unix socket, and asyncio then leaves Nagle's algorithm
    on for TCP, so each answer waits for the client's delayed acknowledgement (about 40 ms)."""
    return socket.socket(fileno=fd)


def _require_socket(fd: int) -> None:
    """--fd names a socket this process holds, or a configuration error now (not uvicorn's traceback)."""
    import stat

    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        raise ConfigError(f"--fd {fd} is not an open file descriptor of this process") from None
    if not stat.S_ISSOCK(mode):
        raise ConfigError(f"--fd {fd} is not a socket")


def _stop_when_stdin_closes(stop: Callable[[], None]) -> None:
    """Call `stop` (a graceful shutdown: open answers finish, the last spans are sent) once standard
    input reaches its end, which happens when the parent holding its other end closes it or exits,
    however it exits."""
    import threading

    def watch() -> None:
        # The raw descriptor, not sys.stdin: a thread blocked in a buffered read would hold the
        # buffer's lock while the interpreter shuts down, which Python reports as a fatal error.
        try:
            while os.read(0, 65536):
                pass
        except OSError:
            pass
        stop()

    threading.Thread(target=watch, name="stdin-eof-watch", daemon=True).start()


def require_tracing(endpoint: str) -> None:
    """A usable OTLP endpoint and the `[otel]` extra installed, or a configuration error now
    (before any worker starts) rather than a traceback later."""
    if not endpoint.startswith(("http://", "https://")):
        raise ConfigError(f"--otlp-endpoint {endpoint!r} is not an http(s) URL (e.g. http://127.0.0.1:4318/v1/traces)")
    try:
        import reference_impl.telemetry  # noqa: F401 (imported to learn whether the extra is there)
    except ImportError as exc:
        raise ConfigError(
            f"--otlp-endpoint needs the OpenTelemetry extra ({exc.name or exc} is missing): pip install -e '.[otel]'"
        ) from None
