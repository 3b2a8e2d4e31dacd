"""Build time of the werewolf example, as ratios to black's own time on the same output.

"Cold" is the first build in a fresh process (the compiler's caches of its own tables warm,
the script never built), best of several processes; "black alone" is black formatting the
finished module in that process after the build, best of three. "Warm" is a rebuild in the
same process after a one-line prompt edit (what an author does all day), best of several
edits. The same comparison as two commands: ``python -m fems2py build`` against ``python -m
black`` on the finished module, each a fresh process (imports included), best of several.
Then the time per node of building four flow shapes at 1,000 and 10,000 nodes (black
included; linear: a ratio near 1). The 10,000-node builds take minutes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import black

from bench import Figure, quick
from bench.shapes import per_node_times, print_table
from fems2py.build import BLACK_MODE, build_source, forget_earlier_builds

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "werewolf"
PROMPT_LINE = "Speak once to the village"
SIZES = (50, 200) if quick() else (1_000, 10_000)
RUNS = 1 if quick() else 5


def _copy_example(folder: Path) -> Path:
    workdir = folder / "werewolf"
    shutil.copytree(EXAMPLE, workdir, ignore=shutil.ignore_patterns("build", ".fems-cache"))
    return workdir / "werewolf.fems"


def _best(run: Callable[[], object], times: int) -> float:
    best = float("inf")
    for _ in range(times):
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return best


def cold_once() -> None:
    """In a fresh process: the first build of werewolf and black alone on its output (JSON)."""
    with tempfile.TemporaryDirectory() as folder:
        script = _copy_example(Path(folder))
        started = time.perf_counter()
        output = build_source(script)
        cold = time.perf_counter() - started
    alone = _best(lambda: black.format_str(output, mode=BLACK_MODE), 3)
    print(json.dumps({"cold": cold, "black": alone, "lines": output.count("\n")}))


def _fresh(arguments: list[str]) -> float:
    """Wall time of a fresh Python process running ``arguments``."""
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, *arguments], check=True, env=environment, cwd=ROOT, capture_output=True
    )
    return time.perf_counter() - started


def _cold() -> tuple[float, float, int]:
    """Best cold build and best black alone over :data:`RUNS` fresh processes."""
    runs = []
    for _ in range(RUNS):
        completed = subprocess.run(
            [sys.executable, "-c", "from bench.bench_build import cold_once; cold_once()"],
            check=True,
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        runs.append(json.loads(completed.stdout.splitlines()[-1]))
    return min(r["cold"] for r in runs), min(r["black"] for r in runs), runs[0]["lines"]


def _commands(folder: Path) -> tuple[float, float]:
    """Best wall of ``fems2py build`` (a script never built) and of ``black`` on the finished
    module (its cache in a fresh folder, so it formats), over :data:`RUNS` runs."""
    builds, blacks = [], []
    for run in range(RUNS):
        (folder / str(run)).mkdir()
        script = _copy_example(folder / str(run))  # a new folder: no formatting kept from before
        output = folder / f"werewolf_{run}.py"
        builds.append(_fresh(["-m", "fems2py", "build", str(script), "-o", str(output)]))
        os.environ["BLACK_CACHE_DIR"] = str(folder / f"black-cache-{run}")
        try:
            blacks.append(_fresh(["-m", "black", "-q", str(output)]))
        finally:
            del os.environ["BLACK_CACHE_DIR"]
    return min(builds), min(blacks)


def _warm(folder: Path) -> float:
    """Best rebuild after a one-line prompt edit, in this process (first build not timed)."""
    script = _copy_example(folder)
    text = script.read_text(encoding="utf-8")
    if PROMPT_LINE not in text:
        raise SystemExit(f"the benchmark edits the line holding {PROMPT_LINE!r}; not found")
    build_source(script)
    best = float("inf")
    for edit in range(RUNS):
        changed = text.replace(PROMPT_LINE, f"{PROMPT_LINE} (edit {edit})", 1)
        script.write_text(changed, encoding="utf-8")
        started = time.perf_counter()
        build_source(script)
        best = min(best, time.perf_counter() - started)
    return best


def main() -> list[Figure]:
    cold, alone, lines = _cold()
    with tempfile.TemporaryDirectory() as folder:
        build_command, black_command = _commands(Path(folder))
    with tempfile.TemporaryDirectory() as folder:
        warm = _warm(Path(folder))
    print(f"   output: {lines} lines; black alone {alone * 1000:.0f} ms (best of {RUNS} processes)")
    print(f"   cold build {cold * 1000:.0f} ms = {cold / alone:.2f} × black")
    print(
        f"   commands: fems2py build {build_command * 1000:.0f} ms, black "
        f"{black_command * 1000:.0f} ms = {build_command / black_command:.2f} ×"
    )
    print(f"   warm rebuild after a one-line prompt edit {warm * 1000:.0f} ms (best of {RUNS})")
    figures = [
        Figure("cold build of werewolf / black alone", f"{cold / alone:.2f}×", "≤ 1.5×"),
        Figure("`fems2py build` / `black`, werewolf", f"{build_command / black_command:.2f}×"),
        Figure("warm rebuild after a one-line prompt edit", f"{warm:.3f} s", "≤ 0.3 s"),
    ]
    with tempfile.TemporaryDirectory() as folder:

        def build(source: str) -> None:
            script = Path(folder) / "shape.fems"
            script.write_text(source, encoding="utf-8")
            forget_earlier_builds()  # each of the best-of runs formats and proves in full
            build_source(script)

        try:
            table = per_node_times(build, SIZES)
        except Exception as error:  # keep the werewolf figures in the table
            print(f"   building the shape scripts failed: {type(error).__name__}: {error}")
            figures.append(Figure("build of the shape scripts", f"failed: {type(error).__name__}"))
        else:
            print_table("build", table, SIZES)
            worst = max(table, key=lambda name: table[name][-1] / table[name][0])
            ratio = table[worst][-1] / table[worst][0]
            figures.append(
                Figure(
                    f"build per node, {SIZES[-1]:,} / {SIZES[0]:,} nodes",
                    f"{ratio:.2f}× ({worst})",
                    "≤ 2×",
                )
            )
    return figures


if __name__ == "__main__":
    main()
