"""Schemathesis's own command line against a served reference server (deep set: a few minutes).

`schemathesis run spec/openapi.yaml` with every check (`--checks all`: server errors, status codes,
headers and bodies against the document, negative and positive data, stateful links) in every
phase, seeded. The run must find nothing but what ALLOWED lists: each entry is a kind of finding
(Schemathesis code and the problem type the reference answered) that is the spec's intended
answer, with the reason. Anything else - a 5xx, an undeclared status, a body or header that does
not match, a refusal the list does not explain - fails the test with Schemathesis's own report.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import spec
from conformance.embedded import reference_server

PROBLEM = "urn:session-lineage:problem:"
ALLOWED: dict[tuple[str, str], str] = {
    # ST201 "schema-violating request accepted": Schemathesis expects one of its own list of
    # rejection statuses, which lacks 412.
    ("ST201", "capability-missing"): "a malformed Requires-Capabilities name is a capability the server lacks: "
    "NEGOTIATE-HEADER-001 answers 412 capability-missing, a refusal, and changes nothing",
    # ST202 "schema-valid request rejected": refusals that no schema can express, because they
    # depend on the server's state, its advertised limits or an earlier request.
    ("ST202", "capability-missing"): "random capability names in Requires-Capabilities are ones the server lacks "
    "(NEGOTIATE-HEADER-001: 412)",
    ("ST202", "precondition-failed"): "a random If-Match is not the session's current ETag (REVERT-CAS-001, SESS-PATCH-CAS-001)",
    ("ST202", "invalid-cursor"): "a cursor of the right shape that this server never issued for this listing (XS-CURSOR-INVALID-001)",
    ("ST202", "page-size-exceeded"): "a limit above the advertised max_page_size, a runtime limit (ERR-REFUSAL-TYPE-001)",
    ("ST202", "lease-too-long"): "a ttl_seconds above the advertised max_lease_seconds (ERR-REFUSAL-TYPE-001)",
    ("ST202", "grant-to-owner"): "a grant naming the session's owner (AUTH-GRANT-001)",
    ("ST202", "unknown-principal"): "a random principal id is not a principal of the caller's project (AUTH-GRANT-001)",
    ("ST202", "idempotency-key-reused"): "generated requests reuse a key with a different body (FORK-IDEMPOTENT-MISMATCH-001)",
    ("ST202", "unknown-turn"): "a cut naming a random turn outside the source's effective transcript (FORK-CUT-UNKNOWN-001)",
    ("ST202", "depth-exceeded"): "a fork chain the stateful phase grows past max_lineage_depth (FORK-DEPTH-001)",
    ("ST202", "payload-too-large"): "a schema-valid body over an advertised size limit (ERR-SIZE-001)",
    ("ST202", "invalid-legacy-history"): "random bytes are not a legacy history starting with session_meta (IMPORT-FORMAT-001)",
    ("ST202", "legacy-parent-missing"): "a random history names a fork parent never imported (IMPORT-FORK-001)",
    ("ST202", "precondition-required"): "If-Match is required; a generated request without it answers 428 (REVERT-CAS-001)",
    # ST203 "missing required header accepted": Schemathesis's list of statuses for a missing
    # header lacks 428, which RFC 6585 defines for exactly this.
    ("ST203", "precondition-required"): "without If-Match, patch and revert answer 428 precondition-required (RFC 6585; "
    "REVERT-CAS-001, SESS-PATCH-CAS-001)",
}


def _findings(output: str) -> list[tuple[str, str, str]]:
    """(code, problem kind or '', first line) for each failure Schemathesis printed."""
    found = []
    for block in re.split(r"\n(?=\d+\. Test Case ID)", output):
        for part in re.split(r"\n(?=- ST\d+ )", block):
            code = re.match(r"- (ST\d+) ([^\n]*)", part.strip())
            if not code:
                continue
            kind = re.search(re.escape(PROBLEM) + r"([a-z-]+)", part)
            found.append((code.group(1), kind.group(1) if kind else "", code.group(2)))
    return found


@pytest.mark.deep
def test_schemathesis_cli_finds_nothing_but_the_allowed(tmp_path: Path) -> None:
    cli = shutil.which("schemathesis", path=str(Path(sys.executable).parent)) or shutil.which("schemathesis")
    if cli is None:
        pytest.skip("Schemathesis is in the test extra: pip install -e '.[test]'")
    report = tmp_path / "schemathesis.json"
    with reference_server() as server:
        done = subprocess.run(
            [cli, "run", str(spec.SPEC_DIR / "openapi.yaml"), "--url", server.url,
             "-H", f"Authorization: Bearer {server.tokens[0]}",
             "--checks", "all", "--max-examples", "10", "--seed", "20261203", "--workers", "1",
             "--continue-on-failure", "--suppress-health-check", "all", "--no-color", "--output-truncate", "false",
             "--report", "json", "--report-json-path", str(report)],
            capture_output=True, text=True, timeout=1500, check=False,
            cwd=tmp_path,  # Schemathesis keeps its example database in ./.schemathesis
        )
    summary = json.loads(report.read_text(encoding="utf-8"))
    assert summary["complete"] and summary["operations"]["tested"] == summary["operations"]["total"], done.stdout[-3000:]
    assert not summary["errors"], summary["errors"]
    findings = _findings(done.stdout)
    assert len(findings) >= summary["test_cases"]["unique_failures"], "the printed failures could not be read"
    unexplained = sorted({(code, kind, title) for code, kind, title in findings if (code, kind) not in ALLOWED})
    assert not unexplained, f"Schemathesis found {unexplained}:\n{done.stdout[-6000:]}"
    assert summary["test_cases"]["generated"] > 1000, summary["test_cases"]
