"""Turn and record ids the server makes, derived from the session's token and the index.

A stored uuid per turn and per record was, after the session id, most of what a record cost beyond
its content (benchmarks, comparison 4). An id the server makes is instead its session's `token`
(32 random hex digits, made with the session, unique) with `t` and the turn index, or `r` and the
record index: unique and stable (indexes are never reused), never stored, and it tells nothing
about other sessions. The store keeps such an id's column NULL and writes it out on every read.

Ids kept in the column: those a client chose (a turn id in `startTurn`) and those made before
derived ids (uuids). A client may choose an id of the derived form only when its token is no
session's of the same project (SessionStatements.refuse_taken_token refuses it otherwise as taken),
so an id names one turn of its project either way.
"""

from __future__ import annotations

import re

from reference_impl.principals import project_of_key, public_id, scoped_key

DERIVED = re.compile(r"([0-9a-f]{32})t(0|[1-9][0-9]{0,9})")


def turn_public_id(token: str, turn_index: int) -> str:
    return f"{token}t{turn_index}"


def record_id(token: str, record_index: int) -> str:
    return f"{token}r{record_index}"


def turn_key(session_key: str, token: str, turn_index: int) -> str:
    """The store key of a derived turn id: the session's project, as a session's own turn ids have."""
    return scoped_key(project_of_key(session_key), turn_public_id(token, turn_index))


def key_scope(session_key: str) -> str:
    """What a derived turn key of this session starts with before its token: its project's prefix."""
    return session_key[: len(session_key) - len(public_id(session_key))]


def decoded(turn_key_: str) -> tuple[str, int] | None:
    """(token, turn index) of a turn key of the derived form, else None."""
    match = DERIVED.fullmatch(public_id(turn_key_))
    return (match.group(1), int(match.group(2))) if match else None
