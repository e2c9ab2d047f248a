"""Deliberately broken variants of the reference server: each must be caught by the suite.

A mutant is a function from `Settings` to an ASGI app. It reuses the reference layers and breaks
one rule, by subclassing a chapter's service (or `Access`) or the store transaction, or by wrapping the HTTP app. It
declares the requirement IDs the suite must then report as failed.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from starlette.types import ASGIApp

from reference_impl.http.app import build_app
from reference_impl.services import build_services, part_name
from reference_impl.settings import Settings
from reference_impl.store import Store, Transaction
from reference_impl.store.engine import make_engine, migrate

MUTANT_MODULES = (
    "core", "sessions", "fork_cuts", "fork_targets", "fork_idempotency", "reads", "errors", "leases", "diagnostics", "authorization", "context", "suspend", "rollout",
    "turn_writes", "revert", "legacy_import", "export", "mutations", "listing_order", "three_state",
    "rewind_clear", "attachment_copies", "state_matrix", "access_orders",
    "hidden_sessions", "precedence", "audit_authorization", "audit_states",
)


@dataclass(frozen=True)
class Mutant:
    name: str
    description: str
    catches: tuple[str, ...]  # requirement IDs the suite must report as failed
    select: tuple[str, ...]  # checks to run (name or requirement prefixes); default: `catches`
    build: Callable[[Settings], ASGIApp]


MUTANTS: dict[str, Mutant] = {}


def mutant(
    *catches: str, description: str, select: tuple[str, ...] = ()
) -> Callable[[Callable[[Settings], ASGIApp]], Callable[[Settings], ASGIApp]]:
    def register(build: Callable[[Settings], ASGIApp]) -> Callable[[Settings], ASGIApp]:
        name = build.__name__
        if name in MUTANTS:
            raise ValueError(f"duplicate mutant {name}")
        MUTANTS[name] = Mutant(name, description, tuple(catches), tuple(select) or tuple(catches), build)
        return build

    return register


def all_mutants() -> list[Mutant]:
    for module in MUTANT_MODULES:
        importlib.import_module(f"tests.mutants.{module}")
    return list(MUTANTS.values())


# ---------------------------------------------------------------- building blocks
def open_store(settings: Settings, transaction_class: type[Transaction] = Transaction) -> Store:
    engine = make_engine(settings.database_url)
    migrate(engine)
    return Store(engine, transaction_class=transaction_class)


def app_with_layers(
    settings: Settings, *service_classes: type, transaction_class: type[Transaction] = Transaction
) -> ASGIApp:
    """The reference app with broken service parts (each replaces the part it subclasses: a
    chapter's service or `Access`), broken store transactions, or both."""
    overrides = {part_name(cls): cls for cls in service_classes}
    services = build_services(open_store(settings, transaction_class), settings, overrides)
    return build_app(services, settings)


def app_with_service(settings: Settings, *service_classes: type) -> ASGIApp:
    return app_with_layers(settings, *service_classes)


def app_with_transaction(settings: Settings, transaction_class: type[Transaction]) -> ASGIApp:
    return app_with_layers(settings, transaction_class=transaction_class)


def reference_app(settings: Settings) -> ASGIApp:
    return app_with_layers(settings)


Rewrite = Callable[[dict[str, Any], int, list[tuple[bytes, bytes]], bytes], tuple[int, list[tuple[bytes, bytes]], bytes]]


def rewrite_responses(app: ASGIApp, rewrite: Rewrite) -> ASGIApp:
    """Wrap an app so each buffered response passes through `rewrite(scope, status, headers, body)`."""

    async def wrapped(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        start: dict[str, Any] = {}
        chunks: list[bytes] = []

        async def capture(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))
                if not message.get("more_body"):
                    status, headers, body = rewrite(scope, start["status"], list(start.get("headers", [])), b"".join(chunks))
                    headers = [(k, v) for k, v in headers if k.lower() != b"content-length"]
                    headers.append((b"content-length", str(len(body)).encode()))
                    await send({"type": "http.response.start", "status": status, "headers": headers})
                    await send({"type": "http.response.body", "body": body})

        await app(scope, receive, capture)

    return wrapped
