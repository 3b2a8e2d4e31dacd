"""Engine cost of one ``@assign`` step (µs per step): a loop of two nodes, one assignment each.

No model and no store traffic: what is left is the flow itself, counting steps, the variable
write under the branch rule and the trace hook. Measured after a warm-up run.
"""

from __future__ import annotations

import time
from pathlib import Path
from tempfile import TemporaryDirectory

from bench import Figure, quick
from bench.modules import load_module

STEPS = 1_000 if quick() else 100_000
SCRIPT = f"""\
meta:
    max_steps = {STEPS * 2}
vars:
    n = 0
action inc @assign:
    out: n += 1
mainflow:
    [A]: inc
    [B]: inc
    [START] -> [A] -> [B]
    [B] -> if (n < {STEPS}) -> [A]
    [B] -> if (n >= {STEPS}) -> [END]
"""


def main() -> list[Figure]:
    with TemporaryDirectory() as folder:
        module = load_module(Path(folder), "steps", SCRIPT)
        module.run(db=":memory:")  # warm-up
        started, cpu = time.perf_counter(), time.process_time()
        result = module.run(db=":memory:")
        wall = (time.perf_counter() - started) / result.steps * 1e6
        cpu = (time.process_time() - cpu) / result.steps * 1e6
    print(f"   {result.steps:,} steps: {wall:.2f} µs per step ({cpu:.2f} CPU)")
    return [Figure("@assign step", f"{wall:.2f} µs", "≤ 5 µs")]


if __name__ == "__main__":
    main()
