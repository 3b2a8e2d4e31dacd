"""Engine-side cost of one model call with the offline ``fems/mock`` model (µs per call).

A generated module runs 2,000 AI turns in a ``for`` loop; everything but the model itself is
measured: prompt rendering, scope, context, message assembly, signal parsing and validation,
storage of prompt and reply with scope tags and the turn's checkpoint, and the flow. Reported
for an in-memory SQLite database and for a SQLite file (the default storage), after one
warm-up run so that one-off imports and schema creation are not counted. CPU time is shown
too, and the times the run waited (none: a turn never waits for the store's writer or a
thread), so on a loaded machine the gap between wall and CPU time is the time other processes
held the CPU. Each figure is the fastest of three runs.
"""

from __future__ import annotations

from pathlib import Path
from tempfile import TemporaryDirectory

from bench import Figure, load, quick, timed
from bench.modules import load_module

TURNS = 50 if quick() else 2_000
SCRIPT = f"""\
vars:
    n = 0
actors:
    ai @a
    ai @b
action talk @ai(@a):
    scope: [@a, @b]
    prompt: Say something short about turn {{n}}.
    out: n: int
mainflow:
    [START] -> for i in range({TURNS}):
        -> talk ->
    -> [END]
"""


def main() -> list[Figure]:
    figures = []
    repeats = 1 if quick() else 3
    print(f"   ({load()})")
    with TemporaryDirectory() as folder:
        module = load_module(Path(folder), "calls", SCRIPT)
        module.run(model="fems/mock", seed=0, db=":memory:")  # warm-up: imports, schema, caches
        for label, db in (("in-memory SQLite", ":memory:"), ("SQLite file", f"{folder}/calls.db")):
            timing, result = timed(
                lambda db=db: module.run(model="fems/mock", seed=1, db=db), repeats
            )
            wall = timing.wall / result.model_calls * 1e6
            cpu = timing.cpu / result.model_calls * 1e6
            print(
                f"   {label}: {result.model_calls} calls, {wall:,.0f} µs per call "
                f"({cpu:,.0f} CPU, {timing.waits} waits)"
            )
            figures.append(
                Figure(
                    f"fems/mock model call, {label}", f"{wall:,.0f} µs ({cpu:,.0f} CPU)", "≤ 500 µs"
                )
            )
    return figures


if __name__ == "__main__":
    main()
