"""Every answer of an embedded run of the whole suite against the reference server, recorded.

The suite's own requests go through `conformance.client.Recorder`; the requests Schemathesis
generates land in each check's `Target.generated`. Both are collected here, across checks (the
runner clears its recorder per check), so tests can compare what the reference answers with what
`spec/openapi.yaml` declares. Only the reference server in its normal configuration is run: mutants,
fault servers and the legacy server answer wrongly on purpose.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from conformance import client as client_module
from conformance import target as target_module
from conformance.config import load
from conformance.contract import find_operation
from conformance.embedded import reference_server
from conformance.results import Exchange
from conformance.runner import run


@dataclass(frozen=True)
class Answer:
    operation_id: str
    method: str
    template: str
    status: int
    problem_type: str | None
    exchange: Exchange


def problem_type(exchange: Exchange) -> str | None:
    media = (exchange.response_headers.get("content-type") or "").split(";")[0].strip()
    if media != "application/problem+json":
        return None
    try:
        body = json.loads(exchange.response_body)
    except ValueError:
        return None
    return body.get("type") if isinstance(body, dict) else None


@contextmanager
def _collecting(sink: list[Exchange]) -> Iterator[None]:
    original_add = client_module.Recorder.add
    original_run_one = target_module.Target._run_one

    def add(self: Any, exchange: Exchange) -> None:
        sink.append(exchange)
        original_add(self, exchange)

    def run_one(self: Any, item: Any) -> Any:
        try:
            return original_run_one(self, item)
        finally:
            sink.extend(self.generated)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(client_module.Recorder, "add", add)
        patch.setattr(target_module.Target, "_run_one", run_one)
        yield


def record_run(seed: int = 20261203, **overrides: Any) -> tuple[Any, list[Exchange]]:
    """Run the suite (`check --embedded`, quick depth) and return its result and every exchange."""
    exchanges: list[Exchange] = []
    with reference_server() as server, _collecting(exchanges):
        result = run(load(overrides={"target": server.url, "tokens": list(server.tokens), "seed": seed, **overrides}, environ={}))
        base = server.url
    return result, [e for e in exchanges if e.url.startswith(base)]


def answers(exchanges: list[Exchange]) -> list[Answer]:
    """The exchanges that reached a documented operation, with the operation they reached."""
    found = []
    for exchange in exchanges:
        path = httpx.URL(exchange.url).path
        operation = find_operation(exchange.method, path)
        if operation is None:
            continue
        found.append(
            Answer(operation.operation_id, exchange.method, operation.template, exchange.status, problem_type(exchange), exchange)
        )
    return found
