"""Issue 17 item 4 for the fork idempotency and turn-write checks: each check is exactly its rule.

A server the rules permit passes (keys kept past their lifetime; concurrent answers whose
`Idempotency-Replayed` the concurrent rules leave open), and a failure names the rule whose text
is broken (a keyed finish that does not replay is TURN-IDEM-001, a rewind that stored nothing is
REWIND-CREATE-001, neither is REWIND-CLEAR-001).
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from starlette.types import ASGIApp

from conformance.config import load
from conformance.embedded import serve_app
from conformance.results import Outcome, RunResult
from conformance.runner import run
from reference_impl.services.fork import ForkOutcome, ForkService
from reference_impl.settings import Settings
from reference_impl.store import Transaction
from reference_impl.store.rows import IdempotencyRow
from tests.mutants import app_with_layers, reference_app, rewrite_responses
from tests.mutants.sessions import rewrite_requests
from tests.servers import PROJECTS, TOKENS


def _run(build: Any, tmp_path: Any, select: list[str]) -> RunResult:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'audit.db'}", tokens=TOKENS, projects=PROJECTS)
    with serve_app(build(settings)) as server:
        config = load(overrides={"target": server.url, "tokens": list(TOKENS), "seed": 17, "select": select}, environ={})
        return run(config)


def _checks(result: RunResult) -> dict[str, Any]:
    return {c.name: c for c in result.checks}


def _failed(result: RunResult) -> set[str]:
    return {v.id for v in result.requirements if v.outcome is Outcome.FAIL}


class KeysKeptForever(Transaction):
    """Idempotency keys are never forgotten: no rule says a key is freed when its lifetime ends."""

    def idempotency(self, principal: str, key: str) -> IdempotencyRow | None:
        row = super().idempotency(principal, key)
        return None if row is None else replace(row, expires_at="9999-12-31T23:59:59.999999Z")


def _short_lifetime(settings: Settings) -> Settings:
    return replace(settings, limits=replace(settings.limits, idempotency_key_lifetime_seconds=2))


def test_a_key_kept_past_its_lifetime_passes_key_lifetime(tmp_path: Any) -> None:
    result = _run(lambda s: app_with_layers(_short_lifetime(s), transaction_class=KeysKeptForever), tmp_path, ["fork.key_lifetime"])
    check = _checks(result)["fork.key_lifetime"]
    assert check.outcome in (Outcome.PASS, Outcome.NOT_VERIFIED), (check.outcome, check.message)


def test_a_different_request_answered_with_the_first_child_past_the_lifetime_fails_mismatch(tmp_path: Any) -> None:
    class ReplaysAnything(ForkService):
        def _fork_in(self, tx: Any, principal: str, source_id: str, body: dict[str, Any], key: str | None, fingerprint: str) -> ForkOutcome:
            stored = tx.idempotency(principal, key) if key is not None else None
            return super()._fork_in(tx, principal, source_id, body, key, stored.fingerprint if stored else fingerprint)

    result = _run(lambda s: app_with_layers(_short_lifetime(s), ReplaysAnything, transaction_class=KeysKeptForever), tmp_path,
                  ["fork.key_lifetime"])
    check = _checks(result)["fork.key_lifetime"]
    assert check.outcome in (Outcome.FAIL, Outcome.NOT_VERIFIED), (check.outcome, check.message)
    if check.outcome is Outcome.FAIL:
        assert _failed(result) == {"FORK-IDEMPOTENT-MISMATCH-001"}, (_failed(result), check.message)


def _replay_header_false(app: ASGIApp, replays: list[str]) -> ASGIApp:
    """Every answer says `Idempotency-Replayed: false`, replays included (noted in `replays`)."""

    def rewrite(scope: dict[str, Any], status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        kept = [(k, v) for k, v in headers if k.lower() != b"idempotency-replayed"]
        if (b"idempotency-replayed", b"true") in headers:
            replays.append(scope["path"])
        return status, kept + [(b"idempotency-replayed", b"false")], body

    return rewrite_responses(app, rewrite)


def test_the_replay_header_is_not_judged_by_the_concurrent_rules(tmp_path: Any) -> None:
    """FORK-IDEMPOTENT-CONCURRENT-001 and TURN-IDEM-CONCURRENT-001 fix the statuses and bodies of
    concurrent answers, not which of them says `Idempotency-Replayed: true`."""
    select = ["fork.concurrent_identical_forks", "turn_writes.concurrent_identical_turn_writes"]
    replays: list[str] = []
    result = _run(lambda s: _replay_header_false(reference_app(s), replays), tmp_path, select)
    checks = _checks(result)
    assert all(checks[name].outcome is Outcome.PASS for name in select), [(n, checks[n].outcome, checks[n].message) for n in select]
    for kind in ("/fork", "/turns", "/records"):  # the races did answer replays, so the test proves something
        assert any(path.endswith(kind) for path in replays), (kind, replays[:5])


def test_a_keyed_finish_that_does_not_replay_fails_turn_idem_not_rewind_clear(tmp_path: Any) -> None:
    def drop_finish_keys(scope: dict[str, Any], body: bytes) -> tuple[dict[str, Any], bytes]:
        if scope["path"].endswith("/finish"):
            scope["headers"] = [(k, v) for k, v in scope["headers"] if k.lower() != b"idempotency-key"]
        return scope, body

    result = _run(lambda s: rewrite_requests(reference_app(s), drop_finish_keys), tmp_path,
                  ["turn_writes.rewind_cleared_by_a_keyed_finish"])
    check = _checks(result)["turn_writes.rewind_cleared_by_a_keyed_finish"]
    assert check.outcome is Outcome.FAIL, (check.outcome, check.message)
    assert _failed(result) == {"TURN-IDEM-001"}, (_failed(result), check.message)


def test_a_rewind_that_stores_no_action_fails_rewind_create_not_rewind_clear(tmp_path: Any) -> None:
    def drop_rewind(scope: dict[str, Any], body: bytes) -> tuple[dict[str, Any], bytes]:
        if scope["path"].endswith("/fork") and body:
            request = json.loads(body)
            request.pop("rewind", None)
            body = json.dumps(request).encode()
        return scope, body

    select = ["turn_writes.rewind_cleared_by_a_keyed_finish", "turn_writes.rewind_cleared_by_a_one_request_write"]
    result = _run(lambda s: rewrite_requests(reference_app(s), drop_rewind), tmp_path, select)
    checks = _checks(result)
    assert all(checks[name].outcome is Outcome.FAIL for name in select), [(n, checks[n].outcome, checks[n].message) for n in select]
    assert _failed(result) == {"REWIND-CREATE-001"}, _failed(result)


def test_two_spellings_of_one_key_not_replayed_fail_key_syntax_only(tmp_path: Any) -> None:
    """`"k"` and `k` are one key (FORK-IDEMPOTENT-KEY-001's text); a server treating them as two
    created nothing it should not have, so FORK-ATOMIC-001, which the check also declares, holds."""
    from tests.mutants.fork_idempotency import quoted_key_keeps_its_quotes

    result = _run(quoted_key_keeps_its_quotes, tmp_path, ["fork.key_syntax"])
    check = _checks(result)["fork.key_syntax"]
    assert check.outcome is Outcome.FAIL and check.failed_requirements == ["FORK-IDEMPOTENT-KEY-001"], (
        check.failed_requirements, check.message[:300])
