"""The server under test, and one check run against it: planned from the capability document,
seeded, its failure turned into a reproducer, the target's expected failures applied.
"""

from __future__ import annotations

import re
import threading
import time
import traceback
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

import spec
from conformance.cleanup import CreatedSessions, EarlyPurges
from conformance.client import ApiClient, Recorder
from conformance.config import Config, ConfigError, ExpectedFailure, load_expected_failures
from conformance.context import CheckContext
from conformance.curl import exchange_from_schemathesis, scrub, to_script, token_variables
from conformance.errors import CheckFailed, NotVerified, TargetUnreachable, Unsupported
from conformance.profiles import Claim, Scope, resolve_claim
from conformance.registry import Check, undeclared
from conformance.results import CheckResult, Cleanup, Exchange, Outcome

LEVEL_RANK = {"MUST": 3, "SHOULD": 2, "MAY": 1}
_NOT_ADVERTISED = re.compile(r"does not advertise '([^']+)'")


def check_seed(run_seed: int, name: str) -> int:
    """A per-check seed: stable for a run seed, independent of which other checks run."""
    value = run_seed
    for char in name:
        value = (value * 1_000_003 + ord(char)) % (2**32)
    return value


def _catalogue() -> dict[str, dict[str, Any]]:
    return {req["id"]: req for req in spec.requirements()}


class Target:
    """Open connections to the server under test (one client per principal and an anonymous one)
    and the claim the run holds it to."""

    def __init__(
        self,
        config: Config,
        capabilities: dict[str, Any] | None = None,
        expected: dict[str, ExpectedFailure] | None = None,
    ) -> None:
        self.config = config
        self.catalogue = _catalogue()
        self.expected = load_expected_failures(config.expected_failures) if expected is None else expected
        self.variables = token_variables(config.tokens)
        self.recorder = Recorder()
        self.generated: list[Exchange] = []  # requests the fuzz layer sent through Schemathesis
        self.created = CreatedSessions(config.id_prefix)
        self.clients = [
            ApiClient(config.target, token, f"principal-{n + 1}", self.recorder, config.timeout, config.concurrency * 2)
            for n, token in enumerate(config.tokens)
        ]
        self.anonymous = ApiClient(config.target, None, None, self.recorder, config.timeout)
        self.replicas = [
            [client]
            + [
                ApiClient(url, client.token, client.principal, self.recorder, config.timeout, config.concurrency * 2)
                for url in config.replicas
            ]
            for client in self.clients
        ]
        self.capabilities: dict[str, Any] | None = with_defaults(capabilities) if capabilities else None
        self._claim: Claim | None = None
        self._early: EarlyPurges | None = None
        self._early_lock = threading.Lock()

    def discover(self) -> dict[str, Any]:
        """Read the capability document once; every check is then planned from it."""
        if self.capabilities is None:
            self.capabilities = _discover(self.clients[0])
        return self.capabilities

    @property
    def claim(self) -> Claim:
        if self._claim is None:
            try:
                self._claim = resolve_claim(self.config.profile, self.discover())
            except ValueError as exc:
                raise ConfigError(f"claim: {exc}") from None
        return self._claim

    @property
    def scope(self) -> Scope:
        return Scope(self.claim, self.catalogue)

    def advertised(self) -> list[str]:
        return list(self.discover().get("capabilities", []))

    def missing_expected_capabilities(self) -> list[str]:
        return [name for name in self.config.expect_capabilities if name not in self.advertised()]

    def run_check(self, item: Check) -> CheckResult:
        result = self._run_one(item)
        return _apply_expected(result, self.expected)

    def _purges(self) -> bool:
        return not self.config.keep and "sharing" in self.advertised()

    def _purge(self, session_id: str, creator: str | None, clients: list[ApiClient] | None = None) -> int | None:
        """One purge as the session's creator: its status, None when the target cannot be reached."""
        clients = clients or self.clients
        client = next((c for c in clients if c.principal == creator), clients[0])
        try:
            answer = client.post(f"/sessions/{quote(session_id, safe='')}/purge", validate_response=False)
        except TargetUnreachable:
            return None
        return answer.status

    def purge_soon(self, pairs: list[tuple[str, str | None]]) -> None:
        """Purge a finished check's sessions in the background while the next checks run, through
        clients of their own, so that no purge appears among a running check's exchanges."""
        if not pairs or not self._purges():
            return
        with self._early_lock:
            if self._early is None:
                clients = [ApiClient(self.config.target, c.token, c.principal, Recorder(), self.config.timeout) for c in self.clients]
                self._early = EarlyPurges(self.created, lambda sid, who: self._purge(sid, who, clients), clients)
            self._early.submit(pairs)

    def cleanup(self) -> Cleanup:
        """Purge what the run created, as its creator, when the target offers purge (`sharing`):
        after the early purges end, whatever they did not remove."""
        self._end_early_purges()
        if not self._purges():
            return self.created.finish(self.config.keep)
        return self.created.finish(False, self._purge, workers=min(8, self.config.concurrency))

    def _end_early_purges(self) -> None:
        with self._early_lock:
            early, self._early = self._early, None
        if early is not None:
            early.end()

    def close(self) -> None:
        self._end_early_purges()
        for client in [c for group in self.replicas for c in group] + [self.anonymous]:
            client.close()

    # ------------------------------------------------------------------------------ one check
    def _run_one(self, item: Check) -> CheckResult:
        scope = self.scope
        missing = [need for need in item.needs if not self._offered(item, need)]
        subjects = [need for need in missing if not self._evidence_only(item, need)]
        if subjects:
            return self._cannot_run(item, subjects[0], scope)
        if missing:  # only what would show the evidence is missing: the rules apply, unverified
            shown_by = [" or ".join(repr(name) for name in ways(item, need, self.catalogue)) for need in missing]
            reason = (
                f"{', '.join(item.requirements)} {'is' if len(item.requirements) == 1 else 'are'} verifiable only with "
                f"{' and '.join(shown_by)} (requirements.yaml `verifiable_with`), which the target does not advertise"
            )
            return check_result(item, self.catalogue, Outcome.NOT_VERIFIED, "", reason=reason)
        seed = check_seed(self.config.seed, item.name)
        self.recorder.clear()
        self.generated = []
        context = CheckContext(self.config, self.discover(), self.replicas, self.anonymous, seed)
        started = time.perf_counter()
        extra: dict[str, Any] = {"seed": seed}
        try:
            with _capture_generated(self.generated, self.variables):
                item.func(context)
        except CheckFailed as failure:
            stray = undeclared(item, failure)
            if stray:  # the check cited a rule it does not verify: the suite's defect, not the target's
                message = (
                    f"suite defect: check {item.name} failed citing {', '.join(stray)}, which it does not declare: "
                    f"{scrub(failure.message, self.variables)}"
                )
                result = check_result(item, self.catalogue, Outcome.ERROR, message, **extra)
                result.exchange = failure.exchange or self.recorder.last
                return self._finish(result, context, started)
            violated = failure.requirements or list(item.requirements)
            if failure.also_check:
                violated = list(dict.fromkeys([*violated, *item.requirements]))
            exchanges, failing = self._sequence(failure.exchange)
            message = scrub(failure.message, self.variables)
            if failing is not None and failing in self.generated:
                message = _unfilter(message, failing, self.variables)
            result = check_result(item, self.catalogue, Outcome.FAIL, f"{message} (seed {seed})", **extra)
            result.failed_requirements = violated
            levels = [self.catalogue[r]["level"] for r in violated if r in self.catalogue]
            result.level = max(levels, key=LEVEL_RANK.__getitem__) if levels else result.level
            result.exchange = failing
            if exchanges:
                title = f"Replays check {item.name} (seed {seed}) against {self.config.target}."
                result.reproducer = to_script(exchanges, self.variables, title, failing, self.config.id_prefix)
        except NotVerified as unverified:  # the rule applies; its evidence could not be observed
            reason = scrub(str(unverified), self.variables)
            result = check_result(item, self.catalogue, Outcome.NOT_VERIFIED, "", reason=reason, **extra)
        except Unsupported as skip:
            capability = _NOT_ADVERTISED.search(str(skip))
            if capability:
                result = self._cannot_run(item, capability.group(1), scope, **extra)
            else:
                reason = f"not verifiable in this run: {skip}"
                result = check_result(item, self.catalogue, Outcome.SKIPPED, "", reason=reason, **extra)
        except TargetUnreachable as exc:
            result = check_result(item, self.catalogue, Outcome.ERROR, f"target unreachable: {exc}", **extra)
        except Exception as exc:  # the suite itself broke
            tail = "".join(traceback.format_exception(exc)[-3:]).strip()
            message = scrub(f"{exc.__class__.__name__}: {exc}\n{tail}", self.variables)
            result = check_result(item, self.catalogue, Outcome.ERROR, message, **extra)
            result.exchange = self.recorder.last
        else:
            result = check_result(item, self.catalogue, Outcome.PASS, "", **extra)
        finally:
            self.created.scan([*self.recorder.exchanges, *self.generated])
        return self._finish(result, context, started)

    @staticmethod
    def _finish(result: CheckResult, context: CheckContext, started: float) -> CheckResult:
        result.details = dict(context.details)
        result.duration_ms = round((time.perf_counter() - started) * 1000, 1)
        return result

    def _offered(self, item: Check, need: str) -> bool:
        return offered(item, need, self.advertised(), self.catalogue)

    def _evidence_only(self, item: Check, capability: str) -> bool:
        """Whether a capability the check needs only shows the evidence of its rules (every rule names
        it in `verifiable_with`) rather than bringing what they govern."""
        return bool(item.requirements) and all(capability in verifiable_with(self.catalogue.get(req, {})) for req in item.requirements)

    def _cannot_run(self, item: Check, capability: str, scope: Scope, **extra: Any) -> CheckResult:
        """A check whose capability the target lacks: a failure within the claim, else out of scope."""
        in_claim = [r for r in item.requirements if scope.in_profile(r)]
        instead, primary = scope.stand_in(capability, self.advertised()), scope.stands_in(capability)
        if in_claim and (instead or primary):  # the profile takes either: rules conditional on this one do not bind
            why = (
                f"profile '{scope.claim.profile}' accepts '{instead}' in its place, which the target advertises" if instead
                else f"in profile '{scope.claim.profile}' it stands in for '{primary}', which the target lacks too (the verdict names it)"
            )
            binds = "binds" if len(item.requirements) == 1 else "bind"
            reason = (
                f"target lacks '{capability}'; {why}: {', '.join(item.requirements)} {binds} only servers that advertise '{capability}'"
            )
            return check_result(item, self.catalogue, Outcome.OUT_OF_SCOPE, "", reason=reason, **extra)
        if in_claim:
            profile = scope.requiring_profile(capability)
            why = f"which profile '{profile}' requires" if profile else f"which this check needs for {', '.join(in_claim)}"
            result = check_result(item, self.catalogue, Outcome.FAIL, f"not testable: target lacks '{capability}', {why}", **extra)
            result.failed_requirements = in_claim
            result.untestable = True
            return result
        reason = (
            f"target lacks '{capability}'; {', '.join(item.requirements)} "
            f"{'is' if len(item.requirements) == 1 else 'are'} outside the claimed {scope.claim}"
        )
        return check_result(item, self.catalogue, Outcome.OUT_OF_SCOPE, "", reason=reason, **extra)

    def _sequence(self, failing: Exchange | None) -> tuple[list[Exchange], Exchange | None]:
        """The requests that led to a failure, set-up included, and the failing one.

        The suite's own requests are all recorded: they are replayed up to the failing exchange
        (or all of them when the failure names none). Requests generated by Schemathesis are not
        set-up for one another: only the one that failed is replayed.
        """
        own = list(self.recorder.exchanges)
        if failing is not None:
            for position, exchange in enumerate(own):
                if exchange is failing:
                    return own[: position + 1], failing
            return own + [failing], failing
        if own:
            return own, own[-1]
        if self.generated:
            return [self.generated[-1]], self.generated[-1]
        return [], None


def ways(item: Check, need: str, catalogue: dict[str, dict[str, Any]]) -> list[str]:
    """`need` and the capabilities every rule of the check accepts in its place: those named with
    it in each rule's `capability` list, or in each rule's `verifiable_with` list."""
    found_in_all: set[str] | None = None
    for req in item.requirements:
        entry = catalogue.get(req, {})
        lists = [names for names in (spec.requirement_capabilities(entry), verifiable_with(entry)) if need in names]
        found = {name for names in lists for name in names}
        found_in_all = found if found_in_all is None else found_in_all & found
    return [need, *sorted((found_in_all or set()) - {need})]


def offered(item: Check, need: str, advertised: Iterable[str], catalogue: dict[str, dict[str, Any]]) -> bool:
    """Whether the target advertises `need`, or a capability every rule of the check accepts in its
    place (round trips: the header's `diagnostics.query-count` or the spans' `diagnostics.trace-context`);
    the runner and preflight's role count judge a check's `needs` alike."""
    held = set(advertised)
    return any(name in held for name in ways(item, need, catalogue))


def verifiable_with(requirement: dict[str, Any]) -> list[str]:
    """The capabilities whose evidence verifies a requirement (`verifiable_with`: a name or a list)."""
    value = requirement.get("verifiable_with") or []
    return [value] if isinstance(value, str) else list(value)


def _discover(client: ApiClient) -> dict[str, Any]:
    """The capability document, unvalidated: `capabilities.discovery_document` judges its shape."""
    response = client.get("/capabilities", validate_response=False)
    if response.status != 200:
        raise TargetUnreachable(f"GET /capabilities answered {response.status}")
    try:
        document = response.json()
    except ValueError as exc:
        raise TargetUnreachable("GET /capabilities did not answer JSON") from exc
    if not isinstance(document, dict):
        raise TargetUnreachable("GET /capabilities did not answer a JSON object")
    return with_defaults(document)


def with_defaults(document: dict[str, Any]) -> dict[str, Any]:
    """The capability document with the members checks read, even from a target that omits them."""
    document = dict(document)
    document.setdefault("capabilities", [])
    document.setdefault("limits", {})
    document.setdefault("diagnostics", {"query_count": False})
    return document


@contextmanager
def _capture_generated(sink: list[Exchange], variables: dict[str, str]) -> Iterator[None]:
    """Record the requests Schemathesis sends while a check runs, through its documented
    `after_call` hook, so fuzz failures get reproducers like every other check."""
    try:
        from schemathesis.hooks import GLOBAL_HOOK_DISPATCHER
    except ImportError:  # the fuzz layer is not installed: nothing to capture
        yield
        return
    lock = threading.Lock()

    def after_call(context: Any, case: Any, response: Any) -> None:
        try:
            exchange = exchange_from_schemathesis(response, variables)
        except Exception:  # an odd response must never break the check that sent it
            return
        with lock:
            sink.append(exchange)

    GLOBAL_HOOK_DISPATCHER.register_hook_with_name(after_call, "after_call")
    try:
        yield
    finally:
        GLOBAL_HOOK_DISPATCHER.unregister(after_call)


def _unfilter(message: str, failing: Exchange, variables: dict[str, str]) -> str:
    """Schemathesis prints `Authorization: [Filtered]` in its curl lines; name the token variable."""
    sent = failing.request_headers.get("Authorization") or failing.request_headers.get("authorization") or ""
    for token, variable in variables.items():
        if sent == f"Bearer {token}":
            message = message.replace("'Authorization: [Filtered]'", f'"Authorization: Bearer ${variable}"')
            return message.replace("Authorization: [Filtered]", f"Authorization: Bearer ${variable}")
    return message


def check_result(item: Check, catalogue: dict[str, dict[str, Any]], outcome: Outcome, message: str, **extra: Any) -> CheckResult:
    """A check's result at the level of its strongest requirement."""
    levels = [catalogue[r]["level"] for r in item.requirements if r in catalogue]
    level = max(levels, key=LEVEL_RANK.__getitem__) if levels else "MUST"
    return CheckResult(
        name=item.name,
        title=item.title,
        chapter=item.chapter,
        requirements=list(item.requirements),
        outcome=outcome,
        message=message,
        level=level,
        **extra,
    )


def _apply_expected(result: CheckResult, expected: dict[str, ExpectedFailure]) -> CheckResult:
    if not expected:
        return result
    if result.outcome is Outcome.FAIL:
        for key in [result.name, *result.failed_requirements]:
            if key in expected:
                result.outcome = Outcome.XFAIL
                result.reason, result.link = expected[key].reason, expected[key].link
                return result
    if result.outcome is Outcome.PASS and result.name in expected:
        result.outcome = Outcome.XPASS
        result.reason, result.link = expected[result.name].reason, expected[result.name].link
    return result
