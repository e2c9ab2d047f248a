"""spec/openapi.bundled.yaml: fresh, valid, self-contained, and usable by a client generator.

Usability is shown the direct way: openapi-python-client generates a client from the bundle with
no warning and one function per operation, and that client then drives the reference server
through a whole fork (create, turn, append, finish, fork, read, lease).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import shutil
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate

import spec
from spec.bundle import BUNDLED_PATH, BundleError, bundle, external_refs, render

METHODS = {"get", "put", "post", "delete", "patch", "head", "options", "trace"}


def _bundled() -> dict[str, Any]:
    return spec.load_yaml(BUNDLED_PATH)


def _operation_ids(document: dict[str, Any]) -> list[str]:
    return [
        operation["operationId"]
        for item in document["paths"].values()
        for method, operation in item.items()
        if method in METHODS
    ]


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [value for key, value in node.items() if key == "$ref"] + [
            ref for key, value in node.items() if key != "$ref" for ref in _refs(value)
        ]
    if isinstance(node, list):
        return [ref for item in node for ref in _refs(item)]
    return []


def test_shipped_bundle_is_fresh() -> None:
    assert BUNDLED_PATH.read_text(encoding="utf-8") == render(bundle()), (
        "spec/openapi.bundled.yaml is stale: run `session-lineage bundle`"
    )


def test_bundle_is_a_valid_openapi_document() -> None:
    validate(_bundled())


def test_bundle_has_no_external_reference() -> None:
    assert external_refs(_bundled()) == []
    assert external_refs(spec.openapi()), "the source document does use external references"


def test_every_reference_resolves_inside_the_bundle() -> None:
    document = _bundled()
    for ref in _refs(document):
        assert ref.startswith("#/"), ref
        node: Any = document
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            assert isinstance(node, dict) and part in node, f"{ref} does not resolve"
            node = node[part]


def test_bundle_keeps_every_operation_and_schema() -> None:
    document = _bundled()
    ids = _operation_ids(document)
    assert ids == _operation_ids(spec.openapi())
    assert len(ids) == len(set(ids)) and all(ids)
    schemas = document["components"]["schemas"]
    for path in spec.SCHEMAS_DIR.glob("*.json"):
        if path.name != "common.json":  # only its $defs entries are referenced
            name = "".join(part.capitalize() for part in path.stem.split("-"))
            assert name in schemas, f"{path.name} is not bundled as {name}"
    for name, schema in schemas.items():
        assert "$schema" not in schema and "$id" not in schema, name
        Draft202012Validator.check_schema(schema)


def test_bundler_refuses_two_schemas_with_one_name(tmp_path: Path) -> None:
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "common.json").write_text('{"$defs": {"Thing": {"type": "string"}}}')
    (tmp_path / "schemas" / "thing.json").write_text('{"type": "integer"}')
    (tmp_path / "openapi.yaml").write_text(
        "openapi: 3.1.0\ninfo: {title: t, version: '1'}\npaths: {}\ncomponents:\n  parameters:\n"
        "    A: {name: a, in: query, schema: {$ref: 'schemas/common.json#/$defs/Thing'}}\n"
        "    B: {name: b, in: query, schema: {$ref: 'schemas/thing.json'}}\n"
    )
    with pytest.raises(BundleError, match="both want the name Thing"):
        bundle(tmp_path)


def test_bundle_subcommand_checks_freshness() -> None:
    from conformance.cli import main

    assert main(["bundle", "--check"]) == 0


# ---------------------------------------------------------------- a generated client, used


def _generator() -> str:
    found = shutil.which("openapi-python-client", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    if found is None:
        pytest.fail("openapi-python-client is missing: install the test extra (pip install -e '.[test]')")
    return found


@pytest.fixture(scope="module")
def generated_client(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("generated")
    package = root / "sl_bundle_client"
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    completed = subprocess.run(
        [_generator(), "generate", "--path", str(BUNDLED_PATH), "--meta", "none", "--output-path", str(package)],
        capture_output=True, text=True, env=env, timeout=120,
    )
    output = completed.stdout + completed.stderr
    assert completed.returncode == 0, output
    assert "warning" not in output.lower(), f"the generator skipped parts of the bundle:\n{output}"
    sys.path.insert(0, str(root))
    try:
        yield importlib.import_module("sl_bundle_client")
    finally:
        sys.path.remove(str(root))
        for name in [name for name in sys.modules if name.startswith("sl_bundle_client")]:
            del sys.modules[name]


def _call(client: Any, module_name: str, *args: Any, body: dict[str, Any] | None = None, **kwargs: Any) -> Any:
    """Call one generated operation; its body model is built from a plain dict."""
    package = client.__class__.__module__.split(".")[0]
    module = next(
        importlib.import_module(f"{package}.api.{tag}.{module_name}")
        for tag in ("capabilities", "sessions", "fork", "transcript", "lineage")
        if importlib.util.find_spec(f"{package}.api.{tag}.{module_name}")
    )
    if body is not None:
        model = typing.get_type_hints(module.sync_detailed)["body"]
        kwargs["body"] = model.from_dict(body)
    return module.sync_detailed(*args, client=client, **kwargs)


def test_generator_makes_one_function_per_operation(generated_client: Any) -> None:
    api = Path(generated_client.__file__).parent / "api"
    generated = {path.stem for path in api.rglob("*.py") if path.stem != "__init__"}
    expected = {
        "".join("_" + ch.lower() if ch.isupper() else ch for ch in operation_id)
        for operation_id in _operation_ids(_bundled())
    }
    assert generated == expected


def test_generated_client_drives_a_whole_fork(generated_client: Any) -> None:
    from conformance.embedded import reference_server

    with reference_server() as server:
        client = generated_client.AuthenticatedClient(base_url=server.url, token=server.tokens[0])
        capabilities = _call(client, "get_capabilities")
        assert capabilities.status_code == 200 and "fork" in capabilities.parsed.capabilities
        root = _call(client, "create_session", body={"name": "generated"})
        assert root.status_code == 201, root.content
        root_id = root.parsed.session_id
        turn = _call(client, "start_turn", root_id, body={"role": "user"})
        assert turn.status_code == 201, turn.content
        appended = _call(client, "append_records", root_id, turn.parsed.turn_id,
                         body={"records": [{"type": "message", "content": {"text": "hello"}}]})
        assert appended.status_code == 201, appended.content
        finished = _call(client, "finish_turn", root_id, turn.parsed.turn_id, body={"status": "completed"})
        assert finished.status_code == 200 and finished.parsed.status.value == "completed"
        fork = _call(client, "fork_session", root_id, body={"cut": {"mode": "latest"}}, idempotency_key='"gen-1"')
        assert fork.status_code == 201, fork.content
        child_id = fork.parsed.session.session_id
        assert fork.parsed.lineage.inherited_turn_count == 1
        page = _call(client, "get_transcript", child_id, limit=10)
        assert page.status_code == 200
        assert [record.session_id for record in page.parsed.records] == [root_id]
        assert page.parsed.has_more is False
        lineage = _call(client, "get_lineage", child_id)
        assert lineage.status_code == 200 and lineage.parsed.depth == 1
        lease = _call(client, "acquire_lease", child_id, body={"ttl_seconds": 5})
        assert lease.status_code == 201, lease.content
        released = _call(client, "release_lease", child_id, writer_lease=lease.parsed.lease_id)
        assert released.status_code == 204
        missing = _call(client, "get_session", "no-such-session")
        assert missing.status_code == 404 and missing.parsed.status == 404
