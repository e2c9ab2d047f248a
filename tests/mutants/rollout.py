"""Mutants: rollout (unknown request fields, Requires-Capabilities, replay history, deprecation
headers, the pending rewind action)."""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp

import spec
from conformance.client import find_operation
from reference_impl.errors import ReplayHistoryMismatch
from reference_impl.services.rewind import RewindService
from reference_impl.services.rollout import ReplayPlan, ReplayService
from reference_impl.services.sessions import SessionsService
from reference_impl.settings import Settings
from reference_impl.store import Transaction
from reference_impl.store.rows import Segment, SessionRow
from tests.mutants import app_with_service, app_with_transaction, mutant, reference_app, rewrite_responses
from tests.mutants.sessions import rewrite_requests

Headers = list[tuple[bytes, bytes]]


# ---------------------------------------------------------------- versions and negotiation
def _strip_unknown_members(scope: dict[str, Any], body: bytes) -> tuple[dict[str, Any], bytes]:
    """Drop every member the operation's request schema does not define (what a lenient server does)."""
    operation = find_operation(scope["method"], scope["path"])
    if operation is None or not body:
        return scope, body
    request = spec.openapi()["paths"][operation.template][scope["method"].lower()].get("requestBody")
    if not request or "application/json" not in request.get("content", {}):
        return scope, body
    try:
        data = json.loads(body)
    except ValueError:
        return scope, body
    schema_file = request["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
    for error in spec.validator(schema_file).iter_errors(data):
        if error.validator != "additionalProperties" or not isinstance(error.instance, dict):
            continue
        known = set(error.schema.get("properties", {}))
        for name in [name for name in error.instance if name not in known]:
            del error.instance[name]  # the instance is the very object inside `data`
    return scope, json.dumps(data).encode()


@mutant("VERSION-UNKNOWN-FIELD-001", description="unknown request members are silently ignored")
def unknown_field_ignored(settings: Settings) -> ASGIApp:
    return rewrite_requests(reference_app(settings), _strip_unknown_members)


@mutant("NEGOTIATE-HEADER-001", description="Requires-Capabilities is ignored: the server guesses")
def requires_capabilities_ignored(settings: Settings) -> ASGIApp:
    def drop(scope: dict[str, Any], body: bytes) -> tuple[dict[str, Any], bytes]:
        scope["headers"] = [(k, v) for k, v in scope.get("headers", []) if k.lower() != b"requires-capabilities"]
        return scope, body

    return rewrite_requests(reference_app(settings), drop)


# ---------------------------------------------------------------- replay history
class DuplicatePrefix(ReplayService):
    """Appends replay history to the durable context: the child's context holds its prefix twice."""

    def plan(self, principal: str, session_id: str, replay: list[dict[str, Any]], lease_id: str | None = None) -> ReplayPlan:
        with self.store.read() as tx:
            self.access.writable_session(tx, principal, session_id, lease_id)
        return self.rebuild_plan(replay)


class PerAncestorReplay(ReplayService):
    """Reads the records before the turn one ancestor at a time: cost grows with depth."""

    def preceding_record_ids(self, tx: Any, principal: str, session_id: str) -> list[str]:
        chain = self.access.visible_chain(tx, principal, session_id)
        ids: list[str] = []
        for link in chain:
            if link.record_bound == -1:
                continue
            upto = link.record_bound if link.record_bound is not None else link.session.record_count - 1
            ids += [row.record_id for row in tx.records([Segment(link.session.session_id, -1, upto)], upto + 2)]
        return ids


class MismatchAccepted(ReplayService):
    """Accepts any replay history on a session with records."""

    @staticmethod
    def compare(session_id: str, preceding: list[str], replay: list[dict[str, Any]]) -> None:
        return None


class RebuildDropped(ReplayService):
    """Ignores replay history on a new session: the rebuilt context is lost."""

    def rebuild_plan(self, replay: list[dict[str, Any]]) -> ReplayPlan:
        return ReplayPlan([])


class ChildNeedsReplay(SessionsService):
    """A lineage server that still insists on replay history for a forked child's first turn."""

    def start_turn(self, principal: str, session_id: str, body: dict[str, Any], lease_id: str | None = None,
                   prefix: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        if prefix is None:
            with self.store.read() as tx:
                session = tx.session(session_id)
            if session is not None and session.lineage is not None and session.turn_count == 0:
                raise ReplayHistoryMismatch("send the inherited records as replay_history")
        return super().start_turn(principal, session_id, body, lease_id, prefix=prefix)


@mutant("REPLAY-MATCH-001", description="replay history appended to the durable context (a duplicate prefix)")
def replay_duplicate_prefix(settings: Settings) -> ASGIApp:
    return app_with_service(settings, DuplicatePrefix)


@mutant("REPLAY-COST-001", description="replay history compared by reading one ancestor at a time")
def replay_per_ancestor(settings: Settings) -> ASGIApp:
    return app_with_service(settings, PerAncestorReplay)


@mutant("REPLAY-CONFLICT-001", description="replay history that contradicts the lineage is accepted")
def replay_mismatch_accepted(settings: Settings) -> ASGIApp:
    return app_with_service(settings, MismatchAccepted)


@mutant("REPLAY-REBUILD-001", description="replay history on a new session is dropped")
def replay_rebuild_dropped(settings: Settings) -> ASGIApp:
    return app_with_service(settings, RebuildDropped)


@mutant("COMPAT-LINEAGE-001", description="a forked child's first turn is refused without replay history")
def lineage_child_needs_replay(settings: Settings) -> ASGIApp:
    return app_with_service(settings, ChildNeedsReplay)


def _rewrite_header(name: bytes, value: bytes | None):
    def rewrite(scope: dict[str, Any], status: int, headers: Headers, body: bytes) -> tuple[int, Headers, bytes]:
        if not any(k.lower() == name for k, _ in headers):
            return status, headers, body
        kept = [(k, v) for k, v in headers if k.lower() != name]
        if value is not None:
            kept.append((name, value))
        return status, kept, body

    return rewrite


@mutant("COMPAT-DEPRECATION-001", description="no Deprecation header on answers to replay history")
def no_deprecation_header(settings: Settings) -> ASGIApp:
    return rewrite_responses(reference_app(settings), _rewrite_header(b"deprecation", None))


@mutant("COMPAT-DEPRECATION-001", description="Sunset earlier than Deprecation")
def sunset_before_deprecation(settings: Settings) -> ASGIApp:
    return rewrite_responses(reference_app(settings), _rewrite_header(b"sunset", b"Mon, 01 Jan 2024 00:00:00 GMT"))


# ---------------------------------------------------------------- pending rewind action
class DraftDropped(Transaction):
    def insert_pending_action(self, row: dict[str, Any]) -> None:
        super().insert_pending_action({**row, "draft": None})


class StickyInFlight(RewindService):
    """Marks the action in flight once a turn started and never resets it when the turn stops."""

    @staticmethod
    def state(session: SessionRow) -> str:
        return "in-flight" if session.turn_count > 0 else "pending"


class ClearedOnFirstRequest(SessionsService):
    """Clears the pending action when the first turn starts instead of when one succeeds."""

    def start_turn(self, principal: str, session_id: str, body: dict[str, Any], lease_id: str | None = None,
                   prefix: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        result = super().start_turn(principal, session_id, body, lease_id, prefix=prefix)
        with self.store.write() as tx:
            tx.clear_pending_action(session_id)
        return result


class KeptAfterPurge(Transaction):
    def delete_pending_action(self, session_id: str) -> None:
        return None


@mutant("REWIND-CREATE-001", description="the restored draft of an edit rewind is not stored")
def rewind_draft_dropped(settings: Settings) -> ASGIApp:
    return app_with_transaction(settings, DraftDropped)


@mutant("REWIND-STATE-001", description="in-flight is not reset to pending after the turn stops")
def rewind_inflight_sticky(settings: Settings) -> ASGIApp:
    return app_with_service(settings, StickyInFlight)


@mutant("REWIND-CLEAR-001", description="the pending action is cleared on the first request instead of the first success")
def rewind_cleared_on_first_request(settings: Settings) -> ASGIApp:
    return app_with_service(settings, ClearedOnFirstRequest)


@mutant("REWIND-PURGE-001", description="a purge leaves the pending action behind")
def rewind_kept_after_purge(settings: Settings) -> ASGIApp:
    return app_with_transaction(settings, KeptAfterPurge)

