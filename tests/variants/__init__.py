"""Small servers that differ from the reference only where the spec allows (each must pass the
suite), and servers that lack something their claim needs (each must fail for the right reason).

A variant is a function from `Settings` to an ASGI app, like a mutant; it reuses the reference
layers and changes one permitted (or one missing) thing.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

import spec
from reference_impl.errors import IdempotencyInFlight
from reference_impl.services.fork import ForkOutcome, ForkService
from reference_impl.settings import Limits, Settings
from tests.mutants import app_with_service, reference_app

# CAP-LIMITS-001: the smallest limits a server may advertise, every one of them (default_page_size 1,
# key lifetime 1 s, attachments of 64 KiB), and the smallest the chapters' own limit rules allow.
MINIMUM_LIMITS = Limits(
    max_lineage_depth=5,
    max_page_size=10,
    default_page_size=1,
    max_record_bytes=1024,
    max_records_per_append=3,
    max_request_bytes=16384,  # at least 16384 and at least max_record_bytes + 1024
    idempotency_key_lifetime_seconds=1,
    max_lease_seconds=2,
    max_attachment_bytes=65536,
    max_context_record_bytes=64,  # CONTEXT-LIMITS-001: at least 64, at most max_record_bytes / 8
    max_context_bytes=256,  # and at least 4 times the record cap
    max_import_line_bytes=1024,  # IMPORT-LIMITS-001
    max_export_records=1000,  # EXPORT-LIMIT-001: at least 1000 and at least max_page_size
)
LEASE_PATH = re.compile(r"^/sessions/[^/]+/lease$")


def minimum_limits(settings: Settings) -> ASGIApp:
    """Every limit at the spec's minimum."""
    return reference_app(replace(settings, limits=MINIMUM_LIMITS))


def no_optional_capability(settings: Settings) -> ASGIApp:
    """Core only: no writer leases, no diagnostics headers."""
    return reference_app(
        replace(
            settings,
            disabled_capabilities=frozenset(
                {"writer-lease", "model-context", "suspend", "idempotent-turns", "turn-write", "revert", "session-patch", "legacy-import",
                 "transcript-export", "turn-by-position"}
            ),
            query_count_diagnostics=False,
            write_count_diagnostics=False,
            records_examined_diagnostics=False,
        )
    )


# The reference advertises `diagnostics.trace-context` only when started with tracing, so the span
# checks are out of scope on it otherwise (tests/test_otel_reference.py runs them traced).
UNTRACED_OUT_OF_SCOPE = frozenset({"diagnostics.spans_continue_the_trace", "diagnostics.header_and_spans_agree"})
UNTRACED_RULES = frozenset({"DIAG-SPANS-001", "DIAG-COUNTS-AGREE-001"})


def optional_capabilities(version: str | None = None) -> list[str]:
    """Every capability of profile `full` outside `core` at the spec version (default: the suite's),
    less the stand-ins (`or` in profiles.yaml, such as `diagnostics.trace-context`): the reference
    offers those only when started for them, so there is nothing to take out."""
    version = version or spec.spec_version()
    core = set(spec.profile_capabilities("core", version))
    stand_ins = spec.stand_ins("full", version)
    return [name for name in spec.profile_capabilities("full", version) if name not in core and name not in stand_ins]


def without(removed: frozenset[str] | set[str] | tuple[str, ...]) -> Callable[[Settings], ASGIApp]:
    """The reference server with the optional capabilities `removed` taken out, nothing else changed
    (the capability-removal matrix: tests/test_capability_removal.py)."""
    removed = frozenset(removed)
    unknown = removed - set(optional_capabilities())
    if unknown:
        raise ValueError(f"not optional capabilities: {sorted(unknown)}")

    def build(settings: Settings) -> ASGIApp:
        return reference_app(replace(settings, disabled_capabilities=removed))

    build.__name__ = "without_" + "_".join(sorted(removed)).replace(".", "_").replace("-", "_")
    return build


async def _problem(send: Send, status: int, kind: str, detail: str, headers: list[tuple[bytes, bytes]]) -> None:
    body = json.dumps(
        {"type": f"urn:session-lineage:problem:{kind}", "title": detail, "status": status, "detail": detail}
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/problem+json"),
                (b"content-length", str(len(body)).encode()),
                # answered before any storage is touched: counted, zero
                (b"storage-round-trips", b"0"),
                (b"storage-items-written", b"0"),
                (b"storage-bytes-written", b"0"),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def other_permitted_answers(settings: Settings) -> ASGIApp:
    """Without `writer-lease`, the lease paths answer 405 (not 404), and a body sent without a
    Content-Type is answered 415 instead of being read as JSON: both are MAYs of the spec."""
    app = reference_app(replace(settings, disabled_capabilities=frozenset({"writer-lease"})))

    async def front(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            if LEASE_PATH.match(scope["path"]):
                await _problem(send, 405, "method-not-allowed", "this server offers no writer leases", [(b"allow", b"")])
                return
            headers = dict(scope["headers"])
            if scope["method"] in ("POST", "PUT", "PATCH") and b"content-type" not in headers:
                if headers.get(b"content-length", b"0") != b"0" or b"transfer-encoding" in headers:
                    await _problem(send, 415, "unsupported-media-type", "a body needs a JSON Content-Type", [])
                    return
        await app(scope, receive, send)

    return front


def idempotency_in_flight(settings: Settings) -> ASGIApp:
    """A fork whose key is still being worked on answers 409 `idempotency-in-flight` at once
    (FORK-IDEMPOTENT-CONCURRENT-001 allows it) instead of waiting for the first answer."""

    class Service(ForkService):
        _flight: set[tuple[str, str]] = set()
        _lock = threading.Lock()

        def fork(self, principal: str, source_id: str, body: dict[str, Any], idempotency_key: str | None) -> ForkOutcome:
            if idempotency_key is None:
                return super().fork(principal, source_id, body, None)
            marker = (principal, idempotency_key)
            with self._lock:
                if marker in self._flight:
                    raise IdempotencyInFlight("a request with this Idempotency-Key is still being answered")
                self._flight.add(marker)
            try:
                time.sleep(0.02)  # a slow fork: concurrent retries find it in flight
                return super().fork(principal, source_id, body, idempotency_key)
            finally:
                with self._lock:
                    self._flight.discard(marker)

    return app_with_service(settings, Service)


def shallow_lineage(settings: Settings) -> ASGIApp:
    """Lacking: max_lineage_depth 3, below the minimum of 5 every server supports."""
    return reference_app(replace(settings, limits=replace(settings.limits, max_lineage_depth=3)))


def no_diagnostics(settings: Settings) -> ASGIApp:
    """Lacking under the full profile: neither diagnostics header, so no-copy cannot be shown."""
    return reference_app(
        replace(settings, query_count_diagnostics=False, write_count_diagnostics=False, records_examined_diagnostics=False)
    )


def copying_fork(settings: Settings) -> ASGIApp:
    """Lacking: every fork copies what the child inherits (ids kept, one statement)."""
    from tests.mutants import MUTANTS, all_mutants

    all_mutants()
    return MUTANTS["fork_copies_inherited_records_keeping_ids"].build(settings)
