"""The reference server's command line: `python -m reference_impl`, also `session-lineage serve`.

It lives with the server so that the conformance suite needs none of it: `session-lineage serve`
reaches it through conformance/embedded.py.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

EXIT_USAGE = 2  # as the suite's: a usage or configuration error


class ConfigError(Exception):
    """A configuration the server cannot start with: one message, exit 2."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--database-url", default=os.environ.get("DATABASE_URL", "sqlite:///session-lineage.db"))
    parser.add_argument("--records-database-url", help="keep records in this second database (two-store deployment)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument(
        "--tokens-file",
        help="YAML mapping of bearer token to `principal` or to `{principal: p, project: q}` (default: development mode)",
    )
    parser.add_argument("--max-lineage-depth", type=int)
    parser.add_argument("--workers", type=int, default=1, help="server processes sharing the database (use PostgreSQL)")
    parser.add_argument(
        "--legacy", action="store_true",
        help="run a pre-lineage server (profile legacy): no fork or lineage; clients fork by replay history",
    )


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """Parse the arguments and run the server until it stops; 2 on a configuration error."""
    parser = argparse.ArgumentParser(prog=prog)
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return serve(args)
    except ConfigError as exc:
        print(f"session-lineage: configuration error: {exc}", file=sys.stderr)
        return EXIT_USAGE


def serve(args: argparse.Namespace) -> int:
    import uvicorn
    import yaml

    from reference_impl.http import create_app
    from reference_impl.settings import Limits, Settings

    tokens: dict[str, str] = {}
    projects: dict[str, str] = {}
    if args.tokens_file:
        from reference_impl.principals import TokensFileError, parse_tokens

        data = yaml.safe_load(Path(args.tokens_file).read_text(encoding="utf-8")) or {}
        try:
            tokens, projects = parse_tokens(data)
        except TokensFileError as exc:
            raise ConfigError(f"{args.tokens_file}: {exc}") from None
    else:
        print("session-lineage: development mode: any bearer token names its own principal", file=sys.stderr)
    limits = Limits() if args.max_lineage_depth is None else Limits(max_lineage_depth=args.max_lineage_depth)
    settings = Settings(
        database_url=args.database_url,
        records_database_url=args.records_database_url,
        tokens=tokens,
        projects=projects,
        limits=limits,
        legacy=args.legacy,
    )
    if args.workers > 1:
        from reference_impl.http.factory import settings_to_environment

        settings_to_environment(settings)
        uvicorn.run(
            "reference_impl.http.factory:app_from_environment",
            factory=True,
            host=args.host,
            port=args.port,
            workers=args.workers,
            log_level="info",
        )
        return 0
    uvicorn.run(create_app(settings), host=args.host, port=args.port, log_level="info")
    return 0
