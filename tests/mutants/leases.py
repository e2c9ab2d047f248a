"""Mutants: writer leases, and forks racing each other or a writer."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

from starlette.types import ASGIApp

from reference_impl.errors import TargetConflict, WriterConflict
from reference_impl.services.access import Access
from reference_impl.services.common import new_id, timestamp, utcnow
from reference_impl.services.fork import Cutoff, ForkOutcome, ForkService
from reference_impl.services.leases import LeasesService
from reference_impl.settings import Settings
from reference_impl.store import Transaction
from reference_impl.store.rows import LeaseRow
from tests.mutants import app_with_service, app_with_transaction, mutant


@mutant("LEASE-ACQUIRE-001", "LEASE-EXCLUSIVE-001", description="Every acquisition replaces the current lease", select=("leases.acquire_and_renew", "leases.concurrent_acquisitions"))
def second_acquisition_granted(settings: Settings) -> ASGIApp:
    class Tx(Transaction):
        def take_expired_lease(self, session_id: str, lease: dict[str, Any], now: str) -> bool:
            return super().take_expired_lease(session_id, lease, "9999-12-31T23:59:59.999999Z")

    return app_with_transaction(settings, Tx)


@mutant("LEASE-EXCLUSIVE-001", description="The lease is checked in one transaction and taken in another", select=("leases.concurrent_acquisitions",))
def lease_checked_then_taken(settings: Settings) -> ASGIApp:
    class Service(LeasesService):
        def acquire_lease(self, principal: str, session_id: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
            if body.get("lease_id") is not None:
                return super().acquire_lease(principal, session_id, body)
            with self.store.read() as tx:
                found = tx.session_for_write(session_id)
                held = found[1] if found else None
            if held is not None and held.expires_at > timestamp(utcnow()):
                raise WriterConflict(f"another writer holds the lease of session {session_id!r}")
            time.sleep(0.005)  # the window between the check and the write
            expires_at = timestamp(utcnow() + timedelta(seconds=body["ttl_seconds"]))
            lease = {"lease_id": new_id(), "principal": principal, "expires_at": expires_at}
            with self.store.write() as tx:
                if not tx.take_expired_lease(session_id, lease, "9999-12-31T23:59:59.999999Z"):
                    tx.insert_lease({"session_id": session_id, **lease})
            return 201, {"session_id": session_id, **{k: lease[k] for k in ("lease_id", "expires_at")}}

    return app_with_service(settings, Service)


@mutant("LEASE-ENFORCE-001", description="Leases are granted but writes never check them", select=("leases.holder_only_writes",))
def writes_ignore_leases(settings: Settings) -> ASGIApp:
    class Service(Access):
        def check_writer(self, lease: LeaseRow | None, session_id: str, lease_id: str | None) -> None:
            return None

    return app_with_service(settings, Service)


@mutant("LEASE-EXPIRY-001", description="A lease never expires", select=("leases.lease_expires",))
def leases_never_expire(settings: Settings) -> ASGIApp:
    class Tx(Transaction):
        def session_for_write(self, session_id: str, viewer: str | None = None, lock: bool = False) -> Any:
            found = super().session_for_write(session_id, viewer, lock)
            if found is None or found[1] is None:
                return found
            held = found[1]
            return found[0], LeaseRow(held.session_id, held.lease_id, held.principal, "9999-12-31T23:59:59.999999Z")

        def take_expired_lease(self, session_id: str, lease: dict[str, Any], now: str) -> bool:
            return False

    return app_with_transaction(settings, Tx)


@mutant("LEASE-EXPIRY-001", description="A lease is free after half its ttl (its expires_at says so too)", select=("leases.lease_expires",))
def leases_expire_early(settings: Settings) -> ASGIApp:
    class Service(LeasesService):
        def acquire_lease(self, principal: str, session_id: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
            return super().acquire_lease(principal, session_id, {**body, "ttl_seconds": body["ttl_seconds"] / 2})

    return app_with_service(settings, Service)


@mutant("LEASE-RELEASE-001", description="Release answers 204 but keeps the lease", select=("leases.release",))
def release_keeps_lease(settings: Settings) -> ASGIApp:
    class Tx(Transaction):
        def delete_lease(self, session_id: str, lease_id: str, now: str) -> bool:
            found = self.session_for_write(session_id)
            return found is not None and found[1] is not None and found[1].lease_id == lease_id

    return app_with_transaction(settings, Tx)


@mutant("FORK-TARGET-CONCURRENT-001", description="A fork that lost the race for its target reports the winner's child as its own", select=("fork.concurrent_forks_to_one_target",))
def lost_target_race_reported_as_created(settings: Settings) -> ASGIApp:
    class Service(ForkService):
        def fork(self, principal: str, source_id: str, body: dict[str, Any], idempotency_key: str | None) -> ForkOutcome:
            try:
                return super().fork(principal, source_id, body, idempotency_key)
            except TargetConflict:
                target = body.get("target_session_id")
                if target is None:
                    raise
                from reference_impl import views

                with self.store.read() as tx:
                    existing = tx.session(target)
                if existing is None or existing.lineage is None:
                    raise
                return ForkOutcome(201, views.fork_result(existing), False)

    return app_with_service(settings, Service)


@mutant("FORK-SNAPSHOT-CONCURRENT-001", description="The fork counts the source's turns before its transaction and cuts inside it", select=("fork.forks_while_source_is_written",))
def snapshot_outside_transaction(settings: Settings) -> ASGIApp:
    counted = threading.local()

    class Service(ForkService):
        def fork(self, principal: str, source_id: str, body: dict[str, Any], idempotency_key: str | None) -> ForkOutcome:
            counted.value = None
            if body["cut"]["mode"] == "latest":
                with self.store.read() as early:  # the snapshot, taken outside the fork's transaction
                    chain = early.chain(source_id, self.limits.max_lineage_depth)
                    if chain:
                        counted.value = super()._resolve_cut(early, chain, body["cut"]).inherited_turn_count
                time.sleep(0.02)  # the window in which the source moves on
            return super().fork(principal, source_id, body, idempotency_key)

        def _resolve_cut(self, tx: Transaction, chain: Any, cut: dict[str, Any]) -> Cutoff:
            resolved = super()._resolve_cut(tx, chain, cut)
            if counted.value is None:
                return resolved
            return Cutoff(resolved.session_id, resolved.turn_index, resolved.record_index, counted.value)

    return app_with_service(settings, Service)


@mutant("LEASE-EXPIRY-001", description="A lease expires at half its ttl, though the answer states the full ttl", select=("leases.lease_expires",))
def lease_expires_early(settings: Settings) -> ASGIApp:
    from sqlalchemy import update

    from reference_impl.store import tables as t

    class Service(LeasesService):
        def acquire_lease(self, principal: str, session_id: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
            status, answer = super().acquire_lease(principal, session_id, body)
            early = timestamp(utcnow() + timedelta(seconds=body["ttl_seconds"] / 2))
            with self.store.write() as tx:
                tx.conn.execute(
                    update(t.session_leases).where(t.session_leases.c.lease_id == answer["lease_id"]).values(expires_at=early)
                )
            return status, answer

    return app_with_service(settings, Service)
