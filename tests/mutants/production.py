"""Mutants that only a multi-process PostgreSQL deployment exposes.

They are kept out of the single-process registry: in one process each of them looks correct.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from starlette.types import ASGIApp

from reference_impl.services.fork import ForkOutcome, ForkService
from reference_impl.settings import Settings
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
    class Service(ForkService):
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
