"""Benchmarks (`make bench`): results are printed as numbers and ratios, never asserted.

Each ``bench_NAME`` module has a ``main()`` that prints its details and returns its
:class:`Figure` rows; ``python -m bench`` ends with one table of every figure and its target.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

QUICK = "FEMS_BENCH_QUICK"
COUNT = "FEMS_BENCH_N"  # ``--n N``: how many cases a counting benchmark (fuzz) runs


@dataclass(frozen=True)
class Figure:
    """One row of the table: what was measured, the result as shown, and the target."""

    name: str
    value: str
    target: str = ""


def quick() -> bool:
    """Whether the benchmarks run small, only to show they work (``python -m bench --quick``)."""
    return os.environ.get(QUICK) == "1"


def count(default: int) -> int:
    """How many cases to run: ``--n N`` if given, else ``default``."""
    return int(os.environ.get(COUNT) or default)
