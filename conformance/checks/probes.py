"""One request to each operation a requirement lists, for the checks of rules about every
operation (AUTH-REQUIRED-001, AUTH-HIDE-001): the operations come from the requirement, whose list
tests/test_spec_crosscheck.py derives from the OpenAPI document, and the paths from that document."""

from __future__ import annotations

import re
from typing import Any

import spec
from conformance.checks.fuzz import operation_capabilities
from conformance.context import CheckContext
from conformance.contract import operations


# What a request carries besides its path, so that every rule ERR-PRECEDENCE-001 puts before the
# session's own (media type, body, If-Match, header syntax) passes: only credentials or the session
# itself can refuse it. Operations absent here send nothing.
def _options(operation_id: str, turn_id: str) -> dict[str, Any]:
    octets = {"content": b"probe", "headers": {"Content-Type": "text/plain"}}
    return {
        "createSession": {"json": {}},
        "patchSession": {"content": b"{}", "headers": {"Content-Type": "application/merge-patch+json", "If-Match": "*"}},
        "putGrant": {"json": {"role": "reader"}},
        "uploadAttachment": octets,
        "putAttachment": octets,
        "startTurn": {"json": {"role": "user"}},
        "appendRecords": {"json": {"records": [{"type": "message", "content": {}}]}},
        "finishTurn": {"json": {"status": "completed"}},
        "forkSession": {"json": {"cut": {"mode": "latest"}}},
        "revertSession": {"json": {"turn_id": turn_id}, "headers": {"If-Match": "*"}},
        "acquireLease": {"json": {"ttl_seconds": 2}},
        "releaseLease": {"headers": {"Writer-Lease": "no-such-lease"}},
        "queueInput": {"json": {"content": {}}},
        "importLegacy": {"content": b"", "headers": {"Content-Type": "application/x-ndjson"}},
    }.get(operation_id, {})


Probe = tuple[str, str, str, dict[str, Any]]  # operationId, method, path (`{sid}` for the session), options


def probes(ctx: CheckContext, requirement: str, ids: dict[str, str]) -> list[Probe]:
    """One request per operation `requirement` lists (a list tests/test_spec_crosscheck.py derives
    from the OpenAPI document), but those of a capability the target does not advertise, which
    may answer 404 or 405 (CAP-UNADVERTISED-001). `ids` fills the path parameters but the session."""
    named = next(r for r in spec.requirements() if r["id"] == requirement)["operations"]
    listed = {operation.operation_id for operation in operations()} if named == "all" else set(named)
    brought_by = operation_capabilities()
    found = []
    for operation in operations():
        capability = brought_by.get(operation.operation_id)
        if operation.operation_id not in listed or (capability is not None and not ctx.has(capability)):
            continue
        path = re.sub(r"\{(\w+)\}", lambda m: "{sid}" if m[1] == "session_id" else ids[m[1]], operation.template)
        found.append((operation.operation_id, operation.method, path, _options(operation.operation_id, ids["turn_id"])))
    return found
