"""Engine-side cost of one model call with the offline ``fems/mock`` model (µs per call).

A generated module runs 2,000 AI turns in a ``for`` loop; everything but the model itself is
measured: prompt rendering, scope, context, message assembly, signal parsing and validation,
storage of prompt and reply with scope tags and the turn's checkpoint, and the flow. Reported
for an in-memory SQLite database and for a SQLite file (the default storage), after one
warm-up run so that one-off imports and schema creation are not counted. CPU time is shown
too, and the times the run waited (none: a turn never waits for the store's writer or a
thread), so on a loaded machine the gap between wall and CPU time is the time other processes
held the CPU. Each figure is the fastest of three runs.
"""

from __future__ import annotations

import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from tempfile import TemporaryDirectory
from types import ModuleType
from typing import Any

from fems_runtime.otel import flush

from bench import Figure, load, quick, timed
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
    repeats = 1 if quick() else 3
    print(f"   ({load()})")
    with TemporaryDirectory() as folder:
        module = load_module(Path(folder), "calls", SCRIPT)
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
        figures.append(_with_export(module, repeats))
    return figures


def _with_export(module: ModuleType, repeats: int) -> Figure:
    """The in-memory run again with ``--otel`` (issue 31): spans and metrics batched to an
    OTLP/HTTP collector on 127.0.0.1 that accepts everything, CPU time of its export thread
    included."""
    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = otlp_sink()
    module.run(model="fems/mock", seed=0, db=":memory:", otel=True)  # warm-up: imports
    flush()

    def exported() -> Any:
        result = module.run(model="fems/mock", seed=1, db=":memory:", otel=True)
        flush()  # every span sent: the export's work counts
        return result

    timing, result = timed(exported, repeats)
    wall = timing.wall / result.model_calls * 1e6
    cpu = timing.cpu / result.model_calls * 1e6
    print(f"   in-memory SQLite, --otel: {wall:,.0f} µs per call ({cpu:,.0f} CPU)")
    value = f"{wall:,.0f} µs ({cpu:,.0f} CPU)"
    return Figure("fems/mock model call, in-memory SQLite, --otel", value, "≤ 1.3 × without")


def otlp_sink() -> str:
    """An OTLP/HTTP endpoint on 127.0.0.1 that answers every export 200 and keeps nothing,
    serving for the rest of the process (the exporter's last flush comes at its exit)."""

    class Sink(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


if __name__ == "__main__":
    main()
