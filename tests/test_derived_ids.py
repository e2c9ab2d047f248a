"""Turn and record ids the server makes are derived from the session's token and the index, and not
stored (reference_impl/store/ids.py); ids a client chose, and ids made before, are stored and keep
working beside them."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import text

from conformance.embedded import serve_app
from reference_impl.http import create_app
from reference_impl.settings import Settings
from reference_impl.store.engine import MIGRATIONS_DIR, make_engine

TOKENS = {"ids-alice": "alice", "ids-bob": "bob", "ids-erin": "erin"}
PROJECTS = {"alice": "acme", "bob": "acme", "erin": "globex"}
ALICE, BOB, ERIN = ({"Authorization": f"Bearer ids-{name}"} for name in ("alice", "bob", "erin"))
DERIVED_TURN = re.compile(r"([0-9a-f]{32})t([0-9]+)")
DERIVED_RECORD = re.compile(r"([0-9a-f]{32})r([0-9]+)")


def _turn(http: httpx.Client, sid: str, headers: dict[str, str], **body: Any) -> httpx.Response:
    records = [{"type": "message", "content": {"n": n}} for n in range(2)]
    return http.post(f"/sessions/{sid}/turns", json={"role": "user", "records": records, "status": "completed", **body},
                     headers=headers)


def _app(url: str) -> Any:
    return create_app(Settings(database_url=url, tokens=TOKENS, projects=PROJECTS))


def test_ids_the_server_makes_are_its_sessions_token_and_the_index_and_are_not_stored(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'ids.db'}"
    with serve_app(_app(url)) as server, httpx.Client(base_url=server.url) as http:
        first, second = (http.post("/sessions", json={}, headers=ALICE).json()["session_id"] for _ in range(2))
        tokens = {}
        for sid in (first, second):
            for index in range(2):
                written = _turn(http, sid, ALICE).json()
                token, number = DERIVED_TURN.fullmatch(written["turn_id"]).groups()  # type: ignore[union-attr]
                assert int(number) == index == written["index"]
                assert [DERIVED_RECORD.fullmatch(r["record_id"]).groups() for r in written["records"]] == [  # type: ignore[union-attr]
                    (token, str(r["index"])) for r in written["records"]
                ]
                tokens.setdefault(sid, token)
                assert token == tokens[sid]
        assert tokens[first] != tokens[second]
        page = http.get(f"/sessions/{second}/transcript", headers=ALICE).json()["records"]
        assert [r["record_id"] for r in page] == [f"{tokens[second]}r{n}" for n in range(4)]
    engine = make_engine(url)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM turns WHERE turn_id IS NOT NULL")).scalar() == 0
        assert conn.execute(text("SELECT count(*) FROM records WHERE record_id IS NOT NULL OR turn_id IS NOT NULL")).scalar() == 0
    engine.dispose()


def test_a_chosen_id_of_the_derived_form_is_taken_in_its_project_and_free_in_another(tmp_path) -> None:
    """SESS-TURN-001: turn ids are unique in a project. A client's id that has the form of a derived
    one names another session's turn in the same project (409 turn-exists, nothing started); in
    another project it is free, and each project then finds its own turn by it."""
    with serve_app(_app(f"sqlite:///{tmp_path / 'ids.db'}")) as server, httpx.Client(base_url=server.url) as http:
        mine = http.post("/sessions", json={}, headers=ALICE).json()["session_id"]
        derived = _turn(http, mine, ALICE).json()["turn_id"]
        token = derived[:32]
        other = http.post("/sessions", json={}, headers=BOB).json()["session_id"]
        for chosen in (derived, f"{token}t7"):  # taken now, and one the session will make later
            refused = _turn(http, other, BOB, turn_id=chosen)
            assert refused.status_code == 409 and refused.json()["type"].endswith("turn-exists"), refused.text
        assert http.get(f"/sessions/{other}/transcript", headers=BOB).json()["records"] == []  # and its next turn is turn 0, below
        elsewhere = http.post("/sessions", json={}, headers=ERIN).json()["session_id"]
        taken = _turn(http, elsewhere, ERIN, turn_id=derived)
        assert taken.status_code == 201 and taken.json()["turn_id"] == derived
        assert http.get(f"/sessions/{elsewhere}/turns/{derived}", headers=ERIN).json()["session_id"] == elsewhere
        assert http.get(f"/sessions/{mine}/turns/{derived}", headers=ALICE).json()["session_id"] == mine
        assert http.get(f"/sessions/{mine}/turns/{derived}", headers=ERIN).status_code == 404
        # A chosen id whose token is no session's is stored, and found, like any other.
        unknown = "f" * 32 + "t3"
        assert _turn(http, other, BOB, turn_id=unknown).status_code == 201
        assert http.get(f"/sessions/{other}/turns/{unknown}", headers=BOB).json()["index"] == 0


def _legacy_database(url: str) -> tuple[str, str, list[str]]:
    """A database made before derived ids (migration 0007) holding one session, one finished turn and
    its two records, with uuid-like ids; then migrated to head."""
    engine = make_engine(url)
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    sid, turn, records = "acme~old-session", "acme~old-turn", ["old-record-0", "old-record-1"]
    at = "2026-12-01T00:00:00.000000Z"
    with engine.connect().execution_options(write=True) as conn, conn.begin():
        config.attributes["connection"] = conn
        command.upgrade(config, "0007_records_key")
    with engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO sessions (session_id, owner, created_at, depth, turn_count, record_count) "
            "VALUES (:s, 'alice', :at, 0, 1, 2)"), {"s": sid, "at": at})
        conn.execute(text(
            "INSERT INTO turns (turn_id, session_id, turn_index, role, status, first_record_index, end_record_index, "
            "created_at, finished_at) VALUES (:t, :s, 0, 'user', 'completed', 0, 2, :at, :at)"), {"t": turn, "s": sid, "at": at})
        for index, record in enumerate(records):
            conn.execute(text(
                "INSERT INTO records (record_id, session_id, record_index, turn_id, turn_index, record_type, content, "
                "created_at) VALUES (:r, :s, :i, :t, 0, 'message', :c, :at)"),
                {"r": record, "s": sid, "i": index, "t": turn, "c": f'{{"n":{index}}}', "at": at})
    engine.dispose()
    return "old-session", "old-turn", records


@pytest.mark.parametrize("engine", ["sqlite", "postgres"])
def test_ids_made_before_derived_ids_keep_working_beside_derived_ones(engine: str, tmp_path, request) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}" if engine == "sqlite" else request.getfixturevalue("postgres_url")
    sid, old_turn, old_records = _legacy_database(url)
    with serve_app(_app(url)) as server, httpx.Client(base_url=server.url) as http:  # the app migrates to head
        new = _turn(http, sid, ALICE)
        assert new.status_code == 201 and DERIVED_TURN.fullmatch(new.json()["turn_id"])
        new_records = [r["record_id"] for r in new.json()["records"]]
        assert [DERIVED_RECORD.fullmatch(r)[2] for r in new_records] == ["2", "3"]  # type: ignore[index]
        page = http.get(f"/sessions/{sid}/transcript", headers=ALICE).json()["records"]
        assert [r["record_id"] for r in page] == old_records + new_records
        assert [r["turn_id"] for r in page] == [old_turn] * 2 + [new.json()["turn_id"]] * 2
        export = http.get(f"/sessions/{sid}/export", headers=ALICE).json()
        assert export["records"] == page
        assert [t["turn_id"] for t in export["turns"]] == [old_turn, new.json()["turn_id"]]
        assert http.get(f"/sessions/{sid}/turns/{old_turn}", headers=ALICE).json()["index"] == 0
        for through in (old_turn, new.json()["turn_id"]):
            child = http.post(f"/sessions/{sid}/fork", json={"cut": {"mode": "through", "turn_id": through}}, headers=ALICE)
            assert child.status_code == 201, child.text
            inherited = http.get(f"/sessions/{child.json()['session']['session_id']}/transcript", headers=ALICE).json()
            kept = [r["record_id"] for r in page[: 2 if through == old_turn else 4]]
            assert [r["record_id"] for r in inherited["records"]] == kept  # FORK-NO-COPY-001: the same ids
