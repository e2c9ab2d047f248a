"""Cleanup: what a run creates is purged as its creator at the end, unless `--keep`, and listed otherwise."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from conformance.cleanup import CreatedSessions
from conformance.cli import main
from conformance.embedded import serve_app
from reference_impl.http import create_app
from reference_impl.settings import Settings
from tests.servers import PROJECTS, TOKENS

CHECKS = ["fork.", "authorization.grants", "transcript."]


@pytest.fixture(autouse=True)
def _no_outside_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("CONFIG", "TARGET", "TOKENS", "PROFILE", "SKIP_PREFLIGHT", "EXPECTED_FAILURES", "REPLICAS", "KEEP"):
        monkeypatch.delenv(f"SESSION_LINEAGE_{name}", raising=False)


def _run(tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str, disabled: tuple[str, ...] = ()) -> tuple[dict, int]:
    database = tmp_path / "a.db"
    settings = Settings(database_url=f"sqlite:///{database}", tokens=TOKENS, projects=PROJECTS, disabled_capabilities=disabled)
    report = tmp_path / "report.json"
    with serve_app(create_app(settings)) as running:
        tokens = [arg for token in TOKENS for arg in ("--token", token)]
        select = [arg for name in CHECKS for arg in ("--select", name)]
        code = main(["check", "--quiet", "--target", running.url, *tokens, *select, "--report-json", str(report), *extra])
    capsys.readouterr()
    engine = sa.create_engine(f"sqlite:///{database}")
    with engine.connect() as connection:
        remaining = connection.execute(sa.text("SELECT count(*) FROM sessions")).scalar_one()
    engine.dispose()
    return json.loads(report.read_text()), remaining


def test_a_run_purges_everything_it_created(tmp_path, capsys) -> None:
    report, remaining = _run(tmp_path, capsys)
    cleanup = report["cleanup"]
    assert cleanup["created"] > 10, cleanup
    assert sorted(cleanup["removed"]) == sorted(set(cleanup["removed"])) and len(cleanup["removed"]) == cleanup["created"]
    assert cleanup["left_behind"] == [] and cleanup["note"].startswith(f"removed {cleanup['created']} of")
    assert remaining == 0, f"{remaining} sessions are still stored after the run"


def test_keep_keeps_everything(tmp_path, capsys) -> None:
    report, remaining = _run(tmp_path, capsys, "--keep")
    cleanup = report["cleanup"]
    assert cleanup["removed"] == [] and cleanup["kept"] is True
    assert remaining == cleanup["created"] > 10


def test_without_sharing_nothing_can_be_removed_and_everything_is_listed(tmp_path, capsys) -> None:
    report, remaining = _run(tmp_path, capsys, "--profile", "core", disabled=("sharing", "attachments"))
    cleanup = report["cleanup"]
    assert cleanup["removed"] == [] and len(cleanup["left_behind"]) == cleanup["created"] == remaining > 10
    assert "does not advertise `sharing`" in cleanup["note"]


def test_parents_wait_for_their_children() -> None:
    """A purge answering 409 (a live descendant) is asked again after every newer session went."""
    created = CreatedSessions("p-")
    created.add(["p-root"], "principal-1")
    created.add(["p-child"], "principal-2")
    created.add(["p-grandchild"], "principal-1")
    gone: set[str] = set()
    parents = {"p-grandchild": "p-child", "p-child": "p-root"}
    calls: list[tuple[str, str | None]] = []

    def purge(session: str, creator: str | None) -> int:
        calls.append((session, creator))
        if any(parents.get(child) == session for child in parents if child not in gone):
            return 409
        gone.add(session)
        return 204

    cleanup = created.finish(False, purge, workers=1)
    assert sorted(cleanup.removed) == ["p-child", "p-grandchild", "p-root"] and cleanup.left_behind == []
    assert calls[0] == ("p-grandchild", "principal-1") and ("p-child", "principal-2") in calls
