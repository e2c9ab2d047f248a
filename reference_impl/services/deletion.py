"""Chapter: authorization - soft deletion and purge.

A deleted session is hidden from everyone but still serves what its descendants inherit. A purge
removes a session that nothing inherits from: it marks the session deleted (so no fork can start
from it) only while no child is counted, removes its records (in the records store, if apart),
then its own rows. If the records store fails in between, the session stays deleted and the
owner's next purge finishes the job.
"""

from __future__ import annotations

from reference_impl.errors import LiveDescendants
from reference_impl.services.common import ChapterService, timestamp, utcnow


class DeletionService(ChapterService):
    chapter = "deletion"
    capabilities = ("sharing",)

    def delete_session(self, principal: str, session_id: str) -> None:
        with self.store.write() as tx:
            self.access.owned_session(tx, principal, session_id, deleted_too=True)
            tx.mark_deleted(session_id, timestamp(utcnow()))  # deleting again changes nothing

    def purge_session(self, principal: str, session_id: str) -> None:
        with self.store.write() as tx:
            session = self.access.owned_session(tx, principal, session_id, deleted_too=True)
            if not tx.mark_purging(session_id, timestamp(utcnow())):
                raise LiveDescendants(f"session {session_id} has descendants; purge them first")
        parent = session.lineage.parent_session_id if session.lineage else None
        with self.store.write_records() as records_tx:
            records_tx.delete_records_of(session_id)
        with self.store.write() as tx:
            tx.delete_pending_action(session_id)  # REWIND-PURGE-001
            tx.purge_session(session_id, parent)
