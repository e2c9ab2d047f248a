"""Mutants: ERR-PRECEDENCE-001's rows of replay history, suspended turns and legacy imports, each
answered before a row the table puts first (errors/precedence.py's checks catch them)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.types import ASGIApp

from reference_impl.errors import ImportInProgress, TurnInProgress, TurnNotSuspended
from reference_impl.legacy_lines import Line
from reference_impl.services.legacy_import import ImportJob
from reference_impl.services.legacy_progress import Progress
from reference_impl.services.rollout import ReplayPlan, ReplayService
from reference_impl.services.suspend import SuspendService
from reference_impl.settings import Settings
from tests.mutants import app_with_service, mutant, reference_app
from tests.mutants.errors import _problem
from tests.mutants.legacy_import import with_job


# ---------------------------------------------------------------- replay-history-mismatch
class TurnBeforeReplay(ReplayService):
    def plan(self, principal: str, session_id: str, replay: list[dict[str, Any]], lease_id: str | None = None) -> ReplayPlan:
        with self.store.read() as tx:
            session = tx.session(session_id)
        if session is not None and session.running_turn_id is not None:
            raise TurnInProgress(f"session {session_id} already has a running turn")
        return super().plan(principal, session_id, replay, lease_id)


@mutant("ERR-PRECEDENCE-001", select=("errors.replay_history_rows",),
        description="A turn start with replay history checks for a running turn before comparing the history")
def running_turn_before_replay_history(settings: Settings) -> ASGIApp:
    return app_with_service(settings, TurnBeforeReplay)


# ---------------------------------------------------------------- turn-not-suspended
class StateBeforeAccess(SuspendService):
    """Recover and abandon look at the turn before the caller's role and the writer lease."""

    def _suspended_first(self, session_id: str, turn_id: str) -> None:
        with self.store.read() as tx:
            turn = tx.turn(turn_id)
        if turn is not None and turn.session_id == session_id and turn.status not in ("suspended", "interrupted"):
            raise TurnNotSuspended(f"turn {turn_id} is {turn.status}, not suspended or interrupted")

    def recover(self, principal: str, session_id: str, turn_id: str, lease_id: str | None = None) -> dict[str, Any]:
        self._suspended_first(session_id, turn_id)
        return super().recover(principal, session_id, turn_id, lease_id)

    def abandon(self, principal: str, session_id: str, turn_id: str, lease_id: str | None = None) -> dict[str, Any]:
        self._suspended_first(session_id, turn_id)
        return super().abandon(principal, session_id, turn_id, lease_id)


@mutant("ERR-PRECEDENCE-001", select=("errors.suspended_turn_rows",),
        description="Recover and abandon refuse a turn that is not suspended before checking role and writer lease")
def turn_state_before_access(settings: Settings) -> ASGIApp:
    return app_with_service(settings, StateBeforeAccess)


# ---------------------------------------------------------------- invalid-legacy-history, legacy-parent-missing
def _header_checked_after(settings: Settings, name: bytes, refused: Callable[[str, bytes], bool],
                          replacement: list[tuple[bytes, bytes]], later: str, status: int, kind: str) -> ASGIApp:
    """A server that checks header `name` after the row of `later`: a request to a path whose header
    is `refused` goes on with `replacement` instead, and the `later` refusal answers first; anything
    else it would answer is answered `status` `kind`, as the header's row says."""
    app = reference_app(settings)

    async def wrapped(scope: dict[str, Any], receive: Any, send: Any) -> None:
        values = [value for key, value in scope.get("headers", []) if key.lower() == name]
        if scope["type"] != "http" or not values or not refused(scope.get("path", ""), values[0]):
            await app(scope, receive, send)
            return
        headers = [(key, value) for key, value in scope["headers"] if key.lower() != name] + replacement
        messages: list[dict[str, Any]] = []

        async def keep(message: dict[str, Any]) -> None:
            messages.append(message)

        await app({**scope, "headers": headers}, receive, keep)
        body = b"".join(message.get("body", b"") for message in messages[1:])
        if f"urn:session-lineage:problem:{later}".encode() not in body:
            await _problem(status, kind)(scope, receive, send)
            return
        for message in messages:
            await send(message)

    return wrapped


@mutant("ERR-PRECEDENCE-001", select=("errors.legacy_import_rows",),
        description="An import reads the history before its media type: a text/plain upload without a meta line answers "
                    "422 invalid-legacy-history")
def legacy_history_before_media_type(settings: Settings) -> ASGIApp:
    ndjson = b"application/x-ndjson"
    return _header_checked_after(settings, b"content-type",
                                 lambda path, value: path == "/imports" and value.split(b";")[0].strip() != ndjson,
                                 [(b"content-type", ndjson)], "invalid-legacy-history", 415, "unsupported-media-type")


@mutant("ERR-PRECEDENCE-001", select=("errors.legacy_import_rows",),
        description="An import looks for the fork parent before it checks the Writer-Lease header's syntax")
def legacy_parent_before_lease_syntax(settings: Settings) -> ASGIApp:
    return _header_checked_after(settings, b"writer-lease", lambda path, value: path == "/imports" and b" " in value, [],
                                 "legacy-parent-missing", 422, "invalid-request")


# ---------------------------------------------------------------- capability-missing
@mutant("ERR-PRECEDENCE-001", "NEGOTIATE-HEADER-001", select=("errors.capability_missing_row",),
        description="getContext and getEffectiveTurn check Requires-Capabilities after the session: an unknown session "
                    "answers 404 however the header reads")
def capabilities_after_session_on_later_operations(settings: Settings) -> ASGIApp:
    later = ("/context", "/effective-turns/")
    return _header_checked_after(settings, b"requires-capabilities", lambda path, value: any(part in path for part in later),
                                 [], "not-found", 412, "capability-missing")


# ---------------------------------------------------------------- import-in-progress, writer-conflict
class BytesBeforeClaim(ImportJob):
    """Compares the upload with what was imported even when another upload holds the history: a
    conflict answers 409 legacy-conflict; otherwise, at its first new line or at the end, 409
    import-in-progress."""

    deferred = False

    def _claim(self, parent: str | None, meta_line: Line) -> None:
        try:
            super()._claim(parent, meta_line)
        except ImportInProgress:
            with self.store.read() as tx:
                row = tx.legacy_import(self.principal, self.legacy_id)
            assert row is not None
            self.deferred = True
            self.session_id, self.bytes_done, self.lines_done = row.session_id, row.bytes_done, row.lines_done
            self.progress = Progress.load(row.state)

    async def line(self, line: Line, final: bool = False) -> None:
        if self.deferred:
            raise ImportInProgress(f"history {self.legacy_id} is being imported by another upload; retry later")
        await super().line(line, final)

    def summary(self, fingerprint: str, replayed: bool) -> dict[str, Any]:
        if self.deferred:
            raise ImportInProgress(f"history {self.legacy_id} is being imported by another upload; retry later")
        return super().summary(fingerprint, replayed)

    async def finish(self, size: int, fingerprint: str) -> None:
        if self.deferred:
            raise ImportInProgress(f"history {self.legacy_id} is being imported by another upload; retry later")
        await super().finish(size, fingerprint)


@mutant("ERR-PRECEDENCE-001", select=("errors.import_in_progress_row",),
        description="An upload is compared with the imported bytes before the claim: a conflicting upload answers "
                    "legacy-conflict while another upload imports the history")
def legacy_conflict_before_claim(settings: Settings) -> ASGIApp:
    return app_with_service(settings, with_job(BytesBeforeClaim))


class LeaseAtClaim(ImportJob):
    """Checks the writer lease of the import's session as soon as it claims the history."""

    def _claim(self, parent: str | None, meta_line: Line) -> None:
        super()._claim(parent, meta_line)
        if self.session_id is not None:
            with self.store.read() as tx:
                self.service.access.writable_session(tx, self.principal, self.session_id, self.lease_id)


@mutant("ERR-PRECEDENCE-001", select=("errors.legacy_import_rows",),
        description="Continuing an import checks the writer lease before the bytes: a conflicting upload without the "
                    "lease answers writer-conflict")
def lease_before_legacy_conflict(settings: Settings) -> ASGIApp:
    return app_with_service(settings, with_job(LeaseAtClaim))
