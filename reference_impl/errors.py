"""Domain errors. Each class names one problem kind of spec/problem-types.yaml."""

from __future__ import annotations


class DomainError(Exception):
    """A rule of the spec refused the request; `kind` selects the problem type."""

    kind: str = "internal"

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class NotFound(DomainError):
    kind = "not-found"


class SessionExists(DomainError):
    kind = "session-exists"


class TurnExists(DomainError):
    kind = "turn-exists"


class TurnInProgress(DomainError):
    kind = "turn-in-progress"


class TurnNotRunning(DomainError):
    kind = "turn-not-running"


class TurnIncomplete(DomainError):
    kind = "turn-incomplete"


class UnknownTurn(DomainError):
    kind = "unknown-turn"


class TargetConflict(DomainError):
    kind = "target-conflict"


class IdempotencyKeyReused(DomainError):
    kind = "idempotency-key-reused"


class IdempotencyInFlight(DomainError):
    kind = "idempotency-in-flight"


class DepthExceeded(DomainError):
    kind = "depth-exceeded"


class PayloadTooLarge(DomainError):
    kind = "payload-too-large"


class InvalidCursor(DomainError):
    kind = "invalid-cursor"


class InvalidRequest(DomainError):
    kind = "invalid-request"


class StorageUnavailable(DomainError):
    kind = "unavailable"


class WriterConflict(DomainError):
    kind = "writer-conflict"


class RecordsUnavailable(DomainError):
    kind = "records-unavailable"


class Forbidden(DomainError):
    """The caller has a role on the session, but not one that allows this operation."""

    kind = "forbidden"


class AncestorNotReadable(DomainError):
    """The read draws from an ancestor the caller has no role on."""

    kind = "ancestor-not-readable"


class UnknownPrincipal(DomainError):
    kind = "unknown-principal"


class SessionDeleted(DomainError):
    kind = "session-deleted"


class LiveDescendants(DomainError):
    kind = "live-descendants"


class AttachmentExists(DomainError):
    kind = "attachment-exists"


class AttachmentInherited(DomainError):
    kind = "attachment-inherited"


class CursorReverted(DomainError):
    """The cursor was issued before the session it reads was reverted."""

    kind = "cursor-reverted"


class PreconditionFailed(DomainError):
    kind = "precondition-failed"


class PreconditionRequired(DomainError):
    kind = "precondition-required"


class ReplayHistoryMismatch(DomainError):
    """`replay_history` contradicts the records that precede the turn (REPLAY-CONFLICT-001)."""

    kind = "replay-history-mismatch"


class CapabilityMissing(DomainError):
    """`Requires-Capabilities` names a capability the server lacks (NEGOTIATE-HEADER-001)."""

    kind = "capability-missing"

    def __init__(self, detail: str, missing: list[str]) -> None:
        super().__init__(detail)
        self.members = {"missing_capabilities": list(missing)}


class ExportTooLarge(DomainError):
    kind = "export-too-large"
class TurnNotSuspended(DomainError):
    """Recover or abandon of a turn that is not suspended or interrupted (capability `suspend`)."""

    kind = "turn-not-suspended"


class ImportInProgress(DomainError):
    """Another upload is importing the same legacy history (capability `legacy-import`)."""

    kind = "import-in-progress"


class InvalidLegacyHistory(DomainError):
    """The upload does not start with a legacy session_meta line."""

    kind = "invalid-legacy-history"


class LegacyConflict(DomainError):
    """The upload differs from what was imported before under the same legacy id."""

    kind = "legacy-conflict"


class LegacyParentMissing(DomainError):
    """The history names a fork parent the caller has not imported."""

    kind = "legacy-parent-missing"


class PageSizeExceeded(DomainError):
    """A `limit` above the advertised `max_page_size` (ERR-REFUSAL-TYPE-001; `invalid-request` before 1.3.0)."""

    kind = "page-size-exceeded"


class LeaseTooLong(DomainError):
    """A `ttl_seconds` above the advertised `max_lease_seconds` (ERR-REFUSAL-TYPE-001)."""

    kind = "lease-too-long"


class GrantToOwner(DomainError):
    """A grant naming the session's owner, who holds every right already (ERR-REFUSAL-TYPE-001)."""

    kind = "grant-to-owner"
