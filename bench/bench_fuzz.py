"""Fuzz campaign: hostile replies, scripts and runs; tracebacks and hangs over 10 s (counts).

``python -m bench fuzz --n 100000`` generates N cases (case K from seed K: ``RandomChooser(K)``
and the generator of its kind rebuild it): of every fifty, forty-four are replies applied to
variables, five mutated scripts through check and code generation, one a whole run of a
generated module fed hostile replies. The cases are shared among one worker process per core.
A case that raises where it must not is a traceback; one that takes over 10 s is a hang (a
watchdog notes it while it runs, and ends the campaign if it is stuck past 120 s). The first
few failing cases are written to ``fuzz-failures/`` for replay.
"""

from __future__ import annotations

import contextlib
import io
import multiprocessing
import os
import tempfile
import threading
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from bench import Figure, count, quick
from bench.fuzzing import (
    OUTS,
    RandomChooser,
    Runner,
    check_reply,
    check_script,
    hostile_reply,
    hostile_script,
    script_folder,
)

HANG_SECONDS = 10.0
STUCK_SECONDS = 120.0
KEPT_FAILURES = 20
KINDS = ["reply"] * 44 + ["script"] * 5 + ["run"]
FAILURES = Path("fuzz-failures")


@dataclass
class Tally:
    """What one worker (or the whole campaign) saw."""

    done: Counter[str] = field(default_factory=Counter)
    spent: Counter[str] = field(default_factory=Counter)
    tracebacks: Counter[str] = field(default_factory=Counter)
    hangs: list[tuple[int, str, float]] = field(default_factory=list)
    slowest: tuple[float, int, str] = (0.0, -1, "")

    def add(self, other: Tally) -> None:
        self.done += other.done
        self.spent += other.spent
        self.tracebacks += other.tracebacks
        self.hangs += other.hangs
        self.slowest = max(self.slowest, other.slowest)


class Watchdog(threading.Thread):
    """Ends the process when one case has run past :data:`STUCK_SECONDS` (a hang in C code
    cannot be interrupted), naming the case."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.case: tuple[int, str] | None = None
        self.started = 0.0
        self.stop = threading.Event()

    def begin(self, number: int, kind: str) -> None:
        self.case, self.started = (number, kind), time.monotonic()

    def run(self) -> None:
        while not self.stop.wait(1.0):
            case = self.case
            if case is not None and time.monotonic() - self.started > STUCK_SECONDS:
                print(f"case {case[0]} ({case[1]}) stuck for {STUCK_SECONDS:.0f} s", flush=True)
                os._exit(3)


def run_case(number: int, kind: str, folder: Path, runner: Runner) -> None:
    choose = RandomChooser(number)
    if kind == "reply":
        check_reply(hostile_reply(choose), choose.pick(OUTS))
    elif kind == "script":
        check_script(hostile_script(choose), folder)
    else:  # the run's warnings (one per rejected signal) are not the campaign's output
        with contextlib.redirect_stderr(io.StringIO()):
            runner.check_run([hostile_reply(choose) for _ in range(choose.number(1, 3))])


def run_cases(numbers: range) -> Tally:
    """One worker: the cases ``numbers``."""
    folder = script_folder()
    runner = Runner(Path(tempfile.mkdtemp(prefix="fems-fuzz-run-")))
    tally = Tally()
    watchdog = Watchdog()
    watchdog.start()
    for number in numbers:
        kind = KINDS[number % len(KINDS)]
        watchdog.begin(number, kind)
        began = time.perf_counter()
        try:
            run_case(number, kind, folder, runner)
        except Exception:  # a broken property: keep the case for replay
            tally.tracebacks[kind] += 1
            if sum(tally.tracebacks.values()) <= KEPT_FAILURES:
                FAILURES.mkdir(exist_ok=True)
                (FAILURES / f"case-{number}-{kind}.txt").write_text(
                    traceback.format_exc(), encoding="utf-8"
                )
        elapsed = time.perf_counter() - began
        tally.done[kind] += 1
        tally.spent[kind] += elapsed
        tally.slowest = max(tally.slowest, (elapsed, number, kind))
        if elapsed > HANG_SECONDS:
            tally.hangs.append((number, kind, elapsed))
    watchdog.stop.set()
    return tally


def main() -> list[Figure]:
    total = count(200 if quick() else 10_000)
    workers = 1 if quick() else max(1, min(os.cpu_count() or 1, 4))
    ranges = [range(start, total, workers) for start in range(workers)]
    start = time.perf_counter()
    tally = Tally()
    if workers == 1:
        tally.add(run_cases(ranges[0]))
    else:
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            for part in pool.imap_unordered(run_cases, ranges):
                tally.add(part)
    seconds = time.perf_counter() - start
    for kind in ("reply", "script", "run"):
        mean = tally.spent[kind] / max(tally.done[kind], 1) * 1000
        print(
            f"{kind:<7} {tally.done[kind]:>8,} cases  {tally.tracebacks[kind]:>4} tracebacks"
            f"  {mean:6.1f} ms a case"
        )
    slowest, number, kind = tally.slowest
    print(f"slowest case: {number} ({kind}) {slowest:.2f} s; {workers} workers, {seconds:.0f} s")
    for number, kind, elapsed in tally.hangs:
        print(f"hang: case {number} ({kind}) {elapsed:.1f} s")
    return [
        Figure(f"fuzz: tracebacks in {total:,} cases", str(sum(tally.tracebacks.values())), "0"),
        Figure(f"fuzz: cases over {HANG_SECONDS:.0f} s", str(len(tally.hangs)), "0"),
        Figure("fuzz: slowest case", f"{slowest:.2f} s", f"< {HANG_SECONDS:.0f} s"),
    ]
