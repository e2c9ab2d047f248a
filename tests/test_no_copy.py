"""No-copy verified, or said to be unverified: a fork that stores a full copy of the inherited state
in one item (ids kept) is caught by the bytes it writes; without write diagnostics nothing the API
shows tells it apart, and FORK-NO-COPY-001 is not verified - named in the verdict line, never a pass."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conformance.config import load
from conformance.embedded import serve_app
from conformance.results import Outcome, RunResult, Verdict
from conformance.runner import run
from reference_impl.settings import Settings
from tests.mutants.attachment_copies import (
    fork_copies_attachments,
    fork_copies_attachments_without_diagnostics,
)
from tests.mutants.diagnostics import (
    fork_checkpoints_whole_state,
    fork_checkpoints_whole_state_without_diagnostics,
)
from tests.servers import PROJECTS, TOKENS

SELECT = ["fork.fork_creates_child", "fork.fork_stores_no_copy", "diagnostics.fork_writes_by_source_size"]


def _run(build: Any, tmp_path: Path, **overrides: Any) -> RunResult:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'copy.db'}", tokens=TOKENS, projects=PROJECTS)
    with serve_app(build(settings)) as server:
        config = load(overrides={"target": server.url, "tokens": list(TOKENS), "seed": 11, "select": SELECT, **overrides},
                      environ={})
        return run(config)


def test_a_copy_into_one_item_with_honest_bytes_fails_on_the_bytes(tmp_path: Path) -> None:
    result = _run(fork_checkpoints_whole_state, tmp_path, profile="core")
    found = {v.id: v.outcome for v in result.requirements}
    assert found["FORK-NO-COPY-001"] is Outcome.FAIL and found["DIAG-FORK-WRITES-002"] is Outcome.FAIL
    assert found["DIAG-FORK-WRITES-001"] is not Outcome.FAIL  # the same number of items: the count alone is fooled
    check = next(c for c in result.checks if c.name == "fork.fork_stores_no_copy")
    writes = check.details["fork_writes"]["unkeyed"]
    items = {pair["items"] for pair in writes.values()}
    sizes = sorted(pair["bytes"] for pair in writes.values())
    assert len(items) == 1 and sizes[1] - sizes[0] > 64 * 1024, writes  # honest bytes: the copy shows
    assert result.verdict is Verdict.NOT_CONFORMANT and "FORK-NO-COPY-001" in result.summary


def test_without_write_diagnostics_no_copy_is_not_verified_in_the_verdict_line(tmp_path: Path) -> None:
    (tmp_path / "strict").mkdir()
    result = _run(fork_checkpoints_whole_state_without_diagnostics, tmp_path, profile="core")
    found = {v.id: v for v in result.requirements}
    assert found["FORK-NO-COPY-001"].outcome is Outcome.NOT_VERIFIED  # never "pass"
    check = next(c for c in result.checks if c.name == "fork.fork_stores_no_copy")
    assert check.outcome is Outcome.NOT_VERIFIED and "diagnostics.write-count" in (check.reason or "")
    assert result.verdict is Verdict.CONFORMANT and result.exit_code == 0  # without strict it does not fail
    assert "1 MUST not verified: FORK-NO-COPY-001" in result.summary, result.summary
    strict = _run(fork_checkpoints_whole_state_without_diagnostics, tmp_path / "strict", profile="core", strict=True)
    assert strict.verdict is Verdict.NOT_CONFORMANT and strict.exit_code == 1
    assert "FORK-NO-COPY-001 not verified" in strict.summary, strict.summary


ATTACHMENT_SELECT = ["fork.fork_creates_child", "fork.fork_stores_no_attachment_copy"]


def test_an_attachment_copy_with_honest_bytes_fails_att_inherit(tmp_path: Path) -> None:
    """The copies keep ids and bytes, so reads cannot tell; the bytes each fork wrote do."""
    result = _run(fork_copies_attachments, tmp_path, select=ATTACHMENT_SELECT)
    found = {v.id: v.outcome for v in result.requirements}
    assert found["ATT-INHERIT-001"] is Outcome.FAIL and found["FORK-CREATE-001"] is Outcome.PASS
    check = next(c for c in result.checks if c.name == "fork.fork_stores_no_attachment_copy")
    small, large = sorted(check.details["fork_writes"].values())
    assert large - small >= 64 * 1024 - 1, check.details  # the large attachment's bytes, written again
    assert result.verdict is Verdict.NOT_CONFORMANT and "ATT-INHERIT-001" in result.summary


def test_an_attachment_copy_without_write_diagnostics_is_not_verified(tmp_path: Path) -> None:
    result = _run(fork_copies_attachments_without_diagnostics, tmp_path, select=ATTACHMENT_SELECT)
    found = {v.id: v.outcome for v in result.requirements}
    assert found["ATT-INHERIT-001"] is Outcome.NOT_VERIFIED  # never "pass"
    check = next(c for c in result.checks if c.name == "fork.fork_stores_no_attachment_copy")
    assert check.outcome is Outcome.NOT_VERIFIED and "diagnostics.write-count" in (check.reason or "")
    assert "1 MUST not verified: ATT-INHERIT-001" in result.summary, result.summary
