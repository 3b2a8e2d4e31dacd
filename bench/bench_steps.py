"""Engine cost of one ``@assign`` step (µs per step): a loop of two nodes, one assignment each.

No model and no store traffic: what is left is the flow itself, counting steps, the variable
write under the branch rule and the trace hook. Measured after a warm-up run, the fastest of
three runs, with its CPU time and the times it waited (see ``bench_mock_calls``).
"""

from __future__ import annotations

from pathlib import Path
from tempfile import TemporaryDirectory

from bench import Figure, load, quick, timed
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
    print(f"   ({load()})")
    with TemporaryDirectory() as folder:
        module = load_module(Path(folder), "steps", SCRIPT)
        module.run(db=":memory:")  # warm-up
        timing, result = timed(lambda: module.run(db=":memory:"), 1 if quick() else 3)
    wall = timing.wall / result.steps * 1e6
    cpu = timing.cpu / result.steps * 1e6
    print(
        f"   {result.steps:,} steps: {wall:.2f} µs per step ({cpu:.2f} CPU, {timing.waits} waits)"
    )
    return [Figure("@assign step", f"{wall:.2f} µs ({cpu:.2f} CPU)", "≤ 5 µs")]


if __name__ == "__main__":
    main()
