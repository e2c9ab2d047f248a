"""The benchmarks' exact, deterministic properties in a tiny configuration; no timing assertions.

Times on a shared machine are noise; statement counts and rows written are not, so they are what
these tests pin down.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest
from benchmarks import TINY, run_all
from benchmarks import __main__ as benchmarks_main
from benchmarks.__main__ import main
from benchmarks.layouts import LAYOUTS, REFERENCE
from benchmarks.report import _storage_evidence, render
from reference_impl.store import tables
from sqlalchemy import create_engine, inspect, text


@pytest.fixture(scope="module")
def results() -> dict[str, Any]:
    """One tiny run on SQLite, shared by every test in this module."""
    return run_all(TINY)


@pytest.fixture(scope="module")
def sqlite(results: dict[str, Any]) -> dict[str, Any]:
    return results["backends"]["sqlite"]


def test_reference_fork_cost_is_the_same_at_every_source_size(sqlite: dict[str, Any]) -> None:
    rows = sqlite["fork_cost"]["rows"]
    assert [row["source_turns"] for row in rows] == list(TINY.fork_source_turns)
    assert len({row["lineage"]["statements"] for row in rows}) == 1
    assert len({row["lineage"]["rows_written"] for row in rows}) == 1
    # the child's session row and lineage row, and the source's child count (purge guard)
    assert rows[0]["lineage"]["rows_written"] == 3
    assert rows[0]["lineage"]["statements"] <= 6


def test_copy_on_fork_rows_written_grow_with_the_source(sqlite: dict[str, Any]) -> None:
    rows = sqlite["fork_cost"]["rows"]
    written = [row["copy"]["rows_written"] for row in rows]
    assert written == sorted(written) and len(set(written)) == len(written)
    for row in rows:
        assert row["copy"]["rows_written"] == 1 + row["source_turns"] + row["source_records"]
        assert row["same_transcript"]


def test_reference_transcript_read_costs_the_same_statements_at_every_depth(
    sqlite: dict[str, Any],
) -> None:
    rows = sqlite["transcript_depth"]["rows"]
    assert [row["depth"] for row in rows] == [0, 1, 5, TINY.limits.max_lineage_depth]
    assert {row["lineage"]["statements"] for row in rows} == {2}
    assert all(row["same_records"] for row in rows)


def test_per_ancestor_reader_statements_grow_with_depth(sqlite: dict[str, Any]) -> None:
    rows = sqlite["transcript_depth"]["rows"]
    assert [row["per_ancestor"]["statements"] for row in rows] == [
        2 * (row["depth"] + 1) for row in rows
    ]


def test_reference_page_costs_the_same_statements_first_and_last(sqlite: dict[str, Any]) -> None:
    section = sqlite["page_position"]
    rows = {row["position"]: row for row in section["rows"]}
    assert rows["first"]["cursor"]["statements"] == rows["last"]["cursor"]["statements"] == 2
    assert rows["last"]["offset"] == (section["pages"] - 1) * TINY.page_size
    assert all(row["same_records"] for row in rows.values())


def test_fork_point_is_one_turn_lookup_while_the_scan_grows(sqlite: dict[str, Any]) -> None:
    rows = sqlite["fork_point"]["rows"]
    for row in rows:
        assert row["lineage"]["turn_lookups_in_fork"] == 1
        assert row["lineage"]["statements"] == 1
        assert row["history_scan"]["statements"] == row["source_turns"] - row["target_turn_index"]
    scans = [row["history_scan"]["statements"] for row in rows]
    assert scans == sorted(scans) and scans[0] < scans[-1]


def test_storage_copies_records_and_lineage_does_not(sqlite: dict[str, Any]) -> None:
    section = sqlite["storage"]
    own = (TINY.storage_parent_turns + TINY.storage_branches) * TINY.records_per_turn
    assert section["lineage"]["records_stored"] == own
    assert section["copy"]["records_stored"] > own
    assert section["lineage"]["content_bytes"] == section["copy"]["content_bytes"]
    assert section["same_transcripts"]
    for part in (section["lineage"], section["copy"]):  # each table's bytes are its rows' and its indexes'
        objects = part["bytes_by_object"]
        assert part["bytes_by_table"] == {
            table: sum(size for name, size in objects.items() if name == table or name.startswith(f"{table}."))
            for table in part["bytes_by_table"]
        }
    # At these sizes the lineage's records may still fit in the page an empty table has (growth 0);
    # the copies never do.
    assert section["copy"]["bytes_by_object"]["records"] > section["lineage"]["bytes_by_object"]["records"] >= 0


def test_layouts_probe_writes_the_storage_scenario_in_each_layout(sqlite: dict[str, Any]) -> None:
    section = sqlite["storage"]
    probed = section["layouts"]
    assert [row["layout"] for row in probed] == list(LAYOUTS)
    for row in probed:
        assert row["records"] == section["lineage"]["records_stored"]
        assert row["content_bytes"] == row["records"] * TINY.record_content_bytes
        # at these sizes the rows may fit in the pages an empty table already has: growth can be 0
        assert row["bytes"] >= 0 and row["bytes_per_content_byte"] == row["bytes"] / row["content_bytes"]


def test_layouts_probe_starts_from_the_reference_schema() -> None:
    """The probe's `REFERENCE` layout is the reference's own records and turns tables, column for
    column, so that comparing it with the real measurement checks the probe."""
    engine = create_engine("sqlite://")
    with engine.begin() as conn:
        for statement in LAYOUTS[REFERENCE]:
            conn.execute(text(statement.format(no_rowid="WITHOUT ROWID")))
        for table in (tables.records, tables.turns):
            probed = {column["name"]: column for column in inspect(conn).get_columns(f"probe_{table.name}")}
            assert list(probed) == [column.name for column in table.columns]
            assert [name for name, column in probed.items() if column["nullable"]] == [
                column.name for column in table.columns if column.nullable and not column.primary_key
            ]


def test_turn_write_turn_by_position_and_export_cost_the_same_at_every_length(sqlite: dict[str, Any]) -> None:
    """A message pair is one request of at most 8 statements; a turn by position and the whole
    transcript are one request each, with the same statements whatever the length."""
    rows = sqlite["versus"]["reference_costs"]["rows"]
    assert [row["turns"] for row in rows] == [*TINY.versus_turns, *TINY.versus_read_turns]
    for row in rows:
        assert max(row["pair_statements"]) <= 8, row
        assert row["pair_replay_statements"] <= row["pair_with_key_statements"], row
        assert row["full_read_records"] == 2 * (row["turns"] + 1)  # every pair, and the keyed one once
    assert len({tuple(row["pair_statements"]) for row in rows}) == 1
    assert len({row["turn_at_statements"] for row in rows}) == 1
    assert len({row["full_read_statements"] for row in rows}) == 1


def test_records_examined_per_page_stay_within_the_page_at_any_depth(sqlite: dict[str, Any]) -> None:
    section = sqlite["rows_per_page"]
    assert {row["depth"] for row in section["rows"]} == {0, max(TINY.transcript_depths)}
    assert section["first_page_equal"], section["rows"]
    for row in section["rows"]:
        assert row["records_returned"] <= section["page_size"]
        assert row["records_examined"] is not None and row["records_examined"] <= section["page_size"] + 3, row


def test_report_and_json_carry_every_section(results: dict[str, Any]) -> None:
    markdown = render(results)
    for title in (
        "Fork cost",
        "Transcript read",
        "Page cost",
        "Storage",
        "Layouts probe",
        "fork point",
        "not measured here",
        "Records examined per page",
        "Against LangGraph",
        "Reference statements per step",
    ):
        assert title in markdown
    decoded = json.loads(json.dumps(results))
    assert {"python", "sqlite", "cpu_count", "date"} <= decoded["machine"].keys()


def test_quick_command_writes_the_report_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # --all-cpus: a run on one CPU would leave the threads it starts (the served reference's) on it
    assert main(["--quick", "--repeats", "1", "--output-dir", str(tmp_path), "--all-cpus"]) == 0
    assert (tmp_path / "latest.md").read_text().startswith("# Session lineage benchmarks")
    data = json.loads((tmp_path / "latest.json").read_text())
    assert data["config"]["name"] == "quick"
    assert data["machine"]["timed_on_cpu"] is None
    assert "Timed on every CPU" in (tmp_path / "latest.md").read_text()
    assert "peer / reference" in capsys.readouterr().out


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="this system cannot pin a process to a CPU")
def test_a_run_is_timed_on_one_cpu_and_says_which(
    tmp_path: Path, results: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """By default every comparison runs on one CPU (benchmarks/cpus.py), and the process may use
    every CPU again afterwards; the report names the CPU."""
    allowed = os.sched_getaffinity(0)
    seen: list[set[int]] = []

    def run_all(*_args: Any, **_kwargs: Any) -> dict[str, Any]:
        seen.append(os.sched_getaffinity(0))
        return copy.deepcopy(results)

    monkeypatch.setattr(benchmarks_main, "run_all", run_all)
    assert main(["--quick", "--output-dir", str(tmp_path)]) == 0
    assert seen == [{min(allowed)}]
    assert os.sched_getaffinity(0) == allowed
    assert json.loads((tmp_path / "latest.json").read_text())["machine"]["timed_on_cpu"] == min(allowed)
    assert f"Timed on one CPU (CPU {min(allowed)})" in (tmp_path / "latest.md").read_text()


def test_storage_reason_names_the_probed_layouts_that_meet_the_target() -> None:
    """A missed storage target cites, per layout the probe wrote, its bytes per content byte with
    the rest of the schema added, and which of them meet the target."""
    content = 1_000
    lineage = {
        "records_stored": 10, "content_bytes": content, "bytes": 3_000, "bytes_per_content_byte": 3.0,
        "bytes_by_object": {"records": 2_000, "turns": 800, "sessions": 200},
    }
    probed = [
        {"layout": "text ids", "bytes_per_content_byte": 2.8},
        {"layout": "derived ids", "bytes_per_content_byte": 1.7},
    ]
    store = {"lineage": lineage, "copy": {"bytes_per_content_byte": 9.0}, "layouts": probed}
    evidence = _storage_evidence(store, 2.0)
    assert evidence.endswith("text ids 3.00; derived ids 1.90 (meets it)"), evidence
    assert _storage_evidence({**store, "layouts": []}, 2.0).endswith("stored nowhere")


def test_the_streaming_memory_target_compares_streamed_reads_only() -> None:
    """An export of up to 2,000 turns and records is read whole, so the memory target compares the
    smallest streamed read with the largest (the committed run reads 100 and 200 turns whole)."""
    data = json.loads((Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "latest.json").read_text())
    reads = data["backends"]["sqlite"]["versus"]["reads"]
    streamed = [row["turns"] for row in reads if not row["full_read"]["floors"].get("http_reads_whole")]
    whole = [row["turns"] for row in reads if row["full_read"]["floors"].get("http_reads_whole")]
    assert whole and len(streamed) >= 2, (whole, streamed)
    line = next(line for line in render(data).splitlines() if "export over HTTP streams" in line)
    assert f"at {max(streamed):,} turns" in line and f"at {min(streamed):,} (" in line, line
