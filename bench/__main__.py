"""Run every benchmark, or those named: ``python -m bench [--quick] [--n N] [NAME…]``.

``python -m bench compare [options]`` runs the side-by-side comparison with the original FemWA
engine instead (``bench/compare.py``; ``--help`` lists its options): it installs FemWA, so
``make bench`` does not run it.

``--quick`` runs each one small, to check that it works (CI does, through the test suite);
its figures mean nothing. The run ends with the table of every figure measured.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback

from bench import COUNT, QUICK, Figure

BENCHMARKS = (
    "frontend",
    "build",
    "shape",
    "signals",
    "context",
    "mock_calls",
    "steps",
    "width",
    "start",
    "path",
    "fuzz",
    "batch",
)


def table(figures: list[Figure]) -> str:
    """The figures as a Markdown table (the one docs/PERFORMANCE.md shows)."""
    rows = [("figure", "measured", "target"), *((f.name, f.value, f.target) for f in figures)]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = [
        "| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |"
        for row in rows
    ]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def main(arguments: list[str]) -> int:
    arguments = list(arguments)
    if arguments[:1] == ["compare"]:
        from bench import compare

        return compare.command(arguments[1:])
    if "--n" in arguments:  # ``--n N``: the number of cases of a counting benchmark (fuzz)
        at = arguments.index("--n")
        if at + 1 >= len(arguments) or not arguments[at + 1].isdigit():
            print("--n needs a number of cases")
            return 2
        os.environ[COUNT] = arguments.pop(at + 1)
        arguments.pop(at)
    names = [a for a in arguments if a != "--quick"]
    if "--quick" in arguments:
        os.environ[QUICK] = "1"
    unknown = sorted(set(names) - set(BENCHMARKS))
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(BENCHMARKS)}")
        return 2
    figures: list[Figure] = []
    status = 0
    for name in names or BENCHMARKS:
        module = importlib.import_module(f"bench.bench_{name}")
        print(f"== {name}: {module.__doc__.splitlines()[0]}", flush=True)
        try:
            figures += module.main()
        except Exception as error:  # one broken benchmark still leaves the others' table
            traceback.print_exc()
            failed = f"failed: {type(error).__name__}: {str(error)[:60]}"
            figures.append(Figure(f"{name} (whole benchmark)", failed))
            status = 1
    print()
    print(table(figures))
    return status


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
