"""Requirements and checks point at each other: no MUST without a check, no check citing nothing."""

from __future__ import annotations

from pathlib import Path

import spec
from conformance.docs import REQUIREMENTS_MD, render_requirements
from conformance.spec_site import SITE_HTML, render_site
from conformance.registry import all_checks


TESTS_DIR = Path(__file__).resolve().parent


def test_every_must_requirement_is_checked() -> None:
    checked = {req for item in all_checks() for req in item.requirements}
    suite_level = [r for r in spec.requirements() if r.get("verification", "suite") == "suite"]
    unchecked = [r["id"] for r in suite_level if r["level"] == "MUST" and r["id"] not in checked]
    assert not unchecked, f"MUST requirements without a check: {unchecked}"


def test_deployment_requirements_are_tested_by_the_project() -> None:
    """Rules only a deployment can check are named by the project tests that check them."""
    sources = "".join(path.read_text() for path in TESTS_DIR.rglob("test_*.py"))
    for req in spec.requirements():
        if req.get("verification", "suite") == "deployment":
            assert req["id"] in sources, f"{req['id']} is verified by deployment tests, but none names it"
    assert {r.get("verification", "suite") for r in spec.requirements()} <= {"suite", "deployment"}


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


def test_generated_spec_site_is_fresh_and_links_every_requirement_to_its_checks() -> None:
    page = render_site()
    assert SITE_HTML.read_text(encoding="utf-8") == page, "spec/site/index.html is stale: run `session-lineage docs`"
    for item in all_checks():
        assert f'id="check-{item.name}"' in page
        for req in item.requirements:
            assert f'href="#{req}"' in page and f'<a id="{req}">' in page
    for req in spec.requirements():
        for name in [c.name for c in all_checks() if req["id"] in c.requirements]:
            assert f'href="#check-{name}"' in page, f"{req['id']} does not link to {name}"


def test_catalogue_is_large_enough() -> None:
    assert len(spec.requirements()) >= 30


def test_check_order_does_not_depend_on_what_was_imported_first() -> None:
    """The generated documents and the run order follow the chapter list, whatever a test (or an
    xdist worker) happened to import first."""
    import subprocess
    import sys

    listing = "from conformance.registry import all_checks; print(','.join(c.name for c in all_checks()))"
    plain = subprocess.run([sys.executable, "-c", listing], capture_output=True, text=True, check=True).stdout
    early = subprocess.run([sys.executable, "-c", "import conformance.checks.vectors, conformance.checks.errors.mutations; " + listing],
                           capture_output=True, text=True, check=True).stdout
    assert plain and early == plain
