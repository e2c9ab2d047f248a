"""Chapter: capabilities."""

from __future__ import annotations

from typing import Any

import spec
from conformance.context import CheckContext
from conformance.registry import check

CORE = ("fork", "effective-transcript", "lineage", "idempotency")
# Optional names and the `diagnostics` flag each must agree with.
DIAGNOSTIC_NAMES = {
    "diagnostics.query-count": "query_count",
    "diagnostics.write-count": "write_count",
    "diagnostics.records-examined": "records_examined",
}
# The smallest limits every server supports (CAP-LIMITS-001): the suite can exercise them all.
MINIMUM_LIMITS = {
    "max_lineage_depth": 5,
    "max_page_size": 10,
    "max_records_per_append": 3,
    "max_record_bytes": 1024,
    "max_request_bytes": 16384,
    "idempotency_key_lifetime_seconds": 1,
}
MINIMUM_ATTACHMENT_BYTES = 65536  # with `attachments` (CAP-LIMITS-001)


@check("CAP-DOC-001", "CAP-VERSION-001", title="The discovery document states version, capabilities and limits")
def discovery_document(ctx: CheckContext) -> None:
    response = ctx.alice.get("/capabilities", validate_response=False)
    ctx.expect_status(response, 200, None, "CAP-DOC-001")
    document = response.json()
    errors = list(spec.validator("capabilities.json").iter_errors(document))
    ctx.expect(not errors, f"the capability document breaks capabilities.json: {errors[0].message if errors else ''}", "CAP-DOC-001")
    major = document["spec_version"].split(".")[0]
    ctx.expect(major == "1", f"spec_version {document['spec_version']} is not a 1.x version", "CAP-VERSION-001")
    limits = document["limits"]  # their values are CAP-LIMITS-001's (capabilities.minimum_limits)
    if "writer-lease" in document["capabilities"]:
        ctx.expect(
            isinstance(limits.get("max_lease_seconds"), int),
            "a server that advertises writer-lease states max_lease_seconds in its limits",
            "CAP-DOC-001",
        )


@check("CAP-PUBLIC-001", title="The discovery document needs no credentials")
def discovery_without_credentials(ctx: CheckContext) -> None:
    response = ctx.anonymous.get("/capabilities")
    ctx.expect_status(response, 200)


@check("CAP-NAMES-001", title="Capabilities are listed by name, optional ones exactly when offered")
def core_capability_names(ctx: CheckContext) -> None:
    names = set(ctx.capabilities["capabilities"])
    lineage_names = [name for name in CORE if name != "effective-transcript"]
    if "replay-history" in names and not any(name in names for name in lineage_names):
        # A legacy (pre-lineage) server: profile `legacy`, not a broken core server.
        ctx.expect("effective-transcript" in names, "a legacy server lists effective-transcript")
    else:
        missing = [name for name in CORE if name not in names]
        ctx.expect(not missing, f"capabilities missing: {', '.join(missing)}")
    diagnostics = ctx.capabilities.get("diagnostics", {})
    for name, flag in DIAGNOSTIC_NAMES.items():
        advertised = bool(diagnostics.get(flag, False))
        ctx.expect(
            (name in names) == advertised,
            f"'{name}' must be listed exactly when diagnostics.{flag} is true "
            f"(listed: {name in names}, diagnostics.{flag}: {advertised})",
        )


@check("CAP-LIMITS-001", title="Every advertised limit is at least the spec's minimum")
def minimum_limits(ctx: CheckContext) -> None:
    limits: dict[str, Any] = ctx.limits
    below = []
    for name, minimum in MINIMUM_LIMITS.items():
        value = limits.get(name)
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            below.append(f"{name} is {value!r}, the minimum is {minimum}")
    default = limits.get("default_page_size")
    if not isinstance(default, int) or not 1 <= default <= (limits.get("max_page_size") or 0):
        below.append(f"default_page_size {default!r} is not between 1 and max_page_size")
    record, request = limits.get("max_record_bytes"), limits.get("max_request_bytes")
    if isinstance(record, int) and isinstance(request, int) and request < record + 1024:
        below.append(f"max_request_bytes {request} cannot carry one record of max_record_bytes {record} (needs {record + 1024})")
    if ctx.has("writer-lease"):
        lease = limits.get("max_lease_seconds")
        if not isinstance(lease, int) or lease < 2:
            below.append(f"max_lease_seconds is {lease!r}, the minimum is 2")
    if ctx.has("attachments"):
        size = limits.get("max_attachment_bytes")
        if not isinstance(size, int) or isinstance(size, bool) or size < MINIMUM_ATTACHMENT_BYTES:
            below.append(f"max_attachment_bytes is {size!r}, the minimum is {MINIMUM_ATTACHMENT_BYTES}")
    ctx.expect(not below, "; ".join(below))


OPTIONAL_OPERATIONS = {
    "writer-lease": [("POST", "/sessions/{sid}/lease", {"ttl_seconds": 2}), ("DELETE", "/sessions/{sid}/lease", None)],
    "sharing": [
        ("GET", "/me", None),
        ("GET", "/sessions/{sid}/grants", None),
        ("GET", "/sessions/{sid}/descendants", None),
        ("POST", "/sessions/{sid}/purge", None),
        ("DELETE", "/sessions/{sid}", None),
    ],
    "attachments": [("POST", "/sessions/{sid}/attachments", {}), ("GET", "/sessions/{sid}/attachments/a1", None)],
    "transcript-export": [("GET", "/sessions/{sid}/export", None)],
    "turn-by-position": [("GET", "/sessions/{sid}/effective-turns/1", None)],
    "model-context": [("GET", "/sessions/{sid}/context", None)],
    "suspend": [
        ("GET", "/sessions/{sid}/turns/t1", None),
        ("POST", "/sessions/{sid}/turns/t1/suspend", None),
        ("POST", "/sessions/{sid}/turns/t1/recover", None),
        ("POST", "/sessions/{sid}/turns/t1/inputs", {"content": {}}),
    ],
    "legacy-import": [("POST", "/imports", {})],
}


@check("CAP-UNADVERTISED-001", title="Operations of a capability the server does not offer answer 404 or 405")
def unadvertised_operations(ctx: CheckContext) -> None:
    absent = [name for name in OPTIONAL_OPERATIONS if not ctx.has(name)]
    if not absent:
        from conformance.errors import Unsupported

        raise Unsupported("not applicable: the target advertises every optional capability with operations")
    sid = ctx.create_session()["session_id"]
    for name in absent:
        for method, template, body in OPTIONAL_OPERATIONS[name]:
            path = template.format(sid=sid)
            # Not validated against the operation: its declared answers hold where it is offered.
            options: dict[str, Any] = {"json": body} if body is not None else {}
            response = ctx.alice.request(method, path, validate_response=False, **options)
            ctx.expect(
                response.status in (404, 405),
                f"{method} {path} answered {response.status} although '{name}' is not advertised; expected 404 or 405",
            )
            media_type = (response.header("content-type") or "").split(";")[0].strip()
            ctx.expect(media_type == "application/problem+json", f"{method} {path}: a {response.status} without problem+json")
            ctx.expect_status(response, (404, 405))
    # nothing changed: writes need no lease header, as on a server that never heard of leases
    turn = ctx.start_turn(sid)
    ctx.append(sid, turn["turn_id"], 1)
    ctx.finish(sid, turn["turn_id"])
