"""Claims and profiles: which requirements a run holds the target to, and which profiles it reached.

A target claims a profile at a spec version (`full@1.1.0`). Requirements of that profile at that
version are in scope: each must pass, and one the target cannot show (it lacks the capability) is
a failure. Everything else is out of scope and counts neither for nor against. Every profile is
then judged at the claimed version, so the verdict can name what was reached.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import spec
from conformance.results import Outcome, ProfileResult, RequirementVerdict

DEFAULT_PROFILE = "full"
_CLAIM = re.compile(r"^(?P<name>[a-z][a-z0-9-]*)(?:@(?P<version>[0-9]+\.[0-9]+\.[0-9]+))?$")


@dataclass(frozen=True)
class Claim:
    profile: str
    version: str
    source: str  # "configuration", "capability document" or "default"

    def __str__(self) -> str:
        return f"{self.profile}@{self.version}"

    def as_dict(self) -> dict[str, str]:
        return {"profile": self.profile, "version": self.version, "source": self.source}


def parse_claim(text: str, source: str) -> Claim:
    """`NAME` or `NAME@X.Y.Z` as a Claim; ValueError saying what is wrong otherwise.

    The version defaults to the suite's spec version; it must share the suite's major version and
    be no newer than the suite, and the profile must exist at that version.
    """
    suite = spec.spec_version()
    match = _CLAIM.match(str(text).strip())
    if not match:
        raise ValueError(f"{text!r} is not a claim: expected NAME or NAME@X.Y.Z, e.g. full@{suite}")
    name, version = match.group("name"), match.group("version") or suite
    known = spec.profiles()
    if name not in known:
        raise ValueError(f"unknown profile {name!r} (known: {', '.join(known)})")
    if spec.version_tuple(version)[0] != spec.version_tuple(suite)[0]:
        raise ValueError(f"{name}@{version} is for another major version; this suite checks spec {suite}")
    if spec.version_tuple(version) > spec.version_tuple(suite):
        raise ValueError(f"{name}@{version} is newer than this suite's spec {suite}")
    if spec.version_tuple(version) < spec.version_tuple(known[name]["since"]):
        raise ValueError(f"profile {name!r} exists since {known[name]['since']}, not at {version}")
    return Claim(name, version, source)


def resolve_claim(configured: str | None, document: dict[str, Any] | None) -> Claim:
    """The run's claim: the configuration's, else the capability document's, else `full` at the
    suite's spec version. ValueError when the capability document's claim is unusable."""
    if configured:
        return parse_claim(configured, "configuration")
    stated = (document or {}).get("conformance_claim")
    if stated is not None:
        if not isinstance(stated, str):
            raise ValueError("conformance_claim must be a string NAME or NAME@X.Y.Z")
        return parse_claim(stated, "capability document")
    return Claim(DEFAULT_PROFILE, spec.spec_version(), "default")


class Scope:
    """Answers, for a claim, which requirements and capabilities count."""

    def __init__(self, claim: Claim, catalogue: dict[str, dict[str, Any]]) -> None:
        self.claim = claim
        self.catalogue = catalogue
        self.profiles = spec.profiles()

    def in_profile(self, requirement_id: str, profile: str | None = None) -> bool:
        """Whether a requirement counts for a profile (default: the claimed one) at the claimed version."""
        entry = self.catalogue.get(requirement_id)
        if entry is None:
            return False
        return spec.in_profile(entry, self.profiles[profile or self.claim.profile], self.claim.version)

    def why_out(self, requirement_id: str) -> str:
        """Why a requirement is outside the claim, in words for reports."""
        entry = self.catalogue.get(requirement_id, {})
        since = str(entry.get("since", "0.0.0"))
        if spec.version_tuple(since) > spec.version_tuple(self.claim.version):
            return f"added in spec {since}, after the claimed {self.claim}"
        capability = " or ".join(f"'{name}'" for name in spec.requirement_capabilities(entry))
        return f"needs {capability}, which profile '{self.claim.profile}' does not include"

    def capabilities(self, profile: str | None = None) -> list[str]:
        return spec.profile_capabilities(self.profiles[profile or self.claim.profile], self.claim.version)

    def stand_in(self, capability: str, advertised: list[str]) -> str | None:
        """The advertised capability the claimed profile accepts in place of `capability` (`or` in
        profiles.yaml, either way round), if any."""
        for name, other in spec.stand_ins(self.profiles[self.claim.profile], self.claim.version).items():
            if capability in (name, other):
                alternative = other if capability == name else name
                if alternative in advertised:
                    return alternative
        return None

    def stands_in(self, capability: str) -> str | None:
        """The capability `capability` may stand in for in the claimed profile (`or`), if it is one: a
        server lacking both is held to the other, so lacking this one alone fails nothing."""
        return spec.stand_ins(self.profiles[self.claim.profile], self.claim.version).get(capability)

    def requiring_profile(self, capability: str) -> str | None:
        """The claimed profile when it includes the capability (for "not testable" messages)."""
        return self.claim.profile if capability in self.capabilities() else None


def profile_results(
    scope: Scope,
    verdicts: list[RequirementVerdict],
    advertised: list[str],
    strict: bool,
) -> list[ProfileResult]:
    """Every profile judged at the claimed version over the requirements the run judged.

    A profile is reached when it misses no capability and none of its requirements failed or was
    untestable (a SHOULD counts only with `strict`); errors leave it undetermined. Requirements not
    verified are named; with `strict` they keep the profile from being reached.
    """
    gating = {"MUST", "SHOULD"} if strict else {"MUST"}
    results = []
    for name, entry in scope.profiles.items():
        if spec.version_tuple(entry["since"]) > spec.version_tuple(scope.claim.version):
            continue
        if entry.get("only_when_claimed") and name != scope.claim.profile:
            continue  # e.g. `legacy`: a lineage server is not described as a legacy one
        mine = [v for v in verdicts if scope.in_profile(v.id, name)]
        missing = spec.missing_capabilities(entry, scope.claim.version, advertised)
        failed = [v.id for v in mine if v.outcome is Outcome.FAIL and v.level in gating]
        if strict:
            failed += [v.id for v in mine if v.outcome is Outcome.XPASS]
        undetermined = [v.id for v in mine if v.outcome is Outcome.ERROR]
        not_verified = [v.id for v in mine if v.outcome is Outcome.NOT_VERIFIED and v.level in gating]
        if missing or failed or (strict and not_verified):
            status = "not reached"
        elif undetermined:
            status = "undetermined"
        else:
            status = "reached"
        results.append(
            ProfileResult(
                name=name,
                version=scope.claim.version,
                title=entry["title"],
                claimed=name == scope.claim.profile,
                status=status,
                missing_capabilities=missing,
                failed_requirements=failed,
                undetermined_requirements=undetermined,
                not_verified_requirements=not_verified,
                requirements=len(mine),
                strict=strict,
            )
        )
    return results


def describe(profile: ProfileResult, limit: int = 3, stated: dict[str, str] | None = None) -> str:
    """Why a profile was not reached, shortest first: missing capabilities, then failed IDs.

    IDs in `stated` (ID -> the profile whose description already named it) are not repeated.
    """
    stated = stated if stated is not None else {}
    stand_in = {other: name for name, other in spec.stand_ins(profile.name, profile.version).items()} if profile.name in spec.profiles() else {}
    reasons = [f"{name}{f' (or {stand_in[name]})' if name in stand_in else ''} missing" for name in profile.missing_capabilities]
    failed = [req for req in profile.failed_requirements if req not in stated]
    if failed:
        reasons.append(f"{_listed(failed, limit)} failed")
    if profile.strict:  # with `strict`, what was not verified keeps the profile from being reached
        unverified = [req for req in profile.not_verified_requirements if req not in stated]
        if unverified:
            reasons.append(f"{_listed(unverified, limit)} not verified")
    earlier = list(dict.fromkeys(stated[req] for req in profile.failed_requirements if req in stated))
    if earlier:
        reasons.append(f"the failures of {', '.join(earlier)}")
    if profile.undetermined_requirements:
        reasons.append(f"{_listed(profile.undetermined_requirements, limit)} without a verdict (a check erred, or stopped at another rule's failure first)")
    for req in profile.failed_requirements + (profile.not_verified_requirements if profile.strict else []):
        stated.setdefault(req, profile.name)
    return ", ".join(reasons)


def _listed(ids: list[str], limit: int) -> str:
    return ", ".join(ids[:limit]) + (f" and {len(ids) - limit} more" if len(ids) > limit else "")


def not_verified_text(profiles: list[ProfileResult], stated: set[str] | None = None) -> str | None:
    """`N MUSTs not verified: IDS`, every gating requirement of a judged profile that was not
    verified and not already named, or None."""
    stated = stated or set()
    ids = list(dict.fromkeys(req for p in profiles for req in p.not_verified_requirements if req not in stated))
    if not ids:
        return None
    word = "requirement" if any(p.strict for p in profiles) else "MUST"
    return f"{len(ids)} {word}{'' if len(ids) == 1 else 's'} not verified: {', '.join(ids)}"


def describe_all(profiles: list[ProfileResult], stated: dict[str, str] | None = None) -> list[str]:
    """`NAME not reached: why` for every profile not reached, each failure named once."""
    stated = stated if stated is not None else {}
    return [
        f"{p.name} {'undetermined' if p.status == 'undetermined' else 'not reached'}: {describe(p, stated=stated)}"
        for p in profiles
        if not p.reached
    ]


def summary_text(verdict_value: str, claim: Claim, profiles: list[ProfileResult], extra: list[str]) -> str:
    """The verdict in words, naming what was reached and what was not verified:
    "conformant: core 1.1.0; full not reached: writer-lease missing; 1 MUST not verified: FORK-NO-COPY-001"."""
    reached = [f"{p.name} {p.version}" for p in profiles if p.reached]
    stated: dict[str, str] = {}
    others = describe_all(profiles, stated)
    # what the claimed profile and every profile reached could not verify (a profile not reached
    # has its reasons already)
    unverified = not_verified_text([p for p in profiles if p.claimed or p.reached], set(stated))
    if unverified:
        others.append(unverified)
    head = {
        "conformant": "conformant",
        "not-conformant": f"not conformant to {claim.profile} {claim.version}",
        "incomplete": f"incomplete for {claim.profile} {claim.version}",
    }[verdict_value]
    body = ", ".join(reached) if reached else "no profile reached"
    text = f"{head}: {body}"
    if others:
        text += "; " + "; ".join(others)
    if extra:
        text += "; " + "; ".join(extra)
    return text


__all__ = [
    "Claim",
    "Scope",
    "parse_claim",
    "resolve_claim",
    "profile_results",
    "summary_text",
    "describe",
    "describe_all",
    "not_verified_text",
]
