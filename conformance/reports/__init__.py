"""Report writers for a finished run: JUnit XML for CI, JSON for machines, Markdown for job pages,
a self-contained HTML page, and a rich summary for the terminal.

The names load on first use (PEP 562): the console renderer imports every check module, and
`check` speaks (`terminal.make_console`) and starts the embedded server before it needs them.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "write_junit": "junit",
    "write_json": "json_report",
    "write_markdown": "markdown",
    "render_markdown": "markdown",
    "write_html": "html_report",
    "render_html": "html_report",
    "render_console": "console",
    "render_preflight": "console",
    "make_console": "terminal",
}

__all__ = list(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
