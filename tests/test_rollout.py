"""Rollout: the typed client against both server modes, the suite against the legacy server and
against a server whose responses carry members and values of a later minor version, claims at a
version, and the removal condition of `replay_history`.

Deployment-verified requirements named here: VERSION-OPEN-RESPONSE-001 (the suite and the client
read responses as open), COMPAT-FALLBACK-001 (the client falls back to replay history on a legacy
server), COMPAT-REMOVAL-001 (the removal condition, as a tool checks it).
"""

from __future__ import annotations

import re

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from starlette.types import ASGIApp

import spec
from conformance.cli import main
from conformance.embedded import serve_app
from lineage_client import ApiError, CapabilityMissing, ForkUnsupported, LineageClient, replay_history_removable
from reference_impl.http import create_app
from reference_impl.settings import Settings
from tests.mutants import rewrite_responses

TOKENS = {"ro-alice": "alice", "ro-bob": "bob", "ro-carol": "carol", "ro-dave": "dave", "ro-erin": "erin"}
PROJECTS = {"erin": "elsewhere"}
SUITE_TOKENS = [arg for token in TOKENS for arg in ("--token", token)]
SUITE = spec.spec_version()
UNKNOWN_MEMBER = "x_later_minor_version"
UNKNOWN_CAPABILITY = "x-later-capability"


def _app(tmp_path: Path, legacy: bool = False, name: str = "db") -> ASGIApp:
    return create_app(Settings(database_url=f"sqlite:///{tmp_path / name}.sqlite", tokens=TOKENS, projects=PROJECTS, legacy=legacy))


def _with_later_minor_version(app: ASGIApp) -> ASGIApp:
    """Every JSON response gains a member no client knows (in every object but record content), and
    the capability document an unknown capability name: what a later 1.x server may send."""

    def add(node: Any, key: str | None = None) -> Any:
        if key == "content":  # the client's own data: never touched
            return node
        if isinstance(node, dict):
            out = {k: add(v, k) for k, v in node.items()}
            out[UNKNOWN_MEMBER] = {"note": "a member of a later minor version", "level": "opaque-value"}
            return out
        if isinstance(node, list):
            return [add(item) for item in node]
        return node

    def rewrite(scope: dict[str, Any], status: int, headers: list[tuple[bytes, bytes]], body: bytes):
        media = dict((k.lower(), v) for k, v in headers).get(b"content-type", b"")
        if b"json" not in media or not body:
            return status, headers, body
        data = json.loads(body)
        if scope.get("path") == "/capabilities" and isinstance(data, dict):
            data["capabilities"] = [*data.get("capabilities", []), UNKNOWN_CAPABILITY]
        return status, headers, json.dumps(add(data)).encode()

    return rewrite_responses(app, rewrite)


def _conversation(client: LineageClient, turns: int = 2) -> tuple[str, list[Any]]:
    session = client.create_session()
    records = []
    for n in range(turns):
        turn = client.start_turn(session.session_id, "user" if n % 2 == 0 else "assistant")
        records += client.append(session.session_id, turn.turn_id, [{"type": "message", "content": {"text": f"t{n}"}}])
        client.finish(session.session_id, turn.turn_id)
    return session.session_id, records


# ---------------------------------------------------------------- the client, both server modes
@pytest.mark.parametrize("legacy", [False, True], ids=["lineage-server", "legacy-server"])
def test_client_takes_the_right_path_against_both_server_modes(tmp_path: Path, legacy: bool) -> None:
    """COMPAT-FALLBACK-001: fork on a lineage server, new session plus replay history on a legacy one;
    either way the branch's context is the retained records once, then its own turn."""
    with serve_app(_app(tmp_path, legacy)) as server, LineageClient(server.url, "ro-alice") as client:
        assert client.mode == ("legacy" if legacy else "lineage")
        source, records = _conversation(client)
        branch = client.branch(source, {"mode": "latest"}, records, rewind={"mode": "edit", "draft": "edited"})
        assert (branch.replay is None) is (not legacy)
        if not legacy:
            assert client.pending_action(branch.session.session_id).state == "pending"
        _, own = client.run_first_turn(branch, "user", [{"type": "message", "content": {"text": "edited"}}])
        assert client.last_response is not None and "deprecation" not in client.last_response.headers
        context = client.transcript(branch.session.session_id)
        assert [(r.type, r.content) for r in context] == [(r.type, r.content) for r in records + own]
        if legacy:  # rebuilt: new ids in the new session
            assert all(r.session_id == branch.session.session_id for r in context)
            with pytest.raises(ApiError) as absent:  # routing comes first: no fork operation here
                client.fork(source, {"mode": "latest"})
            assert absent.value.status == 404
            with pytest.raises(CapabilityMissing) as missing:  # a request that relies on fork is refused
                client._request("GET", f"/sessions/{source}", requires=("fork", "replay-history"))
            assert missing.value.missing == ["fork"]
        else:  # inherited: the parent's records themselves, once
            assert [r.record_id for r in context[: len(records)]] == [r.record_id for r in records]
            assert client.pending_action(branch.session.session_id) is None  # the successful first turn cleared it


def test_a_legacy_client_on_a_lineage_server_gets_the_context_once_and_the_deprecation(tmp_path: Path) -> None:
    with serve_app(_app(tmp_path)) as server, LineageClient(server.url, "ro-alice") as client:
        source, records = _conversation(client)
        child = client.fork(source, {"mode": "latest"})
        turn = client.start_turn(child.session_id, replay_history=[r.as_replay() for r in records])
        headers = client.last_response.headers
        assert headers["deprecation"].startswith("@") and "sunset" in headers and 'rel="deprecation"' in headers["link"]
        client.finish(child.session_id, turn.turn_id)
        assert [r.record_id for r in client.transcript(child.session_id)] == [r.record_id for r in records]
        with pytest.raises(ApiError) as conflict:
            client.start_turn(child.session_id, replay_history=[r.as_replay() for r in records[:1]])
        assert conflict.value.status == 409 and conflict.value.kind == "replay-history-mismatch"


def test_client_refuses_to_branch_on_a_server_with_neither_fork_nor_replay_history(tmp_path: Path) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'bare.sqlite'}", tokens=TOKENS, legacy=True,
                        disabled_capabilities=frozenset({"replay-history"}))
    with serve_app(create_app(settings)) as server, LineageClient(server.url, "ro-alice") as client:
        assert client.mode == "none"
        source, records = _conversation(client, 1)
        with pytest.raises(ForkUnsupported):
            client.branch(source, {"mode": "latest"}, records)
        session = client.create_session()
        with pytest.raises(ApiError) as refused:  # the field of a capability the server lacks is unknown
            client.http.post(f"/sessions/{session.session_id}/turns", json={"role": "user"})  # (sanity: route exists)
            client.start_turn(session.session_id, replay_history=[r.as_replay() for r in records])
        assert refused.value.status == 412  # the client relied on replay-history in Requires-Capabilities


def test_client_reads_responses_as_open(tmp_path: Path) -> None:
    """VERSION-OPEN-RESPONSE-001: unknown members are ignored, unknown enum values stay opaque."""
    app = _with_later_minor_version(_app(tmp_path))

    def odd_status(scope: dict[str, Any], status: int, headers: list[tuple[bytes, bytes]], body: bytes):
        if scope["path"].endswith("/finish") and status == 200:
            data = json.loads(body)
            data["status"] = "completed-with-warnings"  # a value of a later minor version
            body = json.dumps(data).encode()
        return status, headers, body

    with serve_app(rewrite_responses(app, odd_status)) as server, LineageClient(server.url, "ro-alice") as client:
        caps = client.capabilities()
        assert UNKNOWN_CAPABILITY in caps.names and UNKNOWN_MEMBER in caps.extra
        session = client.create_session()
        assert UNKNOWN_MEMBER in session.extra
        turn = client.start_turn(session.session_id)
        finished = client.finish(session.session_id, turn.turn_id)
        assert finished.status == "completed-with-warnings" and finished.finished is None


# ---------------------------------------------------------------- the suite and the legacy server
def _check(server_url: str, tmp_path: Path, *args: str) -> tuple[int, dict[str, Any]]:
    report = tmp_path / f"report-{len(list(tmp_path.glob('report-*')))}.json"
    code = main(["check", "--target", server_url, *SUITE_TOKENS, "--quiet", "--seed", "5", "--report-json", str(report), *args])
    return code, json.loads(report.read_text()) if report.exists() else {}


def test_suite_against_the_legacy_server(tmp_path: Path, capsys) -> None:
    """Under `--profile legacy` the legacy server's requirements pass; under the default `full`
    claim the verdict is "full not reached", exit 1, naming the missing capabilities."""
    with serve_app(_app(tmp_path, legacy=True)) as server:
        code, report = _check(server.url, tmp_path, "--profile", "legacy", "--select", "capabilities",
                              "--select", "sessions", "--select", "rollout")
        failures = [(c["name"], c["message"][:200]) for c in report["checks"] if c["outcome"] in ("fail", "error")
                    and any(r in {q["id"] for q in report["requirements"] if q["in_scope"]} for r in c["failed_requirements"] or c["requirements"])]
        assert code == 0, failures
        assert report["summary_text"].startswith(f"conformant: legacy {SUITE}"), report["summary_text"]
        replay = {r["id"]: r["outcome"] for r in report["requirements"] if r["id"].startswith(("REPLAY-", "NEGOTIATE-", "VERSION-"))}
        assert replay["REPLAY-REBUILD-001"] == replay["REPLAY-MATCH-001"] == replay["REPLAY-CONFLICT-001"] == "pass"
        assert replay["NEGOTIATE-HEADER-001"] == replay["VERSION-UNKNOWN-FIELD-001"] == "pass"
        code, report = _check(server.url, tmp_path, "--select", "capabilities", "--select", "rollout")
        assert code == 1
        text = report["summary_text"]
        assert text.startswith(f"not conformant to full {SUITE}"), text
        assert "full not reached: fork missing, lineage missing, idempotency missing" in text, text
        assert not re.search(r"\blegacy\b(?!-import)", text), text  # a profile only judged when claimed


@pytest.mark.deep
def test_suite_passes_against_a_server_of_a_later_minor_version(tmp_path: Path) -> None:
    """VERSION-OPEN-RESPONSE-001: the whole suite against a reference whose every JSON response
    carries an unknown member (and its capability document an unknown capability) still passes."""
    with serve_app(_with_later_minor_version(_app(tmp_path))) as server:
        code, report = _check(server.url, tmp_path)
    failures = [(c["name"], c["message"][:300]) for c in report["checks"] if c["outcome"] in ("fail", "error")]
    assert code == 0, "\n".join(map(str, failures))


def test_a_claim_at_an_older_version_keeps_newer_requirements_out_of_scope(tmp_path: Path) -> None:
    with serve_app(_app(tmp_path)) as server:
        code, report = _check(server.url, tmp_path, "--profile", "full@1.1.0", "--select", "rollout", "--select", "CAP-")
    assert code == 0
    newer = [r for r in report["requirements"] if r["id"].startswith(("REPLAY-", "REWIND-", "COMPAT-", "NEGOTIATE-", "VERSION-"))]
    assert newer and all(r["outcome"] in ("pass", "out-of-scope") and not r["in_scope"] for r in newer)  # never failed
    assert all("after the claimed full@1.1.0" in (r["reason"] or "") for r in newer)
    assert report["summary_text"].startswith("conformant: core 1.1.0, full 1.1.0"), report["summary_text"]


# ---------------------------------------------------------------- the removal condition
def test_removal_condition_of_replay_history() -> None:
    """COMPAT-REMOVAL-001 as a tool checks it: clients may stop once every server lists fork and
    lineage; servers may stop only after the Sunset date too."""
    lineage = {"spec_version": "1.2.0", "capabilities": ["fork", "lineage", "replay-history"], "limits": {}}
    legacy = {"spec_version": "1.2.0", "capabilities": ["effective-transcript", "replay-history"], "limits": {}}
    before = datetime(2027, 6, 30, tzinfo=timezone.utc)
    after = datetime(2027, 7, 2, tzinfo=timezone.utc)
    sunset = "Thu, 01 Jul 2027 00:00:00 GMT"
    assert replay_history_removable([lineage, legacy], sunset, after) == {"clients": False, "servers": False}
    assert replay_history_removable([lineage, lineage], sunset, before) == {"clients": True, "servers": False}
    assert replay_history_removable([lineage], sunset, after) == {"clients": True, "servers": True}
    assert replay_history_removable([lineage], None, after) == {"clients": True, "servers": False}
    assert replay_history_removable([], sunset, after) == {"clients": False, "servers": False}


def test_a_server_without_replay_history_refuses_the_field_as_unknown(tmp_path: Path) -> None:
    """After the Sunset date a server may stop listing `replay-history`: the field is then unknown (422)."""
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'no-replay.sqlite'}", tokens=TOKENS,
                        disabled_capabilities=frozenset({"replay-history", "rewind"}))
    with serve_app(create_app(settings)) as server, LineageClient(server.url, "ro-alice") as client:
        session = client.create_session()
        response = client.http.post(f"/sessions/{session.session_id}/turns", headers={"Authorization": "Bearer ro-alice"},
                                    json={"role": "user", "replay_history": []})
        assert response.status_code == 422 and "replay_history" in response.json()["detail"]
        source, _ = _conversation(client, 1)
        response = client.http.post(f"/sessions/{source}/fork", headers={"Authorization": "Bearer ro-alice"},
                                    json={"cut": {"mode": "latest"}, "rewind": {"mode": "rerun"}})
        assert response.status_code == 422 and "rewind" in response.json()["detail"]


def test_every_response_schema_is_open() -> None:
    """VERSION-OPEN-RESPONSE-001: no schema a response uses forbids members (request schemas stay closed)."""
    refs = set()
    for item in spec.openapi()["paths"].values():
        for method, operation in item.items():
            if method == "parameters":
                continue
            for response in operation["responses"].values():
                for media in response.get("content", {}).values():
                    if "$ref" in media.get("schema", {}):
                        refs.add(media["schema"]["$ref"].rsplit("/", 1)[-1])

    def closed(node: Any) -> bool:
        if isinstance(node, dict):
            return node.get("additionalProperties") is False or any(closed(v) for v in node.values())
        return isinstance(node, list) and any(closed(v) for v in node)

    seen: set[str] = set()
    pending = list(refs)
    while pending:  # follow references to other files
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        data = json.loads((spec.SCHEMAS_DIR / name).read_text(encoding="utf-8"))
        assert not closed(data), f"response schema {name} says additionalProperties: false"
        text = json.dumps(data)
        pending += [ref.split("#")[0] for ref in __import__("re").findall(r'"\$ref": "([a-z-]+\.json)', text)]
    assert "turn.json" in seen and "record.json" in seen


def test_serve_legacy_runs_a_pre_lineage_server(tmp_path: Path, monkeypatch) -> None:
    """`session-lineage serve --legacy`: profile `legacy` (no fork, lineage or idempotent forks)."""
    import uvicorn

    started: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn.Server, "run", lambda server, sockets=None: started.update(app=server.config.app))
    assert main(["serve", "--legacy", "--database-url", f"sqlite:///{tmp_path / 'legacy.sqlite'}"]) == 0
    monkeypatch.undo()  # the app is served below by a real uvicorn.Server
    with serve_app(started["app"]) as server, LineageClient(server.url, "anyone") as client:
        assert client.mode == "legacy"
        assert client.capabilities().names == {
            "effective-transcript", "writer-lease", "replay-history", "diagnostics.query-count", "diagnostics.write-count"
        }


def test_replay_history_is_not_combined_with_a_one_request_turn_write(tmp_path: Path) -> None:
    """REPLAY-MATCH-001: replay history with `records` or `status` answers 422; nothing is dropped."""
    with serve_app(_app(tmp_path)) as server, LineageClient(server.url, "ro-alice") as client:
        session = client.create_session()
        for extra in ({"records": [{"type": "message", "content": {}}]}, {"status": "completed"}):
            response = client.http.post(f"/sessions/{session.session_id}/turns", headers={"Authorization": "Bearer ro-alice"},
                                        json={"role": "user", "replay_history": [], **extra})
            assert response.status_code == 422, response.text
        assert client.transcript(session.session_id) == []
        client.finish(session.session_id, client.start_turn(session.session_id).turn_id)  # no turn was left running
