"""Batch throughput: werewolf sessions per second under ``fems/mock`` at 1, 2 and W workers.

``fems2py batch`` runs whole sessions (``examples/werewolf``, 32 to 60 model calls each, its
souls loaded) on a process pool, with a fresh SQLite file per measurement. The time is the
whole batch, pool start-up included (each worker imports the built module once), so short
batches understate the steady rate; sessions are spread evenly over the workers. With more
workers than cores the rate stops growing: the figures show where, next to the load average
(other processes share the cores).
"""

from __future__ import annotations

import contextlib
import io
import os
import resource
import time
from pathlib import Path
from tempfile import TemporaryDirectory

from bench import Figure, quick
from fems2py.batch.runner import BatchOptions, run_batch
from fems2py.build import build_cached

WEREWOLF = Path(__file__).resolve().parent.parent / "examples" / "werewolf"
SESSIONS = 4 if quick() else 200


def worker_counts() -> list[int]:
    """1, 2 and W: the cores, or 4 on a machine of at most two (to show oversubscription)."""
    return [1, 2] if quick() else sorted({1, 2, max(4, os.cpu_count() or 1)})


def cpu_seconds() -> float:
    """CPU time of this process and its ended children (the pool's workers, once shut down)."""
    own, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def sessions_per_second(workers: int, folder: Path) -> tuple[float, float]:
    """The rate of one batch of :data:`SESSIONS` werewolf games on ``workers`` processes, and
    the CPU milliseconds it spent per session (workers and the batch itself)."""
    options = BatchOptions(
        script=WEREWOLF / "werewolf.fems",
        runs=SESSIONS,
        workers=workers,
        db=str(folder / f"bench-{workers}.db"),
        models=["fems/mock"],
        souls=WEREWOLF / "souls.yaml",
        batch=f"bench-{workers}",
        results=[folder / f"bench-{workers}.json"],
        progress=False,
    )
    module = build_cached(options.script).output
    with contextlib.redirect_stderr(io.StringIO()):
        started, cpu = time.perf_counter(), cpu_seconds()
        status = run_batch(options, module)
        elapsed, cpu = time.perf_counter() - started, cpu_seconds() - cpu
    if status != 0:
        raise RuntimeError(f"the batch on {workers} workers ended with status {status}")
    return SESSIONS / elapsed, cpu / SESSIONS * 1000


def main() -> list[Figure]:
    figures = []
    rates: dict[int, float] = {}
    with TemporaryDirectory() as folder:
        for workers in worker_counts():
            rates[workers], cpu_ms = sessions_per_second(workers, Path(folder))
            scaling = rates[workers] / rates[1]
            print(
                f"   {SESSIONS} werewolf sessions on {workers} worker(s): "
                f"{rates[workers]:.2f} sessions/s ({scaling:.2f}× one worker), "
                f"{cpu_ms:.0f} ms CPU per session"
            )
            figures.append(
                Figure(
                    f"batch werewolf, {workers} worker(s)",
                    f"{rates[workers]:.2f} sessions/s ({scaling:.2f}×)",
                    "grows with workers up to the cores",
                )
            )
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    cores = os.cpu_count()
    print(f"   {cores} cores, load average {load}")
    return figures


if __name__ == "__main__":
    main()
