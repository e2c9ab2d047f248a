"""Mutants that only a multi-process PostgreSQL deployment exposes.

They are kept out of the single-process registry: in one process each of them looks correct.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from starlette.types import ASGIApp

from reference_impl.service import Cutoff, ForkOutcome, LineageService
from reference_impl.settings import Settings
from reference_impl.store import Transaction
from reference_impl.store.rows import ChainLink
from tests.mutants import Mutant, app_with_service

PRODUCTION_MUTANTS: dict[str, Mutant] = {}


def production_mutant(*catches: str, description: str, select: tuple[str, ...]) -> Callable[[Callable[[Settings], ASGIApp]], Callable[[Settings], ASGIApp]]:
    def register(build: Callable[[Settings], ASGIApp]) -> Callable[[Settings], ASGIApp]:
        PRODUCTION_MUTANTS[build.__name__] = Mutant(build.__name__, description, tuple(catches), select, build)
        return build

    return register


@production_mutant(
    "FORK-IDEMPOTENT-CONCURRENT-001",
    description="Idempotency keys live in process memory: each server process creates its own child",
    select=("fork.concurrent_identical_forks",),
)
def idempotency_in_process_memory(settings: Settings) -> ASGIApp:
    class Service(LineageService):
        answers: dict[tuple[str, str], ForkOutcome] = {}
        lock = threading.Lock()

        def fork(self, principal: str, source_id: str, body: dict[str, Any], idempotency_key: str | None) -> ForkOutcome:
            if idempotency_key is None:
                return super().fork(principal, source_id, body, None)
            with self.lock:  # correct inside one process, blind to the others
                stored = self.answers.get((principal, idempotency_key))
                if stored is not None:
                    return ForkOutcome(stored.status, stored.body, True)
                outcome = super().fork(principal, source_id, body, None)
                self.answers[(principal, idempotency_key)] = outcome
                return outcome

    return app_with_service(settings, Service)


@production_mutant(
    "FORK-SNAPSHOT-CONCURRENT-001",
    description="The fork reads the source's turn count in one transaction and its cutoff in another",
    select=("fork.forks_while_source_is_written",),
)
def snapshot_outside_transaction(settings: Settings) -> ASGIApp:
    class Service(LineageService):
        def _resolve_cut(self, tx: Transaction, chain: Any, cut: dict[str, Any]) -> Cutoff:
            if cut["mode"] != "latest":
                return super()._resolve_cut(tx, chain, cut)
            with self.store.read() as early:  # the snapshot, taken outside the fork's transaction
                counted = super()._resolve_cut(early, early.chain(chain[-1].session.session_id, self.limits.max_lineage_depth), cut)
            time.sleep(0.02)  # the window in which the source moves on
            with self.store.read() as late:
                latest: list[ChainLink] = late.chain(chain[-1].session.session_id, self.limits.max_lineage_depth)
                resolved = super()._resolve_cut(late, latest, cut)
            return Cutoff(resolved.session_id, resolved.turn_index, resolved.record_index, counted.inherited_turn_count)

    return app_with_service(settings, Service)


@production_mutant(
    "LEASE-ENFORCE-001",
    description="Leases are granted but writes never check them",
    select=("leases.holder_only_writes",),
)
def no_writer_lease(settings: Settings) -> ASGIApp:
    class Service(LineageService):
        def _check_writer(self, tx: Transaction, session_id: str, lease_id: str | None) -> None:
            return None

    return app_with_service(settings, Service)
