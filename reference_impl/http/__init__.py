"""HTTP layer: routing, request validation against the spec's schemas, problem mapping."""

from reference_impl.http.app import create_app

__all__ = ["create_app"]
