"""Preflight: before any check runs, make sure a failure could only mean the server is wrong.

A wrong token, replicas that do not share a database or an unwritable report path are set-up
mistakes, not non-conformance. Every item runs (those that depend on a failed one say so), all
failures are reported together, one line each, and the run stops with exit code 2.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

import spec
from conformance import otlp
from conformance.client import new_traceparent, tls
from conformance.config import Config, ConfigError, ExpectedFailure, load_expected_failures
from conformance.counts import source_name
from conformance.counts import sources as round_trip_sources
from conformance.profiles import Claim, resolve_claim
from conformance.results import PreflightItem

ITEM_NAMES = ("reachable", "capabilities", "tokens", "principals", "roles", "replicas", "reports", "expected-failures", "counts")
REPLICA_ATTEMPTS = 3  # a replica may take a moment to see a write made through another
REPLICA_WAIT_S = 0.2


@dataclass
class Preflight:
    items: list[PreflightItem] = field(default_factory=list)
    capabilities: dict[str, Any] | None = None
    claim: Claim | None = None
    expected: dict[str, ExpectedFailure] | None = None
    created: list[str] = field(default_factory=list)  # sessions preflight created (none can be deleted)

    @property
    def ok(self) -> bool:
        return all(item.status != "failed" for item in self.items)

    @property
    def failures(self) -> list[PreflightItem]:
        return [item for item in self.items if item.status == "failed"]


class _Failed(Exception):
    """One preflight item failed; the message says what is wrong and how to fix it."""


def run_preflight(
    config: Config,
    report_paths: Sequence[tuple[str, str]] = (),
    check_names: Sequence[str] = (),
    selected: Sequence[Any] | None = None,
) -> Preflight:
    """Run every preflight item not skipped by `config.skip_preflight`.

    `report_paths` are (what, path) pairs such as ("JSON report", "out/report.json");
    `check_names` are the suite's checks, which an expected-failures file may name; `selected`
    are the checks that will run (registry.Check), whose principals the `roles` item counts.
    """
    state = Preflight()
    with httpx.Client(timeout=config.timeout, verify=tls()) as http:
        probe = _Probe(config, http, state)
        probe.selected = selected
        for name in ITEM_NAMES:
            if name in config.skip_preflight:
                state.items.append(PreflightItem(name, "skipped", "skipped (--skip-preflight)"))
                probe.skipped(name)
                continue
            blocker = probe.blocked(name)
            if blocker:
                state.items.append(PreflightItem(name, "not run", f"not run: {blocker}"))
                continue
            try:
                message = getattr(probe, name.replace("-", "_"))(report_paths=report_paths, check_names=check_names)
            except _Failed as failure:
                state.items.append(PreflightItem(name, "failed", str(failure)))
                probe.failed.add(name)
            else:
                state.items.append(PreflightItem(name, "ok", message))
    return state


class _Probe:
    """The preflight items, sharing what earlier ones found."""

    def __init__(self, config: Config, http: httpx.Client, state: Preflight) -> None:
        self.config = config
        self.http = http
        self.state = state
        self.failed: set[str] = set()
        self.response: httpx.Response | None = None
        self.authenticated: list[int] = []  # indexes of tokens that authenticate
        self.session: str | None = None  # a session of principal 1, for the replica item
        self.selected: Sequence[Any] | None = None

    # ------------------------------------------------------------------------------ plumbing
    def blocked(self, name: str) -> str | None:
        needs = {
            "capabilities": ["reachable"],
            "tokens": ["reachable"],
            "principals": ["reachable", "tokens"],
            "replicas": ["reachable", "tokens"],
        }.get(name, [])
        stopped = [need for need in needs if need in self.failed]
        return f"needs '{stopped[0]}'" if stopped else None

    def skipped(self, name: str) -> None:
        """A skipped item still provides what later items and the run need."""
        if name == "capabilities" and "reachable" not in self.failed:
            document = self._document_or_none()
            self.state.capabilities = document
            try:
                self.state.claim = resolve_claim(self.config.profile, document)
            except ValueError:
                self.state.claim = None
        if name == "tokens":
            self.authenticated = list(range(len(self.config.tokens)))
        if name == "counts":  # the receiver still listens; a port that cannot be bound errs in the checks
            try:
                otlp.start(self.config)
            except OSError:
                pass
        if name == "expected-failures":
            try:
                self.state.expected = load_expected_failures(self.config.expected_failures)
            except ConfigError:
                self.state.expected = {}

    def _headers(self, index: int) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.config.tokens[index]}", "Accept": "application/json, application/problem+json"}

    def _send(self, method: str, url: str, index: int | None = 0, **kwargs: Any) -> httpx.Response:
        headers = self._headers(index) if index is not None else {"Accept": "application/json"}
        headers["traceparent"] = new_traceparent()  # every request of the suite is its own trace (client.py)
        try:
            return self.http.request(method, url, headers=headers, **kwargs)
        except httpx.HTTPError as exc:
            raise _Failed(f"{method} {url}: {exc.__class__.__name__}: {exc}") from None

    def _document_or_none(self) -> dict[str, Any] | None:
        try:
            document = (self.response or self._send("GET", f"{self.config.target}/capabilities")).json()
        except (ValueError, _Failed):
            return None
        return document if isinstance(document, dict) else None

    # ------------------------------------------------------------------------------ items
    def reachable(self, **_: Any) -> str:
        """GET /capabilities answers at all, through every base URL."""
        problems = []
        for url in (self.config.target, *self.config.replicas):
            try:
                response = self._send("GET", f"{url}/capabilities")
            except _Failed as failure:
                what = "target" if url == self.config.target else "replica"
                problems.append(f"{what} unreachable: {failure}")
                continue
            if url == self.config.target:
                self.response = response
        if problems:
            raise _Failed("; ".join(problems))
        return f"{len(self.config.replicas) + 1} base URLs answer" if self.config.replicas else "answers"

    def capabilities(self, **_: Any) -> str:
        """The capability document is valid and speaks the suite's major version; the claim is usable."""
        response = self.response or self._send("GET", f"{self.config.target}/capabilities")
        if response.status_code != 200:
            raise _Failed(
                f"GET /capabilities answered {response.status_code}, not 200 with the capability document (CAP-DOC-001)"
            )
        try:
            document = response.json()
        except ValueError:
            raise _Failed("GET /capabilities did not answer JSON (CAP-DOC-001)") from None
        if not isinstance(document, dict):
            raise _Failed("GET /capabilities did not answer a JSON object (CAP-DOC-001)")
        suite = spec.spec_version()
        version = document.get("spec_version")
        try:
            major = spec.version_tuple(str(version))[0]
        except ValueError:
            major = None
        if major is not None and major != spec.version_tuple(suite)[0]:
            raise _Failed(
                f"the target implements spec_version {version}; this suite checks major version "
                f"{spec.version_tuple(suite)[0]} (spec {suite}): use a suite of major version {major}"
            )
        errors = sorted(spec.validator("capabilities.json").iter_errors(document), key=lambda e: list(e.absolute_path))
        if errors:
            where = "/" + "/".join(str(part) for part in errors[0].absolute_path)
            raise _Failed(f"capability document invalid at {where}: {errors[0].message} (CAP-DOC-001)")
        self.state.capabilities = document
        try:
            self.state.claim = resolve_claim(self.config.profile, document)
        except ValueError as exc:
            raise _Failed(f"conformance_claim {document.get('conformance_claim')!r} in the capability document: {exc}") from None
        claim = self.state.claim
        return f"spec {version}, claim {claim}" + (" by default" if claim.source == "default" else f" from the {claim.source}")

    def tokens(self, **_: Any) -> str:
        """Each token authenticates: reading a session that does not exist answers 404, not 401."""
        path = f"/sessions/{self.config.id_prefix}preflight-absent"
        problems = []
        for index in range(len(self.config.tokens)):
            try:
                response = self._send("GET", f"{self.config.target}{path}", index)
            except _Failed as failure:
                problems.append(f"token {index + 1}: {failure}")
                continue
            if response.status_code == 404:
                self.authenticated.append(index)
            elif response.status_code == 401:
                problems.append(
                    f"token {index + 1} is not accepted: GET {path} answered 401 "
                    "(is it in the server's tokens file?)"
                )
            else:
                problems.append(f"token {index + 1}: GET {path} answered {response.status_code}, expected 404")
        if problems:
            raise _Failed("; ".join(problems))
        return f"{len(self.authenticated)} accepted"

    def principals(self, **_: Any) -> str:
        """The tokens are distinct principals: one principal's session is invisible to every other."""
        if len(self.authenticated) < 2:
            raise _Failed("fewer than two tokens authenticate: the suite needs two principals")
        problems = []
        for position, owner in enumerate(self.authenticated[:-1]):
            session = f"{self.config.id_prefix}preflight-p{owner + 1}"
            created = self._send("POST", f"{self.config.target}/sessions", owner, json={"session_id": session})
            if created.status_code != 201:
                raise _Failed(
                    f"principal {owner + 1} could not create a session: POST /sessions answered "
                    f"{created.status_code} {created.text[:200]!r}"
                )
            self.state.created.append(session)
            if owner == 0:
                self.session = session
            for reader in self.authenticated[position + 1 :]:
                seen = self._send("GET", f"{self.config.target}/sessions/{session}", reader)
                if seen.status_code == 200:
                    problems.append(
                        f"tokens {owner + 1} and {reader + 1} act as one principal: principal {reader + 1} "
                        f"can read the session principal {owner + 1} created (give each token its own principal)"
                    )
                elif seen.status_code != 404:
                    problems.append(
                        f"principal {reader + 1} reading principal {owner + 1}'s session answered "
                        f"{seen.status_code}, expected 404"
                    )
        if problems:
            raise _Failed("; ".join(problems))
        return f"{len(self.authenticated)} distinct"

    def roles(self, **_: Any) -> str:
        """The tokens cover every role the selected checks need, and /me shows the project layout."""
        from conformance.preflight_roles import check_roles

        try:
            return check_roles(self, self.selected)
        except ValueError as exc:
            raise _Failed(str(exc)) from None

    def replicas(self, **_: Any) -> str:
        """A session created through the target is readable through every replica."""
        if not self.config.replicas:
            return "none"
        if not self.authenticated:
            raise _Failed("no token authenticates")
        owner = self.authenticated[0]
        if self.session is None:
            self.session = f"{self.config.id_prefix}preflight-replica"
            created = self._send("POST", f"{self.config.target}/sessions", owner, json={"session_id": self.session})
            if created.status_code != 201:
                raise _Failed(f"could not create a session: POST /sessions answered {created.status_code}")
            self.state.created.append(self.session)
        problems = []
        for url in self.config.replicas:
            for attempt in range(REPLICA_ATTEMPTS):
                seen = self._send("GET", f"{url}/sessions/{self.session}", owner)
                if seen.status_code == 200 or attempt == REPLICA_ATTEMPTS - 1:
                    break
                time.sleep(REPLICA_WAIT_S)  # give replication a moment before calling it a set-up error
            if seen.status_code != 200:
                problems.append(
                    f"replica {url} answered {seen.status_code} for session {self.session} created through "
                    f"{self.config.target}: the replicas do not share data (point them at one database)"
                )
        if problems:
            raise _Failed("; ".join(problems))
        return f"{len(self.config.replicas)} share data"

    def reports(self, report_paths: Sequence[tuple[str, str]] = (), **_: Any) -> str:
        """Every report path can be opened for appending (nothing is truncated, nothing left behind)."""
        problems = []
        for what, path in report_paths:
            file = Path(path)
            existed = file.exists()
            if file.parent.exists() and not file.parent.is_dir():
                problems.append(f"cannot write the {what} to {path}: {file.parent} is not a directory")
                continue
            try:
                file.parent.mkdir(parents=True, exist_ok=True)
                with open(file, "a", encoding="utf-8"):
                    pass
            except OSError as exc:
                problems.append(f"cannot write the {what} to {path}: {exc.strerror or exc}")
                continue
            if not existed:
                file.unlink()
        if problems:
            raise _Failed("; ".join(problems))
        return f"{len(report_paths)} writable" if report_paths else "none"

    def expected_failures(self, check_names: Sequence[str] = (), **_: Any) -> str:
        """The expected-failures file is well formed and names only real checks and requirements."""
        try:
            expected = load_expected_failures(self.config.expected_failures)
        except ConfigError as exc:
            raise _Failed(str(exc)) from None
        known_checks = set(check_names)
        known_requirements = {req["id"] for req in spec.requirements()}
        unknown_checks = [e.name for e in expected.values() if e.kind == "check" and e.name not in known_checks]
        unknown_requirements = [
            e.name for e in expected.values() if e.kind == "requirement" and e.name not in known_requirements
        ]
        problems = []
        if unknown_checks:
            problems.append(f"names unknown checks: {', '.join(unknown_checks)} (see `check --list`)")
        if unknown_requirements:
            problems.append(f"names unknown requirements: {', '.join(unknown_requirements)}")
        if problems:
            raise _Failed(f"expected-failures file {self.config.expected_failures}: " + "; ".join(problems))
        self.state.expected = expected
        return f"{len(expected)} entries" if self.config.expected_failures else "none"


    def counts(self, **_: Any) -> str:
        """Which source of round-trip counts the run uses (counts.py), after starting the OTLP receiver
        when one is configured: a port that cannot be bound is a set-up error."""
        url = None
        if self.config.otlp_receiver:
            try:
                otlp.start(self.config)
            except OSError as exc:
                raise _Failed(
                    f"the OTLP receiver cannot listen on {self.config.otlp_receiver} (otlp_receiver): "
                    f"{exc.strerror or exc}; choose a free [HOST:]PORT or stop what holds it"
                ) from None
            url = otlp.receiver_url(self.config)
        document = self.state.capabilities or {}
        found = round_trip_sources(document, self.config)
        advertised = document.get("capabilities", []) if isinstance(document, dict) else []
        words = {
            "header": "the Storage-Round-Trips header",
            "spans": f"spans received at {url}",
            "both": f"the Storage-Round-Trips header and spans received at {url}, which must agree",
            "none": "none: the round-trip cost rules will be not verified",
        }
        message = f"round trips from {words[source_name(found)]}"
        if "spans" not in found and otlp.TRACE_CAPABILITY in advertised:
            message += f" (the target advertises {otlp.TRACE_CAPABILITY}: add --otlp-receiver [HOST:]PORT to count its spans)"
        elif "spans" not in found and url:
            message += f" (the receiver at {url} is unused: the target does not advertise {otlp.TRACE_CAPABILITY})"
        return message


__all__ = ["ITEM_NAMES", "Preflight", "run_preflight"]
