"""Mutants: the ways a turn finishes other than a plain finish leave the pending rewind action
(REWIND-CLEAR-001): the reference's keyed finish once did (fixed with its check)."""

from __future__ import annotations

from dataclasses import replace

from starlette.types import ASGIApp

from reference_impl.services.turn_writes import TurnWritesService
from reference_impl.settings import Settings
from reference_impl.store import Transaction
from reference_impl.store.rows import SessionRow
from tests.mutants import app_with_service, mutant


class KeptBySuccess(TurnWritesService):
    """Keyed finishes and one-request turn writes finish `completed` without clearing."""

    @staticmethod
    def _clear_pending_on_success(tx: Transaction, session: SessionRow, status: str | None) -> None:
        return None


@mutant("REWIND-CLEAR-001", select=("turn_writes.rewind_cleared_by_a_keyed_finish",),
        description="a finish with an Idempotency-Key (or a turn written finished) leaves the pending action")
def rewind_kept_by_keyed_finish(settings: Settings) -> ASGIApp:
    return app_with_service(settings, KeptBySuccess)


@mutant("REWIND-CLEAR-001", select=("turn_writes.rewind_cleared_by_a_one_request_write",),
        description="without idempotent-turns: a turn written `completed` in one request leaves the pending action")
def rewind_kept_by_one_request_write(settings: Settings) -> ASGIApp:
    return app_with_service(replace(settings, disabled_capabilities=frozenset({"idempotent-turns"})), KeptBySuccess)
