"""JSON views of store rows, shaped exactly as the spec's response schemas.

Session and turn ids are stored as keys of their project (principals.py); views write the ids
clients know.
"""

from __future__ import annotations

from typing import Any

from reference_impl.principals import public_id
from reference_impl.store.rows import AttachmentRow, GrantRow, LineageRow, RecordRow, SessionRow, TurnRow


def lineage_summary(lineage: LineageRow) -> dict[str, Any]:
    return {
        "root_session_id": public_id(lineage.root_session_id),
        "parent_session_id": public_id(lineage.parent_session_id),
        "inherited_turn_count": lineage.inherited_turn_count,
        "depth": lineage.depth,
    }


def session(row: SessionRow) -> dict[str, Any]:
    return {
        "session_id": public_id(row.session_id),
        "name": row.name,
        "description": row.description,
        "created_at": row.created_at,
        "lineage": lineage_summary(row.lineage) if row.lineage else None,
    }


def fork_result(row: SessionRow) -> dict[str, Any]:
    assert row.lineage is not None
    return {"session": session(row), "lineage": lineage_summary(row.lineage)}


def turn(row: TurnRow) -> dict[str, Any]:
    return {
        "turn_id": public_id(row.turn_id),
        "session_id": public_id(row.session_id),
        "role": row.role,
        "index": row.turn_index,
        "status": row.status,
        "created_at": row.created_at,
        "finished_at": row.finished_at,
    }


def record(row: RecordRow) -> dict[str, Any]:
    return {
        "record_id": row.record_id,
        "session_id": public_id(row.session_id),
        "turn_id": public_id(row.turn_id),
        "index": row.record_index,
        "type": row.record_type,
        "content": row.content,
        "created_at": row.created_at,
    }


def listed_session(row: SessionRow, access: str) -> dict[str, Any]:
    return {"session": session(row), "access": access}


def grant(row: GrantRow) -> dict[str, Any]:
    return {
        "session_id": public_id(row.session_id),
        "principal_id": row.principal,
        "role": row.role,
        "granted_at": row.granted_at,
    }


def attachment(row: AttachmentRow) -> dict[str, Any]:
    return {
        "attachment_id": row.attachment_id,
        "session_id": public_id(row.session_id),
        "media_type": row.media_type,
        "size": row.size,
        "created_at": row.created_at,
    }
