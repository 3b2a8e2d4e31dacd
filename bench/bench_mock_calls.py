"""Engine-side cost of one model call with the offline ``fems/mock`` model (µs per call).

A generated module runs 2,000 AI turns in a ``for`` loop; everything but the model itself is
measured: prompt rendering, scope, context, message assembly, signal parsing and validation,
storage of prompt and reply with scope tags and the turn's checkpoint, and the flow. Reported
for an in-memory SQLite database and for a SQLite file (the default storage), after one
warm-up run so that one-off imports and schema creation are not counted. CPU time is shown
too, and the times the run waited (none: a turn never waits for the store's writer or a
thread), so on a loaded machine the gap between wall and CPU time is the time other processes
held the CPU. Each figure is the fastest of three runs.

Whether a call costs more as the run's transcript grows: a run of 6,000 turns, the actor
seeing every earlier reply and the narration of 350 characters before each turn; its last
1,000 calls against its second 1,000, as a ratio of CPU time (1: a call's cost does not grow
with the transcript).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from tempfile import TemporaryDirectory
from types import ModuleType
from typing import Any
from unittest.mock import patch

from fems_runtime.llm import ModelClient
from fems_runtime.otel import flush
from fems_runtime.otel.forward import export_process

from bench import Figure, load, quick, timed
from bench.modules import load_module
from bench.otlp_sink import otlp_sink

TURNS = 50 if quick() else 2_000
SPAN, LONG = (50, 200) if quick() else (1_000, 6_000)
NARRATION = " ".join(["The night is long, and the village listens at every door."] * 6)


def script(turns: int, narration: str = "") -> str:
    """``turns`` AI turns in a loop, each seeing every earlier reply (and ``narration``, shown
    to the room before each turn's prompt)."""
    shown = f"\n    showprompt: {narration} Turn {{n}}." if narration else ""
    return f"""\
vars:
    n = 0
actors:
    ai @a
    ai @b
action talk @ai(@a):
    scope: [@a, @b]{shown}
    prompt: Say something short about turn {{n}}.
    out: n: int
mainflow:
    [START] -> for i in range({turns}):
        -> talk ->
    -> [END]
"""


def main() -> list[Figure]:
    figures = []
    repeats = 1 if quick() else 3
    print(f"   ({load()})")
    with TemporaryDirectory() as folder:
        module = load_module(Path(folder), "calls", script(TURNS))
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
        figures.append(_growth(Path(folder), repeats))
        figures.append(_with_export(module, repeats))
    return figures


def _growth(folder: Path, repeats: int) -> Figure:
    """The CPU cost of a call late in a long run against one early on (in-memory SQLite, no
    export), both timed inside the same run: the CPU clock is read as each model call starts
    (a wrapper of :meth:`ModelClient.complete`), and a span of ``SPAN`` calls costs the time
    between its first and its last; each span's figure is its fastest of ``repeats`` runs."""
    module = load_module(folder, "calls_long", script(LONG, NARRATION))
    clock: list[float] = []
    complete = ModelClient.complete

    async def clocked(client: ModelClient, *args: Any, **options: Any) -> Any:
        clock.append(time.process_time())
        return await complete(client, *args, **options)

    early = late = float("inf")
    with patch.object(ModelClient, "complete", clocked):
        module.run(model="fems/mock", seed=0, db=":memory:", otel=False)  # warm-up
        for _ in range(repeats):
            clock.clear()
            module.run(model="fems/mock", seed=1, db=":memory:", otel=False)
            early = min(early, (clock[2 * SPAN] - clock[SPAN]) / SPAN * 1e6)
            late = min(late, (clock[-1] - clock[-1 - SPAN]) / SPAN * 1e6)
    print(
        f"   CPU per call, narration and replies in the context: {early:,.0f} µs over turns "
        f"{SPAN + 1:,}–{2 * SPAN:,}, {late:,.0f} µs over the last {SPAN:,} of {LONG:,} "
        f"({late / early:.2f} ×)"
    )
    value = f"{late / early:.2f} × ({late:,.0f} µs late, {early:,.0f} µs early, CPU)"
    return Figure(f"fems/mock call late in a {LONG:,}-turn run / early", value, "≈ 1 ×")


def _with_export(module: ModuleType, repeats: int) -> Figure:
    """The in-memory run again with ``--otel`` (issue 31): spans and metrics batched to an
    OTLP/HTTP receiver in another process (:mod:`bench.otlp_sink`), each run ending with a
    flush so that all of the export's work is counted. The run's CPU time (its process) and
    the export process's are shown apart: the run's is what export costs the run. Runs with
    and without export alternate, so that the ratio of their fastest CPU times (the target)
    compares runs made under the same load."""
    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = otlp_sink()
    module.run(model="fems/mock", seed=0, db=":memory:", otel=True)  # warm-up: imports
    flush()
    exporter = export_process().pid
    best: tuple[float, float, float] | None = None
    plain = float("inf")

    def exported() -> Any:
        result = module.run(model="fems/mock", seed=1, db=":memory:", otel=True)
        flush()  # every span sent: the export's work counts
        return result

    for _ in range(repeats):
        timing, result = timed(
            lambda: module.run(model="fems/mock", seed=1, db=":memory:", otel=False)
        )
        plain = min(plain, timing.cpu / result.model_calls * 1e6)
        export_cpu = process_cpu(exporter)
        timing, result = timed(exported)
        export_cpu = process_cpu(exporter) - export_cpu
        calls = result.model_calls
        run = (timing.wall / calls * 1e6, timing.cpu / calls * 1e6, export_cpu / calls * 1e6)
        best = run if best is None or run[1] < best[1] else best
    assert best is not None
    wall, cpu, export = best
    extra = f"{cpu / plain:.2f} × {plain:,.0f} without; export process {export:,.0f} CPU"
    print(f"   in-memory SQLite, --otel: {wall:,.0f} µs per call ({cpu:,.0f} CPU, {extra})")
    value = f"{wall:,.0f} µs ({cpu:,.0f} CPU, {extra})"
    return Figure("fems/mock model call, in-memory SQLite, --otel", value, "≤ 1.3 × without")


def process_cpu(pid: int) -> float:
    """CPU seconds process ``pid`` has used so far (Linux: ``/proc``, in clock ticks)."""
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")


if __name__ == "__main__":
    main()
