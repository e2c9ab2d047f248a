"""Preflight: each set-up mistake stops the run with exit code 2 and its own message; no check runs.

Every test uses real servers (the reference app served on a loopback port, or `session-lineage
serve` in a subprocess) and the real command line.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conformance.cli import main
from conformance.embedded import serve_app
from conformance.preflight import ITEM_NAMES
from reference_impl.http import create_app
from reference_impl.settings import Settings
from tests.servers import start_server

TOKENS = {"preflight-alice-token": "alice", "preflight-bob-token": "bob"}
GOOD = ["--token", "preflight-alice-token", "--token", "preflight-bob-token"]


@pytest.fixture(autouse=True)
def _no_outside_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("CONFIG", "TARGET", "TOKENS", "PROFILE", "SKIP_PREFLIGHT", "EXPECTED_FAILURES", "REPLICAS"):
        monkeypatch.delenv(f"SESSION_LINEAGE_{name}", raising=False)


@pytest.fixture
def server(tmp_path: Path):
    with serve_app(create_app(Settings(database_url=f"sqlite:///{tmp_path / 'a.db'}", tokens=TOKENS))) as running:
        yield running


def check(capsys: pytest.CaptureFixture[str], tmp_path: Path, *args: str) -> tuple[int, str]:
    """Run `check` with a JSON report requested; preflight must leave no report behind."""
    report = tmp_path / "out" / "report.json"
    if "--select" not in args:  # two principals: a selection that needs no more (the `roles` tests say otherwise)
        args = (*args, "--select", "fork")
    code = main(["check", "--quiet", "--report-json", str(report), *args])
    err = capsys.readouterr().err
    if code == 2:
        assert not report.exists(), "a report was written although preflight failed"
        assert "Session Lineage conformance" not in err, "checks ran although preflight failed"
        assert "no check ran" in err
    return code, err


def failed_items(err: str) -> dict[str, str]:
    """Failed preflight items and their messages, as printed."""
    items = {}
    for line in err.splitlines():
        if line.startswith("  failed   "):
            name, message = line.removeprefix("  failed   ").split(": ", 1)
            items[name] = message
    return items


def test_a_correct_set_up_passes_every_item(server, tmp_path, capsys) -> None:
    code, err = check(capsys, tmp_path, "--target", server.url, *GOOD, "--select", "capabilities.discovery_document")
    assert code == 0, err
    first = next(line for line in err.splitlines() if line.startswith("preflight"))
    assert first.startswith("preflight ok: reachable (answers), capabilities (spec ")
    assert "tokens (2 accepted), principals (2 distinct), roles (1 needed (owner), 2 given; projects: 1 in default), replicas (none), reports (1 writable)" in first
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert [item["name"] for item in report["preflight"]] == list(ITEM_NAMES)
    # the session preflight created to tell the principals apart is purged with the rest
    assert any(session.endswith("preflight-p1") for session in report["cleanup"]["removed"])
    assert report["cleanup"]["left_behind"] == []


def test_unreachable_target(tmp_path, capsys) -> None:
    code, err = check(capsys, tmp_path, "--target", "http://127.0.0.1:9", "--token", "a", "--token", "b")
    assert code == 2
    assert failed_items(err) == {
        "reachable": "target unreachable: GET http://127.0.0.1:9/capabilities: ConnectError: [Errno 111] Connection refused"
    }
    assert "not run  tokens: not run: needs 'reachable'" in err


def test_wrong_token(server, tmp_path, capsys) -> None:
    code, err = check(capsys, tmp_path, "--target", server.url, "--token", "preflight-alice-token", "--token", "not-a-token")
    assert code == 2
    problems = failed_items(err)
    assert list(problems) == ["tokens"]
    assert problems["tokens"].startswith("token 2 is not accepted: GET /sessions/slc-")
    assert problems["tokens"].endswith("-preflight-absent answered 401 (is it in the server's tokens file?)")
    assert "  not run  principals: not run: needs 'tokens'" in err


def test_two_tokens_of_one_principal(tmp_path, capsys) -> None:
    tokens_file = tmp_path / "tokens.yaml"
    tokens_file.write_text("first-token-of-alice: alice\nsecond-token-of-alice: alice\n")
    process = start_server(f"sqlite:///{tmp_path / 'served.db'}", tokens_file)
    try:
        code, err = check(
            capsys, tmp_path, "--target", process.url, "--token", "first-token-of-alice", "--token", "second-token-of-alice"
        )
    finally:
        process.kill()
    assert code == 2
    assert failed_items(err) == {
        "principals": "tokens 1 and 2 act as one principal: principal 2 can read the session principal 1 "
        "created (give each token its own principal)"
    }


def test_replicas_that_do_not_share_data(tmp_path, capsys) -> None:
    first = create_app(Settings(database_url=f"sqlite:///{tmp_path / 'one.db'}", tokens=TOKENS))
    second = create_app(Settings(database_url=f"sqlite:///{tmp_path / 'two.db'}", tokens=TOKENS))
    with serve_app(first) as one, serve_app(second) as two:
        code, err = check(capsys, tmp_path, "--target", one.url, *GOOD, "--config", str(_config(tmp_path, two.url)))
    assert code == 2
    message = failed_items(err)["replicas"]
    assert message.startswith(f"replica {two.url} answered 404 for session slc-")
    assert message.endswith(f"created through {one.url}: the replicas do not share data (point them at one database)")


def test_unwritable_report_path(server, tmp_path, capsys) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    code, err = check(capsys, tmp_path, "--target", server.url, *GOOD, "--junit", str(blocker / "junit.xml"))
    assert code == 2
    assert failed_items(err) == {"reports": f"cannot write the JUnit report to {blocker / 'junit.xml'}: {blocker} is not a directory"}


def test_unknown_names_in_the_expected_failures_file(server, tmp_path, capsys) -> None:
    expected = tmp_path / "expected.yaml"
    expected.write_text(
        "- check: fork.idempotent_retry\n  reason: real\n"
        "- check: fork.no_such_check\n  reason: typo\n"
        "- requirement: FORK-NOPE-001\n  reason: typo\n"
    )
    code, err = check(capsys, tmp_path, "--target", server.url, *GOOD, "--expected-failures", str(expected))
    assert code == 2
    assert failed_items(err) == {
        "expected-failures": f"expected-failures file {expected}: names unknown checks: fork.no_such_check "
        "(see `check --list`); names unknown requirements: FORK-NOPE-001"
    }


async def _spec_two(scope, receive, send) -> None:
    """A server of a later major version: its capability document says 2.0.0."""
    assert scope["type"] == "http"
    body = json.dumps(
        {"spec_version": "2.0.0", "capabilities": ["fork"], "limits": {}, "diagnostics": {"query_count": False}}
    ).encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})


def test_another_major_spec_version(tmp_path, capsys) -> None:
    with serve_app(_spec_two) as running:
        code, err = check(capsys, tmp_path, "--target", running.url, *GOOD, "--skip-preflight", "tokens")
    assert code == 2
    suite_major = "1"
    assert failed_items(err)["capabilities"].startswith(
        f"the target implements spec_version 2.0.0; this suite checks major version {suite_major} (spec 1."
    )
    assert "use a suite of major version 2" in err


def test_invalid_capability_document(tmp_path, capsys) -> None:
    async def no_limits(scope, receive, send) -> None:
        body = json.dumps({"spec_version": "1.0.0", "capabilities": ["fork"], "diagnostics": {"query_count": False}})
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body.encode()})

    with serve_app(no_limits) as running:
        code, err = check(capsys, tmp_path, "--target", running.url, *GOOD, "--skip-preflight", "tokens")
    assert code == 2
    assert failed_items(err)["capabilities"] == "capability document invalid at /: 'limits' is a required property (CAP-DOC-001)"


def test_every_failure_is_reported_together(server, tmp_path, capsys) -> None:
    expected = tmp_path / "expected.yaml"
    expected.write_text("- check: nope.nothing\n  reason: typo\n")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    code, err = check(
        capsys, tmp_path, "--target", server.url, "--token", "preflight-alice-token", "--token", "wrong",
        "--expected-failures", str(expected), "--html", str(blocker / "r.html"),
    )
    assert code == 2
    assert set(failed_items(err)) == {"tokens", "reports", "expected-failures"}
    assert err.splitlines()[1] == "preflight failed: tokens, reports, expected-failures"


def test_skip_preflight_rejects_unknown_names(tmp_path, capsys) -> None:
    code = main(["check", "--target", "http://127.0.0.1:9", "--token", "a", "--token", "b", "--skip-preflight", "tokens,dns"])
    assert code == 2
    assert "unknown preflight item(s) dns" in capsys.readouterr().err


def test_a_skipped_item_is_not_run(server, tmp_path, capsys) -> None:
    code, err = check(
        capsys, tmp_path, "--target", server.url, "--token", "preflight-alice-token", "--token", "wrong",
        "--skip-preflight", "tokens,principals", "--select", "capabilities.discovery_document",
    )
    assert code == 0, err  # the run went ahead; the discovery check needs no second principal
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    statuses = {item["name"]: item["status"] for item in report["preflight"]}
    assert statuses["tokens"] == statuses["principals"] == "skipped"


def _config(tmp_path: Path, replica: str) -> Path:
    path = tmp_path / "suite.yaml"
    path.write_text(f"replicas: [{replica}]\n")
    return path


# ---------------------------------------------------------------- roles: principals and projects
FIVE = {"r-alice": "alice", "r-bob": "bob", "r-carol": "carol", "r-dave": "dave", "r-erin": "erin"}
FIVE_TOKENS = [arg for token in FIVE for arg in ("--token", token)]


def test_roles_needed_are_read_from_the_checks() -> None:
    from conformance.registry import all_checks, select
    from conformance.roles_needed import roles_needed

    assert list(roles_needed(all_checks())) == ["owner", "stranger", "reader", "writer", "outsider"]
    assert "authorization.grants" in roles_needed(all_checks())["outsider"]
    # revert asks for a reader only `if ... len(ctx.clients) >= 3`: optional, not needed
    assert list(roles_needed(select(all_checks(), ("revert",)))) == ["owner", "stranger"]
    assert list(roles_needed(select(all_checks(), ("capabilities.discovery_document",)))) == ["owner"]


def test_two_tokens_for_the_whole_suite_exit_2_naming_the_missing_roles(server, tmp_path, capsys) -> None:
    import time

    started = time.monotonic()
    code, err = check(capsys, tmp_path, "--target", server.url, *GOOD, "--select", "")
    assert code == 2 and time.monotonic() - started < 15
    message = failed_items(err)["roles"]
    assert list(failed_items(err)) == ["roles"]
    assert message.startswith(
        "the selected checks need 5 principals (owner, stranger, reader, writer, outsider); the configuration "
        "gives 2 (owner, stranger): missing reader, writer and outsider"
    )
    assert "--token" in message and "SESSION_LINEAGE_TOKENS=owner=A,stranger=B" in message


def test_a_selection_needs_only_its_own_roles(server, tmp_path, capsys) -> None:
    code, err = check(capsys, tmp_path, "--target", server.url, *GOOD, "--select", "authorization.soft_delete")
    assert code == 2
    message = failed_items(err)["roles"]
    assert message.startswith("the selected checks need 2 principals (owner, reader); the configuration gives 2 (owner, stranger): missing reader (e.g. authorization.soft_delete needs reader)"), message


def test_five_principals_in_one_project_exit_2_naming_the_layout(tmp_path, capsys) -> None:
    with serve_app(create_app(Settings(database_url=f"sqlite:///{tmp_path / 'one.db'}", tokens=FIVE))) as running:
        code, err = check(capsys, tmp_path, "--target", running.url, *FIVE_TOKENS, "--select", "authorization.grants")
    assert code == 2
    assert list(failed_items(err)) == ["roles"]
    assert failed_items(err)["roles"].startswith(
        "the project layout is wrong: owner, stranger, reader and writer must share a project and the outsider "
        "must be in another; GET /me shows owner alice@default, reader carol@default, "
        "writer dave@default, outsider erin@default (outsider misplaced)"
    )


def test_five_principals_with_the_outsider_elsewhere_pass(tmp_path, capsys) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'two.db'}", tokens=FIVE, projects={"erin": "globex"})
    with serve_app(create_app(settings)) as running:
        code, err = check(capsys, tmp_path, "--target", running.url, *FIVE_TOKENS, "--select", "capabilities.discovery_document")
    assert code == 0, err
    assert "roles (1 needed (owner), 5 given; projects: 1 in default)" in err


def test_without_sharing_the_layout_is_not_checked_and_says_so(tmp_path, capsys) -> None:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'bare.db'}", tokens=TOKENS, disabled_capabilities=("sharing", "attachments")
    )
    with serve_app(create_app(settings)) as running:
        code, err = check(capsys, tmp_path, "--target", running.url, *GOOD, "--profile", "core", "--select", "fork.idempotent_retry")
    assert code == 0, err
    assert "project layout not checked: the target does not advertise `sharing` (no GET /me)" in err
