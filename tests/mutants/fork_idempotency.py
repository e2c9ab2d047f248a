"""Mutants: fork idempotency keys (reuse with another request, syntax, scope, lifetime)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Index, select
from starlette.requests import Request
from starlette.types import ASGIApp

from reference_impl.http.app import build_app
from reference_impl.services import build_services
from reference_impl.http.requests import InvalidIdempotencyKey, idempotency_key
from reference_impl.services.fork import ForkOutcome, ForkService, fingerprint_of
from reference_impl.settings import Settings
from reference_impl.store import Transaction
from reference_impl.store import tables as t
from reference_impl.store.rows import IdempotencyRow
from tests.mutants import app_with_service, app_with_transaction, mutant, open_store, reference_app
from tests.mutants.sessions import rewrite_requests


def _with_header_key(scope: dict[str, Any], value: bytes | None) -> dict[str, Any]:
    headers = [(k, v) for k, v in scope["headers"] if k.lower() != b"idempotency-key"]
    if value is not None:
        headers.append((b"idempotency-key", value))
    return {**scope, "headers": headers}


# ---------------------------------------------------------------- FORK-IDEMPOTENT-MISMATCH-001
@mutant("FORK-IDEMPOTENT-MISMATCH-001", select=("fork.key_reused_differently",), description="The request fingerprint leaves out the header, so a key reused with another header replays")
def fingerprint_ignores_header(settings: Settings) -> ASGIApp:
    class Service(ForkService):
        def fork(self, principal: str, source_id: str, body: dict[str, Any], idempotency_key: str | None) -> ForkOutcome:
            fingerprint = fingerprint_of(source_id, {k: v for k, v in body.items() if k != "header"})
            with self.store.write() as tx:
                return self._fork_in(tx, principal, source_id, body, idempotency_key, fingerprint)

    return app_with_service(settings, Service)


@mutant("FORK-IDEMPOTENT-MISMATCH-001", select=("fork.key_reused_differently",), description="A stored key replays its first answer whatever the new request is")
def reused_key_replays_first_answer(settings: Settings) -> ASGIApp:
    class Service(ForkService):
        def _fork_in(self, tx: Transaction, principal: str, source_id: str, body: dict[str, Any], key: str | None, fingerprint: str) -> ForkOutcome:
            stored = tx.idempotency(principal, key) if key is not None else None
            return super()._fork_in(tx, principal, source_id, body, key, stored.fingerprint if stored else fingerprint)

    return app_with_service(settings, Service)


@mutant("FORK-IDEMPOTENT-MISMATCH-001", select=("fork.key_reused_differently",), description="A key reused with a different request is ignored and a new child is created")
def reused_key_forks_afresh(settings: Settings) -> ASGIApp:
    class Service(ForkService):
        def _fork_in(self, tx: Transaction, principal: str, source_id: str, body: dict[str, Any], key: str | None, fingerprint: str) -> ForkOutcome:
            stored = tx.idempotency(principal, key) if key is not None else None
            if stored is not None and stored.fingerprint != fingerprint:
                key = None
            return super()._fork_in(tx, principal, source_id, body, key, fingerprint)

    return app_with_service(settings, Service)


# ---------------------------------------------------------------- FORK-IDEMPOTENT-KEY-001
@mutant("FORK-IDEMPOTENT-KEY-001", select=("fork.key_syntax",), description="A malformed Idempotency-Key is ignored instead of refused")
def malformed_key_ignored(settings: Settings) -> ASGIApp:
    def drop_malformed_key(scope: dict[str, Any], body: bytes) -> tuple[dict[str, Any], bytes]:
        try:
            idempotency_key(Request(scope))
        except InvalidIdempotencyKey:
            return _with_header_key(scope, None), body
        return scope, body

    return rewrite_requests(reference_app(settings), drop_malformed_key)


@mutant("FORK-IDEMPOTENT-KEY-001", select=("fork.key_syntax",), description="An Idempotency-Key longer than 255 characters is truncated instead of refused")
def long_key_truncated(settings: Settings) -> ASGIApp:
    def truncate_key(scope: dict[str, Any], body: bytes) -> tuple[dict[str, Any], bytes]:
        raw = dict(scope["headers"]).get(b"idempotency-key")
        if raw is None:
            return scope, body
        quoted = raw.startswith(b'"') and raw.endswith(b'"') and len(raw) >= 2
        value = raw[1:-1] if quoted else raw
        if len(value) > 255:
            value = value[:255]
            return _with_header_key(scope, b'"' + value + b'"' if quoted else value), body
        return scope, body

    return rewrite_requests(reference_app(settings), truncate_key)


@mutant("FORK-IDEMPOTENT-KEY-001", select=("fork.key_syntax",), description="Idempotency keys longer than 64 characters are refused.")
def idempotency_key_limited_to_64_characters(settings: Settings) -> ASGIApp:
    """Idempotency keys longer than 64 characters are refused although up to 255 are valid."""

    class Service(ForkService):
        def fork(self, principal: str, source_id: str, body: dict[str, Any], idempotency_key: str | None) -> ForkOutcome:
            if idempotency_key is not None and len(idempotency_key) > 64:
                raise InvalidIdempotencyKey("the key must have 1 to 64 characters")
            return super().fork(principal, source_id, body, idempotency_key)

    return app_with_service(settings, Service)


# ---------------------------------------------------------------- FORK-IDEMPOTENT-SCOPE-001
@mutant(
    "FORK-IDEMPOTENT-SCOPE-001",
    "ERR-NO-5XX-001",
    description="Idempotency keys are unique across principals, so another principal's first use of a key fails with a 5xx",
    select=("fork.key_scope",),
)
def idempotency_key_unique_across_principals(settings: Settings) -> ASGIApp:
    store = open_store(settings)
    with store.engine.begin() as conn:
        Index("uq_mutant_idempotency_key", t.idempotency_keys.c.idempotency_key, unique=True).create(conn, checkfirst=True)
    return build_app(build_services(store, settings), settings)


@mutant("FORK-IDEMPOTENT-SCOPE-001", select=("fork.key_scope",), description="Idempotency keys are looked up without the principal, so another principal's key is matched")
def idempotency_keys_shared_across_principals(settings: Settings) -> ASGIApp:
    class Tx(Transaction):
        def idempotency(self, principal: str, key: str) -> IdempotencyRow | None:
            query = select(t.idempotency_keys).where(t.idempotency_keys.c.idempotency_key == key)
            row = self.conn.execute(query).mappings().first()
            return IdempotencyRow(**row) if row else None

    return app_with_transaction(settings, Tx)


@mutant("FORK-IDEMPOTENT-KEY-001", select=("fork.key_syntax",),
        description="A quoted Idempotency-Key keeps its quotes, so `\"k\"` and `k` are different keys")
def quoted_key_keeps_its_quotes(settings: Settings) -> ASGIApp:
    def keep_quotes(scope: dict[str, Any], body: bytes) -> tuple[dict[str, Any], bytes]:
        raw = dict(scope["headers"]).get(b"idempotency-key")
        if raw is not None and raw.startswith(b'"') and raw.endswith(b'"') and len(raw) > 2 and b"\\" not in raw:
            return _with_header_key(scope, b"q" + raw[1:-1] + b"q"), body  # a different, still valid key
        return scope, body

    return rewrite_requests(reference_app(settings), keep_quotes)


# ---------------------------------------------------------------- key lifetime
@mutant("FORK-IDEMPOTENT-001", select=("fork.key_lifetime",),
        description="Idempotency keys are forgotten after half the advertised 2-second lifetime")
def idempotency_keys_expire_early(settings: Settings) -> ASGIApp:
    from dataclasses import replace as replaced
    from datetime import datetime, timedelta

    from reference_impl.store.rows import IdempotencyRow

    class Tx(Transaction):
        def insert_idempotency(self, row: dict[str, Any]) -> None:
            expires = datetime.fromisoformat(row["expires_at"].replace("Z", "+00:00")) - timedelta(seconds=1)
            super().insert_idempotency({**row, "expires_at": expires.isoformat(timespec="microseconds").replace("+00:00", "Z")})

    short = replaced(settings, limits=replaced(settings.limits, idempotency_key_lifetime_seconds=2))
    return app_with_transaction(short, Tx)
