"""Markdown and JSON renderings of one run's results."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

LABELS = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}

LANGGRAPH_ANCHOR = (
    "Context, **a figure quoted from the product brief, not measured here**: LangGraph 1.2.22 with "
    "its SQLite checkpointer (one thread, ~380 bytes of content per turn) held 50.3 MB after 200 "
    "turns, about 660 times the content, growing quadratically; finding the checkpoint of turn 100 "
    "through the state history cost 601 SQL statements."
)


def seconds(value: float | None) -> str:
    """Milliseconds with three significant digits; absolute times are context, not results."""
    if value is None:
        return "n/a"
    millis = value * 1000
    return f"{millis:.3g} ms" if millis >= 0.1 else f"{millis * 1000:.3g} µs"


def times(value: float | None) -> str:
    """A ratio as `12.3×`."""
    if value is None:
        return "n/a"
    if value >= 100:
        return f"{value:,.0f}×"
    return f"{value:.2f}×" if value < 10 else f"{value:.1f}×"


def number(value: float | int) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:,.2f}"


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def render(results: dict[str, Any]) -> str:
    """The whole report: machine, a ratio summary, the brief's targets, then each comparison."""
    machine = results["machine"]
    config = results["config"]
    lines = [
        "# Session lineage benchmarks",
        "",
        f"Configuration `{config['name']}`, {machine['date']}. Python {machine['python']}, SQLite "
        f"{machine['sqlite']}, SQLAlchemy {machine['sqlalchemy']}, {machine['cpu_count']} CPUs, "
        f"{machine['platform']}"
        + (f", PostgreSQL {machine['postgresql']}" if "postgresql" in machine else "")
        + ".",
        "",
        f"Statements and rows written are exact counts. Times are medians of {config['repeats']} runs "
        "on a shared, noisy machine: read the **ratios**, which compare approaches measured "
        "side by side in this one run; the absolute times are context only.",
    ]
    for kind, data in results["backends"].items():
        lines += ["", f"## {LABELS.get(kind, kind)}", ""]
        lines += summary(data)
        lines += ["", "### Targets from the brief", ""]
        lines += targets(data)
        lines += ["", "### 1. Fork cost vs source size", ""] + fork_cost(data["fork_cost"])
        lines += ["", "### 2. Transcript read vs depth", ""] + transcript_depth(data["transcript_depth"])
        lines += ["", "### 3. Page cost vs position", ""] + page_position(data["page_position"])
        lines += ["", "### 4. Storage", ""] + storage(data["storage"])
        lines += ["", "### 5. Finding a fork point by turn id", ""] + fork_point(data["fork_point"])
        lines += ["", f"Elapsed for this backend: {data['elapsed_seconds']:.1f} s."]
    return "\n".join(lines) + "\n"


def summary(data: dict[str, Any]) -> list[str]:
    """One line per comparison at its largest size: reference, peer, and peer / reference."""
    fork = data["fork_cost"]["rows"][-1]
    depth = data["transcript_depth"]["rows"][-1]
    pages = data["page_position"]
    store = data["storage"]
    point = data["fork_point"]["rows"][-1]
    rows = [
        [
            f"Fork a {fork['source_turns']:,}-turn session: rows written",
            "lineage fork",
            number(fork["lineage"]["rows_written"]),
            "copy-on-fork",
            number(fork["copy"]["rows_written"]),
            times(fork["copy_over_lineage"]["rows_written"]),
        ],
        [
            f"Fork a {fork['source_turns']:,}-turn session: time",
            "lineage fork",
            seconds(fork["lineage"]["seconds"]),
            "copy-on-fork",
            seconds(fork["copy"]["seconds"]),
            times(fork["copy_over_lineage"]["seconds"]),
        ],
        [
            f"Transcript at depth {depth['depth']}: statements",
            "chain CTE + records",
            number(depth["lineage"]["statements"]),
            "query per ancestor",
            number(depth["per_ancestor"]["statements"]),
            times(depth["per_ancestor_over_lineage"]["statements"]),
        ],
        [
            f"Transcript at depth {depth['depth']}: time",
            "chain CTE + records",
            seconds(depth["lineage"]["seconds"]),
            "query per ancestor",
            seconds(depth["per_ancestor"]["seconds"]),
            times(depth["per_ancestor_over_lineage"]["seconds"]),
        ],
        [
            f"Last page of {pages['records']:,} records: time",
            "cursor",
            seconds(pages["rows"][-1]["cursor"]["seconds"]),
            "OFFSET/LIMIT",
            seconds(pages["rows"][-1]["offset_paging"]["seconds"]),
            times(pages["rows"][-1]["offset_over_cursor"]["seconds"]),
        ],
        [
            "Last page / first page: time",
            "cursor",
            times(pages["last_over_first"]["cursor_seconds"]),
            "OFFSET/LIMIT",
            times(pages["last_over_first"]["offset_seconds"]),
            "",
        ],
        [
            f"Storage, {store['branches']} branches of a {store['parent_turns']}-turn parent: "
            "bytes per content byte",
            "lineage",
            number(store["lineage"]["bytes_per_content_byte"]),
            "copy-on-fork",
            number(store["copy"]["bytes_per_content_byte"]),
            times(store["copy_over_lineage"]["bytes_per_content_byte"]),
        ],
        [
            f"Find turn {point['target_turn_index']} of {point['source_turns']:,}: statements",
            "turn id lookup",
            number(point["lineage"]["statements"]),
            "history scan",
            number(point["history_scan"]["statements"]),
            times(point["scan_over_lineage"]["statements"]),
        ],
    ]
    return table(["comparison", "reference", "value", "peer", "value", "peer / reference"], rows)


def targets(data: dict[str, Any]) -> list[str]:
    """The brief's "Numbers to reach", each with the measured evidence."""
    forks = data["fork_cost"]["rows"]
    depths = data["transcript_depth"]["rows"]
    pages = data["page_position"]["rows"]
    store = data["storage"]
    points = data["fork_point"]["rows"]
    fork_statements = sorted({row["lineage"]["statements"] for row in forks})
    fork_rows = sorted({row["lineage"]["rows_written"] for row in forks})
    depth_statements = [row["lineage"]["statements"] for row in depths]
    lookups = sorted({row["lineage"]["turn_lookups_in_fork"] for row in points})
    checks = [
        (
            "Transcript read at the maximum depth costs the same round trips as at depth 0",
            depth_statements[-1] == depth_statements[0],
            f"{depth_statements[0]} statements at depth {depths[0]['depth']}, "
            f"{depth_statements[-1]} at depth {depths[-1]['depth']}",
        ),
        (
            "Fork cost and rows written do not grow with the parent's size",
            len(fork_statements) == 1 and len(fork_rows) == 1,
            f"statements {fork_statements}, rows written {fork_rows} at "
            f"{', '.join(str(row['source_turns']) for row in forks)} turns",
        ),
        (
            "A page costs the same at the end of a long history as at the start",
            pages[0]["cursor"]["statements"] == pages[-1]["cursor"]["statements"],
            f"{pages[0]['cursor']['statements']} statements first and last; time last / first "
            f"{times(data['page_position']['last_over_first']['cursor_seconds'])}",
        ),
        (
            "Store about the content's size",
            None,
            f"{number(store['lineage']['bytes_per_content_byte'])} bytes per content byte "
            f"(copy-on-fork: {number(store['copy']['bytes_per_content_byte'])})",
        ),
        (
            "Find a fork point by turn id in one statement",
            lookups == [1],
            f"turn lookups inside a fork by turn id: {lookups}",
        ),
        (
            "Fork in a handful of statements whatever the parent's size",
            len(fork_statements) == 1 and fork_statements[0] <= 6,
            f"{fork_statements} statements",
        ),
    ]
    verdict = {True: "met", False: "**not met**", None: "see value"}
    return table(["target", "result", "measured"], [[name, verdict[ok], text] for name, ok, text in checks])


def fork_cost(section: dict[str, Any]) -> list[str]:
    rows = [
        [
            number(row["source_turns"]),
            number(row["source_records"]),
            f"{row['lineage']['statements']} / {row['copy']['statements']}",
            f"{number(row['lineage']['rows_written'])} / {number(row['copy']['rows_written'])}",
            f"{seconds(row['lineage']['seconds'])} / {seconds(row['copy']['seconds'])}",
            times(row["copy_over_lineage"]["statements"]),
            times(row["copy_over_lineage"]["rows_written"]),
            times(row["copy_over_lineage"]["seconds"]),
            "yes" if row["same_transcript"] else "**no**",
        ]
        for row in section["rows"]
    ]
    header = [
        "source turns",
        "records",
        "statements lineage / copy",
        "rows written lineage / copy",
        "time lineage / copy",
        "copy/lineage statements",
        "copy/lineage rows",
        "copy/lineage time",
        "same transcript",
    ]
    return [
        "Cut `latest`, no idempotency key. Copy-on-fork copies with `INSERT ... SELECT`, so its "
        "statement count stays flat too: what grows is rows written and time.",
        "",
    ] + table(header, rows)


def transcript_depth(section: dict[str, Any]) -> list[str]:
    rows = [
        [
            str(row["depth"]),
            str(row["records"]),
            f"{row['lineage']['statements']} / {row['per_ancestor']['statements']}",
            f"{seconds(row['lineage']['seconds'])} / {seconds(row['per_ancestor']['seconds'])}",
            times(row["per_ancestor_over_lineage"]["statements"]),
            times(row["per_ancestor_over_lineage"]["seconds"]),
            times(row["growth_vs_first_depth"]["lineage_seconds"]),
            times(row["growth_vs_first_depth"]["per_ancestor_seconds"]),
            "yes" if row["same_records"] else "**no**",
        ]
        for row in section["rows"]
    ]
    header = [
        "depth",
        "records",
        "statements lineage / per-ancestor",
        "time lineage / per-ancestor",
        "per-ancestor/lineage statements",
        "per-ancestor/lineage time",
        "lineage time vs depth 0",
        "per-ancestor time vs depth 0",
        "same records",
    ]
    return [
        f"Whole transcript in one page of {section['page_size']}. The records read grow with depth "
        "for both approaches; only the per-ancestor reader's round trips do.",
        "",
    ] + table(header, rows)


def page_position(section: dict[str, Any]) -> list[str]:
    rows = [
        [
            row["position"],
            number(row["offset"]),
            f"{row['cursor']['statements']} / {row['offset_paging']['statements']}",
            f"{seconds(row['cursor']['seconds'])} / {seconds(row['offset_paging']['seconds'])}",
            times(row["offset_over_cursor"]["seconds"]),
            "yes" if row["same_records"] else "**no**",
        ]
        for row in section["rows"]
    ]
    header = ["page", "offset", "statements cursor / offset", "time cursor / offset", "offset/cursor time", "same records"]
    last = section["last_over_first"]
    return (
        [
            f"{section['records']:,} records across a chain of depth {section['chain_depth']}, "
            f"pages of {section['page_size']} ({section['pages']} pages).",
            "",
        ]
        + table(header, rows)
        + [
            "",
            f"Last page / first page: cursor {times(last['cursor_seconds'])} time, "
            f"{times(last['cursor_statements'])} statements; OFFSET/LIMIT {times(last['offset_seconds'])} "
            f"time, {times(last['offset_statements'])} statements.",
        ]
    )


def storage(section: dict[str, Any]) -> list[str]:
    rows = [
        [
            label,
            number(part["content_bytes"]),
            number(part["records_stored"]),
            number(part["bytes"]),
            number(part["bytes_per_content_byte"]),
        ]
        for label, part in (("lineage", section["lineage"]), ("copy-on-fork", section["copy"]))
    ]
    ratios = section["copy_over_lineage"]
    return (
        [
            f"{section['branches']} branches of a {section['parent_turns']}-turn parent, each forked "
            "through an evenly spaced turn and given one turn of its own; records of "
            f"~{section['record_content_bytes']} bytes. Bytes are the database's size above the "
            "empty migrated schema (SQLite: used pages after a WAL checkpoint; PostgreSQL: relation "
            "sizes).",
            "",
        ]
        + table(["approach", "content bytes", "records stored", "database bytes", "bytes per content byte"], rows)
        + [
            "",
            f"Copy / lineage: {times(ratios['bytes'])} bytes, {times(ratios['records_stored'])} records "
            f"stored. Same transcripts: {'yes' if section['same_transcripts'] else '**no**'}.",
            "",
            LANGGRAPH_ANCHOR,
        ]
    )


def fork_point(section: dict[str, Any]) -> list[str]:
    rows = [
        [
            number(row["source_turns"]),
            str(row["target_turn_index"]),
            str(row["lineage"]["fork_statements"]),
            str(row["lineage"]["turn_lookups_in_fork"]),
            f"{row['lineage']['statements']} / {number(row['history_scan']['statements'])}",
            f"{seconds(row['lineage']['seconds'])} / {seconds(row['history_scan']['seconds'])}",
            times(row["scan_over_lineage"]["statements"]),
            times(row["scan_over_lineage"]["seconds"]),
        ]
        for row in section["rows"]
    ]
    header = [
        "source turns",
        "target turn",
        "reference fork statements",
        "turn lookups in fork",
        "lookup statements id / scan",
        "lookup time id / scan",
        "scan/id statements",
        "scan/id time",
    ]
    return [
        "The reference forks `through` a turn id with one indexed turn lookup; the peer walks the "
        "history back from the newest turn, one query per step (as a state-history iterator does).",
        "",
    ] + table(header, rows)


def write(results: dict[str, Any], markdown: str, folder: Path) -> tuple[Path, Path]:
    """Write latest.md and latest.json into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    md_path = folder / "latest.md"
    json_path = folder / "latest.json"
    md_path.write_text(markdown, encoding="utf-8")
    json_path.write_text(json.dumps(results, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    return md_path, json_path
