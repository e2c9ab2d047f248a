"""Requirements and checks point at each other: no MUST without a check, no check citing nothing."""

from __future__ import annotations

import spec
from conformance.docs import REQUIREMENTS_MD, render_requirements
from conformance.registry import all_checks


def test_every_must_requirement_is_checked() -> None:
    checked = {req for item in all_checks() for req in item.requirements}
    unchecked = [r["id"] for r in spec.requirements() if r["level"] == "MUST" and r["id"] not in checked]
    assert not unchecked, f"MUST requirements without a check: {unchecked}"


def test_every_check_cites_existing_requirements() -> None:
    known = {r["id"] for r in spec.requirements()}
    for item in all_checks():
        unknown = set(item.requirements) - known
        assert not unknown, f"{item.name} cites unknown requirement IDs {sorted(unknown)}"


def test_check_names_are_unique_and_titled() -> None:
    checks = all_checks()
    assert len({c.name for c in checks}) == len(checks)
    assert all(c.title and not c.title.lower().startswith(("test", "should")) for c in checks)


def test_generated_requirements_document_is_fresh() -> None:
    assert REQUIREMENTS_MD.read_text(encoding="utf-8") == render_requirements(), (
        "spec/REQUIREMENTS.md is stale: run `session-lineage docs`"
    )


def test_catalogue_is_large_enough() -> None:
    assert len(spec.requirements()) >= 30
