"""Consecutive seeded runs of the whole suite against a served reference: `session-lineage serve
--tokens-file` twice (two replicas of one deployment), then `session-lineage check --target`.

    python -m tests.seeded_runs --engine sqlite --engine postgresql [--seeds 4242,1,2,...]

Prints one line per run and exits 1 unless every run has 0 failures and 0 errors. Needs a
PostgreSQL server for `--engine postgresql` (DATABASE_URL, or the local one).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from tests.servers import ROOT, TOKENS, server_processes

SEEDS = (4242, 1, 2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61)
LOCAL_POSTGRES = "postgresql://postgres@127.0.0.1:5432/test"


@contextmanager
def database(engine: str, directory: Path, server: str | None = None) -> Iterator[str]:
    """A fresh database for one run: a SQLite file, or a new PostgreSQL database dropped after."""
    if engine == "sqlite":
        yield f"sqlite:///{directory / 'seeded.db'}"
        return
    server = server or os.environ.get("DATABASE_URL", LOCAL_POSTGRES)
    admin_url = make_url(server).set(drivername="postgresql+psycopg")
    name = f"sl_seeded_{secrets.token_hex(6)}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(server).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def one_run(engine: str, seed: int, postgres_server: str | None = None) -> dict[str, object]:
    """Serve two replicas on a fresh database and run the whole suite once with `seed`."""
    with tempfile.TemporaryDirectory(prefix="seeded-") as workdir, database(engine, Path(workdir), postgres_server) as url:
        with server_processes(url, Path(workdir), count=2) as servers:
            report = Path(workdir) / "report.json"
            env = {**os.environ, "PYTHONPATH": str(ROOT), "SESSION_LINEAGE_REPLICAS": servers[1].url}
            command = [sys.executable, "-m", "conformance.cli", "check", "--target", servers[0].url,
                       *[arg for token in TOKENS for arg in ("--token", token)],
                       "--seed", str(seed), "--quiet", "--report-json", str(report)]
            started = time.monotonic()
            finished = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)
            elapsed = time.monotonic() - started
            if not report.exists():
                return {"engine": engine, "seed": seed, "exit": finished.returncode, "fail": -1, "error": -1,
                        "seconds": round(elapsed), "problems": [finished.stdout[-800:] + finished.stderr[-800:]]}
            result = json.loads(report.read_text())
    checks = result["checks"]
    problems = [f"{c['name']}: {c['outcome']}: {(c['message'] or '')[:400]}" for c in checks if c["outcome"] in ("fail", "error")]
    return {
        "engine": engine,
        "seed": seed,
        "exit": finished.returncode,
        "verdict": result["verdict"],
        "pass": sum(c["outcome"] == "pass" for c in checks),
        "fail": sum(c["outcome"] == "fail" for c in checks),
        "error": sum(c["outcome"] == "error" for c in checks),
        "skipped": sorted(c["name"] for c in checks if c["outcome"] not in ("pass", "fail", "error")),
        "seconds": round(elapsed),
        "problems": problems,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", action="append", choices=["sqlite", "postgresql"])
    parser.add_argument("--seeds", default=",".join(map(str, SEEDS)))
    parser.add_argument("--out", help="append one JSON line per run to this file")
    args = parser.parse_args()
    bad = 0
    for engine in args.engine or ["sqlite"]:
        for seed in [int(s) for s in args.seeds.split(",")]:
            outcome = one_run(engine, seed)
            bad += outcome["fail"] != 0 or outcome["error"] != 0  # type: ignore[operator]
            print(json.dumps(outcome), flush=True)
            if args.out:
                with open(args.out, "a", encoding="utf-8") as sink:
                    sink.write(json.dumps(outcome) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
