"""Parse + check throughput of a generated 10,000-line script (lines per second), and the
time per node of four flow shapes at 1,000 and 10,000 nodes (linear: a ratio near 1)."""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from bench import Figure, quick
from bench.shapes import per_node_times, print_table
from fems2py.frontend import analyze_source

TARGET_LINES = 500 if quick() else 10_000
SIZES = (100, 1_000) if quick() else (1_000, 10_000)


def synthetic_script(target_lines: int = TARGET_LINES) -> str:
    """A valid script of about ``target_lines`` lines: many actions chained in a main flow,
    with conditions, forks and a loop, so every front-end stage has real work."""
    header = [
        "meta:",
        "    name = bench",
        "vars:",
        "    day = 0",
        "    alive = [@a, @b, @c]",
        "    votes = {}",
        '    @speaker = ""',
        "actors:",
        "    ai @a = soul:a",
        "    ai @b = soul:b",
        "    ai @c = soul:c",
    ]
    actions: list[str] = []
    flow = ["mainflow:", "    [START] -> [N0]"]
    index = 0
    while len(header) + len(actions) + len(flow) < target_lines:
        actions += [
            f"action talk{index} @ai(@a):",
            "    scope: [@a, @b]",
            "    prompt: |",
            f"        Day {{day}}: say something about {{alive}} (step {index}).",
            "        Keep it short.",
            "    out: day",
            f"action count{index} @assign:",
            "    out: day += 1",
        ]
        flow += [
            f"    [N{index}]: talk{index} -> fork:",
            f"        -> if (day > {index} and len(alive) > 0) -> count{index} -> [M{index}]",
            f"        -> if (day <= {index}) -> [M{index}]",
            f"    [M{index}] -> for @speaker in alive:",
            f"        -> talk{index} ->",
            f"    -> [N{index + 1}]",
        ]
        index += 1
    flow.append(f"    [N{index}] -> [END]")
    return "\n".join(header + actions + flow) + "\n"


def main() -> list[Figure]:
    source = synthetic_script()
    lines = source.count("\n")
    timings = []
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(5):
            started = time.perf_counter()
            _, diagnostics = analyze_source(source, "bench.fems", Path(folder))
            timings.append(time.perf_counter() - started)
    errors = [d for d in diagnostics if d.severity == "error"]
    if errors:
        raise SystemExit(f"the synthetic script has errors: {errors[0].format(source)}")
    best, median = min(timings), statistics.median(timings)
    print(f"   {lines} lines; best {best * 1000:.0f} ms, median {median * 1000:.0f} ms")
    print(f"   throughput: {lines / median:,.0f} lines/s (median of 5)")
    with tempfile.TemporaryDirectory() as folder:

        def check(source: str) -> None:
            _, found = analyze_source(source, "shape.fems", Path(folder))
            if any(d.severity == "error" for d in found):
                raise SystemExit(f"a generated shape has errors: {found[0].format(source)}")

        table = per_node_times(check, SIZES)
    print_table("check", table, SIZES)
    worst = max(table, key=lambda name: table[name][-1] / table[name][0])
    ratio = f"{table[worst][-1] / table[worst][0]:.2f}× ({worst})"
    return [
        Figure(f"parse + check, {lines:,}-line script", f"{lines / median:,.0f} lines/s"),
        Figure(f"check per node, {SIZES[-1]:,} / {SIZES[0]:,} nodes", ratio, "≤ 2×"),
    ]


if __name__ == "__main__":
    main()
