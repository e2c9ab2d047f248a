"""HTTP routes, one module per spec chapter; `build_app` mounts the chapters the server runs."""

from reference_impl.http.routes.capabilities import CapabilitiesHandlers
from reference_impl.http.routes.fork import ForkHandlers
from reference_impl.http.routes.leases import LeasesHandlers
from reference_impl.http.routes.sessions import SessionsHandlers
from reference_impl.http.routes.transcript import TranscriptHandlers

CHAPTERS = (CapabilitiesHandlers, SessionsHandlers, ForkHandlers, LeasesHandlers, TranscriptHandlers)

__all__ = ["CHAPTERS"]
