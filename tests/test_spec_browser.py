"""The spec site and the HTML report, checked in a real browser with the network blocked.

Headless Chromium through Playwright, with the system's Chromium (`executable_path`; Debian's
package `chromium`): `playwright install` would download a browser from outside the package index.
Every request other than the page's own file is aborted and recorded, so a page that needs the
network fails here as it would offline. On each page: no console error and no page error, every
internal link (`href="#..."`) names an element that exists, and no request left the page; on the
site, every Mermaid diagram is an SVG with a size. Skips, saying why, where no browser is installed.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conformance.spec_site import SITE_HTML

CHROMIUM_CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
# The flags Chromium needs as root in a container, and no traffic of its own (updates, sync).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _chromium() -> str | None:
    named = os.environ.get("SESSION_LINEAGE_CHROMIUM")
    if named:
        return named
    return next((found for name in CHROMIUM_CANDIDATES if (found := shutil.which(name))), None)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    executable = _chromium()
    if executable is None:
        pytest.skip("no Chromium on this machine: install Debian's package `chromium` (or set SESSION_LINEAGE_CHROMIUM)")
    playwright_api = pytest.importorskip("playwright.sync_api", reason="Playwright is not installed (pip install playwright; no browser download needed)")
    with playwright_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


def _open_offline(browser: Any, path: Path) -> tuple[Any, list[str], list[str]]:
    """Load a file with every other request aborted; the page, its errors, the requests refused."""
    context = browser.new_context(offline=True)
    errors: list[str] = []
    refused: list[str] = []
    own = path.resolve().as_uri()

    def route(request_route: Any) -> None:
        url = request_route.request.url
        if url.split("#", 1)[0] == own:
            request_route.continue_()
        else:
            refused.append(url)
            request_route.abort()

    context.route("**/*", route)
    page = context.new_page()
    page.on("console", lambda message: errors.append(f"console {message.type}: {message.text}") if message.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(f"page error: {error}"))
    page.goto(own, wait_until="load")
    return page, errors, refused


BROKEN_ANCHORS = """() => Array.from(document.querySelectorAll('a[href^="#"]'))
    .map(a => decodeURIComponent(a.getAttribute('href').slice(1)))
    .filter(id => id !== '' && document.getElementById(id) === null)"""
DUPLICATE_IDS = """() => { const seen = {}; for (const e of document.querySelectorAll('[id]')) seen[e.id] = (seen[e.id] || 0) + 1;
    return Object.keys(seen).filter(id => seen[id] > 1); }"""


def _assert_page_works(page: Any, errors: list[str], refused: list[str]) -> int:
    links = page.evaluate("() => document.querySelectorAll('a[href^=\"#\"]').length")
    broken = page.evaluate(BROKEN_ANCHORS)
    assert not errors, errors
    assert not refused, f"the page requested {refused[:5]} (it must load nothing)"
    assert not broken, f"{len(broken)} of {links} internal links go nowhere, e.g. {sorted(set(broken))[:10]}"
    duplicates = page.evaluate(DUPLICATE_IDS)
    assert not duplicates, f"ids used more than once: {duplicates[:10]}"
    return int(links)


def test_spec_site_works_offline(browser: Any) -> None:
    page, errors, refused = _open_offline(browser, SITE_HTML)
    links = _assert_page_works(page, errors, refused)
    assert links > 1000, f"only {links} internal links: the cross-references are missing"
    headings = page.evaluate("() => Array.from(document.querySelectorAll('h1,h2,h3,h4,h5,h6')).filter(h => !h.id).length")
    assert headings == 0, f"{headings} headings have no id"
    chapters = page.evaluate("() => Array.from(document.querySelectorAll('nav a')).map(a => a.getAttribute('href'))")
    assert len(chapters) > 40 and all(href.startswith("#") for href in chapters)
    sizes = page.evaluate(
        "() => Array.from(document.querySelectorAll('.diagram')).map(d => { const s = d.querySelector('svg');"
        " if (!s) return null; const r = s.getBoundingClientRect(); return [r.width, r.height]; })"
    )
    assert len(sizes) == SITE_HTML.read_text(encoding="utf-8").count('class="diagram"') and sizes, "no diagram found"
    assert all(size is not None and size[0] > 100 and size[1] > 100 for size in sizes), f"diagrams not drawn as SVG: {sizes}"
    raw = page.evaluate("() => document.body.innerText.includes('flowchart LR') || document.body.innerText.includes('sequenceDiagram')")
    assert not raw, "a diagram is shown as its Mermaid source"
    ticks = page.evaluate("() => Array.from(document.querySelectorAll('td, p')).filter(e => /`[^`]+`/.test(e.textContent)).length")
    assert ticks == 0, f"{ticks} paragraphs or cells show raw Markdown backticks"


def test_html_report_works_offline(browser: Any, tmp_path: Path) -> None:
    from conformance.config import load
    from conformance.embedded import serve_app
    from conformance.reports.html_report import write_html
    from conformance.runner import run
    from reference_impl.settings import Settings
    from tests.mutants import all_mutants

    mutant = next(m for m in all_mutants() if m.name == "refusals_as_schema_violations")
    tokens = {f"browser-{name}-token": name for name in ("alice", "bob", "carol", "dave", "erin")}
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'report.db'}", tokens=tokens, projects={"erin": "elsewhere"})
    with serve_app(mutant.build(settings)) as server:
        config = load(
            overrides={"target": server.url, "tokens": list(tokens), "seed": 7, "select": ["capabilities", "errors.refusals_say_what_they_are"]},
            environ={},
        )
        result = run(config)
    assert any(check.outcome.value == "fail" for check in result.checks), "the report should show a failure and its reproducer"
    report = tmp_path / "report.html"
    write_html(result, report)
    page, errors, refused = _open_offline(browser, report)
    _assert_page_works(page, errors, refused)
    assert page.evaluate("() => document.body.innerText.includes('refusals_say_what_they_are')")
