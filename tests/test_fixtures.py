"""The lineage test vectors: valid against their schema, plainly worded, and agreeing with the model.

The vectors are hand-written and LineageModel is written independently of them, so replaying every
case on the model checks both: a wrong expectation or a wrong model rule fails here.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

import fixtures
import spec
from conformance import registry
from conformance.config import load as load_config
from conformance.embedded import reference_server
from conformance.model import LineageModel
from conformance.results import Outcome
from conformance.runner import run

FIXTURES_DIR = Path(fixtures.__file__).resolve().parent
SCHEMA_PATH = FIXTURES_DIR / "lineage.schema.json"
VECTOR_FILES = sorted((FIXTURES_DIR / "lineage").glob("*.json"))
EXPECTED_FILES = {"cuts", "chains", "snapshots", "errors"}
MIN_CASES = 30
BANNED_WORDING = re.compile(r"\bshould\b|\btest that\b", re.IGNORECASE)


def load(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def all_cases() -> list[tuple[str, dict[str, Any]]]:
    return [(path.stem, case) for path in VECTOR_FILES for case in load(path)]


CASES = all_cases()
CASE_IDS = [f"{stem}:{case['description'][:60]}" for stem, case in CASES]


# ---------------------------------------------------------------- shape
def test_schema_passes_its_metaschema() -> None:
    schema = load(SCHEMA_PATH)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(schema)


def test_every_vector_file_is_present_and_there_are_enough_cases() -> None:
    assert {path.stem for path in VECTOR_FILES} == EXPECTED_FILES
    assert len(CASES) >= MIN_CASES


@pytest.mark.parametrize("path", VECTOR_FILES, ids=lambda p: p.name)
def test_vector_file_matches_the_schema(path: Path) -> None:
    validator = Draft202012Validator(load(SCHEMA_PATH))
    errors = [f"{list(error.absolute_path)}: {error.message}" for error in validator.iter_errors(load(path))]
    assert not errors, "\n".join(errors)


def test_descriptions_are_unique_and_plainly_worded() -> None:
    counts = Counter(case["description"] for _, case in CASES)
    assert not [d for d, n in counts.items() if n > 1], "duplicate descriptions"
    worded = [case["description"] for _, case in CASES if BANNED_WORDING.search(case["description"])]
    assert not worded, f"descriptions state facts, without 'should' or 'test that': {worded}"


def test_requirement_ids_exist_in_the_catalogue() -> None:
    known = {req["id"] for req in spec.requirements()}
    unknown = {req for _, case in CASES for req in case["requirements"]} - known
    assert not unknown, f"unknown requirement IDs: {sorted(unknown)}"


# ---------------------------------------------------------------- well-formed sequences
def check_sequence(case: dict[str, Any]) -> list[str]:
    """Steps a server must accept as written: names exist when used, one running turn per session."""
    problems: list[str] = []
    created: set[str] = set()
    owner: dict[str, str] = {}  # turn name -> session that started it
    running: dict[str, str | None] = {}
    for n, step in enumerate(case["steps"]):
        op, where = step["op"], f"step {n} ({step['op']})"
        if op == "create":
            if step["session"] in created:
                problems.append(f"{where}: {step['session']} already exists")
            created.add(step["session"])
            running[step["session"]] = None
        elif op == "turn":
            if step["session"] not in created or running.get(step["session"]) or step["turn"] in owner:
                problems.append(f"{where}: unknown session, a turn already running, or a reused turn name")
            owner[step["turn"]] = step["session"]
            running[step["session"]] = step["turn"] if step["status"] == "running" else None
        elif op in ("append", "finish"):
            if running.get(step["session"]) != step["turn"] or owner.get(step["turn"]) != step["session"]:
                problems.append(f"{where}: {step['turn']} is not a running turn of {step['session']}")
            if op == "finish":
                running[step["session"]] = None
        elif "expect_error" not in step:
            if step["source"] not in created or step["child"] in created:
                problems.append(f"{where}: the source must exist and the child must be new")
            created.add(step["child"])
            running[step["child"]] = None
    expect = case["expect"]
    transcripts = {name for name in expect if name != "lineage"}
    if transcripts != created:
        problems.append(f"expect lists {sorted(transcripts)}, the case creates {sorted(created)}")
    owners = {pair[0] for name in transcripts for pair in expect[name]}
    if not owners <= created or not set(expect.get("lineage", {})) <= created:
        problems.append("expect names a session the case never creates")
    return problems


@pytest.mark.parametrize(("stem", "case"), CASES, ids=CASE_IDS)
def test_case_is_a_well_formed_sequence(stem: str, case: dict[str, Any]) -> None:
    assert check_sequence(case) == []


# ---------------------------------------------------------------- replay on the model
class ModelReplay:
    """Runs a case's steps on LineageModel; records are (session name, index) like the vectors."""

    def __init__(self) -> None:
        self.model = LineageModel()
        self.written: Counter[str] = Counter()

    def step(self, step: dict[str, Any]) -> str | None:
        """Apply one step; for a fork, the problem kind the model answers (None when it succeeds)."""
        op = step["op"]
        if op == "create":
            self.model.create(step["session"])
        elif op == "turn":
            self.model.start_turn(step["session"], step["turn"], step["role"])
            self.append(step["session"], step["turn"], step["records"])
            if step["status"] != "running":
                self.model.finish(step["session"], step["turn"], step["status"])
        elif op == "append":
            self.append(step["session"], step["turn"], step["records"])
        elif op == "finish":
            self.model.finish(step["session"], step["turn"], step["status"])
        else:
            return self.fork(step)
        return None

    def append(self, session: str, turn: str, count: int) -> None:
        start = self.written[session]
        self.model.append(session, turn, [{"session_id": session, "index": start + k} for k in range(count)])
        self.written[session] += count

    def fork(self, step: dict[str, Any]) -> str | None:
        if step["source"] not in self.model.sessions:
            return "not-found"  # FORK-SOURCE-MISSING-001
        if step["child"] in self.model.sessions:
            return "target-conflict"  # FORK-TARGET-001 / FORK-CYCLE-001; vectors never replay a fork
        cut = {"mode": step["cut"]["mode"]}
        if "turn" in step["cut"]:
            cut["turn_id"] = step["cut"]["turn"]
        prefix = self.model.cut_prefix(step["source"], cut)
        if isinstance(prefix, str):
            return prefix
        self.model.fork(step["source"], step["child"], prefix)
        return None

    def transcript(self, session: str) -> list[list[Any]]:
        return [[record["session_id"], record["index"]] for record in self.model.transcript(session)]

    def lineage(self, session: str) -> dict[str, Any] | None:
        found = self.model.sessions[session]
        if found.parent is None:
            return None
        return {
            "root": found.root,
            "parent": found.parent,
            "inherited_turn_count": len(found.inherited),
            "depth": found.depth,
        }


@pytest.mark.parametrize(("stem", "case"), CASES, ids=CASE_IDS)
def test_case_agrees_with_the_model(stem: str, case: dict[str, Any]) -> None:
    replay = ModelReplay()
    for n, step in enumerate(case["steps"]):
        assert replay.step(step) == step.get("expect_error"), f"step {n}: {step}"
    for name, pairs in case["expect"].items():
        if name != "lineage":
            assert replay.transcript(name) == pairs, f"transcript of {name}"
    for name, summary in case["expect"].get("lineage", {}).items():
        assert replay.lineage(name) == summary, f"lineage of {name}"


# ---------------------------------------------------------------- the conformance check
@pytest.fixture(scope="module")
def vector_checks() -> list[Any]:
    """The vector checks, as the registry lists them."""
    return [item for item in registry.all_checks() if item.chapter == "vectors"]


def test_every_vector_file_has_one_check_citing_its_requirements(vector_checks: list[Any]) -> None:
    checks = {item.name.split(".", 1)[1]: item for item in vector_checks}
    assert set(checks) == EXPECTED_FILES
    for stem in EXPECTED_FILES:
        union = {req for case in load(FIXTURES_DIR / "lineage" / f"{stem}.json") for req in case["requirements"]}
        assert set(checks[stem].requirements) == union, stem


def test_vectors_pass_on_the_reference_server(vector_checks: list[Any]) -> None:
    with reference_server() as server:
        config = load_config(
            overrides={"target": server.url, "tokens": list(server.tokens), "select": ["vectors"], "seed": 11},
            environ={},
        )
        result = run(config, checks=vector_checks)
    problems = [f"{c.name}: {c.outcome.value}: {c.message}" for c in result.checks if c.outcome is not Outcome.PASS]
    assert len(result.checks) == len(vector_checks) and not problems, "\n".join(problems)
