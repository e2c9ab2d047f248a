"""Report writers for a finished run: JUnit XML for CI, JSON for machines, Markdown for job pages,
a self-contained HTML page, and a rich summary for the terminal."""

from __future__ import annotations

from conformance.reports.console import make_console, render_console, render_preflight
from conformance.reports.html_report import render_html, write_html
from conformance.reports.json_report import write_json
from conformance.reports.junit import write_junit
from conformance.reports.markdown import render_markdown, write_markdown

__all__ = [
    "write_junit",
    "write_json",
    "write_markdown",
    "write_html",
    "render_markdown",
    "render_html",
    "render_console",
    "render_preflight",
    "make_console",
]
