"""Checks never crash: against servers that answer nonsense, every check fails with a message.

The `error` outcome is kept for a broken suite; a surprising answer (a missing field, an
unexpected status on a set-up step, a body that is not JSON) is the target's failure.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from conformance.config import load
from conformance.embedded import serve_app
from conformance.results import Outcome
from conformance.runner import run
from reference_impl.settings import Settings
from tests.mutants import reference_app, rewrite_responses

TOKENS = ["hostile-alice", "hostile-bob"]
FULL_DOCUMENT = {
    "spec_version": "1.1.0",
    "capabilities": ["fork", "effective-transcript", "lineage", "idempotency", "writer-lease",
                     "diagnostics.query-count", "diagnostics.write-count"],
    "limits": {"max_lineage_depth": 5, "max_page_size": 10, "default_page_size": 10, "max_record_bytes": 1024,
               "max_records_per_append": 3, "max_request_bytes": 16384, "idempotency_key_lifetime_seconds": 2,
               "max_lease_seconds": 2},
    "diagnostics": {"query_count": True, "query_count_header": "Storage-Round-Trips",
                    "write_count": True, "write_count_header": "Storage-Items-Written"},
}
Answer = Callable[[str, str], tuple[int, str, bytes]]


def hostile_app(answer: Answer) -> Any:
    """An ASGI app that reads each request and answers `answer(method, path)`."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        more = True
        while more:
            message = await receive()
            more = message.get("more_body", False)
        status, content_type, body = answer(scope["method"], scope["path"])
        headers = [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode())]
        headers += [(b"storage-round-trips", b"1"), (b"storage-items-written", b"0")]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return app


def empty_everywhere(method: str, path: str) -> tuple[int, str, bytes]:
    """200 `{}` to everything, the capability document included."""
    return 200, "application/json", b"{}"


def capable_but_empty(method: str, path: str) -> tuple[int, str, bytes]:
    """A full capability document, then 201 `{}` to every POST and 200 `{}` to everything else."""
    if path == "/capabilities":
        return 200, "application/json", json.dumps(FULL_DOCUMENT).encode()
    return (201 if method == "POST" else 200), "application/json", b"{}"


def conflict_on_every_post(method: str, path: str) -> tuple[int, str, bytes]:
    """A full capability document, 409 `writer-conflict` to every POST, 404 to everything else."""
    if path == "/capabilities":
        return 200, "application/json", json.dumps(FULL_DOCUMENT).encode()
    kind, status = ("writer-conflict", 409) if method == "POST" else ("not-found", 404)
    problem = {"type": f"urn:session-lineage:problem:{kind}", "title": kind, "status": status}
    return status, "application/problem+json", json.dumps(problem).encode()


def text_everywhere(method: str, path: str) -> tuple[int, str, bytes]:
    """A full capability document, then 200 text/plain that is not JSON."""
    if path == "/capabilities":
        return 200, "application/json", json.dumps(FULL_DOCUMENT).encode()
    return 200, "text/plain", b"hello"


def problem(kind: str, status: int) -> bytes:
    return json.dumps({"type": f"urn:session-lineage:problem:{kind}", "title": kind, "status": status}).encode()


def reference_answering(kind: str, status: int, when: Callable[[str, str], bool]) -> Callable[[Settings], Any]:
    """The reference server, except that requests matching `when` get a problem answer instead."""

    def build(settings: Settings) -> Any:
        def rewrite(scope: dict[str, Any], old: int, headers: Any, body: bytes) -> Any:
            if not when(scope["method"], scope["path"]):
                return old, headers, body
            kept = [(k, v) for k, v in headers if k.lower() != b"content-type"]
            return status, kept + [(b"content-type", b"application/problem+json")], problem(kind, status)

        return rewrite_responses(reference_app(settings), rewrite)

    return build


# The references that refuse forks, leases or reads run nearly every check to its first failure:
# the deep set runs them.
DEEP_HOSTILE = {"every_fork_refused", "leases_always_refused", "reads_not_found", "every_post_conflicts"}
HOSTILE_REFERENCES = {
    # A lease is never granted: set-up steps that need one must fail, not crash (KeyError on lease_id).
    "leases_always_refused": reference_answering("writer-conflict", 409, lambda m, p: m == "POST" and p.endswith("/lease")),
    "every_post_conflicts": reference_answering("session-exists", 409, lambda m, p: m == "POST"),
    "every_fork_refused": reference_answering("depth-exceeded", 422, lambda m, p: m == "POST" and p.endswith("/fork")),
    "reads_not_found": reference_answering("not-found", 404, lambda m, p: m == "GET" and p != "/capabilities"),
}


@pytest.mark.parametrize("name", [pytest.param(name, marks=pytest.mark.deep) if name in DEEP_HOSTILE else name
                                  for name in sorted(HOSTILE_REFERENCES)])
def test_no_check_crashes_on_a_reference_that_refuses(name: str, tmp_path: Any) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'hostile.db'}", tokens=dict(zip(TOKENS, ("alice", "bob"))))
    assert_fails_without_crashing(HOSTILE_REFERENCES[name](settings))


@pytest.mark.parametrize("answer", [empty_everywhere, capable_but_empty, conflict_on_every_post, text_everywhere],
                         ids=lambda f: f.__name__)
def test_no_check_crashes_on_a_hostile_server(answer: Answer) -> None:
    assert_fails_without_crashing(hostile_app(answer))


def assert_fails_without_crashing(app: Any) -> None:
    with serve_app(app) as server:
        config = load(overrides={"target": server.url, "tokens": TOKENS, "seed": 7, "fuzz_examples": 5,
                                 "stateful_examples": 3, "concurrency": 4}, environ={})
        result = run(config)
    crashed = [f"{c.name}: {c.message[:300]}" for c in result.checks if c.outcome is Outcome.ERROR]
    assert not crashed, "\n".join(crashed)
    failed = [c for c in result.checks if c.outcome is Outcome.FAIL]
    assert failed and all(c.message for c in failed)
    assert result.exit_code == 1
