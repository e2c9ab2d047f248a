"""Chapter: writer leases. One writer per session at a time, across every server process."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from reference_impl.errors import LeaseTooLong, WriterConflict
from reference_impl.principals import public_id
from reference_impl.services.common import ChapterService, new_id, timestamp, utcnow
from reference_impl.store.rows import LeaseRow
from reference_impl.store.store import IntegrityError


def check_writer(lease: LeaseRow | None, session_id: str, lease_id: str | None) -> None:
    """While a lease is held only its holder writes; a named lease must still be held."""
    active = lease is not None and lease.expires_at > timestamp(utcnow())
    if lease_id is None:
        if active:
            raise WriterConflict(f"another writer holds the lease of session {session_id}")
    elif not active or lease is None or lease.lease_id != lease_id:
        raise WriterConflict(f"lease {lease_id} does not hold session {session_id}")


class LeasesService(ChapterService):
    chapter = "leases"
    capabilities = ("writer-lease",)

    def advertised_limits(self) -> dict[str, Any]:
        return {"max_lease_seconds": self.limits.max_lease_seconds}

    def acquire_lease(self, principal: str, session_id: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """Take the session's writer lease (201) or renew the caller's own (200)."""
        ttl = body["ttl_seconds"]
        if ttl > self.limits.max_lease_seconds:
            raise LeaseTooLong(f"ttl_seconds {ttl} is above max_lease_seconds: give 1 to {self.limits.max_lease_seconds}")
        now = utcnow()
        expires_at = timestamp(now + timedelta(seconds=ttl))
        try:
            with self.store.write() as tx:
                self.access.writer_session(tx, principal, session_id)
                renewing = body.get("lease_id")
                if renewing is not None:
                    if not tx.renew_lease(session_id, renewing, expires_at, timestamp(now)):
                        raise WriterConflict(f"lease {renewing} does not hold session {session_id}")
                    return 200, {"session_id": public_id(session_id), "lease_id": renewing, "expires_at": expires_at}
                lease = {"lease_id": new_id(), "principal": principal, "expires_at": expires_at}
                if not tx.take_expired_lease(session_id, lease, timestamp(now)):
                    tx.insert_lease({"session_id": session_id, **lease})
        except IntegrityError as exc:
            raise WriterConflict(f"another writer holds the lease of session {session_id}") from exc
        return 201, {"session_id": public_id(session_id), "lease_id": lease["lease_id"], "expires_at": expires_at}

    def release_lease(self, principal: str, session_id: str, lease_id: str | None) -> None:
        with self.store.write() as tx:
            self.access.writer_session(tx, principal, session_id)
            if lease_id is None or not tx.delete_lease(session_id, lease_id, timestamp(utcnow())):
                raise WriterConflict(f"lease {lease_id or '(none named)'} does not hold session {session_id}")
