"""`python -m benchmarks [--quick] [--database-url postgresql://...]`: one run, one report."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path

from benchmarks.backend import Backend
from benchmarks.chart import write_chart
from benchmarks.config import FULL, QUICK
from benchmarks.cpus import one_cpu
from benchmarks.report import render, write
from benchmarks.runner import run_all

RESULTS = Path(__file__).resolve().parent / "results"


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Compare the reference lineage design with peer approaches; report ratios.",
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, for a fast check")
    parser.add_argument(
        "--database-url",
        help="also run on PostgreSQL: a server URL; a database is created there and dropped after",
    )
    parser.add_argument("--repeats", type=int, help="timed runs per operation (median reported)")
    parser.add_argument("--output-dir", type=Path, default=RESULTS, help="where latest.md/json go")
    parser.add_argument(
        "--all-cpus",
        action="store_true",
        help="time on every CPU the system offers, instead of on one (benchmarks/cpus.py says why one)",
    )
    return parser.parse_args(argv)


def _progress(message: str) -> None:
    print(message, file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run everything once, print the Markdown report and write it with the JSON next to it."""
    args = parse(argv)
    config = QUICK if args.quick else FULL
    if args.repeats is not None:
        config = dataclasses.replace(config, repeats=args.repeats)
    backends = [Backend("sqlite")]
    if args.database_url:
        if not args.database_url.startswith("postgresql"):
            print("--database-url must be a postgresql:// URL; SQLite always runs", file=sys.stderr)
            return 2
        backends.append(Backend("postgresql", args.database_url))
    if args.all_cpus:
        results = run_all(config, backends, progress=_progress)
        results["machine"]["timed_on_cpu"] = None
    else:
        with one_cpu() as cpu:
            results = run_all(config, backends, progress=_progress)
        results["machine"]["timed_on_cpu"] = cpu
    results["command"] = " ".join(
        ["python -m benchmarks", *(argv if argv is not None else sys.argv[1:])]
    )
    markdown = render(results)
    md_path, json_path = write(results, markdown, args.output_dir)
    png_path = write_chart(results, args.output_dir / "latest.png")
    print(markdown)
    chart = f" and {png_path}" if png_path else " (no chart: pip install -e '.[bench]' for matplotlib and LangGraph)"
    print(f"written: {md_path}, {json_path}{chart}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
