"""A printed seed replays a run: the generated requests never depend on the target's answers.

Each generating check runs twice with one seed, each time against a fresh reference server; the
requests the server sees (method, path with ids replaced, query parameter names) are the same.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from conformance.config import load
from conformance.embedded import serve_app
from conformance.results import Outcome
from conformance.runner import run
from reference_impl.settings import Settings
from tests.mutants import reference_app
from tests.servers import PROJECTS, TOKENS
# Ids the server chose: session ids (UUIDs), and turn and record ids derived from a session's random
# token and an index (reference_impl/store/ids.py).
SERVER_IDS = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{32}[tr][0-9]+")


def recording(app: Any, seen: list[str]) -> Any:
    async def wrapped(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            query = sorted(part.split(b"=")[0].decode("latin-1") for part in scope["query_string"].split(b"&") if part)
            seen.append(f"{scope['method']} {SERVER_IDS.sub('<id>', scope['path'])} {query}")
        await app(scope, receive, send)

    return wrapped


def requests_of(select: str, seed: int, tmp_path: Any, run_number: int) -> list[str]:
    settings = Settings(database_url=f"sqlite:///{tmp_path / f'replay-{run_number}.db'}", tokens=TOKENS, projects=PROJECTS)
    seen: list[str] = []
    with serve_app(recording(reference_app(settings), seen)) as server:
        config = load(overrides={"target": server.url, "tokens": list(TOKENS), "select": [select], "seed": seed,
                                 "id_prefix": "replay-", "fuzz_examples": 10, "stateful_examples": 5,
                                 "keep": True}, environ={})  # the final purge runs in parallel: not generated
        result = run(config)
    assert [c.outcome for c in result.checks] == [Outcome.PASS], [c.message for c in result.checks]
    return seen


# The quick set replays the valid-request fuzz; the state machine, the negative fuzz and the linked
# sequences draw the most requests: their replay proofs are deep.
@pytest.mark.parametrize("select", [pytest.param("stateful.lineage_state_machine", marks=pytest.mark.deep),
                                    "fuzz.generated_valid_requests",
                                    pytest.param("fuzz.generated_invalid_requests", marks=pytest.mark.deep),
                                    pytest.param("fuzz.generated_stateful_sequences", marks=pytest.mark.deep)])
def test_a_seed_replays_the_same_requests(select: str, tmp_path: Any) -> None:
    first = requests_of(select, 4242, tmp_path, 1)
    second = requests_of(select, 4242, tmp_path, 2)
    assert len(first) > 10
    assert first == second, next((f"request {n}: {a} then {b}" for n, (a, b) in enumerate(zip(first, second)) if a != b),
                                 f"{len(first)} then {len(second)} requests")
