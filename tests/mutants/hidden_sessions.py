"""Mutants: a session the caller may not read is told apart from an unknown id by one of the
operations added after 1.1 (AUTH-HIDE-001 holds on every operation whose path names a session)."""

from __future__ import annotations

from typing import Any

from starlette.types import ASGIApp

from reference_impl.errors import Forbidden, NotFound
from reference_impl.services.context import ContextService
from reference_impl.services.revert import RevertService
from reference_impl.settings import Settings
from tests.mutants import app_with_service, mutant


def _leaking(base: type, method: str) -> type:
    """`base` whose read `method(principal, session_id)` answers 403 instead of 404 for a session
    that exists but is hidden from the caller: 404 stays for an unknown id."""

    def leak(self: Any, principal: str, session_id: str) -> dict[str, Any]:
        try:
            return getattr(base, method)(self, principal, session_id)  # type: ignore[no-any-return]
        except NotFound:
            with self.store.read() as tx:
                if tx.session(session_id) is None:
                    raise
            raise Forbidden("you may not read this session") from None

    return type(f"Leaking{base.__name__}", (base,), {method: leak})


@mutant("AUTH-HIDE-001", select=("authorization.invisible_sessions",),
        description="getContext answers 403 for another principal's session, 404 for an unknown id")
def context_tells_hidden_sessions(settings: Settings) -> ASGIApp:
    return app_with_service(settings, _leaking(ContextService, "context"))


@mutant("AUTH-HIDE-001", select=("authorization.invisible_sessions",),
        description="listReverts answers 403 for another principal's session, 404 for an unknown id")
def reverts_tell_hidden_sessions(settings: Settings) -> ASGIApp:
    return app_with_service(settings, _leaking(RevertService, "reverts"))
