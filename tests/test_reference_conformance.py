"""The reference server passes the whole suite, run after run, with every check reporting."""

from __future__ import annotations

import pytest

from conformance.config import load
from conformance.embedded import reference_server
from conformance.registry import all_checks
from conformance.results import Outcome, Verdict
from conformance.runner import run


@pytest.mark.parametrize("seed", [1, 20261202])
def test_reference_server_is_conformant(seed: int) -> None:
    with reference_server() as server:
        result = run(load(overrides={"target": server.url, "tokens": list(server.tokens), "seed": seed}, environ={}))
    problems = [f"{c.name}: {c.outcome.value}: {c.message}" for c in result.checks if c.outcome is not Outcome.PASS]
    assert not problems, "\n".join(problems)
    assert result.verdict is Verdict.CONFORMANT and result.exit_code == 0
    assert len(result.checks) == len(all_checks())
    assert all(v.outcome is Outcome.PASS for v in result.requirements)
