"""`python -m tests.mutant_server serve --mutant NAME ...`: a mutant as a standalone server process."""

from __future__ import annotations

import argparse
from pathlib import Path

import uvicorn
import yaml

from reference_impl.cli import inherited_socket
from reference_impl.principals import parse_tokens
from reference_impl.settings import Settings
from tests.mutants import MUTANTS, all_mutants
from tests.mutants.production import PRODUCTION_MUTANTS


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["serve"])
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--fd", type=int, help="serve on this inherited bound socket instead of --port")
    parser.add_argument("--tokens-file", required=True)
    parser.add_argument("--mutant", required=True)
    args = parser.parse_args()
    all_mutants()
    mutant = {**MUTANTS, **PRODUCTION_MUTANTS}[args.mutant]
    tokens, projects = parse_tokens(yaml.safe_load(Path(args.tokens_file).read_text()))
    app = mutant.build(Settings(database_url=args.database_url, tokens=tokens, projects=projects))
    uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=args.port, log_level="warning")).run(
        sockets=[inherited_socket(args.fd)] if args.fd is not None else None
    )


if __name__ == "__main__":
    main()
