"""The packages' shape, read from source: the suite does not lean on the reference server, and no
module grows past what a reader takes in at once."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 400


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at module level or inside a function."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def test_only_embedded_imports_the_reference_server() -> None:
    """conformance/ runs against any server; only embedded.py starts (and imports) ours."""
    allowed = ROOT / "conformance" / "embedded.py"
    offenders = [
        f"{path.relative_to(ROOT)} imports {module}"
        for path in sorted((ROOT / "conformance").rglob("*.py"))
        if path != allowed
        for module in sorted(imported_modules(path))
        if module == "reference_impl" or module.startswith("reference_impl.")
    ]
    assert not offenders, offenders


def test_reference_modules_stay_short() -> None:
    long = [
        f"{path.relative_to(ROOT)}: {count} lines"
        for path in sorted((ROOT / "reference_impl").rglob("*.py"))
        if (count := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    ]
    assert not long, f"modules over {MAX_LINES} lines: {long}"
