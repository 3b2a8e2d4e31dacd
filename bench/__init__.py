"""Benchmarks (`make bench`): results are printed as numbers and ratios, never asserted.

Each ``bench_NAME`` module has a ``main()`` that prints its details and returns its
:class:`Figure` rows; ``python -m bench`` ends with one table of every figure and its target.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

_Result = TypeVar("_Result")

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


@dataclass(frozen=True)
class Timing:
    """One timed call: wall and CPU seconds, and ``waits``, the times the process gave up the
    CPU by itself (voluntary context switches: a lock, I/O, a sleep, a thread hand-off). Wall
    time well above CPU time with no waits means other processes held the CPU."""

    wall: float
    cpu: float
    waits: int


def timed(call: Callable[[], _Result], repeats: int = 1) -> tuple[Timing, _Result]:
    """Run ``call`` ``repeats`` times; the fastest run's timing and result (on a shared
    machine the fastest run is the one the other processes disturbed least)."""
    best: tuple[Timing, _Result] | None = None
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw
        started, cpu = time.perf_counter(), time.process_time()
        result = call()
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        waits = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw - before
        if best is None or wall < best[0].wall:
            best = (Timing(wall, cpu, waits), result)
    assert best is not None
    return best


def load() -> str:
    """The machine's load average over the last minute, to note beside wall-clock figures."""
    return f"load average {os.getloadavg()[0]:.1f}"
