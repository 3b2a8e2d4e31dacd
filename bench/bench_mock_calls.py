"""Engine-side cost of one model call with the offline ``fems/mock`` model (µs per call).

A generated module runs 500 AI turns in a ``for`` loop; everything but the model itself is
measured: prompt rendering, scope, context retrieval, message assembly, signal parsing and
validation, storage of prompt and reply with scope tags, and the flow. Reported for an
in-memory SQLite database and for a SQLite file (the default storage), after one warm-up run
so that one-off imports and schema creation are not counted.
"""

from __future__ import annotations

import importlib.util
import json
import os
import tempfile
import time
from pathlib import Path

from fems2py.build import build_source

TURNS = int(os.environ.get("FEMS_BENCH_TURNS", "500"))
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


def _load(module_path: Path):
    spec = importlib.util.spec_from_file_location("bench_calls", module_path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / "calls.fems"
        script.write_text(SCRIPT, encoding="utf-8")
        module_path = Path(folder) / "calls.py"
        module_path.write_text(build_source(script), encoding="utf-8")
        module = _load(module_path)
        module.run(model="fems/mock", seed=0, db=":memory:")  # warm-up: imports, schema, caches
        for label, db in (("in-memory SQLite", ":memory:"), ("SQLite file", f"{folder}/calls.db")):
            trace = Path(folder) / f"trace-{len(label)}.jsonl"
            started = time.perf_counter()
            module.run(model="fems/mock", seed=1, db=db, trace=str(trace))
            elapsed = time.perf_counter() - started
            calls = sum(1 for line in trace.open() if json.loads(line)["event"] == "llm_call")
            print(f"   {label}: {calls} calls, {elapsed / calls * 1e6:,.0f} µs per call")


if __name__ == "__main__":
    main()
