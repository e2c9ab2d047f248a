"""The conformance suite stays in modules a reader takes in at once: a chapter that outgrows one
module becomes a package (conformance/checks/authorization/), a helper outgrowing its module splits."""

from __future__ import annotations

from pathlib import Path

CONFORMANCE = Path(__file__).resolve().parents[1] / "conformance"
LINE_LIMIT = 400


def line_counts(folder: Path) -> dict[str, int]:
    """Lines of every Python module under `folder`, by path relative to it."""
    return {
        str(module.relative_to(folder)): len(module.read_text(encoding="utf-8").splitlines())
        for module in sorted(folder.rglob("*.py"))
    }


def test_every_conformance_module_is_at_most_400_lines() -> None:
    counts = line_counts(CONFORMANCE)
    assert counts, f"no modules found under {CONFORMANCE}"
    over = {name: count for name, count in counts.items() if count > LINE_LIMIT}
    assert not over, f"conformance modules over {LINE_LIMIT} lines (split them by concern): {over}"
