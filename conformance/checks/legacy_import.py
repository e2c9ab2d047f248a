"""Chapter: legacy import (capability `legacy-import`), with the vectors of fixtures/import.

Every vector is a `.jsonl` file with its expected outcome beside it (`.expected.json`). The suite
gives each run's histories fresh legacy ids (it rewrites the meta line's `id` and
`forked_from_id`), pads the lines a vector marks to sizes taken from `max_import_line_bytes`, and
compares the answer and the session's records with the expected outcome.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

import fixtures
from conformance.checks.contention import rounds
from conformance.client import ApiClient, Response, tls
from conformance.context import CheckContext
from conformance.errors import CheckFailed
from conformance.registry import check, setup_step

CAPABILITY = "legacy-import"
NEEDS = (CAPABILITY,)
VECTOR_DIR = Path(fixtures.__file__).resolve().parent / "import"
MEDIA_TYPE = "application/x-ndjson"


# ---------------------------------------------------------------- vectors
def vector_names() -> list[str]:
    return sorted(path.name[: -len(".expected.json")] for path in VECTOR_DIR.glob("*.expected.json"))


def expected_of(name: str) -> dict[str, Any]:
    return json.loads((VECTOR_DIR / f"{name}.expected.json").read_text(encoding="utf-8"))


def split_lines(data: bytes) -> list[bytes]:
    """Lines with their terminators, as the file holds them."""
    return data.splitlines(keepends=True)


def build(ctx: CheckContext, name: str, ids: dict[str, str]) -> tuple[bytes, dict[str, Any]]:
    """The vector's bytes for this run (fresh legacy ids, padded lines) and its expected outcome."""
    data = (VECTOR_DIR / f"{name}.jsonl").read_bytes()
    expected = expected_of(name)
    lines = split_lines(data)
    if lines:
        lines[0] = rewrite_meta(lines[0], ids)
    expanded: dict[int, str] = {}
    for item in expected.get("expand", []):
        number, member = item["line"], item["member"]
        size = ctx.limits["max_import_line_bytes"] + (1 if item["bytes"].endswith("+1") else 0)
        raw = lines[number - 1]
        ending = raw[len(raw.rstrip(b"\r\n")):]
        line = json.loads(raw.rstrip(b"\r\n"))
        line["payload"][member] = ""
        base = len(json.dumps(line, separators=(",", ":"), ensure_ascii=False).encode())
        line["payload"][member] = "x" * (size - base)
        text = json.dumps(line, separators=(",", ":"), ensure_ascii=False).encode()
        assert len(text) == size
        lines[number - 1] = text + ending
        expanded[number] = line["payload"][member]
    expected = json.loads(json.dumps(expected))
    for turn in expected.get("turns", []):
        for record in turn["records"]:
            for key, value in list(record[1].items()):
                if isinstance(value, str) and value.startswith("@expanded:"):
                    record[1][key] = expanded[int(value.split(":")[1].rstrip("@"))]
    return b"".join(lines), expected


def rewrite_meta(raw: bytes, ids: dict[str, str]) -> bytes:
    ending = raw[len(raw.rstrip(b"\r\n")):]
    try:
        line = json.loads(raw.rstrip(b"\r\n"))
    except ValueError:
        return raw
    if not isinstance(line, dict) or not isinstance(line.get("payload"), dict):
        return raw
    payload = line["payload"]
    for key in ("id", "forked_from_id"):
        if isinstance(payload.get(key), str):
            payload[key] = ids.setdefault(payload[key], f"{ids['@prefix']}{payload[key]}")
    return json.dumps(line, separators=(",", ":"), ensure_ascii=False).encode() + ending


def fresh_ids(ctx: CheckContext) -> dict[str, str]:
    return {"@prefix": ctx.new_id("legacy") + "-"}


def upload(ctx: CheckContext, data: bytes | Iterator[bytes], client: ApiClient | None = None, headers: dict[str, str] | None = None) -> Response:
    return (client or ctx.alice).post("/imports", content=data, headers={"Content-Type": MEDIA_TYPE, **(headers or {})})


@setup_step("IMPORT-FORMAT-001")
def imported(ctx: CheckContext, data: bytes, client: ApiClient | None = None) -> dict[str, Any]:
    """The summary of a first import of a history, which must answer 201 (a set-up step)."""
    return ctx.ok(upload(ctx, data, client), 201, "IMPORT-FORMAT-001")  # type: ignore[no-any-return]


@setup_step("IMPORT-IDEMPOTENT-001")
def reimported(ctx: CheckContext, data: bytes) -> dict[str, Any]:
    """The summary of a history imported completely before, which must answer 200 (a set-up step)."""
    return ctx.ok(upload(ctx, data), 200, "IMPORT-IDEMPOTENT-001")  # type: ignore[no-any-return]


def own_turns(ctx: CheckContext, sid: str) -> list[list[tuple[str, Any]]]:
    """The session's own records grouped by turn, in order."""
    turns: list[list[tuple[str, Any]]] = []
    last = None
    for record in ctx.walk(sid, "records"):
        if record["turn_id"] != last:
            turns.append([])
            last = record["turn_id"]
        turns[-1].append((record["type"], record["content"]))
    return turns


def expect_outcome(ctx: CheckContext, name: str, response: Response, expected: dict[str, Any], *reqs: str) -> dict[str, Any] | None:
    if expected["status"] >= 400:
        ctx.expect_status(response, expected["status"], expected.get("problem"), *reqs)
        return None
    ctx.expect_status(response, (200, 201), None, *reqs)
    body = response.json()
    ctx.expect(response.status == expected["status"], f"vector {name}: answered {response.status}, expected {expected['status']}", *reqs)
    got_skipped = [
        {"line": item.get("line"), "reason": item.get("reason")} if isinstance(item, dict) else item
        for item in body.get("skipped") or []
    ]  # members a later minor version may add are not compared
    ctx.expect(
        got_skipped == expected["skipped"],
        f"vector {name}: skipped {got_skipped}, expected {expected['skipped']}",
        *reqs,
    )
    want_turns = [[(r[0], r[1]) for r in turn["records"]] for turn in expected["turns"]]
    got_turns = own_turns(ctx, body["session_id"])
    ctx.expect(
        got_turns == want_turns,
        f"vector {name}: the session's own turns hold {[[t for t, _ in turn] for turn in got_turns]}, expected "
        f"{[[t for t, _ in turn] for turn in want_turns]}" + ("" if len(got_turns) != len(want_turns) else " (contents differ)"),
        *reqs,
    )
    summary = (body.get("lines"), body.get("imported_turns"), body.get("imported_records"), body.get("inherited_turns"))
    want = (expected["lines"], len(want_turns), sum(len(t) for t in want_turns), expected["inherited_turns"])
    ctx.expect(summary == want, f"vector {name}: lines, imported turns, records, inherited turns {summary}; expected {want}", *reqs)
    return body


def import_vector(ctx: CheckContext, name: str, ids: dict[str, str], *reqs: str) -> dict[str, Any] | None:
    data, expected = build(ctx, name, ids)
    parent = expected.get("parent")
    if parent is not None:
        parent_data, _ = build(ctx, parent, ids)
        imported(ctx, parent_data)
    return expect_outcome(ctx, name, upload(ctx, data), expected, *reqs)


# ---------------------------------------------------------------- checks
@check("IMPORT-LIMITS-001", title="max_import_line_bytes is advertised, at least 1024", needs=NEEDS)
def limits_advertised(ctx: CheckContext) -> None:
    ctx.expect(ctx.limits["max_import_line_bytes"] >= 1024, f"max_import_line_bytes is {ctx.limits['max_import_line_bytes']}, below 1024")


@check("IMPORT-FORMAT-001", title="Vectors valid, meta-only, CRLF and empty: turns from consecutive turn ids, records in file order", needs=NEEDS)
def format_vectors(ctx: CheckContext) -> None:
    for name in ("valid", "meta-only", "crlf", "empty"):
        import_vector(ctx, name, fresh_ids(ctx), "IMPORT-FORMAT-001")
    response = ctx.alice.post("/imports", content=b"{}", headers={"Content-Type": "text/plain"})
    ctx.expect_status(response, 415, "unsupported-media-type")
    bad_meta = b'{"type":"message","turn_id":"t1","payload":{}}\n'
    ctx.expect_status(upload(ctx, bad_meta), 422, "invalid-legacy-history")


@check("IMPORT-SKIP-001", title="Malformed, oversized (limit + 1, not the limit) and truncated lines are skipped and reported", needs=NEEDS)
def skip_vectors(ctx: CheckContext) -> None:
    for name in ("malformed", "oversized", "truncated"):
        import_vector(ctx, name, fresh_ids(ctx), "IMPORT-SKIP-001")


@check("IMPORT-FORK-001", title="A forked pair: the child inherits the turns it copied from its imported parent", needs=NEEDS)
def forked_pair(ctx: CheckContext) -> None:
    ids = fresh_ids(ctx)
    child_data, expected = build(ctx, "forked-child", ids)
    missing = upload(ctx, child_data)
    ctx.expect_status(missing, 422, "legacy-parent-missing")
    body = import_vector(ctx, "forked-child", ids, "IMPORT-FORK-001")
    assert body is not None
    parent_key = ids["vec-fork-parent"]
    parent_sid = reimported(ctx, build(ctx, "forked-parent", ids)[0])["session_id"]
    ctx.expect(body.get("parent_session_id") == parent_sid, f"the child names parent {body.get('parent_session_id')}, the parent was imported as {parent_sid}")
    session = ctx.ok(ctx.alice.get(f"/sessions/{body['session_id']}"), 200)
    lineage = session.get("lineage") or {}
    ctx.expect(
        lineage.get("parent_session_id") == parent_sid and lineage.get("inherited_turn_count") == 2,
        f"the child's lineage is {lineage}; expected a fork of {parent_sid} inheriting 2 turns",
    )
    parent_records = ctx.walk(parent_sid, "records")
    inherited = [r for r in ctx.walk(body["session_id"]) if r["session_id"] == parent_sid]
    ctx.expect(
        ctx.keys(inherited) == ctx.keys(parent_records[:3]),
        f"the child's transcript inherits {ctx.keys(inherited)}; expected the parent's first 3 records {ctx.keys(parent_records[:3])}",
    )
    ctx.expect(parent_key.startswith(ids["@prefix"]), "setup")


@check("IMPORT-IDEMPOTENT-001", title="The same file twice creates nothing new; another principal's import is its own", needs=NEEDS)
def same_file_twice(ctx: CheckContext) -> None:
    ids = fresh_ids(ctx)
    data, expected = build(ctx, "valid", ids)
    first = imported(ctx, data)
    before = ctx.walk(first["session_id"], "records")
    second = upload(ctx, data)
    ctx.expect_status(second, 200)
    body = second.json()
    ctx.expect(
        body.get("session_id") == first["session_id"] and body.get("replayed") is True and body.get("fingerprint") == first.get("fingerprint"),
        f"the second import answered session {body.get('session_id')} replayed {body.get('replayed')}; the first created {first['session_id']}",
    )
    for key in ("imported_turns", "imported_records", "skipped", "lines"):
        ctx.expect(body.get(key) == first.get(key), f"the replay reports {key} {body.get(key)}, the first import {first.get(key)}")
    after = ctx.walk(first["session_id"], "records")
    ctx.expect(after == before, f"importing the same file again changed the session: {len(before)} records became {len(after)}")
    size = len(data)
    ctx.expect(
        isinstance(first.get("fingerprint"), str) and first["fingerprint"].startswith(f"{size}:"),
        f"the fingerprint {first.get('fingerprint')} does not start with the file's size {size}",
    )
    other = imported(ctx, data, ctx.bob)
    ctx.expect(other["session_id"] != first["session_id"], "another principal's import of the same file answered the first principal's session")


def _interrupted(data: bytes, cut: int, started: threading.Event) -> Iterator[bytes]:
    yield data[:cut]
    started.set()
    raise ConnectionAbortedError("upload interrupted on purpose")


@check("IMPORT-RESUME-001", title="A re-upload continues after the last imported line; a different file under the same id is refused", needs=NEEDS)
def resume_after_interruption(ctx: CheckContext) -> None:
    ids = fresh_ids(ctx)
    data, expected = build(ctx, "valid", ids)
    lines = split_lines(data)
    prefix = b"".join(lines[:3])  # the history as it was when its first turn ended (lines 1 to 3)
    part = imported(ctx, prefix)
    sid = part["session_id"]
    whole = upload(ctx, data)
    ctx.expect_status(whole, 200)
    body = whole.json()
    ctx.expect(body.get("session_id") == sid, f"the re-upload answered session {body.get('session_id')}, the first upload {sid}")
    ctx.expect(body.get("resumed_from_line") == 4, f"the re-upload reports resumed_from_line {body.get('resumed_from_line')}; lines 1 to 3 were imported")
    got = [[t for t, _ in turn] for turn in own_turns(ctx, sid)]
    want = [[r[0] for r in turn["records"]] for turn in expected["turns"]]
    ctx.expect(got == want, f"after resuming, the session's turns hold {got}; expected {want}: each line once")
    # a connection dropped in the middle of a line, then the whole file again
    ids2 = fresh_ids(ctx)
    data2, expected2 = build(ctx, "valid", ids2)
    started = threading.Event()
    auth = {"Authorization": f"Bearer {ctx.alice.token}"} if ctx.alice.token else {}
    with httpx.Client(base_url=ctx.alice.base_url, headers=auth, timeout=30, verify=tls()) as raw:
        try:
            raw.post("/imports", content=_interrupted(data2, len(data2) // 2, started), headers={"Content-Type": MEDIA_TYPE})
        except Exception:  # noqa: BLE001 - the client gives up on the upload, as a broken connection does
            pass
    again = upload(ctx, data2)
    for _ in range(50):  # the server may not have noticed the broken upload yet
        if again.status != 409:
            break
        threading.Event().wait(0.1)
        again = upload(ctx, data2)
    ctx.expect_status(again, (200, 201))
    sid2 = again.json()["session_id"]
    got2 = [[(t, c) for t, c in turn] for turn in own_turns(ctx, sid2)]
    want2 = [[(r[0], r[1]) for r in turn["records"]] for turn in expected2["turns"]]
    ctx.expect(got2 == want2, f"after an interrupted upload and a full one, the session holds {[[t for t, _ in turn] for turn in got2]}; expected each line once")
    different = data.replace(b'"hello"', b'"HELLO"')
    refused = upload(ctx, different)
    ctx.expect_status(refused, 409, "legacy-conflict")
    ctx.expect([[t for t, _ in turn] for turn in own_turns(ctx, sid)] == want, "a refused upload changed the session")


@check("IMPORT-CONCURRENT-001", title="Concurrent imports of one file: one 201, one session, each line once", needs=NEEDS)
def concurrent_imports(ctx: CheckContext) -> None:
    def prepare() -> tuple[bytes, dict[str, Any]]:
        return build(ctx, "valid", fresh_ids(ctx))

    def attempt(state: tuple[bytes, dict[str, Any]], n: int, client: ApiClient) -> Response:
        return upload(ctx, state[0], client=client)

    def judge(state: tuple[bytes, dict[str, Any]], answers: list[Response]) -> None:
        created = [a for a in answers if a.status == 201]
        for answer in answers:
            if answer.status == 409:
                ctx.expect_status(answer, 409, "import-in-progress")
            elif answer.status == 200:
                ctx.expect(answer.json().get("replayed") is True, "a concurrent import answered 200 without replaying")
            elif answer.status != 201:
                ctx.expect_status(answer, (200, 201, 409))
        ctx.expect(len(created) == 1, f"{len(created)} of {len(answers)} concurrent imports of one file answered 201")
        sessions = {a.json()["session_id"] for a in answers if a.status in (200, 201)}
        ctx.expect(len(sessions) == 1, f"concurrent imports of one file answered {len(sessions)} sessions")
        got = [[t for t, _ in turn] for turn in own_turns(ctx, created[0].json()["session_id"])]
        want = [[r[0] for r in turn["records"]] for turn in state[1]["turns"]]
        ctx.expect(got == want, f"after concurrent imports the session holds {got}; expected each line once: {want}")

    rounds(ctx, prepare, attempt, judge)


@check(
    "IMPORT-WRITE-001",
    title="Continuing an import respects a writer lease held on its session",
    needs=(CAPABILITY, "writer-lease"),
)
def import_respects_lease(ctx: CheckContext) -> None:
    from conformance.checks.leases import held_lease

    data, expected = build(ctx, "valid", fresh_ids(ctx))
    lines = split_lines(data)
    part = imported(ctx, b"".join(lines[:3]))
    sid = part["session_id"]
    lease = held_lease(ctx, sid)
    before = ctx.walk(sid, "records")
    refused = upload(ctx, data)
    ctx.expect_status(refused, 409, "writer-conflict")
    ctx.expect(ctx.walk(sid, "records") == before, "an import without the lease changed the session")
    done = upload(ctx, data, headers={"Writer-Lease": lease["lease_id"]})
    ctx.expect_status(done, 200)
    got = [[t for t, _ in turn] for turn in own_turns(ctx, sid)]
    want = [[r[0] for r in turn["records"]] for turn in expected["turns"]]
    ctx.expect(got == want, f"the import with the lease holds {got}; expected {want}")
    if not isinstance(expected, dict):
        raise CheckFailed("setup", ["IMPORT-WRITE-001"])
