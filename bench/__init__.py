"""Benchmarks (`make bench`): results are printed as numbers and ratios, never asserted.

Each ``bench_NAME`` module has a ``main()`` that prints its details and returns its
:class:`Figure` rows; ``python -m bench`` ends with one table of every figure and its target.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

QUICK = "FEMS_BENCH_QUICK"


@dataclass(frozen=True)
class Figure:
    """One row of the table: what was measured, the result as shown, and the target."""

    name: str
    value: str
    target: str = ""


def quick() -> bool:
    """Whether the benchmarks run small, only to show they work (``python -m bench --quick``)."""
    return os.environ.get(QUICK) == "1"
