"""The Session Lineage specification as data: OpenAPI, JSON Schemas, requirements, problem types."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

SPEC_DIR = Path(__file__).resolve().parent
SCHEMAS_DIR = SPEC_DIR / "schemas"
OPENAPI_PATH = SPEC_DIR / "openapi.yaml"
REQUIREMENTS_PATH = SPEC_DIR / "requirements.yaml"
PROBLEM_TYPES_PATH = SPEC_DIR / "problem-types.yaml"
PROFILES_PATH = SPEC_DIR / "profiles.yaml"


class DuplicateKeyError(yaml.constructor.ConstructorError):
    """A mapping names the same key twice; lenient loaders would silently keep the last one."""


class StrictLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """A safe loader that refuses duplicate mapping keys, as strict OpenAPI tools do. It parses
    with libyaml where PyYAML has it (ten times faster on the spec's documents: 0.03 s for the
    OpenAPI document, not 0.27 s) and builds the values in Python, as the pure loader does."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<` merges may be overridden by explicit keys; that is not a duplicate
            key = self.construct_object(key_node, deep=deep)
            try:
                hash(key)
            except TypeError:
                continue  # the base class reports unhashable keys itself
            if key in seen:
                first = seen[key].start_mark
                raise DuplicateKeyError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"found duplicate key {key!r} (first at line {first.line + 1})",
                    key_node.start_mark,
                )
            seen[key] = key_node
        return super().construct_mapping(node, deep=deep)


def strict_load(stream: Any) -> Any:
    """Parse YAML text or a file object, refusing duplicate keys."""
    return yaml.load(stream, Loader=StrictLoader)  # noqa: S506 - StrictLoader is a SafeLoader


@lru_cache(maxsize=None)
def load_yaml(path: Path) -> Any:
    with open(path, encoding="utf-8") as handle:
        return strict_load(handle)


def openapi() -> dict[str, Any]:
    return load_yaml(OPENAPI_PATH)


def requirements() -> list[dict[str, Any]]:
    return load_yaml(REQUIREMENTS_PATH)["requirements"]


def spec_version() -> str:
    return str(load_yaml(REQUIREMENTS_PATH)["spec_version"])


def version_tuple(version: str) -> tuple[int, int, int]:
    """`"1.10.0"` as `(1, 10, 0)`, so versions compare as numbers; ValueError when not X.Y.Z."""
    parts = str(version).split(".")
    if len(parts) != 3 or not all(part.isdigit() for part in parts):
        raise ValueError(f"{version!r} is not a version of the form X.Y.Z")
    major, minor, patch = (int(part) for part in parts)
    return major, minor, patch


def profiles() -> dict[str, dict[str, Any]]:
    """The conformance profiles of profiles.yaml, each as `{since, title, capabilities, stand_ins}`
    where `capabilities` maps every capability name to the spec version that added it to the profile,
    and `stand_ins` maps a capability listed with `or` to the one it may stand in for."""
    found: dict[str, dict[str, Any]] = {}
    for name, entry in load_yaml(PROFILES_PATH)["profiles"].items():
        capabilities: dict[str, str] = {}
        stand_ins: dict[str, str] = {}
        for item in entry["capabilities"]:
            if isinstance(item, str):
                capabilities[item] = str(entry["since"])
            else:
                capabilities[str(item["name"])] = str(item["since"])
                if item.get("or"):
                    stand_ins[str(item["name"])] = str(item["or"])
        found[str(name)] = {
            "since": str(entry["since"]), "title": entry["title"], "capabilities": capabilities, "stand_ins": stand_ins,
        }
        if entry.get("only_when_claimed"):
            found[str(name)]["only_when_claimed"] = True
        if entry.get("chapters") is not None:
            found[str(name)]["chapters"] = [str(chapter) for chapter in entry["chapters"]]
    return found


def capability_names() -> list[str]:
    """Every capability name the catalogue defines (core and optional)."""
    return [str(item["name"]) for item in load_yaml(REQUIREMENTS_PATH)["capabilities"]]


def profile_capabilities(profile: str | dict[str, Any], version: str) -> list[str]:
    """The capabilities a profile holds at a spec version (those added later are left out)."""
    entry = profiles()[profile] if isinstance(profile, str) else profile
    at = version_tuple(version)
    return [name for name, since in entry["capabilities"].items() if version_tuple(since) <= at]


def requirement_capabilities(requirement: dict[str, Any]) -> list[str]:
    """The capabilities a rule is conditional on (`capability`: a name, or a list of which any one binds)."""
    value = requirement.get("capability") or []
    return [value] if isinstance(value, str) else [str(name) for name in value]


def stand_ins(profile: str | dict[str, Any], version: str) -> dict[str, str]:
    """The profile's capabilities at `version` listed with `or`, each to the one it may stand in for."""
    entry = profiles()[profile] if isinstance(profile, str) else profile
    held = profile_capabilities(entry, version)
    return {name: other for name, other in entry.get("stand_ins", {}).items() if name in held and other in held}


def missing_capabilities(profile: str | dict[str, Any], version: str, advertised: list[str]) -> list[str]:
    """The profile's capabilities at `version` a server does not advertise. A stand-in (`or`) is
    never missing itself, and the capability it stands in for is not missing when it is advertised."""
    pairs = stand_ins(profile, version)
    return [
        name
        for name in profile_capabilities(profile, version)
        if name not in advertised and name not in pairs and not any(p == name and s in advertised for s, p in pairs.items())
    ]


def in_profile(requirement: dict[str, Any], profile: str | dict[str, Any], version: str | None = None) -> bool:
    """Whether a requirement belongs to a profile: it names no `capability` (every server must meet
    it; a profile listing `chapters` holds only those chapters' unconditional rules) or names one of
    the profile's. With `version`, the requirement (by its `since`) and its capability must also
    exist at that version of the profile."""
    entry = profiles()[profile] if isinstance(profile, str) else profile
    capabilities = requirement_capabilities(requirement)
    chapters = entry.get("chapters")
    if not capabilities and chapters is not None and requirement.get("chapter") not in chapters:
        return False
    if version is None:
        return not capabilities or any(name in entry["capabilities"] for name in capabilities)
    if version_tuple(str(requirement.get("since", "0.0.0"))) > version_tuple(version):
        return False
    held = profile_capabilities(entry, version)
    return not capabilities or any(name in held for name in capabilities)


def problem_type_uri(kind: str) -> str:
    """The stable `type` URI of an error kind, from problem-types.yaml."""
    data = load_yaml(PROBLEM_TYPES_PATH)
    if kind not in data["types"]:
        raise KeyError(f"unknown problem kind {kind!r}")
    return data["base"] + kind


def problem_types() -> dict[str, dict[str, Any]]:
    data = load_yaml(PROBLEM_TYPES_PATH)
    return {data["base"] + kind: {"kind": kind, **entry} for kind, entry in data["types"].items()}


@lru_cache(maxsize=None)
def schema_registry() -> Any:
    """Every schema under schemas/, addressed by its file URI so relative `$ref`s resolve."""
    import json

    from referencing import Registry, Resource

    resources = []
    for path in sorted(SCHEMAS_DIR.glob("*.json")):
        contents = json.loads(path.read_text(encoding="utf-8"))
        resources.append((path.as_uri(), Resource.from_contents(contents)))
    return Registry().with_resources(resources)


@lru_cache(maxsize=None)
def validator(schema_file: str) -> Any:
    """A Draft 2020-12 validator for one schema file (for example `fork-request.json`)."""
    from jsonschema import Draft202012Validator, FormatChecker

    uri = (SCHEMAS_DIR / schema_file).as_uri()
    return Draft202012Validator(
        {"$ref": uri}, registry=schema_registry(), format_checker=FormatChecker()
    )
