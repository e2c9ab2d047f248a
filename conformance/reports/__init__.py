"""Report writers for a finished run: JUnit XML for CI, JSON for machines, Markdown for job pages,
and a rich summary for the terminal."""

from __future__ import annotations

from conformance.reports.console import render_console
from conformance.reports.json_report import write_json
from conformance.reports.junit import write_junit
from conformance.reports.markdown import render_markdown, write_markdown

__all__ = ["write_junit", "write_json", "write_markdown", "render_markdown", "render_console"]
