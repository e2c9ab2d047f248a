"""The authorization chapter in the reference: listing cost, tokens files with projects, upgrades
of existing data, and a server without `sharing` and `attachments`."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import yaml
from sqlalchemy import text

from conformance.config import load
from conformance.embedded import reference_server, serve_app
from conformance.results import Outcome
from conformance.runner import run
from reference_impl.http import create_app
from reference_impl.principals import DEFAULT_PROJECT, Caller, TokensFileError, parse_tokens, public_id, scoped_key
from reference_impl.settings import Settings
from reference_impl.store.engine import migrate


def listing_round_trips(database_url: str | None = None) -> dict[str, dict[int, int]]:
    """Storage round trips of a listing page, by the lineage depth of what it lists.

    `list`: the page of `GET /sessions` (limit 1) that holds the session at each depth;
    `descendants`: a page of `GET /sessions/{id}/descendants` for the session at each depth, in a
    family with a second branch at every level.
    """
    with reference_server(database_url) as server, httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {server.tokens[0]}"}
    ) as http:
        maximum = http.get("/capabilities").json()["limits"]["max_lineage_depth"]
        ids = [http.post("/sessions", json={}).json()["session_id"]]
        for _ in range(maximum):
            turn = http.post(f"/sessions/{ids[-1]}/turns", json={"role": "user"}).json()
            http.post(f"/sessions/{ids[-1]}/turns/{turn['turn_id']}/records", json={"records": [{"type": "m", "content": {}}]})
            http.post(f"/sessions/{ids[-1]}/turns/{turn['turn_id']}/finish", json={"status": "completed"})
            ids.append(http.post(f"/sessions/{ids[-1]}/fork", json={"cut": {"mode": "latest"}}).json()["session"]["session_id"])
        for sid in ids[:-1]:
            assert http.post(f"/sessions/{sid}/fork", json={"cut": {"mode": "latest"}}).status_code == 201
        depths = (0, 1, 5, maximum)
        costs: dict[str, dict[int, int]] = {"list": {}, "descendants": {}}
        for depth in depths:
            answer = http.get(f"/sessions/{ids[depth]}/descendants", params={"limit": 2})
            assert answer.status_code == 200, answer.text
            costs["descendants"][depth] = int(answer.headers["Storage-Round-Trips"])
        wanted = {ids[depth]: depth for depth in depths}
        cursor = None
        while True:
            answer = http.get("/sessions", params={"limit": 1, **({"cursor": cursor} if cursor else {})})
            assert answer.status_code == 200, answer.text
            page = answer.json()
            for item in page["sessions"]:
                if item["session"]["session_id"] in wanted:
                    costs["list"][wanted[item["session"]["session_id"]]] = int(answer.headers["Storage-Round-Trips"])
            if not page["has_more"]:
                return costs
            cursor = page["next_cursor"]


def test_listing_pages_cost_the_same_at_every_depth() -> None:
    costs = listing_round_trips()
    print(f"listing round trips by depth: {costs}")
    assert set(costs["list"]) == set(costs["descendants"]) == {0, 1, 5, 16}
    assert set(costs["list"].values()) == {1}  # one statement: owned and granted, unioned
    assert set(costs["descendants"].values()) == {2}  # the session's visibility, then the family


def test_tokens_file_names_principals_and_projects() -> None:
    tokens, projects = parse_tokens(
        yaml.safe_load("a-token: alice\nb-token: {principal: bob, project: acme}\nc-token: {principal: carol}\n")
    )
    assert tokens == {"a-token": "alice", "b-token": "bob", "c-token": "carol"}
    assert projects == {"alice": DEFAULT_PROJECT, "bob": "acme", "carol": DEFAULT_PROJECT}
    for bad in ({}, {"t": {"project": "acme"}}, {"t": "has space"}, {"t": {"principal": "p", "project": "a~b"}},
                {"t1": {"principal": "p", "project": "a"}, "t2": {"principal": "p", "project": "b"}}):
        with pytest.raises(TokensFileError):
            parse_tokens(bad)


def test_keys_carry_the_project_and_default_keys_are_ids() -> None:
    assert scoped_key(DEFAULT_PROJECT, "s-1") == "s-1"
    assert scoped_key("acme", "s-1") == "acme~s-1" != scoped_key("globex", "s-1")
    assert public_id("acme~s-1") == public_id("s-1") == "s-1"
    caller = Caller("alice", "acme")
    assert caller == "alice" and caller.key("t") == "acme~t" and {caller: 1}["alice"] == 1


def test_serve_reads_projects_from_the_tokens_file(tmp_path: Path) -> None:
    from tests.servers import TOKENS, server_processes

    with server_processes(f"sqlite:///{tmp_path / 'serve.db'}", tmp_path, count=1) as (server,):
        me = {
            principal: httpx.get(f"{server.url}/me", headers={"Authorization": f"Bearer {token}"}).json()
            for token, principal in TOKENS.items()
        }
    assert me["alice"]["project_id"] == me["bob"]["project_id"] == DEFAULT_PROJECT
    assert me["erin"] == {"principal_id": "erin", "project_id": "elsewhere"}


def test_upgrade_keeps_existing_sessions_and_counts_their_children(tmp_path: Path) -> None:
    """A 1.0 database: its sessions become the default project's, their forks are counted."""
    from alembic import command
    from alembic.config import Config

    from reference_impl.store.engine import MIGRATIONS_DIR, make_engine

    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = make_engine(url)
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "0002")
        for sid, depth in (("root", 0), ("child", 1)):
            connection.execute(text(
                "INSERT INTO sessions (session_id, owner, created_at, depth, turn_count, record_count) "
                "VALUES (:s, 'alice', '2026-01-01T00:00:00Z', :d, 0, 0)"), {"s": sid, "d": depth})
        connection.execute(text(
            "INSERT INTO session_lineage VALUES ('child', 'root', 'root', 1, 0, 'latest', NULL, NULL, -1, -1, "
            "'2026-01-01T00:00:00Z')"))
    migrate(engine)
    with engine.connect() as connection:
        counts = dict(connection.execute(text("SELECT session_id, child_count FROM sessions")).all())
    engine.dispose()
    assert counts == {"root": 1, "child": 0}
    app = create_app(Settings(database_url=url, tokens={"alice-token": "alice"}))
    with serve_app(app) as server, httpx.Client(base_url=server.url, headers={"Authorization": "Bearer alice-token"}) as http:
        assert http.get("/sessions/root").json()["session_id"] == "root"  # default project: keys are the ids
        assert http.get("/sessions/child/lineage").json()["root_session_id"] == "root"
        assert http.post("/sessions/root/purge").status_code == 409  # its fork is counted


def test_reference_without_sharing_and_attachments_advertises_and_routes_neither() -> None:
    with reference_server(disabled_capabilities=frozenset({"sharing", "attachments"})) as server:
        document = httpx.get(f"{server.url}/capabilities").json()
        config = load(overrides={"target": server.url, "tokens": list(server.tokens), "seed": 4, "profile": "core",
                                 "select": ["capabilities", "authorization", "sessions.create"]}, environ={})
        result = run(config)
    assert "sharing" not in document["capabilities"] and "attachments" not in document["capabilities"]
    assert "max_attachment_bytes" not in document["limits"]
    outcomes = {c.name: c.outcome for c in result.checks}
    assert outcomes["capabilities.unadvertised_operations"] is Outcome.PASS, [c.message for c in result.checks]
    assert outcomes["authorization.invisible_sessions"] is Outcome.PASS, [c.message for c in result.checks]
    assert outcomes["authorization.authorization_matrix"] is Outcome.OUT_OF_SCOPE  # a core claim
    assert not [c for c in result.checks if c.outcome in (Outcome.FAIL, Outcome.ERROR)], [c.message for c in result.checks]
