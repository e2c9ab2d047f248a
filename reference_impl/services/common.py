"""What every chapter's service shares: the clock, new ids, and the base class."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from reference_impl.principals import Caller
from reference_impl.settings import Limits
from reference_impl.store import Store

if TYPE_CHECKING:
    from reference_impl.services.access import Access


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def timestamp(moment: datetime) -> str:
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


def new_id() -> str:
    return str(uuid.uuid4())


def new_key(principal: str) -> str:
    """A new id of the caller's project, as stored (principals.py)."""
    return principal.key(new_id()) if isinstance(principal, Caller) else new_id()


class ChapterService:
    """One spec chapter's rules. No SQL here: statements are methods of `store.Transaction`,
    and every transaction boundary is chosen by the service.

    `capabilities` names what the chapter adds to the capability document; a chapter whose
    capability the server is configured without is neither advertised nor routed.
    """

    chapter: str = ""
    capabilities: tuple[str, ...] = ()

    def __init__(self, store: Store, limits: Limits, access: "Access") -> None:
        self.store = store
        self.limits = limits
        self.access = access

    def advertised_limits(self) -> dict[str, Any]:
        """The chapter's entries in the capability document's `limits`."""
        return {}
