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


def test_requirements_are_well_formed() -> None:
    doc = spec.load_yaml(spec.REQUIREMENTS_PATH)
    chapters = {chapter["id"] for chapter in doc["chapters"]}
    ids = [req["id"] for req in doc["requirements"]]
    assert len(ids) == len(set(ids)), "duplicate requirement ids"
    for req in doc["requirements"]:
        assert re.fullmatch(r"[A-Z]+(-[A-Z0-9]+)*-\d{3}", req["id"]), req["id"]
        assert req["level"] in {"MUST", "SHOULD", "MAY"}, req["id"]
        assert req["chapter"] in chapters, req["id"]
        assert re.fullmatch(r"\d+\.\d+\.\d+", str(req["since"])), req["id"]
        assert req["title"] and len(req["text"]) > 20, req["id"]


def test_problem_types_have_error_statuses() -> None:
    for uri, entry in spec.problem_types().items():
        assert uri.startswith("urn:session-lineage:problem:")
        assert 400 <= entry["status"] <= 599 and entry["title"]
