"""HTTP routes, one module per spec chapter; `build_app` mounts the chapters the server runs."""

from reference_impl.http.routes.attachments import AttachmentsHandlers
from reference_impl.http.routes.capabilities import CapabilitiesHandlers
from reference_impl.http.routes.context import ContextHandlers
from reference_impl.http.routes.deletion import DeletionHandlers
from reference_impl.http.routes.export import ExportHandlers, TurnPositionHandlers
from reference_impl.http.routes.fork import ForkHandlers
from reference_impl.http.routes.grants import GrantsHandlers
from reference_impl.http.routes.legacy_import import ImportHandlers
from reference_impl.http.routes.leases import LeasesHandlers
from reference_impl.http.routes.listing import ListingHandlers
from reference_impl.http.routes.revert import RevertHandlers
from reference_impl.http.routes.session_patch import SessionPatchHandlers
from reference_impl.http.routes.rollout import RolloutHandlers
from reference_impl.http.routes.sessions import SessionsHandlers
from reference_impl.http.routes.suspend import SuspendHandlers
from reference_impl.http.routes.transcript import TranscriptHandlers

CHAPTERS = (
    CapabilitiesHandlers,
    SessionsHandlers,
    ForkHandlers,
    LeasesHandlers,
    TranscriptHandlers,
    GrantsHandlers,
    ListingHandlers,
    DeletionHandlers,
    AttachmentsHandlers,
    RolloutHandlers,
    ContextHandlers,
    ExportHandlers,
    TurnPositionHandlers,
    RevertHandlers,
    SessionPatchHandlers,
    SuspendHandlers,
    ImportHandlers,
)

__all__ = ["CHAPTERS"]
