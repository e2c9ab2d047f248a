"""Builds sessions through the reference service, so every benchmark reads real, valid data."""

from __future__ import annotations

import json
from dataclasses import dataclass

from reference_impl.services import Services

from benchmarks.backend import PRINCIPAL

_FILLER = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor "


def content(turn: int, record: int, size: int) -> dict[str, str]:
    """Deterministic record content whose compact JSON is `size` bytes (LangGraph-anchor sized)."""
    head = f"turn {turn} record {record}: "
    body = {"text": head}
    overhead = len(encoded(body))
    missing = max(size - overhead, 0)
    body["text"] = head + (_FILLER * (missing // len(_FILLER) + 1))[:missing]
    return body


def encoded(value: dict[str, str]) -> bytes:
    """The bytes the reference stores for a record's content."""
    return json.dumps(value, separators=(",", ":")).encode()


@dataclass
class Seeded:
    """Turn ids appended to a session and the content bytes they carry."""

    turn_ids: list[str]
    content_bytes: int


def add_turns(
    services: Services,
    session_id: str,
    turns: int,
    records_per_turn: int,
    record_bytes: int,
    first_label: int = 0,
) -> Seeded:
    """Append `turns` completed turns of `records_per_turn` records, as a client would."""
    turn_ids = []
    total = 0
    for number in range(first_label, first_label + turns):
        role = "user" if number % 2 == 0 else "assistant"
        turn = services.sessions.start_turn(PRINCIPAL, session_id, {"role": role})
        remaining = records_per_turn
        record = 0
        while remaining > 0:
            batch = min(remaining, services.sessions.limits.max_records_per_append)
            items = [
                {"type": "message", "content": content(number, record + offset, record_bytes)}
                for offset in range(batch)
            ]
            total += sum(len(encoded(item["content"])) for item in items)
            services.sessions.append_records(PRINCIPAL, session_id, turn["turn_id"], {"records": items})
            remaining -= batch
            record += batch
        services.sessions.finish_turn(PRINCIPAL, session_id, turn["turn_id"], {"status": "completed"})
        turn_ids.append(turn["turn_id"])
    return Seeded(turn_ids, total)


def new_session(services: Services, name: str) -> str:
    """A fresh root session owned by the benchmark principal."""
    return str(services.sessions.create_session(PRINCIPAL, {"name": name})["session_id"])


def fork_latest(services: Services, source_id: str) -> str:
    """A reference child inheriting every completed turn of the source."""
    outcome = services.fork.fork(PRINCIPAL, source_id, {"cut": {"mode": "latest"}}, None)
    return str(outcome.body["session"]["session_id"])


def chain(
    services: Services,
    depth: int,
    turns_per_session: int,
    records_per_turn: int,
    record_bytes: int,
) -> list[str]:
    """Sessions at depths 0..depth, each forked at the latest turn of the one before, with turns."""
    sessions = [new_session(services, "chain-0")]
    add_turns(services, sessions[0], turns_per_session, records_per_turn, record_bytes)
    for level in range(1, depth + 1):
        child = fork_latest(services, sessions[-1])
        add_turns(
            services,
            child,
            turns_per_session,
            records_per_turn,
            record_bytes,
            level * turns_per_session,
        )
        sessions.append(child)
    return sessions


def transcript_contents(services: Services, session_id: str, page_size: int) -> list[str]:
    """The effective transcript as record contents, page by page: copies change ids, not content."""
    contents: list[str] = []
    cursor = None
    while True:
        page = services.transcript.transcript(PRINCIPAL, session_id, cursor, page_size)
        contents.extend(encoded(record["content"]).decode() for record in page.records)
        if not page.has_more:
            return contents
        cursor = page.next_cursor
