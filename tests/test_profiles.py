"""Profiles and claims: which requirements count, which profiles were reached, and the exit code.

The end-to-end tests serve a variant of the reference server that lacks `writer-lease`: the
reference cannot switch that capability off, so the test wraps its ASGI app to drop the name from
`GET /capabilities` and answer 404 `not-found` on `/sessions/{id}/lease`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import spec
from conformance.cli import main
from conformance.embedded import serve_app
from conformance.profiles import Claim, Scope, parse_claim, profile_results, resolve_claim, summary_text
from conformance.results import CheckResult, Outcome, ProfileResult
from conformance.runner import requirement_verdicts
from reference_impl.http import create_app
from reference_impl.settings import Settings

TOKENS = {"profile-alice-token": "alice", "profile-bob-token": "bob"}
GOOD = ["--token", "profile-alice-token", "--token", "profile-bob-token"]
SUITE = spec.spec_version()


# ---------------------------------------------------------------------------------------- spec/profiles.yaml


def test_profiles_file_holds_core_and_full() -> None:
    profiles = spec.profiles()
    core = ["fork", "effective-transcript", "lineage", "idempotency"]
    assert list(profiles["core"]["capabilities"]) == core
    assert list(profiles["full"]["capabilities"])[:9] == core + [
        "writer-lease",
        "diagnostics.query-count",
        "diagnostics.write-count",
        "sharing",
        "attachments",
    ]
    # Capabilities added later join `full` at their own version (1.2.0: each chapter adds its own).
    assert set(spec.profile_capabilities("full", "1.1.0")) == set(list(profiles["full"]["capabilities"])[:9])
    assert list(profiles["legacy"]["capabilities"]) == ["effective-transcript", "replay-history"]
    # 1.2.0 adds capabilities to full (each chapter its own), none to core.
    assert "model-context" in spec.profile_capabilities("full", "1.2.0")
    assert "model-context" not in spec.profile_capabilities("full", "1.1.0")
    assert "diagnostics.records-examined" in spec.profile_capabilities("full", "1.2.0")
    assert "diagnostics.records-examined" not in spec.profile_capabilities("full", "1.1.0")
    assert all(entry["title"] and spec.version_tuple(entry["since"]) for entry in profiles.values())
    assert spec.profile_capabilities("full", "1.0.0")[-1] == "diagnostics.query-count"
    assert spec.profile_capabilities("full", "1.1.0")[-3:] == ["diagnostics.write-count", "sharing", "attachments"]
    assert {"replay-history", "rewind"} <= set(spec.profile_capabilities("full", "1.2.0"))
    assert not {"replay-history", "rewind"} & set(spec.profile_capabilities("full", "1.1.0"))


def test_every_capability_a_requirement_names_is_in_some_profile() -> None:
    named = {name for req in spec.requirements() for name in spec.requirement_capabilities(req)}
    listed = {name for entry in spec.profiles().values() for name in entry["capabilities"]}
    assert named <= listed, named - listed


@pytest.mark.parametrize(
    ("requirement", "profile", "version", "inside"),
    [
        ({"since": "1.0.0"}, "core", "1.0.0", True),  # no capability: every server
        ({"since": "1.0.0", "capability": "writer-lease"}, "core", "1.0.0", False),
        ({"since": "1.0.0", "capability": "writer-lease"}, "full", "1.0.0", True),
        ({"since": "1.1.0"}, "core", "1.0.0", False),  # newer than the claim
        ({"since": "1.1.0", "capability": "diagnostics.write-count"}, "full", "1.1.0", True),
        ({"since": "1.0.0", "capability": "diagnostics.write-count"}, "full", "1.0.0", False),  # not in full yet
    ],
)
def test_requirement_in_profile(requirement: dict[str, Any], profile: str, version: str, inside: bool) -> None:
    assert spec.in_profile(requirement, profile, version) is inside


# ---------------------------------------------------------------------------------------- claims


def test_claims_parse_and_default_to_the_suites_version() -> None:
    assert parse_claim("core", "configuration") == Claim("core", SUITE, "configuration")
    assert parse_claim("full@1.0.0", "configuration").version == "1.0.0"
    for text, message in (("gold", "unknown profile"), ("core@0.9.0", "major"), ("core@1.99.0", "newer"), ("core 1.0", "NAME")):
        with pytest.raises(ValueError, match=message):
            parse_claim(text, "configuration")


def test_the_configuration_wins_over_the_capability_document_over_the_default() -> None:
    document = {"conformance_claim": "core"}
    assert resolve_claim("full", document) == Claim("full", SUITE, "configuration")
    assert resolve_claim(None, document) == Claim("core", SUITE, "capability document")
    assert resolve_claim(None, {}) == Claim("full", SUITE, "default")
    with pytest.raises(ValueError, match="unknown profile"):
        resolve_claim(None, {"conformance_claim": "platinum"})


# ---------------------------------------------------------------------------------------- verdict arithmetic

CATALOGUE = {
    "CORE-A-001": {"id": "CORE-A-001", "level": "MUST", "chapter": "a", "title": "a", "since": "1.0.0"},
    "CORE-B-001": {"id": "CORE-B-001", "level": "SHOULD", "chapter": "a", "title": "b", "since": "1.0.0"},
    "LEASE-X-001": {
        "id": "LEASE-X-001", "level": "MUST", "chapter": "l", "title": "x", "since": "1.0.0", "capability": "writer-lease",
    },
    "NEW-Y-001": {"id": "NEW-Y-001", "level": "MUST", "chapter": "a", "title": "y", "since": "1.1.0"},
}


def outcome(name: str, requirements: list[str], result: Outcome, failed: list[str] | None = None) -> CheckResult:
    return CheckResult(name, name, "a", requirements, result, failed_requirements=failed or [])


def judge(claim: Claim, results: list[CheckResult], advertised: list[str], strict: bool = False) -> list[ProfileResult]:
    scope = Scope(claim, CATALOGUE)
    return profile_results(scope, requirement_verdicts(results, CATALOGUE, {}, scope), advertised, strict)


def test_an_untestable_requirement_keeps_its_profile_from_being_reached() -> None:
    results = [
        outcome("a.one", ["CORE-A-001"], Outcome.PASS),
        outcome("l.x", ["LEASE-X-001"], Outcome.FAIL, ["LEASE-X-001"]),  # "not testable: target lacks ..."
    ]
    core, full = judge(Claim("full", "1.0.0", "default"), results, ["fork", "effective-transcript", "lineage", "idempotency"])
    assert (core.name, core.status) == ("core", "reached")
    assert (full.name, full.status, full.claimed) == ("full", "not reached", True)
    assert full.missing_capabilities == ["writer-lease", "diagnostics.query-count"]
    assert full.failed_requirements == ["LEASE-X-001"]
    text = summary_text("not-conformant", Claim("full", "1.0.0", "default"), [core, full], [])
    assert text == (
        "not conformant to full 1.0.0: core 1.0.0; "
        "full not reached: writer-lease missing, diagnostics.query-count missing, LEASE-X-001 failed"
    )


def test_should_failures_and_stale_expected_failures_count_only_when_strict() -> None:
    results = [outcome("a.two", ["CORE-B-001"], Outcome.FAIL, ["CORE-B-001"]), outcome("a.one", ["CORE-A-001"], Outcome.PASS)]
    claim = Claim("core", "1.0.0", "configuration")
    advertised = ["fork", "effective-transcript", "lineage", "idempotency"]
    assert judge(claim, results, advertised)[0].status == "reached"
    assert judge(claim, results, advertised, strict=True)[0].failed_requirements == ["CORE-B-001"]


def test_errors_leave_a_profile_undetermined_and_newer_requirements_out_of_scope() -> None:
    results = [outcome("a.one", ["CORE-A-001"], Outcome.ERROR), outcome("a.new", ["NEW-Y-001"], Outcome.FAIL, ["NEW-Y-001"])]
    claim = Claim("core", "1.0.0", "configuration")
    core = judge(claim, results, ["fork", "effective-transcript", "lineage", "idempotency"])[0]
    assert core.status == "undetermined" and core.undetermined_requirements == ["CORE-A-001"]
    assert core.failed_requirements == []  # NEW-Y-001 arrived in 1.1.0, after the claim
    scope = Scope(claim, CATALOGUE)
    assert scope.why_out("NEW-Y-001") == "added in spec 1.1.0, after the claimed core@1.0.0"
    assert scope.why_out("LEASE-X-001") == "needs 'writer-lease', which profile 'core' does not include"


def test_the_verdict_names_what_was_reached() -> None:
    core = ProfileResult("core", "1.1.0", "Core", True, "reached", requirements=40)
    full = ProfileResult("full", "1.1.0", "Full", False, "not reached", ["writer-lease"], ["LEASE-ACQUIRE-001"])
    assert summary_text("conformant", Claim("core", "1.1.0", "configuration"), [core, full], []) == (
        "conformant: core 1.1.0; full not reached: writer-lease missing, LEASE-ACQUIRE-001 failed"
    )


def test_a_not_verified_must_is_named_in_the_verdict_and_fails_only_when_strict() -> None:
    """Not verified: the rule applies, its evidence could not be observed. Never a pass (it wins over
    another check's pass), never a failure without strict, named in the verdict line either way."""
    results = [
        outcome("a.one", ["CORE-A-001"], Outcome.PASS),
        outcome("a.storage", ["CORE-A-001"], Outcome.NOT_VERIFIED),
        outcome("a.two", ["CORE-B-001"], Outcome.NOT_VERIFIED),  # a SHOULD
    ]
    claim = Claim("core", "1.0.0", "configuration")
    advertised = ["fork", "effective-transcript", "lineage", "idempotency"]
    scope = Scope(claim, CATALOGUE)
    verdicts = {v.id: v.outcome for v in requirement_verdicts(results, CATALOGUE, {}, scope)}
    assert verdicts == {"CORE-A-001": Outcome.NOT_VERIFIED, "CORE-B-001": Outcome.NOT_VERIFIED}
    core = judge(claim, results, advertised)[0]
    assert (core.status, core.failed_requirements, core.not_verified_requirements) == ("reached", [], ["CORE-A-001"])
    assert summary_text("conformant", claim, [core], []) == "conformant: core 1.0.0; 1 MUST not verified: CORE-A-001"
    strict = judge(claim, results, advertised, strict=True)[0]
    assert strict.status == "not reached" and strict.failed_requirements == []
    assert strict.not_verified_requirements == ["CORE-A-001", "CORE-B-001"]
    assert summary_text("not-conformant", claim, [strict], []) == (
        "not conformant to core 1.0.0: no profile reached; core not reached: CORE-A-001, CORE-B-001 not verified"
    )


def test_a_skip_after_a_pass_is_still_a_pass_and_not_verified_is_not() -> None:
    scope = Scope(Claim("core", "1.0.0", "configuration"), CATALOGUE)
    skipped = [outcome("a.one", ["CORE-A-001"], Outcome.PASS), outcome("a.wait", ["CORE-A-001"], Outcome.SKIPPED)]
    assert requirement_verdicts(skipped, CATALOGUE, {}, scope)[0].outcome is Outcome.PASS
    failed = [outcome("a.one", ["CORE-A-001"], Outcome.FAIL, ["CORE-A-001"]), outcome("a.x", ["CORE-A-001"], Outcome.NOT_VERIFIED)]
    assert requirement_verdicts(failed, CATALOGUE, {}, scope)[0].outcome is Outcome.FAIL


# ---------------------------------------------------------------------------------------- a server without writer-lease


def without_writer_lease(app: Any, claim: str | None = None) -> Any:
    """The reference server as a server lacking `writer-lease` would look (optionally with a claim)."""

    async def wrapped(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"].rstrip("/").endswith("/lease"):
            body = json.dumps({
                "type": "urn:session-lineage:problem:not-found",
                "title": "No such resource visible to the caller",
                "status": 404,
                "detail": "this server has no writer leases",
            }).encode()
            headers = [(b"content-type", b"application/problem+json"), (b"content-length", str(len(body)).encode())]
            await send({"type": "http.response.start", "status": 404, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        if scope["type"] != "http" or scope["path"] != "/capabilities":
            await app(scope, receive, send)
            return
        started: dict[str, Any] = {}
        chunks: list[bytes] = []

        async def rewrite(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                started.update(message)
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body"):
                return
            document = json.loads(b"".join(chunks))
            document["capabilities"] = [c for c in document["capabilities"] if c != "writer-lease"]
            document["limits"].pop("max_lease_seconds", None)
            if claim:
                document["conformance_claim"] = claim
            body = json.dumps(document).encode()
            headers = [(k, v) for k, v in started["headers"] if k.lower() != b"content-length"]
            await send({**started, "headers": headers + [(b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})

        await app(scope, receive, rewrite)

    return wrapped


def run_against(tmp_path: Path, claim_in_document: str | None, *args: str) -> tuple[int, dict[str, Any]]:
    report = tmp_path / f"report-{len(list(tmp_path.glob('report-*')))}.json"
    app = create_app(Settings(database_url=f"sqlite:///{tmp_path / 'lease-less.db'}", tokens=TOKENS))
    with serve_app(without_writer_lease(app, claim_in_document)) as server:
        code = main([
            "check", "--target", server.url, *GOOD, "--quiet", "--seed", "11",
            "--select", "leases", "--select", "capabilities", "--report-json", str(report), *args,
        ])
    return code, json.loads(report.read_text())


def test_the_default_full_claim_fails_a_server_without_writer_lease(tmp_path, capsys) -> None:
    code, report = run_against(tmp_path, None)
    assert code == 1
    lease_checks = [c for c in report["checks"] if c["chapter"] == "leases"]
    assert lease_checks and all(c["outcome"] == "fail" and c["untestable"] for c in lease_checks)
    assert {c["message"] for c in lease_checks} == {"not testable: target lacks 'writer-lease', which profile 'full' requires"}
    assert report["summary_text"].startswith(f"not conformant to full {SUITE}: core {SUITE}; full not reached: writer-lease missing")
    err = capsys.readouterr().err
    assert "not testable: target lacks 'writer-lease', which profile 'full' requires" in err


def test_under_the_core_claim_the_same_server_is_conformant(tmp_path, capsys) -> None:
    code, report = run_against(tmp_path, None, "--profile", "core")
    assert code == 0
    lease_checks = [c for c in report["checks"] if c["chapter"] == "leases"]
    assert lease_checks and {c["outcome"] for c in lease_checks} == {"out-of-scope"}
    leases = [r for r in report["requirements"] if r["id"].startswith("LEASE-")]
    assert leases and all(r["outcome"] == "out-of-scope" and not r["in_scope"] for r in leases)
    assert report["summary_text"].startswith(f"conformant: core {SUITE}; full not reached: writer-lease missing")
    assert report["claim"] == {"profile": "core", "version": SUITE, "source": "configuration"}
    assert f"PASSED: conformant: core {SUITE}; full not reached: writer-lease missing" in capsys.readouterr().err


def test_the_capability_documents_claim_counts_and_the_configuration_wins(tmp_path) -> None:
    code, report = run_against(tmp_path, "core")
    assert code == 0 and report["claim"]["source"] == "capability document"
    code, report = run_against(tmp_path, "core", "--profile", "full")
    assert code == 1 and report["claim"]["source"] == "configuration"


def test_an_expected_capability_that_is_missing_fails_the_claim(tmp_path) -> None:
    code, report = run_against(tmp_path, None, "--profile", "core", "--config", str(_expect(tmp_path)))
    assert code == 1
    assert report["verdict"] == "not-conformant"
    assert "expected capability writer-lease missing" in report["summary_text"]


def _expect(tmp_path: Path) -> Path:
    path = tmp_path / "suite.yaml"
    path.write_text("expect_capabilities: [writer-lease]\n")
    return path


def test_an_unusable_claim_in_the_capability_document_is_a_preflight_error(tmp_path, capsys) -> None:
    app = create_app(Settings(database_url=f"sqlite:///{tmp_path / 'claims.db'}", tokens=TOKENS))
    with serve_app(without_writer_lease(app, "platinum")) as server:
        code = main(["check", "--target", server.url, *GOOD, "--quiet"])
    err = capsys.readouterr().err
    assert code == 2
    assert "failed   capabilities: conformance_claim 'platinum' in the capability document: unknown profile 'platinum'" in err
