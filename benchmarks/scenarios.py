"""The five comparisons. Each returns plain JSON: exact costs, median seconds and ratios."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

from sqlalchemy import text

from benchmarks import seed
from benchmarks.backend import PRINCIPAL, Backend, Database
from benchmarks.config import Config
from benchmarks.meter import Cost, interleaved_median_seconds, measure, median_seconds, paired_median_seconds, ratio, replay_seconds
from benchmarks.peers import (
    CopyOnForkPeer,
    HistoryScanFinder,
    OffsetPager,
    PerAncestorReader,
)


def _cost(cost: Cost, seconds: float) -> dict[str, Any]:
    return {"statements": cost.statements, "rows_written": cost.rows_written, "seconds": seconds}


def _read_cost(db: Database, cost: Cost, seconds: float, repeats: int) -> dict[str, Any]:
    """A read's cost plus the time its statements take alone, without Python query building."""
    return {**_cost(cost, seconds), "sql_seconds": replay_seconds(db.engine, cost, repeats)}


def _ratios(
    peer: dict[str, Any], reference: dict[str, Any], keys: tuple[str, ...]
) -> dict[str, Any]:
    return {key: ratio(peer[key], reference[key]) for key in keys}


# ---------------------------------------------------------------- 1. fork cost vs source size
@dataclass
class Source:
    """A root session seeded with `turns` completed turns, used as a fork source."""

    session_id: str
    turns: int
    records: int
    turn_ids: list[str]


def prepare_sources(db: Database, config: Config) -> list[Source]:
    """One source session per configured size, all in the same database."""
    sources = []
    for turns in config.fork_source_turns:
        session_id = seed.new_session(db.services, f"source-{turns}")
        seeded = seed.add_turns(
            db.services, session_id, turns, config.records_per_turn, config.record_content_bytes
        )
        sources.append(Source(session_id, turns, turns * config.records_per_turn, seeded.turn_ids))
    return sources


def fork_cost(db: Database, sources: list[Source], config: Config) -> dict[str, Any]:
    """Reference fork (nothing copied) vs copy-on-fork, at each source size."""
    copier = CopyOnForkPeer(db.store)
    latest = {"mode": "latest"}
    rows = []
    for source in sources:
        reference = partial(seed.fork_latest, db.services, source.session_id)
        copy = partial(copier.fork, PRINCIPAL, source.session_id, latest)
        lineage_child, lineage_cost = measure(reference)
        copy_child, copy_cost = measure(copy)
        lineage_seconds, copy_seconds = paired_median_seconds(reference, copy, config.repeats)
        lineage = _cost(lineage_cost, lineage_seconds)
        copied = _cost(copy_cost, copy_seconds)
        same = seed.transcript_contents(
            db.services, lineage_child, config.limits.max_page_size
        ) == seed.transcript_contents(db.services, copy_child, config.limits.max_page_size)
        rows.append(
            {
                "source_turns": source.turns,
                "source_records": source.records,
                "lineage": lineage,
                "copy": copied,
                "copy_over_lineage": _ratios(
                    copied, lineage, ("statements", "rows_written", "seconds")
                ),
                "same_transcript": same,
            }
        )
    return {"cut": latest, "rows": rows}


# ---------------------------------------------------------------- 5. fork point by turn id
def fork_point(db: Database, sources: list[Source], config: Config) -> dict[str, Any]:
    """Statements to find the fork point by turn id: one lookup vs walking the history back."""
    finder = HistoryScanFinder(db.store)
    rows = []
    for source in sources:
        target_index = source.turns // 2
        target = source.turn_ids[target_index]
        body = {"cut": {"mode": "through", "turn_id": target}}
        fork = partial(db.services.fork.fork, PRINCIPAL, source.session_id, body, None)
        lookup = partial(_lookup_turn, db, target)
        scan = partial(finder.find, source.session_id, target)
        _, fork_cost_ = measure(fork)
        _, lookup_cost = measure(lookup)
        (found, steps), scan_cost = measure(scan)
        assert found == target_index
        lookup_seconds, scan_seconds = paired_median_seconds(lookup, scan, config.repeats)
        reference = {
            "fork_statements": fork_cost_.statements,
            "turn_lookups_in_fork": fork_cost_.count("FROM turns"),
            "statements": lookup_cost.statements,
            "seconds": lookup_seconds,
        }
        peer = {"statements": scan_cost.statements, "steps": steps, "seconds": scan_seconds}
        rows.append(
            {
                "source_turns": source.turns,
                "target_turn_index": target_index,
                "lineage": reference,
                "history_scan": peer,
                "scan_over_lineage": _ratios(peer, reference, ("statements", "seconds")),
            }
        )
    return {"rows": rows}


def _lookup_turn(db: Database, turn_id: str) -> Any:
    """The reference's own fork-point lookup, alone in a read transaction."""
    with db.store.read() as tx:
        return tx.turn(turn_id)


# ---------------------------------------------------------------- 2. transcript read vs depth
def transcript_depth(db: Database, config: Config) -> dict[str, Any]:
    """Reference read (chain CTE + one records query) vs one query per ancestor, by depth."""
    depth = max(config.transcript_depths)
    sessions = seed.chain(
        db.services,
        depth,
        config.turns_per_chain_session,
        config.records_per_turn,
        config.record_content_bytes,
    )
    reader = PerAncestorReader(db.store, config.limits.max_lineage_depth)
    size = config.limits.max_page_size
    rows = []
    for level in config.transcript_depths:
        session_id = sessions[level]
        reference = partial(db.services.transcript.transcript, PRINCIPAL, session_id, None, size)
        per_ancestor = partial(reader.read, PRINCIPAL, session_id)
        page, reference_cost = measure(reference)
        records, peer_cost = measure(per_ancestor)
        if page.has_more:
            raise ValueError(f"the depth-{level} transcript does not fit one page of {size}")
        same = [r["record_id"] for r in page.records] == [r.record_id for r in records]
        lineage_seconds, peer_seconds = paired_median_seconds(
            reference, per_ancestor, config.repeats
        )
        lineage = _read_cost(db, reference_cost, lineage_seconds, config.repeats)
        peer = _read_cost(db, peer_cost, peer_seconds, config.repeats)
        rows.append(
            {
                "depth": level,
                "records": len(records),
                "lineage": lineage,
                "per_ancestor": peer,
                "per_ancestor_over_lineage": _ratios(
                    peer, lineage, ("statements", "seconds", "sql_seconds")
                ),
                "break_even_round_trip_seconds": _break_even(lineage, peer),
                "same_records": same,
            }
        )
    first = rows[0]
    for row in rows:
        row["growth_vs_first_depth"] = {
            "lineage_seconds": ratio(row["lineage"]["seconds"], first["lineage"]["seconds"]),
            "per_ancestor_seconds": ratio(
                row["per_ancestor"]["seconds"], first["per_ancestor"]["seconds"]
            ),
            "lineage_sql_seconds": ratio(
                row["lineage"]["sql_seconds"], first["lineage"]["sql_seconds"]
            ),
            "per_ancestor_sql_seconds": ratio(
                row["per_ancestor"]["sql_seconds"], first["per_ancestor"]["sql_seconds"]
            ),
        }
    return {"page_size": size, "rows": rows}


def _break_even(lineage: dict[str, Any], peer: dict[str, Any]) -> float | None:
    """Added latency per statement above which the reference read is the faster one.

    In-process SQLite makes a round trip nearly free; over a network each of the peer's extra
    statements pays the round-trip time, so this is the latency where the two lines cross.
    None when the reference is already faster or the statement counts are equal.
    """
    extra_statements = peer["statements"] - lineage["statements"]
    extra_seconds = lineage["seconds"] - peer["seconds"]
    if extra_statements <= 0 or extra_seconds <= 0:
        return None
    return extra_seconds / extra_statements


# ---------------------------------------------------------------- 3. page cost vs position
def page_position(db: Database, config: Config) -> dict[str, Any]:
    """Cursor pages vs OFFSET/LIMIT pages: first, middle and last page of a long transcript."""
    sessions = config.page_chain_depth + 1
    turns = config.page_transcript_records // sessions // config.page_records_per_turn
    chain = seed.chain(
        db.services,
        config.page_chain_depth,
        turns,
        config.page_records_per_turn,
        config.record_content_bytes,
    )
    session_id = chain[-1]
    cursors = _page_cursors(db, session_id, config.page_size)
    total = turns * config.page_records_per_turn * sessions
    pager = OffsetPager(db.store, config.limits.max_lineage_depth)
    positions = {"first": 0, "middle": len(cursors) // 2, "last": len(cursors) - 1}
    reads = {
        name: (
            partial(db.services.transcript.transcript, PRINCIPAL, session_id, cursors[number], config.page_size),
            partial(pager.page, PRINCIPAL, session_id, number * config.page_size, config.page_size),
        )
        for name, number in positions.items()
    }
    # Every page of both approaches in one interleaved series, 4 times the usual repeats: the last /
    # first ratio compares medians taken side by side. Timed position by position (15 pairs each),
    # the ratio ranged from 0.94 to 1.53 in three runs of one day (the page path unchanged).
    timed = interleaved_median_seconds([read for pair in reads.values() for read in pair], 4 * config.repeats)
    rows = []
    for index, (name, number) in enumerate(positions.items()):
        offset = number * config.page_size
        by_cursor, by_offset = reads[name]
        page, cursor_cost = measure(by_cursor)
        records, offset_cost = measure(by_offset)
        same = [r["record_id"] for r in page.records] == [r.record_id for r in records]
        cursor_seconds, offset_seconds = timed[2 * index], timed[2 * index + 1]
        lineage = _read_cost(db, cursor_cost, cursor_seconds, config.repeats)
        peer = _read_cost(db, offset_cost, offset_seconds, config.repeats)
        rows.append(
            {
                "position": name,
                "page": number,
                "offset": offset,
                "cursor": lineage,
                "offset_paging": peer,
                "offset_over_cursor": _ratios(
                    peer, lineage, ("statements", "seconds", "sql_seconds")
                ),
                "same_records": same,
            }
        )
    first, last = rows[0], rows[-1]
    return {
        "records": total,
        "chain_depth": config.page_chain_depth,
        "page_size": config.page_size,
        "pages": len(cursors),
        "rows": rows,
        "last_over_first": {
            "cursor_seconds": ratio(last["cursor"]["seconds"], first["cursor"]["seconds"]),
            "offset_seconds": ratio(
                last["offset_paging"]["seconds"], first["offset_paging"]["seconds"]
            ),
            "cursor_sql_seconds": ratio(
                last["cursor"]["sql_seconds"], first["cursor"]["sql_seconds"]
            ),
            "offset_sql_seconds": ratio(
                last["offset_paging"]["sql_seconds"], first["offset_paging"]["sql_seconds"]
            ),
            "cursor_statements": ratio(last["cursor"]["statements"], first["cursor"]["statements"]),
            "offset_statements": ratio(
                last["offset_paging"]["statements"], first["offset_paging"]["statements"]
            ),
        },
    }


def rows_per_page(db: Database, config: Config) -> dict[str, Any]:
    """Records examined per page (the reference's diagnostics count) at depth 0 and at the
    deepest chain, same page size, same total: the first, a middle and the last page."""
    depth = max(config.transcript_depths)
    turns = max(1, config.page_size // config.records_per_turn)  # each segment holds one page or more
    total_turns = turns * (depth + 1)
    root = seed.new_session(db.services, "rows-root")
    seed.add_turns(db.services, root, total_turns, config.records_per_turn, config.record_content_bytes)
    deep = seed.chain(db.services, depth, turns, config.records_per_turn, config.record_content_bytes)[-1]
    rows = []
    pages: dict[tuple[int, str], tuple[str, str | None]] = {}
    for level, session_id in ((0, root), (depth, deep)):
        cursors = _page_cursors(db, session_id, config.page_size)
        for name, number in (("first", 0), ("middle", len(cursors) // 2), ("last", len(cursors) - 1)):
            read = partial(db.services.transcript.transcript, PRINCIPAL, session_id, cursors[number], config.page_size)
            page, cost = measure(read)
            pages[(level, name)] = (session_id, cursors[number])
            rows.append(
                {
                    "depth": level,
                    "position": name,
                    "records_returned": len(page.records),
                    "records_examined": cost.records_examined,
                    "statements": cost.statements,
                    "seconds": median_seconds(read, config.repeats),
                }
            )
    # The same pages over HTTP, depth 0 and the deepest chain alternating (one pair per position),
    # 4 times the usual repeats: a page takes a few milliseconds, and the ratio of two such medians
    # moved by a tenth between idle runs with 15.
    from benchmarks.versus import served

    with served(db) as http:
        for name in ("first", "middle", "last"):
            shallow, deep_page = pages[(0, name)], pages[(depth, name)]
            times_over_http = interleaved_median_seconds(
                [partial(http.page, *shallow, config.page_size), partial(http.page, *deep_page, config.page_size)],
                4 * config.repeats,
            )
            for row in rows:
                if row["position"] == name:
                    row["http_seconds"] = times_over_http[0 if row["depth"] == 0 else 1]
    over = {
        name: ratio(
            next(row["http_seconds"] for row in rows if row["depth"] == depth and row["position"] == name),
            next(row["http_seconds"] for row in rows if row["depth"] == 0 and row["position"] == name),
        )
        for name in ("first", "middle", "last")
    }
    examined = [row["records_examined"] for row in rows if row["records_examined"] is not None]
    return {
        "page_size": config.page_size,
        "records": total_turns * config.records_per_turn,
        "depth": depth,
        "rows": rows,
        "http_deep_over_shallow": over,
        "max_examined": max(examined) if examined else None,
        "first_page_equal": len({row["records_examined"] for row in rows if row["position"] == "first"}) == 1,
    }


def _page_cursors(db: Database, session_id: str, size: int) -> list[str | None]:
    """The cursor that opens each page of the transcript (None for the first)."""
    cursors: list[str | None] = [None]
    while True:
        page = db.services.transcript.transcript(PRINCIPAL, session_id, cursors[-1], size)
        if not page.has_more:
            return cursors
        cursors.append(page.next_cursor)


# ---------------------------------------------------------------- 4. storage
def storage(backend: Backend, config: Config) -> dict[str, Any]:
    """Database bytes per byte of record content, branches by lineage vs branches by copy."""
    lineage = _branches(backend, config, copy=False)
    copied = _branches(backend, config, copy=True)
    same = lineage.pop("transcripts") == copied.pop("transcripts")
    return {
        "parent_turns": config.storage_parent_turns,
        "branches": config.storage_branches,
        "record_content_bytes": config.record_content_bytes,
        "lineage": lineage,
        "copy": copied,
        "copy_over_lineage": {
            key: ratio(copied[key], lineage[key])
            for key in ("bytes", "bytes_per_content_byte", "records_stored")
        },
        "same_transcripts": same,
    }


def _branches(backend: Backend, config: Config, copy: bool) -> dict[str, Any]:
    """A parent and its branches, each forked through an evenly spaced turn and given one turn."""
    with backend.database(config.limits) as db:
        baseline = db.size_bytes()
        baseline_objects = db.object_bytes()
        parent = seed.new_session(db.services, "parent")
        seeded = seed.add_turns(
            db.services,
            parent,
            config.storage_parent_turns,
            config.records_per_turn,
            config.record_content_bytes,
        )
        content = seeded.content_bytes
        copier = CopyOnForkPeer(db.store)
        branches = []
        for number in range(1, config.storage_branches + 1):
            index = max(number * config.storage_parent_turns // config.storage_branches - 1, 0)
            cut = {"mode": "through", "turn_id": seeded.turn_ids[index]}
            if copy:
                child = copier.fork(PRINCIPAL, parent, cut)
            else:
                child = str(
                    db.services.fork.fork(PRINCIPAL, parent, {"cut": cut}, None).body["session"][
                        "session_id"
                    ]
                )
            own = seed.add_turns(
                db.services,
                child,
                1,
                config.records_per_turn,
                config.record_content_bytes,
                10_000 + number,
            )
            content += own.content_bytes
            branches.append(child)
        size = db.size_bytes() - baseline
        by_object = {
            key: grown - baseline_objects.get(key, 0) for key, grown in db.object_bytes().items()
        }
        by_table: dict[str, int] = {}
        for (table, _), grown in by_object.items():
            by_table[table] = by_table.get(table, 0) + grown
        with db.engine.connect() as conn:
            stored = conn.execute(text("SELECT COUNT(*) FROM records")).scalar_one()
        transcripts = [
            seed.transcript_contents(db.services, child, config.limits.max_page_size)
            for child in branches
        ]
    return {
        "content_bytes": content,
        "bytes": size,
        "baseline_bytes": baseline,
        "bytes_per_content_byte": ratio(size, content),
        "records_stored": int(stored),
        "bytes_by_table": by_table,
        "bytes_by_object": {f"{table}.{name}" if name != table else table: size for (table, name), size in by_object.items()},
        "transcripts": transcripts,
    }
