"""Build time of the werewolf example, as ratios to black's own time on the same output.

"Cold" is the first build in a fresh process (imports done, the compiler's caches of its own
tables warm, the script never built), best of several processes; "black alone" is black's first
formatting of the finished module in another fresh process that imports black alone, with the
same mode, best of as many processes: both pay what a process pays the first time it does the
work. Black again in that process (warm, best of three) is printed too. The same comparison as two commands,
what an author waits for: ``python -m fems2py build`` against ``python -m black`` on the finished
module, each a fresh process (imports included), best of several. Every fresh process keeps
Python's bytecode (in a temporary ``PYTHONPYCACHEPREFIX``, after one untimed run), as an
installed package has it: ``PYTHONDONTWRITEBYTECODE`` would make each process compile
fems2py's sources again, which black (installed, compiled) never does.
"Warm" is a rebuild in the same process after a one-line prompt edit (what an author does all
day), best of several edits. Then the time per node of building four flow shapes at 1,000 and
10,000 nodes (black included; linear: a ratio near 1). The 10,000-node builds take minutes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import Figure, quick
from bench.shapes import per_node_times, print_table
from fems2py.build import BLACK_MODE, build_source, forget_earlier_builds

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "werewolf"
PROMPT_LINE = "Speak once to the village"
SIZES = (50, 200) if quick() else (1_000, 10_000)
RUNS = 1 if quick() else 5
PROCESSES = 1 if quick() else 10
"""Fresh processes per figure of the cold comparisons: each lasts about a second, and on a
loaded machine the best of ten is what the work costs when the process had a core to itself."""


def _copy_example(folder: Path) -> Path:
    workdir = folder / "werewolf"
    shutil.copytree(EXAMPLE, workdir, ignore=shutil.ignore_patterns("build", ".fems-cache"))
    return workdir / "werewolf.fems"


def cold_once(output: str) -> None:
    """In a fresh process: the first build of werewolf (JSON: seconds), its module written to
    ``output`` for :data:`BLACK_ALONE`."""
    with tempfile.TemporaryDirectory() as folder:
        script = _copy_example(Path(folder))
        started = time.perf_counter()
        module = build_source(script)
        cold = time.perf_counter() - started
    Path(output).write_text(module, encoding="utf-8")
    print(json.dumps({"cold": cold, "lines": module.count("\n")}))


BLACK_ALONE = """
import json, sys, time
import black
module = open(sys.argv[1], encoding="utf-8").read()
versions = {black.TargetVersion[name] for name in sys.argv[2].split(",")}
mode = black.Mode(target_versions=versions, line_length=int(sys.argv[3]))
times = []
for _ in range(4):
    started = time.perf_counter()
    black.format_str(module, mode=mode)
    times.append(time.perf_counter() - started)
print(json.dumps({"first": times[0], "warm": min(times[1:])}))
"""
"""A fresh process that imports black alone (what else a process holds slows black down: its
collector walks it) and formats the module at ``argv[1]`` in the build's mode, four times: the
first time and the best of the other three (JSON: seconds)."""


def _environment(pycache: Path) -> dict[str, str]:
    """A fresh process's environment: this checkout's compiler and runtime importable, bytecode
    kept in ``pycache``."""
    path = os.pathsep.join([str(ROOT), str(ROOT / "runtime")])
    environment = {**os.environ, "PYTHONPATH": path, "PYTHONPYCACHEPREFIX": str(pycache)}
    environment.pop("PYTHONDONTWRITEBYTECODE", None)
    return environment


def _fresh(arguments: list[str], environment: dict[str, str]) -> str:
    """The standard output of a fresh Python process running ``arguments``."""
    completed = subprocess.run(
        [sys.executable, *arguments],
        check=True,
        env=environment,
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    return completed.stdout


def _timed(arguments: list[str], environment: dict[str, str]) -> float:
    """Wall time of a fresh Python process running ``arguments``."""
    started = time.perf_counter()
    _fresh(arguments, environment)
    return time.perf_counter() - started


def _cold_build(output: Path, environment: dict[str, str]) -> dict[str, float]:
    code = f"from bench.bench_build import cold_once; cold_once({str(output)!r})"
    return json.loads(_fresh(["-c", code], environment).splitlines()[-1])


def _black_alone(output: Path, environment: dict[str, str]) -> dict[str, float]:
    versions = ",".join(sorted(version.name for version in BLACK_MODE.target_versions))
    arguments = ["-c", BLACK_ALONE, str(output), versions, str(BLACK_MODE.line_length)]
    return json.loads(_fresh(arguments, environment).splitlines()[-1])


def _cold(folder: Path, environment: dict[str, str]) -> tuple[float, float, float, int]:
    """Best cold build, best first black and best warm black over :data:`PROCESSES` pairs of fresh
    processes (after one untimed pair that writes the bytecode), and the module's lines."""
    output = folder / "werewolf.py"
    _cold_build(output, environment)
    _black_alone(output, environment)
    builds, blacks = [], []
    for _ in range(PROCESSES):
        builds.append(_cold_build(output, environment))
        blacks.append(_black_alone(output, environment))
    return (
        min(b["cold"] for b in builds),
        min(b["first"] for b in blacks),
        min(b["warm"] for b in blacks),
        int(builds[0]["lines"]),
    )


_BLACK_OPTIONS = [
    f"--line-length={BLACK_MODE.line_length}",
    *(f"--target-version={version.name.lower()}" for version in BLACK_MODE.target_versions),
]
"""The build's mode on black's command line (unset, black would infer the target versions from
the module, work the build does not do)."""


def _commands(folder: Path, environment: dict[str, str]) -> tuple[float, float]:
    """Best wall of ``fems2py build`` (a script never built) and of ``black`` on the finished
    module (its cache in a fresh folder, so it formats), over :data:`PROCESSES` runs after an
    untimed one of each."""
    builds, blacks = [], []
    for run in range(PROCESSES + 1):
        (folder / str(run)).mkdir()
        script = _copy_example(folder / str(run))  # a new folder: no formatting kept from before
        output = folder / f"werewolf_{run}.py"
        build = _timed(["-m", "fems2py", "build", str(script), "-o", str(output)], environment)
        black_cache = {**environment, "BLACK_CACHE_DIR": str(folder / f"black-cache-{run}")}
        formatting = _timed(["-m", "black", "-q", *_BLACK_OPTIONS, str(output)], black_cache)
        if run:  # the first run writes the bytecode
            builds.append(build)
            blacks.append(formatting)
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
    with tempfile.TemporaryDirectory() as folder:
        environment = _environment(Path(folder) / "pycache")
        (Path(folder) / "cold").mkdir()
        cold, alone, warm_black, lines = _cold(Path(folder) / "cold", environment)
        (Path(folder) / "commands").mkdir()
        build_command, black_command = _commands(Path(folder) / "commands", environment)
    with tempfile.TemporaryDirectory() as folder:
        warm = _warm(Path(folder))
    print(
        f"   output: {lines} lines; black alone {alone * 1000:.0f} ms first in a fresh "
        f"process, {warm_black * 1000:.0f} ms warm (best of {PROCESSES} processes)"
    )
    print(
        f"   cold build {cold * 1000:.0f} ms = {cold / alone:.2f} × black alone "
        f"({cold / warm_black:.2f} × black warm)"
    )
    print(
        f"   commands: fems2py build {build_command * 1000:.0f} ms, black "
        f"{black_command * 1000:.0f} ms = {build_command / black_command:.2f} ×"
    )
    print(f"   warm rebuild after a one-line prompt edit {warm * 1000:.0f} ms (best of {RUNS})")
    figures = [
        Figure("cold build of werewolf / black alone", f"{cold / alone:.2f}×", "≤ 1.5×"),
        Figure(
            "`fems2py build` / `black`, werewolf",
            f"{build_command / black_command:.2f}×",
            "≤ 1.5×",
        ),
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
