"""The steps every turn write shares, whichever chapter takes the request: the writer check, the
session's turn slot, the running turn, reserved record indexes and the two-store record write.

Plain turns (sessions.py), keyed and one-request turns (turn_writes.py), suspend and inputs
(suspend.py) and legacy import call these, so one rule is written once. No SQL here either: each
step calls the `store.Transaction` statement it names.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from reference_impl.errors import NotFound, PayloadTooLarge, StorageUnavailable, TurnNotRunning
from reference_impl.principals import public_id
from reference_impl.services.common import new_id, timestamp, utcnow
from reference_impl.settings import Limits
from reference_impl.store import Store, Transaction
from reference_impl.store import ids
from reference_impl.store.rows import TurnRow
from reference_impl.store.store import StorageError

if TYPE_CHECKING:
    from reference_impl.services.access import Access


# ---------------------------------------------------------------- the turn
def own_turn(tx: Transaction, session_id: str, turn_id: str) -> TurnRow:
    """The turn, if it belongs to the session; else 404."""
    turn = tx.turn(turn_id)
    if turn is None or turn.session_id != session_id:
        raise NotFound(f"turn {turn_id} not found in session {session_id}")
    return turn


def writable_turn(
    access: Access, tx: Transaction, principal: str, session_id: str, turn_id: str, lease_id: str | None
) -> TurnRow:
    """A turn of a session the caller may write now: role and writer lease checked first."""
    access.writable_session(tx, principal, session_id, lease_id)
    return own_turn(tx, session_id, turn_id)


def require_running(turn: TurnRow) -> TurnRow:
    if turn.status != "running":
        raise TurnNotRunning(f"turn {turn.turn_id} is {turn.status}")
    return turn


def turn_row(
    turn_id: str, session_id: str, turn_index: int, role: str, first: int, created_at: str,
    status: str = "running", end: int | None = None,
) -> dict[str, Any]:
    """A new turn's row; a turn written finished (`end` given) finishes when it is created."""
    return {
        "turn_id": turn_id,
        "session_id": session_id,
        "turn_index": turn_index,
        "role": role,
        "status": status,
        "first_record_index": first,
        "end_record_index": end,
        "created_at": created_at,
        "finished_at": created_at if end is not None else None,
    }


def open_turn(tx: Transaction, session_id: str, turn_id: str | None, role: str) -> TurnRow | None:
    """Claim the session's turn slot and insert the running turn, with `turn_id` (a client's) or the
    id the store derives (None); None when another turn holds the slot."""
    slot = tx.claim_turn_slot(session_id, turn_id)
    if slot is None:
        return None
    row = turn_row(slot.turn_id, session_id, slot.index, role, slot.first, timestamp(utcnow()))
    tx.insert_turn(row, slot.token)
    return TurnRow(**row, token=slot.token)


def close_turn(tx: Transaction, turn: TurnRow, status: str, finished_at: str) -> TurnRow:
    """Finish the running turn, giving the session's slot back; the turn as finished."""
    end = tx.finish_turn(turn.turn_id, status, finished_at)
    if end is None:
        raise TurnNotRunning(f"turn {turn.turn_id} is not running")
    return replace(turn, status=status, end_record_index=end, finished_at=finished_at)


# ---------------------------------------------------------------- records
def encoded_contents(limits: Limits, inputs: list[dict[str, Any]]) -> list[str]:
    """Each record's content as stored, after the advertised record limits (413 past them)."""
    if len(inputs) > limits.max_records_per_append:
        raise PayloadTooLarge(
            f"{len(inputs)} records exceed max_records_per_append ({limits.max_records_per_append})"
        )
    encoded = [json.dumps(item["content"], separators=(",", ":")) for item in inputs]
    for position, content in enumerate(encoded):
        if len(content.encode()) > limits.max_record_bytes:
            raise PayloadTooLarge(f"record {position} exceeds max_record_bytes ({limits.max_record_bytes})")
    return encoded


def reserve_indexes(tx: Transaction, session_id: str, turn_id: str, count: int) -> int:
    """The first of `count` record indexes reserved for the running turn."""
    first = tx.reserve_record_indexes(session_id, turn_id, count)
    if first is None:
        raise TurnNotRunning(f"turn {turn_id} is not running")
    return first


def record_rows(
    session_id: str, turn_id: str, turn_index: int, first: int, items: list[tuple[str, str]], created_at: str,
    token: str | None,
) -> list[dict[str, Any]]:
    """Rows for records (type, stored content) at the indexes reserved from `first`. Their ids are
    derived from the session's `token` and the index (store/ids.py); without one, made afresh."""
    return [
        {
            "record_id": ids.record_id(token, first + offset) if token else new_id(),
            "token": token,
            "session_id": session_id,
            "record_index": first + offset,
            "turn_id": turn_id,
            "turn_index": turn_index,
            "record_type": record_type,
            "content": content,
            "created_at": created_at,
        }
        for offset, (record_type, content) in enumerate(items)
    ]


def record_views(rows: list[dict[str, Any]], contents: list[Any] | None = None) -> list[dict[str, Any]]:
    """The records as answered; `contents`: the request's contents (default: decoded from the rows)."""
    decoded = contents if contents is not None else [json.loads(row["content"]) for row in rows]
    return [
        {
            "record_id": row["record_id"],
            "session_id": public_id(row["session_id"]),
            "turn_id": public_id(row["turn_id"]),
            "index": row["record_index"],
            "type": row["record_type"],
            "content": content,
            "created_at": row["created_at"],
        }
        for row, content in zip(rows, decoded)
    ]


def append_rows(
    store: Store, tx: Transaction, turn: TurnRow, items: list[tuple[str, str]], created_at: str
) -> tuple[int, list[dict[str, Any]]]:
    """Reserve indexes for the items on the running turn and build their rows; with one store they
    are inserted here, in the reservation's transaction (two stores: `insert_or_give_back` after it)."""
    first = reserve_indexes(tx, turn.session_id, turn.turn_id, len(items))
    rows = record_rows(turn.session_id, turn.turn_id, turn.turn_index, first, items, created_at, turn.token)
    if not store.split:
        tx.insert_records(rows)
    return first, rows


def insert_or_give_back(
    store: Store, rows: list[dict[str, Any]], give_back: Callable[[Transaction], bool], refused: str,
    kept: str | None = None,
) -> None:
    """Two stores: the core has committed the reservation; the records store now takes the rows.

    If it refuses, `give_back` takes the reservation back in a core transaction (True when nothing
    came after it) and the answer is 503: `refused`, or `kept` when the reservation had to stay.
    """
    try:
        with store.write_records() as records_tx:
            records_tx.insert_records(rows)
    except StorageError as exc:
        with store.write() as tx:
            given_back = give_back(tx)
        raise StorageUnavailable(refused if given_back or kept is None else kept) from exc


def release_indexes(session_id: str, turn_id: str, first: int, count: int) -> Callable[[Transaction], bool]:
    """The usual `give_back`: the reserved indexes, when no later append holds the ones after them."""
    return lambda tx: tx.release_record_indexes(session_id, turn_id, first, count)


NOTHING_APPENDED = "the records store did not take the records; nothing was appended"
INDEXES_HELD = NOTHING_APPENDED + " and a later append holds the indexes after them"
