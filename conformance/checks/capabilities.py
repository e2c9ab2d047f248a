"""Chapter: capabilities."""

from __future__ import annotations

import spec
from conformance.context import CheckContext
from conformance.registry import check

CORE = ("fork", "effective-transcript", "lineage", "idempotency")


@check("CAP-DOC-001", "CAP-VERSION-001", title="The discovery document states version, capabilities and limits")
def discovery_document(ctx: CheckContext) -> None:
    response = ctx.alice.get("/capabilities", validate_response=False)
    ctx.expect_status(response, 200)
    document = response.json()
    errors = list(spec.validator("capabilities.json").iter_errors(document))
    ctx.expect(not errors, f"the capability document breaks capabilities.json: {errors[0].message if errors else ''}", "CAP-DOC-001")
    major = document["spec_version"].split(".")[0]
    ctx.expect(major == "1", f"spec_version {document['spec_version']} is not a 1.x version", "CAP-VERSION-001")
    limits = document["limits"]
    ctx.expect(
        limits["default_page_size"] <= limits["max_page_size"],
        "default_page_size exceeds max_page_size",
        "CAP-DOC-001",
    )


@check("CAP-PUBLIC-001", title="The discovery document needs no credentials")
def discovery_without_credentials(ctx: CheckContext) -> None:
    response = ctx.anonymous.get("/capabilities")
    ctx.expect_status(response, 200)


@check("CAP-NAMES-001", title="The core capabilities are listed by name")
def core_capability_names(ctx: CheckContext) -> None:
    names = set(ctx.capabilities["capabilities"])
    missing = [name for name in CORE if name not in names]
    ctx.expect(not missing, f"capabilities missing: {', '.join(missing)}")
    advertised = ctx.capabilities["diagnostics"]["query_count"]
    ctx.expect(
        ("diagnostics.query-count" in names) == advertised,
        "'diagnostics.query-count' must be listed exactly when diagnostics.query_count is true",
    )
