"""Plain rows the store returns to the service layer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class LineageRow:
    session_id: str
    parent_session_id: str
    root_session_id: str
    depth: int
    inherited_turn_count: int
    cut_mode: str
    cut_turn_id: str | None
    cutoff_session_id: str | None
    cutoff_turn_index: int
    cutoff_record_index: int
    created_at: str
    cutoff_segments: str | None = None  # the cutoff session's effective segments (segments.py)


@dataclass(frozen=True)
class SessionRow:
    session_id: str
    owner: str
    name: str | None
    description: str | None
    created_at: str
    depth: int
    turn_count: int
    record_count: int
    running_turn_id: str | None
    lineage: LineageRow | None
    deleted_at: str | None = None
    child_count: int = 0
    # The role granted to the principal the row was read for (`viewer`), if any.
    viewer: str | None = None
    viewer_grant: str | None = None
    version: int = 0  # bumped by every change to the transcript or metadata (the ETag)
    revision: int = 0  # reverts so far
    own_segments: str | None = None  # the own effective segments (segments.py); None: all
    suspended_turn_id: str | None = None  # the turn holding the slot while suspended (capability suspend)


@dataclass(frozen=True)
class ChainLink:
    """One session of a lineage chain with the bounds its descendant inherits.

    `turn_bound` and `record_bound` are the last inherited turn and record indexes of this
    session (-1: nothing); both are None for the session the chain was read for.
    """

    session: SessionRow
    hops: int
    turn_bound: int | None
    record_bound: int | None
    # The session's effective segments this read sees (segments.py): its own current ones for the
    # session read, those a fork captured for an ancestor; None: all.
    segments: str | None = None


@dataclass(frozen=True)
class TurnRow:
    turn_id: str
    session_id: str
    turn_index: int
    role: str
    status: str
    first_record_index: int
    end_record_index: int | None
    created_at: str
    finished_at: str | None
    token: str = ""  # its session's token, which the ids of its records derive from (store/ids.py)


@dataclass(frozen=True)
class RecordRow:
    record_id: str
    session_id: str
    record_index: int
    turn_id: str
    turn_index: int
    record_type: str
    content: Any
    created_at: str


@dataclass(frozen=True)
class IdempotencyRow:
    principal: str
    idempotency_key: str
    fingerprint: str
    child_session_id: str
    response_status: int
    response_body: str
    expires_at: str


@dataclass(frozen=True)
class Segment:
    """A bounded slice of one session's records: indexes after `after` up to `upto` (None: all)."""

    session_id: str
    after: int
    upto: int | None


@dataclass(frozen=True)
class LeaseRow:
    session_id: str
    lease_id: str
    principal: str
    expires_at: str


@dataclass(frozen=True)
class GrantRow:
    session_id: str
    principal: str
    role: str
    granted_at: str


@dataclass(frozen=True)
class AttachmentRow:
    """An attachment without its bytes (`content` is read only when they are served)."""

    session_id: str
    attachment_id: str
    position: int
    media_type: str
    size: int
    sha256: str
    created_at: str
