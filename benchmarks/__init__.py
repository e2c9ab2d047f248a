"""Side-by-side cost comparisons of the reference lineage design and the approaches peers use.

Run `python -m benchmarks` (or `--quick`); see benchmarks/README.md for how to read the ratios.
"""

from __future__ import annotations

from benchmarks.config import FULL, QUICK, TINY, Config
from benchmarks.runner import run_all

__all__ = ["FULL", "QUICK", "TINY", "Config", "run_all"]
