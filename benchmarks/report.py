"""Markdown and JSON renderings of one run's results."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

LABELS = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}

LANGGRAPH_ANCHOR = (
    "Context, **a published peer measurement quoted for context, not measured here**: LangGraph 1.2.22 "
    "with its SQLite checkpointer (one thread, ~380 bytes of content per turn) held 50.3 MB after "
    "200 turns, about 660 times the content, growing quadratically; finding the checkpoint of "
    "turn 100 through the state history cost 601 SQL statements."
)

Row = list[str]


def seconds(value: float | None) -> str:
    """Milliseconds with three significant digits; absolute times are context, not results."""
    if value is None:
        return "n/a"
    millis = value * 1000
    return f"{millis:.3g} ms" if millis >= 0.1 else f"{millis * 1000:.3g} µs"


def times(value: float | None) -> str:
    """A ratio as `12.3×`, with fewer decimals as it grows."""
    if value is None:
        return "n/a"
    if value >= 100:
        return f"{value:,.0f}×"
    return f"{value:.2f}×" if value < 10 else f"{value:.1f}×"


def number(value: float) -> str:
    """Thousands separators; two decimals for non-integers."""
    return f"{value:,}" if isinstance(value, int) else f"{value:,.2f}"


def pair(left: str, right: str) -> str:
    """`reference / peer` in one cell, so each table row reads left to right."""
    return f"{left} / {right}"


def yes(flag: bool) -> str:
    return "yes" if flag else "**no**"


def table(header: Row, rows: list[Row]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def render(results: dict[str, Any]) -> str:
    """The whole report: machine, a ratio summary, the design targets, then each comparison."""
    machine = results["machine"]
    config = results["config"]
    postgres = f", PostgreSQL {machine['postgresql']}" if "postgresql" in machine else ""
    lines = [
        "# Session lineage benchmarks",
        "",
        (
            f"Configuration `{config['name']}`, {machine['date']}. Python {machine['python']}, "
            f"SQLite {machine['sqlite']}, SQLAlchemy {machine['sqlalchemy']}{postgres}, "
            f"{machine['cpu_count']} CPUs, {machine['platform']}."
        ),
        "",
        (
            "Statements and rows written are exact counts. Times are medians of "
            f"{config['repeats']} runs (the full reads against LangGraph: of the rounds given beside them), "
            "the reference and its peer alternating, on a shared, noisy "
            "machine: read the **ratios**, which compare approaches measured side by side in this "
            "one run; the absolute times are context only."
        ),
    ]
    if machine.get("load_average_at_start"):
        lines += ["", f"Load average (1, 5, 15 min) at the start: {', '.join(map(str, machine['load_average_at_start']))} on {machine['cpu_count']} CPUs."]
    if "timed_on_cpu" in machine:  # since the results of 2026-12-05; earlier runs used every CPU
        cpu = machine["timed_on_cpu"]
        lines += ["", (
            f"Timed on one CPU (CPU {cpu}): this process and its threads, the reference's HTTP server "
            "included; database servers run where the system puts them (benchmarks/cpus.py says why)."
            if cpu is not None else
            "Timed on every CPU the system offers (`--all-cpus`, or a system that cannot pin a process)."
        )]
    if machine.get("note"):
        lines += ["", str(machine["note"])]
    for kind, data in results["backends"].items():
        lines += ["", f"## {LABELS.get(kind, kind)}", ""]
        lines += summary(data)
        lines += ["", "### Design targets", ""] + targets(data, kind)
        lines += ["", "### 1. Fork cost vs source size", ""] + fork_cost(data["fork_cost"])
        lines += ["", "### 2. Transcript read vs depth", ""]
        lines += transcript_depth(data["transcript_depth"])
        lines += ["", "### 3. Page cost vs position", ""] + page_position(data["page_position"])
        lines += ["", "### 4. Storage", ""] + storage(data["storage"])
        lines += ["", "### 5. Finding a fork point by turn id", ""] + fork_point(data["fork_point"])
        if "rows_per_page" in data:
            lines += ["", "### 7. Records examined per page by depth", ""] + rows_per_page(data["rows_per_page"])
        if "versus" in data:
            lines += ["", "### 6. Against LangGraph (the real peer)", ""] + versus(data["versus"])
        ended = data.get("load_average_at_end")
        lines += ["", f"Elapsed for this backend: {data['elapsed_seconds']:.1f} s." + (f" Load average at its end: {', '.join(map(str, ended))}." if ended else "")]
    return "\n".join(lines) + "\n"


def summary(data: dict[str, Any]) -> list[str]:
    """One line per comparison at its largest size: reference, peer, and peer / reference."""
    fork = data["fork_cost"]["rows"][-1]
    fork_ratio = fork["copy_over_lineage"]
    depth = data["transcript_depth"]["rows"][-1]
    depth_ratio = depth["per_ancestor_over_lineage"]
    pages = data["page_position"]
    last_page = pages["rows"][-1]
    growth = pages["last_over_first"]
    store = data["storage"]
    point = data["fork_point"]["rows"][-1]
    fork_label = f"Fork a {fork['source_turns']:,}-turn session (lineage vs copy-on-fork)"
    depth_label = f"Transcript at depth {depth['depth']} (chain CTE vs query per ancestor)"
    page_label = f"{pages['records']:,}-record transcript (cursor vs OFFSET/LIMIT)"
    rows = [
        [
            f"{fork_label}: rows written",
            number(fork["lineage"]["rows_written"]),
            number(fork["copy"]["rows_written"]),
            times(fork_ratio["rows_written"]),
        ],
        [
            f"{fork_label}: time",
            seconds(fork["lineage"]["seconds"]),
            seconds(fork["copy"]["seconds"]),
            times(fork_ratio["seconds"]),
        ],
        [
            f"{depth_label}: statements",
            number(depth["lineage"]["statements"]),
            number(depth["per_ancestor"]["statements"]),
            times(depth_ratio["statements"]),
        ],
        [
            f"{depth_label}: time",
            seconds(depth["lineage"]["seconds"]),
            seconds(depth["per_ancestor"]["seconds"]),
            times(depth_ratio["seconds"]),
        ],
        [
            f"{depth_label}: SQL-only time",
            seconds(depth["lineage"]["sql_seconds"]),
            seconds(depth["per_ancestor"]["sql_seconds"]),
            times(depth_ratio["sql_seconds"]),
        ],
        [
            f"{page_label}: last page time",
            seconds(last_page["cursor"]["seconds"]),
            seconds(last_page["offset_paging"]["seconds"]),
            times(last_page["offset_over_cursor"]["seconds"]),
        ],
        [
            f"{page_label}: last page / first page time",
            times(growth["cursor_seconds"]),
            times(growth["offset_seconds"]),
            "",
        ],
        [
            f"{page_label}: last page / first page SQL-only time",
            times(growth["cursor_sql_seconds"]),
            times(growth["offset_sql_seconds"]),
            "",
        ],
        [
            (
                f"{store['branches']} branches of a {store['parent_turns']}-turn parent "
                "(lineage vs copy-on-fork): bytes per content byte"
            ),
            number(store["lineage"]["bytes_per_content_byte"]),
            number(store["copy"]["bytes_per_content_byte"]),
            times(store["copy_over_lineage"]["bytes_per_content_byte"]),
        ],
        [
            (
                f"Find turn {point['target_turn_index']} of {point['source_turns']:,} "
                "(turn id lookup vs history scan): statements"
            ),
            number(point["lineage"]["statements"]),
            number(point["history_scan"]["statements"]),
            times(point["scan_over_lineage"]["statements"]),
        ],
        [
            (
                f"Find turn {point['target_turn_index']} of {point['source_turns']:,} "
                "(turn id lookup vs history scan): time"
            ),
            seconds(point["lineage"]["seconds"]),
            seconds(point["history_scan"]["seconds"]),
            times(point["scan_over_lineage"]["seconds"]),
        ],
    ]
    return table(["comparison", "reference", "peer", "peer / reference"], rows)


# Bytes stored per content byte the storage target allows, by engine (issue 20).
STORAGE_TARGET = {"sqlite": 2.0, "postgresql": 3.0}
FULL_READ_IN_PROCESS = 1.5  # LangGraph / reference, in-process, at every scenario size up to 1,000 turns
FULL_READ_HTTP = 1.0  # LangGraph in-process / reference over HTTP
FULL_READ_TARGET_TURNS = 1_000  # the largest size the full-read targets apply to; larger rows are context
PAGE_DEPTH_HTTP = 1.2  # a page at the deepest chain over HTTP / the same page at depth 0
FLAT_MEMORY = 1.5  # streamed export peak at the longest read / at the 1,000-turn read


def mib(value: int | None) -> str:
    return "n/a" if value is None else f"{value / 1_048_576:.2f} MiB"


def targets(data: dict[str, Any], kind: str = "sqlite") -> list[str]:
    """The design targets, each with the measured evidence."""
    forks = data["fork_cost"]["rows"]
    depths = data["transcript_depth"]["rows"]
    pages = data["page_position"]
    store = data["storage"]
    points = data["fork_point"]["rows"]
    fork_statements = sorted({row["lineage"]["statements"] for row in forks})
    fork_rows = sorted({row["lineage"]["rows_written"] for row in forks})
    shallow, deep = depths[0], depths[-1]
    first, last = pages["rows"][0]["cursor"], pages["rows"][-1]["cursor"]
    lookups = sorted({row["lineage"]["turn_lookups_in_fork"] for row in points})
    sizes = ", ".join(f"{row['source_turns']:,}" for row in forks)
    checks: list[tuple[str, bool | None, str]] = [
        (
            "Transcript read at the maximum depth costs the same round trips as at depth 0",
            deep["lineage"]["statements"] == shallow["lineage"]["statements"],
            (
                f"{shallow['lineage']['statements']} statements at depth {shallow['depth']}, "
                f"{deep['lineage']['statements']} at depth {deep['depth']}"
            ),
        ),
        (
            "Fork cost and rows written do not grow with the parent's size",
            len(fork_statements) == 1 and len(fork_rows) == 1,
            f"statements {fork_statements}, rows written {fork_rows} at {sizes} turns",
        ),
        (
            "A page costs the same at the end of a long history as at the start",
            first["statements"] == last["statements"],
            (
                f"{first['statements']} statements first and last; time last / first "
                f"{times(pages['last_over_first']['cursor_seconds'])}"
            ),
        ),
        (
            f"Store at most {STORAGE_TARGET.get(kind, 2.0):g} bytes per content byte "
            f"({store['branches']} branches of a {store['parent_turns']:,}-turn parent, above the empty schema)",
            store["lineage"]["bytes_per_content_byte"] <= STORAGE_TARGET.get(kind, 2.0),
            _storage_evidence(store, STORAGE_TARGET.get(kind, 2.0)),
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
    last_over_first = pages["last_over_first"]["cursor_seconds"]
    checks.append(
        (
            "Last page / first page at most 1.5 (time)",
            last_over_first is not None and last_over_first <= 1.5,
            f"{times(last_over_first)}",
        )
    )
    examined = data.get("rows_per_page")
    if examined and examined["max_examined"] is not None:
        bound = examined["page_size"] + 3
        firsts = {row["depth"]: row["records_examined"] for row in examined["rows"] if row["position"] == "first"}
        checks.append(
            (
                f"Records examined per page equal at depths 0 and {examined['depth']}, within the page size + 3",
                examined["first_page_equal"] and examined["max_examined"] <= bound,
                f"first page {firsts}; at most {examined['max_examined']} on any page (bound {bound})",
            )
        )
    matches = data.get("versus", {})
    if "rows" in matches:
        largest = matches["rows"][-1]
        pair_cost = largest["pair_statements"]
        checks.append(
            (
                "A message pair takes 4 statements without an Idempotency-Key",
                pair_cost["reference"] <= 4,
                f"{pair_cost['reference']} (with a key: {pair_cost['reference_with_key']}; LangGraph: {pair_cost['langgraph']} per invoke)",
            )
        )
        lookups = sorted({row["fork_point"]["reference"]["requests"] for row in matches["rows"]})
        checks.append(
            (
                "Fork point lookup in one request",
                lookups == [1],
                f"requests {lookups}, statements {sorted({row['fork_point']['reference']['statements'] for row in matches['rows']})}",
            )
        )
        scenario = [(row, f"Full read at {row['turns']:,} turns, the scenario's branch ({_branch_turns(row)})") for row in matches["rows"]]
        whole = [(row, f"Full read at {row['turns']:,} turns, a {row['turns']:,}-turn session") for row in matches.get("reads", [])]
        for row, name in [*scenario, *whole]:
            read = row["full_read"]
            local, remote = read["langgraph_over_reference"], read["langgraph_over_reference_http"]
            applies = row["turns"] <= FULL_READ_TARGET_TURNS
            checks.append(
                (
                    f"{name}: in-process at least {FULL_READ_IN_PROCESS}× LangGraph's speed, "
                    f"over HTTP at least {FULL_READ_HTTP}× LangGraph in-process" + ("" if applies else " (context: beyond the sizes the target names)"),
                    (local is not None and remote is not None and local >= FULL_READ_IN_PROCESS and remote >= FULL_READ_HTTP)
                    if applies else None,
                    f"LangGraph / reference {times(local)} in-process, {times(remote)} over HTTP" + _plain_ratio(read) + _read_floors(read),
                )
            )
        # Streamed reads only (an export of up to 2,000 turns and records is read whole): the
        # smallest against the largest. Reports without floors (before stop 27) read 1,000 turns and more only: all streamed.
        memory = [
            (row["turns"], row["full_read"].get("peak_memory_bytes"))
            for row in matches.get("reads", []) if not (row["full_read"].get("floors") or {}).get("http_reads_whole")
        ]
        memory = [(turns, peaks) for turns, peaks in memory if peaks]
        if len(memory) >= 2:
            (small, low), (large, high) = memory[0], memory[-1]
            grown = ratio_of(high["reference_http_streamed"], low["reference_http_streamed"])
            checks.append(
                (
                    f"A {large:,}-turn export over HTTP streams: its peak memory does not grow with the transcript",
                    grown is not None and grown <= FLAT_MEMORY,
                    f"peak {mib(high['reference_http_streamed'])} at {large:,} turns, {mib(low['reference_http_streamed'])} at "
                    f"{small:,} ({times(grown)}; bound {FLAT_MEMORY}×); in-process (whole document) {mib(high['reference'])}, "
                    f"LangGraph {mib(high['langgraph'])}",
                )
            )
    pages_by_depth = (examined or {}).get("http_deep_over_shallow")
    if pages_by_depth:
        worst = max((value for value in pages_by_depth.values() if value is not None), default=None)
        checks.append(
            (
                f"A {examined['page_size']}-record page at depth {examined['depth']} over HTTP within {PAGE_DEPTH_HTTP}× of depth 0",
                worst is not None and worst <= PAGE_DEPTH_HTTP,
                "depth " + str(examined["depth"]) + " / depth 0: " + ", ".join(f"{name} {times(value)}" for name, value in pages_by_depth.items()),
            )
        )
    verdict = {True: "met", False: "**not met**", None: "see value"}
    rows = [[name, verdict[ok], evidence] for name, ok, evidence in checks]
    return table(["target", "result", "measured"], rows)


def _client(section: dict[str, Any]) -> tuple[str, bool]:
    """The HTTP client of the reads over HTTP (benchmarks/reader.py; the standard library's before
    2026-12-05), and whether each read was timed with the standard library's client too."""
    rows = [row["full_read"]["reference"] for row in [*section.get("rows", []), *section.get("reads", [])]]
    clients = {row.get("http_client") for row in rows} - {None, ""}
    plain = any(row.get("http_stdlib_seconds") is not None for row in rows)
    return ", ".join(sorted(clients)) or "the standard library's http.client", plain


def _branch_turns(row: dict[str, Any]) -> str:
    """What the scenario's full read reads: the branch forked after turn T/2, with one turn more."""
    messages = row.get("messages_read")
    return f"{messages // 2:,} turns" if messages else "T/2 + 1 turns"


def _plain_ratio(read: dict[str, Any]) -> str:
    """The ratio over HTTP with the standard library's client, when the run timed it (context)."""
    plain = read["reference"].get("http_stdlib_seconds")
    if plain is None:
        return ""
    return f" ({times(ratio_of(_peer_beside_plain(read), plain))} with the standard library's http.client as the client)"


def _peer_beside_plain(read: dict[str, Any]) -> float:
    """LangGraph's read timed beside the standard library's client (its own series since 2026-12-05)."""
    return read["reference"].get("http_stdlib_langgraph_seconds") or read["langgraph"]["seconds"]


def _read_floors(read: dict[str, Any]) -> str:
    """The measured floors of a full read beside LangGraph's whole read: why a ratio stops where it does."""
    floors, peer = read.get("floors") or {}, read["langgraph"]["seconds"]
    if not floors or not peer:
        return ""
    sql, http = floors.get("sql_seconds"), floors.get("http_seconds")
    parts = [f"LangGraph's whole read {seconds(peer)}"]
    if sql is not None:
        count = read["reference"]["statements"]
        parts.append(f"the export's {count} statement{'' if count == 1 else 's'} alone, straight through the DB-API, "
                     f"{seconds(sql)} ({sql / peer:.0%} of it)")
    if http is not None:
        parts.append(f"the cheapest request over this HTTP stack (the capability document, no database read) {seconds(http)} "
                     f"({http / peer:.0%} of it)")
    empty, empty_http = floors.get("empty_export_seconds"), floors.get("empty_export_http_seconds")
    if empty is not None and empty_http is not None:
        parts.append(f"the export of a session with no turns (the read transaction and the chain statement) {seconds(empty)} in-process "
                     f"({empty / peer:.0%} of it), {seconds(empty_http)} over HTTP ({empty_http / peer:.0%} of it)")
    documents, parse = floors.get("documents_sql_seconds"), floors.get("parse_seconds")
    if documents is not None and empty is not None and empty_http is not None:
        # Reports before the parse was measured (stop 27) bound the read without it.
        shared = floors.get("documents_shared_sql_seconds")
        work = f"the documents statement alone ({seconds(documents)})"
        if shared is not None:  # the statement reads the chain too: the no-turn export holds that part
            work = (f"what building the documents adds to the statement ({seconds(max(documents - shared, 0.0))}: "
                    f"{seconds(documents)} here, {seconds(shared)} for the session with no turns)")
            documents = max(documents - shared, 0.0)
        local, remote = empty + documents + (parse or 0.0), empty_http + documents + (parse or 0.0)
        if parse is not None:
            work += f" and parsing the document with orjson ({seconds(parse)}; the in-process export returns it parsed, the HTTP reader parses the body)"
        bound = (f"so, with {work}, this export costs at least about {seconds(local)} "
                 f"in-process ({local / peer:.0%} of LangGraph's read; the target needs at most {1 / FULL_READ_IN_PROCESS:.0%})")
        if floors.get("http_reads_whole"):
            bound += f" and {seconds(remote)} over HTTP ({remote / peer:.0%}; the target needs at most {1 / FULL_READ_HTTP:.0%})"
        parts.append(bound)
    return ". Floors, this run: " + "; ".join(parts)


def ratio_of(numerator: float | None, denominator: float | None) -> float | None:
    return numerator / denominator if numerator is not None and denominator else None


def fork_cost(section: dict[str, Any]) -> list[str]:
    rows = []
    for row in section["rows"]:
        lineage, copy, ratios = row["lineage"], row["copy"], row["copy_over_lineage"]
        rows.append(
            [
                number(row["source_turns"]),
                number(row["source_records"]),
                pair(str(lineage["statements"]), str(copy["statements"])),
                pair(number(lineage["rows_written"]), number(copy["rows_written"])),
                pair(seconds(lineage["seconds"]), seconds(copy["seconds"])),
                times(ratios["statements"]),
                times(ratios["rows_written"]),
                times(ratios["seconds"]),
                yes(row["same_transcript"]),
            ]
        )
    header = [
        "source turns",
        "records",
        "statements lineage / copy",
        "rows written lineage / copy",
        "time lineage / copy",
        "copy / lineage statements",
        "copy / lineage rows",
        "copy / lineage time",
        "same transcript",
    ]
    intro = (
        "Cut `latest`, no idempotency key. Copy-on-fork copies with `INSERT ... SELECT`, so its "
        "statement count stays flat too: what grows is rows written and time."
    )
    return [intro, ""] + table(header, rows)


def transcript_depth(section: dict[str, Any]) -> list[str]:
    rows = []
    for row in section["rows"]:
        lineage, peer = row["lineage"], row["per_ancestor"]
        ratios, growth = row["per_ancestor_over_lineage"], row["growth_vs_first_depth"]
        rows.append(
            [
                str(row["depth"]),
                str(row["records"]),
                pair(str(lineage["statements"]), str(peer["statements"])),
                times(ratios["statements"]),
                pair(seconds(lineage["seconds"]), seconds(peer["seconds"])),
                times(ratios["seconds"]),
                pair(seconds(lineage["sql_seconds"]), seconds(peer["sql_seconds"])),
                times(ratios["sql_seconds"]),
                pair(times(growth["lineage_seconds"]), times(growth["per_ancestor_seconds"])),
                seconds(row["break_even_round_trip_seconds"]),
                yes(row["same_records"]),
            ]
        )
    header = [
        "depth",
        "records",
        "statements lineage / per-ancestor",
        "per-ancestor / lineage statements",
        "time lineage / per-ancestor",
        "per-ancestor / lineage time",
        "SQL-only time lineage / per-ancestor",
        "per-ancestor / lineage SQL-only",
        "time vs depth 0 lineage / per-ancestor",
        "break-even round trip",
        "same records",
    ]
    intro = (
        f"Whole transcript in one page of {section['page_size']}. The records read grow with "
        "depth for both approaches; only the per-ancestor reader's round trips do. *SQL-only* "
        "replays the very statements each approach sent straight through the DB-API, without "
        "building queries or rows in Python. *Break-even round trip*: the latency added to every "
        "statement (a network hop) above which the reference read becomes the faster one, from "
        "this run's times and statement counts; n/a where it already is."
    )
    return [intro, ""] + table(header, rows)


def page_position(section: dict[str, Any]) -> list[str]:
    rows = []
    for row in section["rows"]:
        cursor, offset = row["cursor"], row["offset_paging"]
        rows.append(
            [
                row["position"],
                number(row["offset"]),
                pair(str(cursor["statements"]), str(offset["statements"])),
                pair(seconds(cursor["seconds"]), seconds(offset["seconds"])),
                times(row["offset_over_cursor"]["seconds"]),
                pair(seconds(cursor["sql_seconds"]), seconds(offset["sql_seconds"])),
                times(row["offset_over_cursor"]["sql_seconds"]),
                yes(row["same_records"]),
            ]
        )
    header = [
        "page",
        "offset",
        "statements cursor / offset",
        "time cursor / offset",
        "offset / cursor time",
        "SQL-only time cursor / offset",
        "offset / cursor SQL-only",
        "same records",
    ]
    last = section["last_over_first"]
    intro = (
        f"{section['records']:,} records across a chain of depth {section['chain_depth']}, "
        f"pages of {section['page_size']} ({section['pages']} pages)."
    )
    growth = (
        f"Last page / first page: cursor {times(last['cursor_seconds'])} time "
        f"({times(last['cursor_sql_seconds'])} SQL-only), "
        f"{times(last['cursor_statements'])} statements; OFFSET/LIMIT "
        f"{times(last['offset_seconds'])} time ({times(last['offset_sql_seconds'])} SQL-only), "
        f"{times(last['offset_statements'])} statements."
    )
    return [intro, ""] + table(header, rows) + ["", growth]


def storage(section: dict[str, Any]) -> list[str]:
    parts = (("lineage", section["lineage"]), ("copy-on-fork", section["copy"]))
    rows = [
        [
            label,
            number(part["content_bytes"]),
            number(part["records_stored"]),
            number(part["bytes"]),
            number(part["bytes_per_content_byte"]),
        ]
        for label, part in parts
    ]
    header = ["approach", "content bytes", "records stored", "database bytes", "per content byte"]
    ratios = section["copy_over_lineage"]
    intro = (
        f"{section['branches']} branches of a {section['parent_turns']}-turn parent, each forked "
        "through an evenly spaced turn and given one turn of its own; records of "
        f"~{section['record_content_bytes']} bytes. Database bytes are the growth above the empty "
        "migrated schema (SQLite: pages in use after a WAL checkpoint; PostgreSQL: relation sizes)."
    )
    outcome = (
        f"Copy / lineage: {times(ratios['bytes'])} bytes, {times(ratios['records_stored'])} "
        f"records stored. Same transcripts: {yes(section['same_transcripts'])}."
    )
    lines = [intro, ""] + table(header, rows) + ["", outcome]
    breakdown = [
        f"- {label}: " + ", ".join(f"{name} {number(size)}" for name, size in _largest(part))
        for label, part in parts
        if _objects(part)
    ]
    if breakdown:
        lines += [
            "",
            "Bytes by table and by index (`table.index`; a bare table name is its rows: the SQLite "
            "b-tree, or the PostgreSQL heap with its TOAST and maps), above the empty schema:",
            "",
        ] + breakdown
    return lines + _layouts(section) + ["", LANGGRAPH_ANCHOR]


def _layouts(section: dict[str, Any]) -> list[str]:
    """The layouts probe (benchmarks/layouts.py), when the run took it: each layout's records and
    turns alone, and with the rest of the schema as comparison 4 measured it."""
    probed = section.get("layouts")
    if not probed:
        return []
    rest = _rest_of_schema(section)
    rows = [
        [row["layout"] + (" (the reference's)" if row.get("reference") else ""), number(row["bytes"]), number(row["bytes_per_content_byte"]),
         number(row["bytes_per_content_byte"] + rest)]
        for row in probed
    ]
    header = ["layout", "records and turns: bytes", "per content byte", "with the rest of the schema"]
    intro = (
        "Layouts probe (`benchmarks/layouts.py`): the same turns and records, with the ids and "
        "timestamps the reference writes, in plain tables of three layouts on a fresh database of "
        "this engine. The reference's own layout is among them, a check on the probe against the "
        "measurement above; the rest of the schema (sessions, lineage and their indexes) adds "
        f"{number(rest)} bytes per content byte in that measurement."
    )
    return ["", intro, ""] + table(header, rows)


def _rest_of_schema(section: dict[str, Any]) -> float:
    """Bytes per content byte the lineage measurement spent outside the records and turns tables."""
    lineage = section["lineage"]
    inside = sum(size for (name, size) in _objects(lineage).items() if name.split(".")[0] in ("records", "turns"))
    return max(lineage["bytes"] - inside, 0) / (lineage["content_bytes"] or 1)


def _storage_evidence(store: dict[str, Any], target: float) -> str:
    """The measured bytes per content byte, what each table and index costs per record, and, when
    over the target, how the records' own rows compare with what the target leaves them."""
    lineage = store["lineage"]
    per_record = lineage["records_stored"] or 1
    content = lineage["content_bytes"] / per_record
    text = (
        f"{number(lineage['bytes_per_content_byte'])} bytes per content byte "
        f"(copy-on-fork: {number(store['copy']['bytes_per_content_byte'])}); "
        + ", ".join(f"{name} {size / per_record:.0f}" for name, size in _largest(lineage))
        + f" bytes per record stored, for {content:.0f} bytes of content"
    )
    rows = _objects(lineage).get("records")
    if lineage["bytes_per_content_byte"] <= target or rows is None:
        return text
    allowed, rows_each = target * content, rows / per_record
    rest = (lineage["bytes"] - rows) / per_record
    return text + (
        f". Reason: the records' own rows take {rows_each:.0f} bytes per record of the {allowed:.0f} "
        f"the target allows for everything, which leaves {max(allowed - rows_each, 0):.0f} for the turns "
        f"and every index, which take {rest:.0f}: besides its content each record row stores its own "
        "uuid and its turn's, and each turn row and turn id index entry its turn's (36 characters "
        "each). Going lower needs turn and record ids derived from the session and the index, "
        "stored nowhere"
    ) + _probe_evidence(store, target)


def _probe_evidence(store: dict[str, Any], target: float) -> str:
    """What the layouts probe measured for each layout, against the target."""
    probed = store.get("layouts")
    if not probed:
        return ""
    rest = _rest_of_schema(store)
    found = "; ".join(
        f"{row['layout']} {row['bytes_per_content_byte'] + rest:.2f}"
        + (" (meets it)" if row["bytes_per_content_byte"] + rest <= target else "")
        for row in probed
    )
    return f". The layouts probe in this run, with the rest of the schema as measured: {found}"


def _objects(part: dict[str, Any]) -> dict[str, int]:
    """Bytes by table and index when the run measured them, else by table (older results)."""
    return dict(part.get("bytes_by_object") or part.get("bytes_by_table") or {})


def _largest(part: dict[str, Any]) -> list[tuple[str, int]]:
    """Tables and indexes that grew, largest first."""
    grown = [(name, size) for name, size in _objects(part).items() if size > 0]
    return sorted(grown, key=lambda item: -item[1])


def fork_point(section: dict[str, Any]) -> list[str]:
    rows = []
    for row in section["rows"]:
        lineage, scan = row["lineage"], row["history_scan"]
        rows.append(
            [
                number(row["source_turns"]),
                str(row["target_turn_index"]),
                str(lineage["fork_statements"]),
                str(lineage["turn_lookups_in_fork"]),
                pair(str(lineage["statements"]), number(scan["statements"])),
                pair(seconds(lineage["seconds"]), seconds(scan["seconds"])),
                times(row["scan_over_lineage"]["statements"]),
                times(row["scan_over_lineage"]["seconds"]),
            ]
        )
    header = [
        "source turns",
        "target turn",
        "reference fork statements",
        "turn lookups in fork",
        "lookup statements id / scan",
        "lookup time id / scan",
        "scan / id statements",
        "scan / id time",
    ]
    intro = (
        "The reference forks `through` a turn id with one indexed turn lookup; the peer walks "
        "the history back from the newest turn, one query per step, as a state-history "
        "iterator does."
    )
    return [intro, ""] + table(header, rows)


def rows_per_page(section: dict[str, Any]) -> list[str]:
    """Records examined per page, from the reference's own diagnostics count."""
    intro = (
        f"{section['records']:,} records in a root session and in a chain of depth {section['depth']} "
        f"(each segment holds a page or more), pages of {section['page_size']}; the bound is the page "
        "size + 3 (DIAG-RECORDS-PAGE-001)."
    )
    header = ["depth", "page", "records returned", "records examined", "statements", "time", "time over HTTP"]
    rows = [
        [str(row["depth"]), row["position"], str(row["records_returned"]),
         "n/a" if row["records_examined"] is None else str(row["records_examined"]),
         str(row["statements"]), seconds(row["seconds"]), seconds(row.get("http_seconds"))]
        for row in section["rows"]
    ]
    lines = [intro, ""] + table(header, rows)
    if section.get("http_deep_over_shallow"):
        lines += ["", "Over HTTP (the reference app on a loopback port, depth 0 and the deepest chain alternating, 4 times "
                  "the repeats of the other times), depth "
                  f"{section['depth']} / depth 0: " + ", ".join(f"{name} page {times(value)}" for name, value in section["http_deep_over_shallow"].items()) + "."]
    return lines


def versus(section: dict[str, Any]) -> list[str]:
    """The scenario against LangGraph: exact statements, bytes, and time ratios from one run."""
    costs = ["Reference statements per step (exact; a message pair is one turn of two records written in one request):", ""]
    costs += table(
        ["turns", "message pair", "pair with Idempotency-Key", "its replay", "turn by position", "full read (export)", "records read"],
        [
            [f"{row['turns']:,}", "/".join(map(str, row["pair_statements"])), str(row["pair_with_key_statements"]),
             str(row["pair_replay_statements"]), str(row["turn_at_statements"]), str(row["full_read_statements"]),
             f"{row['full_read_records']:,}"]
            for row in section.get("reference_costs", {}).get("rows", [])
        ],
    )
    if "skipped" in section:
        return costs + ["", f"LangGraph not run: {section['skipped']}."]
    intro = (
        f"LangGraph {section['langgraph']} with its {section.get('checkpointer', 'SQLite checkpointer')}, in-process, against the reference "
        f"through its services (and over HTTP for the full read). Each turn is a user message and an "
        f"assistant reply of {section['content_bytes_per_message']} bytes each; the reference writes it as one "
        "request (`turn-write`), LangGraph as one `invoke`. Fork point: the turn after T/2 turns, found "
        "without stored ids (reference: one request by position; LangGraph: walking the state history). "
        "The full read is of the branch forked there, with one turn added (T/2 + 1 turns); a read-only row "
        "reads a session of T turns. "
        "Ratios are LangGraph / reference: above 1x the reference is faster."
    )
    header = ["turns", "same transcript", "statements per message pair (ref / ref with key / LangGraph)",
              "fork point statements (ref / LangGraph)", "fork point time LangGraph / ref",
              "fork + one turn statements (ref / LangGraph)", "full read statements (ref / LangGraph)",
              "full read time LangGraph / ref (in-process)", "full read time LangGraph / ref over HTTP",
              "stored bytes (ref database / LangGraph)"]
    rows = []
    for row in section["rows"]:
        pairs, point, read = row["pair_statements"], row["fork_point"], row["full_read"]
        rows.append([
            f"{row['turns']:,}", yes(row["same_transcript"]),
            f"{pairs['reference']} / {pairs['reference_with_key']} / {pairs['langgraph']}",
            pair(str(point["reference"]["statements"]), str(point["langgraph"]["statements"])),
            times(point["langgraph_over_reference"]),
            pair(str(row["fork_and_turn_statements"]["reference"]), str(row["fork_and_turn_statements"]["langgraph"])),
            pair(str(read["reference"]["statements"]), str(read["langgraph"]["statements"])),
            times(read["langgraph_over_reference"]), times(read["langgraph_over_reference_http"]),
            pair(f"{row['storage_bytes']['reference']:,}", f"{row['storage_bytes']['langgraph']:,}"),
        ])
    for row in section.get("reads", []):
        read = row["full_read"]
        rows.append([
            f"{row['turns']:,} (read only)", yes(row["same_transcript"]), "", "", "", "",
            pair(str(read["reference"]["statements"]), str(read["langgraph"]["statements"])),
            times(read["langgraph_over_reference"]), times(read["langgraph_over_reference_http"]), "",
        ])
    timing = []
    labelled = [(row, f"{row['turns']:,} turns, the branch ({_branch_turns(row)})") for row in section["rows"]]
    labelled += [(row, f"{row['turns']:,} turns (read only)") for row in section.get("reads", [])]
    for row, label in labelled:
        read = row["full_read"]
        plain = read["reference"].get("http_stdlib_seconds")  # since 2026-12-05
        timing.append(
            f"{label}: reference {seconds(read['reference']['seconds'])} in-process, "
            f"{seconds(read['reference']['http_seconds'])} over HTTP"
            + (f" ({seconds(plain)} with the standard library's http.client, "
               f"{times(ratio_of(_peer_beside_plain(read), plain))})" if plain is not None else "")
            + f"; LangGraph {seconds(read['langgraph']['seconds'])}"
            + (f" (medians of {read['rounds']} rounds)" if read.get("rounds") else "")
        )
    memory = [
        [f"{row['turns']:,}", mib(peaks["reference"]), mib(peaks["reference_http_streamed"]), mib(peaks["langgraph"])]
        for row in [*section["rows"], *section.get("reads", [])]
        if (peaks := row["full_read"].get("peak_memory_bytes"))
    ]
    lines = costs + ["", intro, ""] + table(header, rows) + ["", "Full read times (context): " + "; ".join(timing) + "."]
    client, plain = _client(section)
    apart = (" The reads with the standard library's http.client are a series of their own, as many rounds, each "
             "alternating with a LangGraph read that its ratio uses, so that they change nothing in the series above.") if plain else ""
    lines += ["", "Times are medians of the rounds given above, each round the reads alternating (reference in-process, "
              "LangGraph, reference over HTTP, then the floors' reads), "
              "after 10 untimed rounds (2 above 2,000 turns), as a running server has sent its "
              f"statements before; the HTTP client is {client} and parses the export with orjson." + apart]
    if memory:
        lines += [
            "",
            "Peak Python memory of one full read (tracemalloc, one untimed run each). In-process: the reference's "
            "parsed document, LangGraph's state. Over HTTP: the reference server answering a streamed export, and a "
            "client in the same process that drops each chunk as it arrives.",
            "",
        ] + table(["turns", "reference in-process", "reference over HTTP (one body up to 2,000 turns and records, streamed above)", "LangGraph in-process"], memory)
    return lines


def write(results: dict[str, Any], markdown: str, folder: Path) -> tuple[Path, Path]:
    """Write latest.md and latest.json into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    md_path = folder / "latest.md"
    json_path = folder / "latest.json"
    md_path.write_text(markdown, encoding="utf-8")
    json_path.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return md_path, json_path
