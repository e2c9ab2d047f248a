"""The spec itself: a valid OpenAPI 3.1 document, valid schemas, a consistent catalogue."""

from __future__ import annotations

import json
import re

import pytest
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate

import spec

SCHEMA_FILES = sorted(spec.SCHEMAS_DIR.glob("*.json"))


def test_openapi_document_is_valid() -> None:
    validate(spec.openapi(), base_uri=spec.OPENAPI_PATH.as_uri())


@pytest.mark.parametrize("path", SCHEMA_FILES, ids=lambda p: p.name)
def test_schema_passes_its_metaschema(path) -> None:
    schema = json.loads(path.read_text())
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(schema)


def test_every_body_schema_is_a_file_reference() -> None:
    """Bodies are referenced from schemas/, never inlined copies."""
    for path, item in spec.openapi()["paths"].items():
        for method, operation in item.items():
            if method == "parameters":
                continue
            bodies = [operation.get("requestBody", {})] + list(operation["responses"].values())
            for body in bodies:
                for media in body.get("content", {}).values():
                    assert set(media["schema"]) == {"$ref"}, (path, method)
                    assert media["schema"]["$ref"].startswith("schemas/"), (path, method)


def _version(text: object) -> tuple[int, ...]:
    assert re.fullmatch(r"\d+\.\d+\.\d+", str(text)), text
    return tuple(int(part) for part in str(text).split("."))


def test_requirements_are_well_formed() -> None:
    doc = spec.load_yaml(spec.REQUIREMENTS_PATH)
    chapters = {chapter["id"] for chapter in doc["chapters"]}
    capabilities = {item["name"] for item in doc["capabilities"]}
    current = _version(doc["spec_version"])
    ids = [req["id"] for req in doc["requirements"]]
    assert len(ids) == len(set(ids)), "duplicate requirement ids"
    known_fields = {"id", "level", "chapter", "since", "changed", "capability", "operations",
                    "verification", "verifiable_with", "title", "text", "precedence"}
    for req in doc["requirements"]:
        assert set(req) <= known_fields, (req["id"], set(req) - known_fields)
        assert re.fullmatch(r"[A-Z]+(-[A-Z0-9]+)*-\d{3}", req["id"]), req["id"]
        assert req["level"] in {"MUST", "SHOULD", "MAY"}, req["id"]
        assert req["chapter"] in chapters, req["id"]
        assert _version(req["since"]) <= current, req["id"]
        if "changed" in req:
            assert _version(req["since"]) < _version(req["changed"]) <= current, req["id"]
        for name in spec.requirement_capabilities(req):
            assert name in capabilities, req["id"]
        assert req["title"] and len(req["text"]) > 20, req["id"]


def test_spec_version_is_the_same_everywhere() -> None:
    assert spec.openapi()["info"]["version"] == spec.spec_version()
    assert spec.spec_version().startswith("1.")


def test_requirements_speak_of_behaviour_not_implementation() -> None:
    """Rules are phrased as what a client observes; storage technology is not named."""
    banned = re.compile(r"\bSQL\b|row locks?|unique constraints?|\bdatabase\b|\bPython\b", re.IGNORECASE)
    for req in spec.requirements():
        found = banned.search(req["text"])
        assert not found, f"{req['id']} speaks of {found.group(0)!r}"


def test_key_words_are_cited_from_bcp_14() -> None:
    header = spec.REQUIREMENTS_PATH.read_text(encoding="utf-8").split("spec_version:")[0]
    assert "RFC 2119" in header and "RFC 8174" in header
    assert any("MAY" in req["text"] for req in spec.requirements()), "MAY marks where servers may differ"


def test_changelog_lists_every_new_and_changed_requirement() -> None:
    changelog = (spec.SPEC_DIR / "CHANGELOG.md").read_text(encoding="utf-8")
    version = spec.spec_version()
    sections = re.split(r"^## ", changelog, flags=re.MULTILINE)
    entry = next((part for part in sections if part.startswith(version)), None)
    assert entry is not None, f"CHANGELOG.md has no entry for {version}"
    for req in spec.requirements():
        if version in (str(req["since"]), str(req.get("changed"))):
            assert req["id"] in entry, f"CHANGELOG.md {version} does not list {req['id']}"


def test_problem_types_have_error_statuses() -> None:
    for uri, entry in spec.problem_types().items():
        assert uri.startswith("urn:session-lineage:problem:")
        assert 400 <= entry["status"] <= 599 and entry["title"]
