"""Fuzz campaign: hostile replies, scripts and runs; tracebacks and hangs over 10 s (counts).

``python -m bench fuzz --n 100000`` generates N cases (case K from seed K, so any case can be
replayed): of every twenty, fifteen are replies applied to variables, four mutated scripts
through check and code generation, one a whole run of a generated module fed hostile replies
(``RandomChooser(K)`` and the generator of its kind rebuild case K).
A case that raises where it must not is a traceback; one that takes over 10 s is a hang (a
watchdog notes it while it runs, and ends the campaign if it is stuck past 120 s). The first
few failing cases are written to ``fuzz-failures/`` for replay.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
import threading
import time
import traceback
from collections import Counter
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
KINDS = ["reply"] * 15 + ["script"] * 4 + ["run"]


class Watchdog(threading.Thread):
    """Notes the case running when a case passes :data:`HANG_SECONDS`; past
    :data:`STUCK_SECONDS` it reports the case and ends the process (a hang in C code cannot be
    interrupted)."""

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


def main() -> list[Figure]:
    total = count(200 if quick() else 10_000)
    folder = script_folder()
    runner = Runner(Path(tempfile.mkdtemp(prefix="fems-fuzz-run-")))
    failures_dir = Path("fuzz-failures")
    done: Counter[str] = Counter()
    spent: Counter[str] = Counter()
    tracebacks: Counter[str] = Counter()
    hangs: list[tuple[int, str, float]] = []
    slowest = (0.0, -1, "")
    watchdog = Watchdog()
    watchdog.start()
    start = time.perf_counter()
    for number in range(total):
        kind = KINDS[number % len(KINDS)]
        watchdog.begin(number, kind)
        began = time.perf_counter()
        try:
            run_case(number, kind, folder, runner)
        except Exception:  # a broken property: keep the case for replay
            tracebacks[kind] += 1
            if sum(tracebacks.values()) <= KEPT_FAILURES:
                failures_dir.mkdir(exist_ok=True)
                (failures_dir / f"case-{number}-{kind}.txt").write_text(
                    traceback.format_exc(), encoding="utf-8"
                )
        elapsed = time.perf_counter() - began
        done[kind] += 1
        spent[kind] += elapsed
        slowest = max(slowest, (elapsed, number, kind))
        if elapsed > HANG_SECONDS:
            hangs.append((number, kind, elapsed))
        if not quick() and (number + 1) % 10_000 == 0:
            print(f"  {number + 1:,} cases, {sum(tracebacks.values())} tracebacks", flush=True)
    watchdog.stop.set()
    seconds = time.perf_counter() - start
    for kind in ("reply", "script", "run"):
        mean = spent[kind] / max(done[kind], 1) * 1000
        print(f"{kind:<7} {done[kind]:>8,} cases  {tracebacks[kind]:>4} tracebacks  {mean:6.1f} ms")
    print(f"slowest case: {slowest[1]} ({slowest[2]}) {slowest[0]:.2f} s; total {seconds:.0f} s")
    for number, kind, elapsed in hangs:
        print(f"hang: case {number} ({kind}) {elapsed:.1f} s")
    return [
        Figure(f"fuzz: tracebacks in {total:,} cases", str(sum(tracebacks.values())), "0"),
        Figure(f"fuzz: cases over {HANG_SECONDS:.0f} s", str(len(hangs)), "0"),
        Figure("fuzz: slowest case", f"{slowest[0]:.2f} s", f"< {HANG_SECONDS:.0f} s"),
    ]
