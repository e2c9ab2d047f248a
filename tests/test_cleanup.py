"""Cleanup: what a run creates is purged as its creator at the end, unless `--keep`, and listed otherwise."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from conformance.cleanup import CreatedSessions
from conformance.cli import main
from conformance.embedded import serve_app
from reference_impl.http import create_app
from reference_impl.settings import Settings
from conformance.results import Exchange
from tests.servers import PROJECTS, TOKENS, start_server, write_tokens

CHECKS = ["fork.", "authorization.grants", "transcript."]


@pytest.fixture(autouse=True)
def _no_outside_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("CONFIG", "TARGET", "TOKENS", "PROFILE", "SKIP_PREFLIGHT", "EXPECTED_FAILURES", "REPLICAS", "KEEP"):
        monkeypatch.delenv(f"SESSION_LINEAGE_{name}", raising=False)


def _stored(database: Path) -> int:
    engine = sa.create_engine(f"sqlite:///{database}")
    with engine.connect() as connection:
        remaining = connection.execute(sa.text("SELECT count(*) FROM sessions")).scalar_one()
    engine.dispose()
    return int(remaining)


def _run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str, disabled: tuple[str, ...] = (),
    checks: list[str] = CHECKS, wrap: Callable[[Any], Any] | None = None,
) -> tuple[dict, int]:
    database = tmp_path / "a.db"
    settings = Settings(database_url=f"sqlite:///{database}", tokens=TOKENS, projects=PROJECTS, disabled_capabilities=disabled)
    report = tmp_path / "report.json"
    app = create_app(settings)
    with serve_app(wrap(app) if wrap else app) as running:
        tokens = [arg for token in TOKENS for arg in ("--token", token)]
        select = [arg for name in checks for arg in ("--select", name)]
        main(["check", "--quiet", "--target", running.url, *tokens, *select, "--report-json", str(report), *extra])
    capsys.readouterr()
    return json.loads(report.read_text()), _stored(database)


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


def test_a_legacy_import_run_leaves_nothing_behind(tmp_path, capsys) -> None:
    """Imports create sessions (and their fork parents) with ids the server chooses: tracked, purged, verified."""
    report, remaining = _run(tmp_path, capsys, checks=["legacy_import"])
    cleanup = report["cleanup"]
    server_chosen = [sid for sid in cleanup["removed"] if not sid.startswith(cleanup["prefix"])]
    assert len(server_chosen) >= 10, cleanup  # the imported sessions
    assert cleanup["left_behind"] == [] and cleanup["note"].endswith("verified by listing as 5 principals: none left")
    assert remaining == 0, f"{remaining} sessions are still stored after the run"


def test_a_purge_that_lies_is_caught_by_the_listing(tmp_path, capsys) -> None:
    """A target whose purge answers 204 and keeps the session: the listing finds every one, with its id."""

    def lying(app: Any) -> Any:
        async def wrapped(scope, receive, send):
            if scope["type"] == "http" and scope["method"] == "POST" and scope["path"].endswith("/purge"):
                await send({"type": "http.response.start", "status": 204, "headers": []})
                await send({"type": "http.response.body", "body": b""})
                return
            await app(scope, receive, send)

        return wrapped

    report, remaining = _run(tmp_path, capsys, checks=["fork.idempotent_retry"], wrap=lying)
    cleanup = report["cleanup"]
    assert remaining > 0 and len(cleanup["left_behind"]) == remaining, (remaining, cleanup)
    assert f"{remaining} left behind (verified by listing as 5 principals; seen by principal-1" in cleanup["note"]
    assert cleanup["left_behind"][0] in cleanup["note"]


def _exchange(url: str, status: int, body: dict, principal: str = "principal-1") -> Exchange:
    return Exchange("POST", url, {}, None, status, {}, json.dumps(body).encode(), principal)


def test_every_way_a_session_comes_to_exist_is_recorded() -> None:
    created = CreatedSessions("p-")
    created.scan([
        _exchange("http://h/imports", 201, {"session_id": "child", "parent_session_id": "parent"}),
        _exchange("http://h/imports", 200, {"session_id": "again", "parent_session_id": None}),
        _exchange("http://h/sessions/p-a/fork", 200, {"session": {"session_id": "replayed-child"}}),
        _exchange("http://h/sessions", 201, {"session_id": "p-same"}, "principal-1"),
        _exchange("http://h/sessions", 201, {"session_id": "p-same"}, "principal-5"),
        _exchange("http://h/sessions", 200, {"session_id": "p-not-created"}),
    ])
    assert created.ids == ["parent", "child", "again", "replayed-child", "p-same"]
    assert ("p-same", "principal-5") in created.pairs and ("p-same", "principal-1") in created.pairs
    purged: list[tuple[str, str | None]] = []
    cleanup = created.finish(False, lambda sid, who: purged.append((sid, who)) or 204, workers=1)
    assert ("p-same", "principal-5") in purged and cleanup.left_behind == []


def test_the_plugins_cleanup_purges_and_verifies(tmp_path) -> None:
    """What the plugin does at the end (pytest_plugin._cleanup), in-process: purge, then list."""
    from conformance.config import load
    from conformance.pytest_plugin import _cleanup
    from conformance.registry import all_checks, select
    from conformance.target import Target

    database = tmp_path / "in-process.db"
    settings = Settings(database_url=f"sqlite:///{database}", tokens=TOKENS, projects=PROJECTS)
    with serve_app(create_app(settings)) as running:
        suite = load(overrides={"target": running.url, "tokens": list(TOKENS), "seed": 3}, environ={})
        target = Target(suite)
        try:
            for item in select(all_checks(), ("legacy_import.forked_pair", "authorization.projects_and_ids")):
                target.run_check(item)
            cleanup = _cleanup(target, suite)
        finally:
            target.close()
    assert len(cleanup.removed) >= 4 and cleanup.left_behind == [], cleanup
    assert cleanup.note.endswith("verified by listing as 5 principals: none left")
    assert _stored(database) == 0


@pytest.mark.deep  # two processes (a served reference and pytest with the plugin): about 15-20 s
def test_a_plugin_run_purges_and_verifies(tmp_path) -> None:
    from tests.test_pytest_plugin import run_pytest

    database = tmp_path / "plugin.db"
    process = start_server(f"sqlite:///{database}", write_tokens(tmp_path))
    try:
        tokens = [arg for token in TOKENS for arg in ("--sl-token", token)]
        done = run_pytest(
            tmp_path, "--sl-target", process.url, *tokens,
            "--sl-select", "legacy_import.forked_pair", "--sl-select", "authorization.projects_and_ids",
        )
        remaining = _stored(database)
    finally:
        process.kill()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "verified by listing as 5 principals: none left" in done.stdout, done.stdout
    assert remaining == 0, f"{remaining} sessions are still stored after the plugin run"


@pytest.mark.deep
def test_a_full_run_leaves_nothing_behind(tmp_path, capsys) -> None:
    report, remaining = _run(tmp_path, capsys, checks=[])
    cleanup = report["cleanup"]
    assert report["summary"]["checks"] > 150 and cleanup["left_behind"] == []
    assert remaining == 0, f"{remaining} sessions are still stored after the full run"


def test_sessions_purged_early_are_not_purged_again_and_a_failed_early_purge_is_retried() -> None:
    """A finished check's sessions are purged while the run goes on (`purge_some`); the cleanup at
    the end asks only about those not already answered 204 or 404, and counts them all."""
    created = CreatedSessions("p-")
    created.add(["p-parent"], "principal-1")
    created.add(["p-child"], "principal-1")
    created.add(["p-flaky"], "principal-2")
    created.add(["p-late"], "principal-1")
    gone: set[str] = set()
    calls: list[str] = []
    flaky: list[str] = []

    def purge(session: str, creator: str | None) -> int:
        calls.append(session)
        if session == "p-parent" and "p-child" not in gone:
            return 409
        if session == "p-flaky" and not flaky:
            flaky.append(session)
            return 503
        gone.add(session)
        return 204

    created.purge_some([("p-parent", "principal-1"), ("p-child", "principal-1")], purge)
    assert calls == ["p-child", "p-parent"]  # newest first: the child before its parent, no 409 to retry
    created.purge_some([("p-flaky", "principal-2")], purge)
    calls.clear()
    cleanup = created.finish(False, purge, workers=1)
    assert calls == ["p-late", "p-flaky"], calls  # neither p-child nor p-parent is asked again
    assert sorted(cleanup.removed) == ["p-child", "p-flaky", "p-late", "p-parent"] and cleanup.left_behind == []
    assert cleanup.note.startswith("removed 4 of 4")


def test_an_early_purge_answering_409_is_asked_again_within_its_batch() -> None:
    created = CreatedSessions("p-")
    pairs = [("p-child", "principal-1"), ("p-parent", "principal-1")]  # created in this order: an odd pair
    gone: set[str] = set()

    def purge(session: str, creator: str | None) -> int:
        if session == "p-child" and "p-parent" not in gone:  # here the later session is the one that must wait
            return 409
        gone.add(session)
        return 204

    created.add([sid for sid, _ in pairs], "principal-1")
    created.purge_some(pairs, purge)
    assert gone == {"p-child", "p-parent"}
    assert created.finish(False, lambda *_: pytest.fail("nothing is left to purge"), workers=1).left_behind == []


def test_early_purges_run_beside_the_checks_and_stay_out_of_their_exchanges(tmp_path) -> None:
    """`Target.purge_soon` purges through clients of its own: a running check's recorded exchanges
    (its reproducers, the sessions it created) never show a purge."""
    from conformance.config import load
    from conformance.target import Target

    settings = Settings(database_url=f"sqlite:///{tmp_path / 'early.db'}", tokens=TOKENS, projects=PROJECTS)
    with serve_app(create_app(settings)) as running:
        config = load(overrides={"target": running.url, "tokens": list(TOKENS)}, environ={})
        target = Target(config)
        try:
            made = target.clients[0].post("/sessions", json={"session_id": f"{config.id_prefix}early"})
            assert made.status == 201
            target.created.scan(target.recorder.exchanges)
            target.discover()  # read once, before the check's exchanges are watched
            target.recorder.clear()
            target.purge_soon(target.created.pairs)
            cleanup = target.cleanup()
        finally:
            target.close()
    assert cleanup.removed == [f"{config.id_prefix}early"] and cleanup.left_behind == []
    assert target.recorder.exchanges == []  # neither the early purge nor the cleanup asked again
    assert _stored(tmp_path / "early.db") == 0
