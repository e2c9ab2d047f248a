"""Mutants of the states audit (issue 17 item 4): each breaks one rule that a state-machine table or
the lineage state machine now charges by name, where it used to charge another rule.

- A reader deletes and purges a live session: the reader's refusal is AUTH-ROLES-001's answer (only
  `owner` deletes and purges), not DEL-SOFT-001's or DEL-PURGE-001's.
- A fork resolves its cut before it looks at the depth: a fork too deep *and* through an unknown
  turn answers `unknown-turn`, where ERR-PRECEDENCE-001 puts `depth-exceeded` first. The lineage
  state machine charges ERR-PRECEDENCE-001, not the cut's rule nor FORK-DEPTH-001. Its lineages are
  shallow (max_lineage_depth 2) so that short random programs reach the depth.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from starlette.types import ASGIApp

from reference_impl.services.access import READER, Access
from reference_impl.services.fork import ForkService
from reference_impl.settings import Settings
from reference_impl.store import Transaction
from reference_impl.store.rows import SessionRow
from tests.mutants import app_with_service, mutant


@mutant("AUTH-ROLES-001", select=("state_matrix.deleted_sessions",),
        description="A reader of a live session may delete and purge it (owner-only operations)")
def reader_deletes_and_purges(settings: Settings) -> ASGIApp:
    class Service(Access):
        def owned_session(self, tx: Transaction, principal: str, session_id: str, deleted_too: bool = False) -> SessionRow:
            session = tx.session(session_id, viewer=principal)
            if session is not None and session.deleted_at is None and self.role(principal, session) == READER:
                return session
            return super().owned_session(tx, principal, session_id, deleted_too)

    return app_with_service(settings, Service)


def cut_before_depth(settings: Settings) -> ASGIApp:
    """A fork resolves its cut before the depth (ERR-PRECEDENCE-001 puts the depth first), on a
    server whose lineages are at most 2 deep. Not registered as a mutant: whether a random program
    forks too deep through an unknown turn depends on the seed (tests/test_audit_states.py runs it)."""

    class Service(ForkService):
        def _fork_in(self, tx: Transaction, principal: str, source_id: str, body: dict[str, Any], key: str | None,
                     fingerprint: str) -> Any:
            chain = self.access.source_chain(tx, principal, source_id)
            self._resolve_cut(tx, chain, body["cut"])  # unknown-turn / turn-incomplete before depth-exceeded
            return super()._fork_in(tx, principal, source_id, body, key, fingerprint)

    return app_with_service(replace(settings, limits=replace(settings.limits, max_lineage_depth=2)), Service)
