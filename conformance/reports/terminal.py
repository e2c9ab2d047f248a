"""The terminal the suite writes to: kept apart from the report renderers, so that `check` can
speak before it has imported them (and the checks they import)."""

from __future__ import annotations

import sys
from typing import TextIO

from rich.console import Console


def make_console(file: TextIO | None = None) -> Console:
    """A console on stderr (or `file`): wrapped to the terminal's width on a terminal, never
    wrapped when piped or redirected (CI logs keep one line per message)."""
    stream = file or sys.stderr
    terminal = hasattr(stream, "isatty") and stream.isatty()
    if terminal:
        return Console(file=file, stderr=file is None)
    return Console(file=file, stderr=file is None, soft_wrap=True, width=250)
