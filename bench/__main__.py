"""Run every benchmark, or those named on the command line: ``python -m bench [NAME…]``."""

from __future__ import annotations

import importlib
import sys

BENCHMARKS = ("frontend", "build", "context", "mock_calls", "signals")


def main(names: list[str]) -> int:
    unknown = sorted(set(names) - set(BENCHMARKS))
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(BENCHMARKS)}")
        return 2
    for name in names or BENCHMARKS:
        module = importlib.import_module(f"bench.bench_{name}")
        print(f"== {name}: {module.__doc__.splitlines()[0]}")
        module.main()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
