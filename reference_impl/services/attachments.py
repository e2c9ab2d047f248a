"""Chapter: authorization - attachments, stored in one session and inherited along its lineage.

Nothing is copied by a fork: an attachment belongs to the session it was stored in, at a position
(the session's record count then), and a descendant reaches it exactly when it inherits a record
of that session at or after the position - the bound the lineage-chain query computes anyway.
Storing takes the session row's lock, so no record can be reserved at the position while the
attachment is not yet committed, and a fork that inherits such a record sees the attachment.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from reference_impl import views
from reference_impl.errors import AttachmentExists, AttachmentInherited, IdempotencyKeyReused, NotFound
from reference_impl.services.common import ChapterService, new_id, timestamp, utcnow
from reference_impl.store import Transaction
from reference_impl.store.rows import AttachmentRow, ChainLink
from reference_impl.store.store import IntegrityError


@dataclass(frozen=True)
class Stored:
    body: dict[str, Any]
    replayed: bool


def reach_of(chain: Sequence[ChainLink]) -> list[tuple[str, int | None]]:
    """(session, last position it lends) for the session (all) and each ancestor (its bound)."""
    return [(link.session.session_id, link.record_bound) for link in chain]


class AttachmentsService(ChapterService):
    chapter = "attachments"
    capabilities = ("attachments",)

    def advertised_limits(self) -> dict[str, Any]:
        return {"max_attachment_bytes": self.limits.max_attachment_bytes}

    # ---------------------------------------------------------------- store
    def upload(self, principal: str, session_id: str, media_type: str, content: bytes, key: str | None) -> Stored:
        """Store under a new id; a key replays the first answer (retries meet on its primary key)."""
        digest = hashlib.sha256(content).hexdigest()
        fingerprint = hashlib.sha256(
            json.dumps({"attachment": session_id, "media_type": media_type, "sha256": digest}).encode()
        ).hexdigest()
        for attempt in range(3):
            try:
                with self.store.write() as tx:
                    if key is not None:
                        replay = self._replay(tx, principal, key, fingerprint)
                        if replay is not None:
                            return replay
                    session = self.access.writer_session(tx, principal, session_id, lock=True)
                    row = self._insert(tx, session_id, new_id(), session.record_count, media_type, content, digest)
                    body = views.attachment(row)
                    if key is not None:
                        expires = utcnow() + timedelta(seconds=self.limits.idempotency_key_lifetime_seconds)
                        tx.insert_idempotency(
                            {
                                "principal": principal,
                                "idempotency_key": key,
                                "fingerprint": fingerprint,
                                "child_session_id": session_id,
                                "response_status": 201,
                                "response_body": json.dumps(body),
                                "expires_at": timestamp(expires),
                            }
                        )
                    return Stored(body, False)
            except IntegrityError:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def put(self, principal: str, session_id: str, attachment_id: str, media_type: str, content: bytes) -> Stored:
        """Store under the client's id; the same content again replays, other content conflicts."""
        digest = hashlib.sha256(content).hexdigest()
        for attempt in range(3):
            try:
                with self.store.write() as tx:
                    session = self.access.writer_session(tx, principal, session_id, lock=True)
                    chain = tx.chain(session_id, self.limits.max_lineage_depth, viewer=principal)
                    found = tx.reachable_attachment(reach_of(chain), attachment_id)
                    if found is not None:
                        existing = found[0]
                        if existing.session_id == session_id and (existing.media_type, existing.sha256) == (media_type, digest):
                            return Stored(views.attachment(existing), True)
                        raise AttachmentExists(f"attachment {attachment_id} is taken in session {session_id}")
                    row = self._insert(tx, session_id, attachment_id, session.record_count, media_type, content, digest)
                    return Stored(views.attachment(row), False)
            except IntegrityError:  # a concurrent upload of the same id: evaluate again
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    # ---------------------------------------------------------------- read and delete
    def read(self, principal: str, session_id: str, attachment_id: str) -> tuple[AttachmentRow, bytes]:
        """An own attachment needs a role on the session; an inherited one on every ancestor too."""
        with self.store.read() as tx:
            chain = self.access.chain_of(tx, principal, session_id)
            found = tx.reachable_attachment(reach_of(chain), attachment_id, with_content=True)
        if found is None or found[0].session_id != session_id:
            self.access.require_ancestors(principal, chain)  # whether or not an ancestor holds it
        if found is None:
            raise NotFound(f"no attachment {attachment_id} in session {session_id}")
        row, content = found
        assert content is not None
        return row, content

    def delete(self, principal: str, session_id: str, attachment_id: str) -> None:
        """Delete an own attachment that no descendant inherits; inherited ones are read-only."""
        with self.store.write() as tx:
            self.access.writer_session(tx, principal, session_id, lock=True)  # a fork waits for us
            chain = tx.chain(session_id, self.limits.max_lineage_depth, viewer=principal)
            found = tx.reachable_attachment(reach_of(chain), attachment_id)
            if found is not None and found[0].session_id == session_id:
                if tx.inherited_by_a_child(session_id, found[0].position):
                    raise AttachmentInherited(f"a descendant of session {session_id} inherits attachment {attachment_id}")
                tx.delete_attachment(session_id, attachment_id)
                return
            self.access.require_ancestors(principal, chain)
            if found is not None:
                raise AttachmentInherited(f"attachment {attachment_id} is inherited; it belongs to an ancestor")
            raise NotFound(f"no attachment {attachment_id} in session {session_id}")

    # ---------------------------------------------------------------- helpers
    def _replay(self, tx: Transaction, principal: str, key: str, fingerprint: str) -> Stored | None:
        stored = tx.idempotency(principal, key)
        if stored is None:
            return None
        if stored.expires_at <= timestamp(utcnow()):
            tx.delete_idempotency(principal, key)
            return None
        if stored.fingerprint != fingerprint:
            raise IdempotencyKeyReused("this Idempotency-Key was used with a different request")
        return Stored(json.loads(stored.response_body), True)

    @staticmethod
    def _insert(
        tx: Transaction, session_id: str, attachment_id: str, position: int, media_type: str, content: bytes, digest: str
    ) -> AttachmentRow:
        row = AttachmentRow(
            session_id=session_id,
            attachment_id=attachment_id,
            position=position,
            media_type=media_type,
            size=len(content),
            sha256=digest,
            created_at=timestamp(utcnow()),
        )
        tx.insert_attachment({**vars(row), "content": content})
        return row
