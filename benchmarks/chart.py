"""The results as one PNG (matplotlib, no display needed): the comparison with LangGraph at a glance.

Installed with the benchmark extra (`pip install -e '.[bench]'`); without matplotlib the run still
writes its Markdown and JSON and says the chart was skipped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def write_chart(results: dict[str, Any], path: Path) -> Path | None:
    """Four panels per run: full-read time, statements per step, stored bytes, page cost by
    position. Returns the path, or None when matplotlib or the LangGraph comparison is missing."""
    if not available():
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    backends = results["backends"]
    sqlite = backends.get("sqlite") or next(iter(backends.values()))
    versus = sqlite.get("versus", {})
    if "rows" not in versus:
        return None
    figure, ((reads, steps), (storage, pages)) = plt.subplots(2, 2, figsize=(13, 9))
    figure.suptitle(f"Session lineage reference vs LangGraph {versus['langgraph']} ({results['config']['name']} run, one machine)")

    _full_reads(reads, backends)
    _steps(steps, versus)
    _storage(storage, versus)
    _pages(pages, backends)

    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def _full_reads(axis: Any, backends: dict[str, Any]) -> None:
    for kind, data in backends.items():
        rows = [*data.get("versus", {}).get("rows", []), *data.get("versus", {}).get("reads", [])]
        rows.sort(key=lambda row: row["turns"])
        if not rows:
            continue
        turns = [row["turns"] for row in rows]
        axis.plot(turns, [row["full_read"]["reference"]["seconds"] * 1000 for row in rows], "o-", label=f"reference in-process ({kind})")
        axis.plot(turns, [row["full_read"]["reference"]["http_seconds"] * 1000 for row in rows], "s--", label=f"reference over HTTP ({kind})")
        if kind == "sqlite":
            axis.plot(turns, [row["full_read"]["langgraph"]["seconds"] * 1000 for row in rows], "^-", label="LangGraph in-process")
    axis.set(title="Full conversation read (median)", xlabel="turns", ylabel="ms", xscale="log", yscale="log")
    axis.legend(fontsize=8)


def _steps(axis: Any, versus: dict[str, Any]) -> None:
    row = versus["rows"][-1]
    names = ["message pair", "fork point", "fork + turn", "full read"]
    reference = [row["pair_statements"]["reference"], row["fork_point"]["reference"]["statements"],
                 row["fork_and_turn_statements"]["reference"], row["full_read"]["reference"]["statements"]]
    peer = [row["pair_statements"]["langgraph"], row["fork_point"]["langgraph"]["statements"],
            row["fork_and_turn_statements"]["langgraph"], row["full_read"]["langgraph"]["statements"]]
    positions = range(len(names))
    axis.bar([p - 0.2 for p in positions], reference, 0.4, label="reference")
    axis.bar([p + 0.2 for p in positions], peer, 0.4, label="LangGraph")
    for p, (left, right) in enumerate(zip(reference, peer)):
        axis.annotate(str(left), (p - 0.2, left), ha="center", va="bottom", fontsize=8)
        axis.annotate(str(right), (p + 0.2, right), ha="center", va="bottom", fontsize=8)
    axis.set_xticks(list(positions), names)
    axis.set(title=f"Storage statements per step at {row['turns']} turns (exact)", ylabel="statements", yscale="log")
    axis.legend(fontsize=8)


def _storage(axis: Any, versus: dict[str, Any]) -> None:
    turns = [row["turns"] for row in versus["rows"]]
    axis.plot(turns, [row["storage_bytes"]["reference"] for row in versus["rows"]], "o-", label="reference (whole database)")
    axis.plot(turns, [row["storage_bytes"]["langgraph"] for row in versus["rows"]], "^-", label="LangGraph")
    axis.set(title="Stored bytes after the scenario", xlabel="turns", ylabel="bytes", yscale="log")
    axis.legend(fontsize=8)


def _pages(axis: Any, backends: dict[str, Any]) -> None:
    for kind, data in backends.items():
        rows = data["page_position"]["rows"]
        first = rows[0]
        labels = [row["position"] for row in rows]
        axis.plot(labels, [row["cursor"]["seconds"] / first["cursor"]["seconds"] for row in rows], "o-", label=f"cursor pages ({kind})")
        axis.plot(labels, [row["offset_paging"]["seconds"] / first["cursor"]["seconds"] for row in rows], "^--", label=f"OFFSET/LIMIT ({kind})")
    axis.axhline(1.5, color="grey", linewidth=0.8, linestyle=":")
    axis.set(title="Page time relative to the first cursor page", ylabel="x first page")
    axis.legend(fontsize=8)
