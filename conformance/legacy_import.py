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


def import_with_parents(
    client: httpx.Client, path: Path, lease: str | None = None, seen: set[Path] | None = None
) -> list[tuple[Path, httpx.Response]]:
    """Import the file's fork parents (found beside it) first, then the file; every (file, answer), in order."""
    seen = seen or set()
    if path in seen:
        raise ValueError(f"{path}: its fork parents form a cycle")
    seen.add(path)
    answers: list[tuple[Path, httpx.Response]] = []
    meta = meta_of(path)
    parent_id = meta.get("forked_from_id") if meta else None
    if isinstance(parent_id, str):
        parent = find_parent(path, parent_id)
        if parent is not None:
            answers += import_with_parents(client, parent, None, seen)
            if answers[-1][1].status_code >= 400:
                return answers  # the child cannot inherit from a parent that was refused
    answers.append((path, upload(client, path, lease)))
    return answers


def _problem(answer: httpx.Response) -> str:
    try:
        body = answer.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        kind = str(body.get("type") or "").rsplit(":", 1)[-1]
        detail = str(body.get("detail") or body.get("title") or "").replace("\n", " ")
        return f"{kind}: {detail}" if kind else detail
    return answer.text[:200].replace("\n", " ")


def _say(message: str) -> None:
    print(f"session-lineage import: {message}", file=sys.stderr)


def run(
    file: str, target: str, token: str, lease: str | None = None, timeout: float = 300.0, jsonl: bool = False,
    out: Any = None,
) -> int:
    """Upload; print the import summaries as one JSON array (or JSON Lines) on stdout, every error
    on stderr, one line each. Exit 0, 1 when the server refused an upload, 2 on a set-up mistake
    (no such file, an unreachable target, a token it does not accept)."""
    out = out or sys.stdout
    path = Path(file)
    if not path.is_file():
        _say(f"no such file {file}")
        return 2
    if not target.startswith(("http://", "https://")):
        _say(f"--target {target!r} is not an http:// or https:// URL")
        return 2
    try:
        with httpx.Client(base_url=target, headers={"Authorization": f"Bearer {token}"}, timeout=timeout) as client:
            answers = import_with_parents(client, path, lease)
    except httpx.TransportError as exc:
        _say(f"cannot reach {target}: {exc.__class__.__name__}: {exc}; run the same command again to continue")
        return 2
    except httpx.HTTPError as exc:
        _say(f"{exc.__class__.__name__}: {exc}; run the same command again to continue")
        return 1
    except (OSError, ValueError) as exc:
        _say(str(exc))
        return 2
    summaries: list[Any] = []
    code = 0
    for source, answer in answers:
        if answer.status_code >= 400:
            _say(f"{source.name}: the server answered {answer.status_code} ({_problem(answer)})")
            code = max(code, 2 if answer.status_code == 401 else 1)
            continue
        try:
            summaries.append(answer.json())
        except ValueError:
            _say(f"{source.name}: the server answered {answer.status_code} without JSON")
            code = max(code, 1)
    if jsonl:
        for summary in summaries:
            out.write(json.dumps(summary, ensure_ascii=False) + "\n")
    else:
        out.write(json.dumps(summaries, indent=2, ensure_ascii=False) + "\n")
    return code
