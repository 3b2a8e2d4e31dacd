"""Build time of the werewolf example, as ratios to black's own time on the same output.

"Cold" is the first build in a fresh process; "warm" is a rebuild in the same process after a
one-line prompt edit (what an author does all day). Black alone, formatting the finished module,
is the yardstick: a ratio near 1 means the compiler adds little on top of the formatter.
Then the time per node of building four flow shapes at 1,000 and 10,000 nodes (black
included; linear: a ratio near 1). The 10,000-node builds take minutes.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import black

from bench import Figure, quick
from bench.shapes import per_node_times, print_table
from fems2py.build import BLACK_MODE, build_source

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "werewolf"
PROMPT_LINE = "Speak once to the village"
SIZES = (50, 200) if quick() else (1_000, 10_000)


def _timed_build(script: Path) -> tuple[float, str]:
    started = time.perf_counter()
    output = build_source(script)
    return time.perf_counter() - started, output


def main() -> list[Figure]:
    with tempfile.TemporaryDirectory() as folder:
        workdir = Path(folder) / "werewolf"
        shutil.copytree(EXAMPLE, workdir, ignore=shutil.ignore_patterns("build", ".fems-cache"))
        script = workdir / "werewolf.fems"
        cold, output = _timed_build(script)
        started = time.perf_counter()
        black.format_str(output, mode=BLACK_MODE)
        black_alone = time.perf_counter() - started

        text = script.read_text(encoding="utf-8")
        if PROMPT_LINE not in text:
            raise SystemExit(f"the benchmark edits the line holding {PROMPT_LINE!r}; not found")
        script.write_text(text.replace(PROMPT_LINE, PROMPT_LINE + " (briefly)", 1), "utf-8")
        warm, _ = _timed_build(script)
    lines = output.count("\n")
    print(f"   output: {lines} lines; black alone {black_alone * 1000:.0f} ms")
    print(f"   cold build {cold * 1000:.0f} ms = {cold / black_alone:.2f} × black")
    print(
        f"   warm rebuild after a one-line prompt edit {warm * 1000:.0f} ms = {warm / black_alone:.2f} × black"
    )
    figures = [
        Figure("cold build of werewolf / black alone", f"{cold / black_alone:.2f}×", "≤ 1.5×"),
        Figure("warm rebuild after a one-line prompt edit", f"{warm:.3f} s", "≤ 0.3 s"),
    ]
    with tempfile.TemporaryDirectory() as folder:

        def build(source: str) -> None:
            script = Path(folder) / "shape.fems"
            script.write_text(source, encoding="utf-8")
            build_source(script)

        try:
            print_table("build", per_node_times(build, SIZES), SIZES)
        except Exception as error:  # keep the werewolf figures in the table
            print(f"   building the shape scripts failed: {type(error).__name__}: {error}")
            figures.append(Figure("build of the shape scripts", f"failed: {type(error).__name__}"))
    return figures


if __name__ == "__main__":
    main()
