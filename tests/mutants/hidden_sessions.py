"""Mutants: a session the caller may not read is told apart from an unknown id by one of the
operations added after 1.1 (AUTH-HIDE-001 holds on every operation whose path names a session)."""

from __future__ import annotations

from typing import Any

from starlette.types import ASGIApp

from reference_impl.errors import Forbidden, NotFound
from reference_impl.services.context import ContextService
from reference_impl.services.revert import RevertService
from reference_impl.settings import Settings
from reference_impl.store import Store
from tests.mutants import app_with_service, mutant


def _forbidden_if_it_exists(store: Store, session_id: str, hidden: NotFound) -> Forbidden | NotFound:
    """What a leaking server answers instead of `hidden`: 403 when the session exists."""
    with store.read() as tx:
        exists = tx.session(session_id) is not None
    return Forbidden("you may not read this session") if exists else hidden


class LeakingContext(ContextService):
    def context(self, principal: str, session_id: str) -> dict[str, Any]:
        try:
            return super().context(principal, session_id)
        except NotFound as hidden:
            raise _forbidden_if_it_exists(self.store, session_id, hidden) from None


class LeakingReverts(RevertService):
    def reverts(self, principal: str, session_id: str) -> dict[str, Any]:
        try:
            return super().reverts(principal, session_id)
        except NotFound as hidden:
            raise _forbidden_if_it_exists(self.store, session_id, hidden) from None


@mutant("AUTH-HIDE-001", select=("authorization.invisible_sessions",),
        description="getContext answers 403 for another principal's session, 404 for an unknown id")
def context_tells_hidden_sessions(settings: Settings) -> ASGIApp:
    return app_with_service(settings, LeakingContext)


@mutant("AUTH-HIDE-001", select=("authorization.invisible_sessions",),
        description="listReverts answers 403 for another principal's session, 404 for an unknown id")
def reverts_tell_hidden_sessions(settings: Settings) -> ASGIApp:
    return app_with_service(settings, LeakingReverts)
