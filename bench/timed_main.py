"""Run a generated module as ``python MODULE.py ARGS`` does, and time the run itself.

    PYTHON bench/timed_main.py MODULE.py TIMINGS.json -- ARGS...

``python -m bench compare --offline`` uses it: it loads the module, calls ``PROGRAM.main(ARGS)``
(what the module's own ``__main__`` block does) and writes ``{"import_s", "main_s", "rc"}`` to
TIMINGS.json, so ``main_s`` is the engine's time without interpreter start-up and imports.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time


def main(arguments: list[str]) -> int:
    if len(arguments) < 3 or arguments[2] != "--":
        print("usage: timed_main.py MODULE.py TIMINGS.json -- ARGS...", file=sys.stderr)
        return 2
    module_path, timings_path, module_arguments = arguments[0], arguments[1], arguments[3:]
    began = time.perf_counter()
    spec = importlib.util.spec_from_file_location("fems_bench_module", module_path)
    if spec is None or spec.loader is None:
        print(f"timed_main.py: cannot load {module_path}", file=sys.stderr)
        return 2
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    import_s = time.perf_counter() - began
    began = time.perf_counter()
    status = int(module.PROGRAM.main(module_arguments))
    main_s = time.perf_counter() - began
    with open(timings_path, "w", encoding="utf-8") as file:
        json.dump({"import_s": import_s, "main_s": main_s, "rc": status}, file)
    return status


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
