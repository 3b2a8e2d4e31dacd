"""Engine-side cost of one model call with the offline ``fems/mock`` model (µs per call).

A generated module runs 2,000 AI turns in a ``for`` loop; everything but the model itself is
measured: prompt rendering, scope, context, message assembly, signal parsing and validation,
storage of prompt and reply with scope tags and the turn's checkpoint, and the flow. Reported
for an in-memory SQLite database and for a SQLite file (the default storage), after one
warm-up run so that one-off imports and schema creation are not counted. CPU time is shown
too: on a loaded machine the wall clock also counts the time other processes held the CPU.
"""

from __future__ import annotations

import time
from pathlib import Path
from tempfile import TemporaryDirectory

from bench import Figure, quick
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
    with TemporaryDirectory() as folder:
        module = load_module(Path(folder), "calls", SCRIPT)
        module.run(model="fems/mock", seed=0, db=":memory:")  # warm-up: imports, schema, caches
        for label, db in (("in-memory SQLite", ":memory:"), ("SQLite file", f"{folder}/calls.db")):
            started, cpu = time.perf_counter(), time.process_time()
            result = module.run(model="fems/mock", seed=1, db=db)
            wall = (time.perf_counter() - started) / result.model_calls * 1e6
            cpu = (time.process_time() - cpu) / result.model_calls * 1e6
            print(
                f"   {label}: {result.model_calls} calls, {wall:,.0f} µs per call ({cpu:,.0f} CPU)"
            )
            figures.append(Figure(f"fems/mock model call, {label}", f"{wall:,.0f} µs", "≤ 500 µs"))
    return figures


if __name__ == "__main__":
    main()
