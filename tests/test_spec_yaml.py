"""Every YAML file of the spec and the fixtures parses under a loader that refuses duplicate keys.

Lenient loaders keep the last of two equal keys, so a duplicate hides half of what was written;
strict OpenAPI tools reject the whole file. This test fails first and names the file and line.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import spec

ROOT = Path(__file__).resolve().parent.parent
YAML_FILES = sorted(
    path
    for folder in (ROOT / "spec", ROOT / "fixtures")
    for pattern in ("*.yaml", "*.yml")
    for path in folder.rglob(pattern)
    if "node_modules" not in path.parts  # spec/site/tools' npm packages: not the project's YAML
)


def test_there_are_yaml_files_to_check() -> None:
    names = {path.name for path in YAML_FILES}
    assert {"openapi.yaml", "requirements.yaml", "problem-types.yaml"} <= names


@pytest.mark.parametrize("path", YAML_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_yaml_file_has_no_duplicate_keys(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    try:
        spec.strict_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"{path.relative_to(ROOT)}:{mark.line + 1}" if mark else str(path.relative_to(ROOT))
        pytest.fail(f"{where}: {exc.problem}")


def test_strict_loader_refuses_a_duplicate_key_and_names_its_line() -> None:
    text = "paths:\n  /a:\n    parameters: []\n    parameters: []\n"
    with pytest.raises(spec.DuplicateKeyError) as raised:
        spec.strict_load(text)
    assert raised.value.problem_mark.line + 1 == 4
    assert "parameters" in str(raised.value.problem)


def test_strict_loader_accepts_distinct_keys_and_merge_overrides() -> None:
    text = "base: &b {x: 1, y: 2}\nderived:\n  <<: *b\n  y: 3\n"
    assert spec.strict_load(text) == {"base": {"x": 1, "y": 2}, "derived": {"x": 1, "y": 3}}


def test_spec_loader_is_the_strict_one(tmp_path: Path) -> None:
    doubled = tmp_path / "doubled.yaml"
    doubled.write_text("a: 1\na: 2\n", encoding="utf-8")
    with pytest.raises(spec.DuplicateKeyError):
        spec.load_yaml(doubled)
