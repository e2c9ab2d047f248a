"""`session-lineage import FILE --target URL --token T`: upload a legacy JSONL history.

The file is streamed (never read whole). When its meta line names a fork parent, the parent's
file is looked for beside it (a `*.jsonl` whose meta line has that id) and imported first, so the
child can inherit the turns it copied. A failed or interrupted upload can simply be run again:
the server continues after the last line it imported, and a complete import is replayed.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

CHUNK = 64 * 1024
MEDIA_TYPE = "application/x-ndjson"


def meta_of(path: Path) -> dict[str, Any] | None:
    """The meta line's payload, reading no more than its first line."""
    try:
        with path.open("rb") as handle:
            first = handle.readline(1 << 20)
        line = json.loads(first.decode("utf-8").rstrip("\r\n"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    if isinstance(line, dict) and line.get("type") == "session_meta" and isinstance(line.get("payload"), dict):
        return line["payload"]
    return None


def find_parent(path: Path, parent_id: str) -> Path | None:
    for candidate in sorted(path.parent.glob("*.jsonl")):
        if candidate != path:
            meta = meta_of(candidate)
            if meta is not None and meta.get("id") == parent_id:
                return candidate
    return None


def chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as handle:
        while True:
            chunk = handle.read(CHUNK)
            if not chunk:
                return
            yield chunk


def upload(client: httpx.Client, path: Path, lease: str | None = None) -> httpx.Response:
    headers = {"Content-Type": MEDIA_TYPE}
    if lease:
        headers["Writer-Lease"] = lease
    return client.post("/imports", content=chunks(path), headers=headers)


def import_with_parents(client: httpx.Client, path: Path, lease: str | None = None, seen: set[Path] | None = None) -> list[httpx.Response]:
    """Import the file's fork parents (found beside it) first, then the file; every answer, in order."""
    seen = seen or set()
    if path in seen:
        raise ValueError(f"{path}: its fork parents form a cycle")
    seen.add(path)
    answers: list[httpx.Response] = []
    meta = meta_of(path)
    parent_id = meta.get("forked_from_id") if meta else None
    if isinstance(parent_id, str):
        parent = find_parent(path, parent_id)
        if parent is not None:
            answers += import_with_parents(client, parent, None, seen)
    answers.append(upload(client, path, lease))
    return answers


def run(file: str, target: str, token: str, lease: str | None = None, timeout: float = 300.0) -> int:
    path = Path(file)
    if not path.is_file():
        print(f"session-lineage import: no such file {file}", file=sys.stderr)
        return 2
    with httpx.Client(base_url=target, headers={"Authorization": f"Bearer {token}"}, timeout=timeout) as client:
        try:
            answers = import_with_parents(client, path, lease)
        except (httpx.HTTPError, ValueError) as exc:
            print(f"session-lineage import: {exc}; run the same command again to continue", file=sys.stderr)
            return 1
    failed = False
    for answer in answers:
        try:
            body = answer.json()
        except ValueError:
            body = {"status": answer.status_code, "body": answer.text[:500]}
        print(json.dumps(body, indent=2, ensure_ascii=False))
        failed = failed or answer.status_code >= 400
    return 1 if failed else 0
