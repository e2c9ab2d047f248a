"""Chapter: session-patch. `PATCH /sessions/{id}` with a JSON Merge Patch (RFC 7396) of the session's
metadata, by compare-and-swap on the session's version (the strong ETag).

A member absent from the patch leaves its field unchanged, `null` clears it, a string sets it (the
empty string included: it is a value, not a clearing). A patch that changes nothing changes
nothing: the version, and so the ETag, stay as they were.
"""

from __future__ import annotations

from typing import Any

from reference_impl import etags, views
from reference_impl.errors import PreconditionFailed
from reference_impl.services.common import ChapterService

FIELDS = ("name", "description")


class SessionPatchService(ChapterService):
    chapter = "session-patch"
    capabilities = ("session-patch",)

    def patch(
        self, principal: str, session_id: str, body: dict[str, Any], lease_id: str | None, if_match: list[str] | None
    ) -> etags.Tagged:
        if if_match is None:  # refused before anything is read (428)
            etags.require_match(None, "")
        with self.store.write() as tx:
            session = self.access.writable_session(tx, principal, session_id, lease_id)
            etags.require_match(if_match, etags.etag(session))
            values = {name: body[name] for name in FIELDS if name in body}
            changed = {name: value for name, value in values.items() if getattr(session, name) != value}
            if not changed:
                return etags.tagged(views.session(session), session)
            version = tx.patch_session(session_id, session.version, changed)
            if version is None:
                raise PreconditionFailed("the session changed while the patch was evaluated; read its ETag again")
        view = views.session(session)
        view.update(changed)
        return etags.tagged(view, session, version)
