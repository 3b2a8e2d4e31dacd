"""Run a ``.fems`` script with the original FemWA 1.1.11 engine, without its terminal prompts.

    FEMWA_VENV/bin/python bench/femwa_headless.py SCRIPT.fems --result RESULT.json

``python -m bench compare`` runs this file with the interpreter of its FemWA venv. It does what
``femwa SCRIPT.fems`` (FemWA's ``main.cli_main``) does, minus the ``(y/N)`` confirmation and the
``clear`` calls that make the stock command unusable in a batch job: ``prepare_database()``,
``parse_script(text, base_dir)``, ``run_script(script, base_dir)``. No FemWA code is changed;
pass-through wrappers count the model calls and keep the final variables.

FemWA picks its endpoint from ``OPENAI_API_KEY`` / ``OPENAI_API_MODEL`` / ``OPENAI_API_URL`` (no
other ``*_API_KEY`` may be set: it takes the first provider of its table that has a key). Its
database is always ``$HOME/FemWA/user_data/memory/Chronica.wor``, so every run gets a fresh
``$HOME``. Standard library and FemWA only: this runs outside the project's environment.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from typing import Any

STARTED = time.perf_counter()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("script")
    parser.add_argument("--result", required=True, help="write a JSON summary here")
    options = parser.parse_args()
    result: dict[str, Any] = {"script": options.script, "ok": False, "error": None}

    began = time.perf_counter()
    import femBridges.llmBridge as llm_bridge
    import femCompiler.FEM_runtime as fem_runtime
    import main as femwa_main  # FemWA's wheel installs its command as a top-level module
    from femCompiler.db_utils import _get_conn, check_soul_id_exists
    from femCompiler.FEM_parser import parse_script

    result["import_s"] = time.perf_counter() - began

    # FemWA looks these up at call time, so wrapping the module attributes is enough
    calls = {"n": 0, "failed": 0}
    lock = threading.Lock()
    call_model = llm_bridge.call_ai_with_blocks

    def counted_call(*args: Any, **kwargs: Any) -> Any:
        reply = call_model(*args, **kwargs)
        with lock:
            calls["n"] += 1
            calls["failed"] += reply is None
        return reply

    llm_bridge.call_ai_with_blocks = counted_call

    runners: list[Any] = []
    make_runner = fem_runtime.FEMRunner.__init__

    def keep_runner(self: Any, *args: Any, **kwargs: Any) -> None:
        make_runner(self, *args, **kwargs)
        runners.append(self)

    fem_runtime.FEMRunner.__init__ = keep_runner

    # the main flow runs inside ExecutionContext("__main__"): the variables it writes live in
    # that context's locals, not in vm.globals, so keep them when it exits
    main_locals: dict[str, Any] = {}
    leave_context = fem_runtime.ExecutionContext.__exit__

    def keep_locals(self: Any, *args: Any) -> Any:
        if self.module_name == "__main__":
            main_locals.update(self.locals)
        return leave_context(self, *args)

    fem_runtime.ExecutionContext.__exit__ = keep_locals

    began = time.perf_counter()
    femwa_main.prepare_database()
    with open(options.script, encoding="utf-8") as file:
        text = file.read()
    base_dir = os.path.dirname(os.path.abspath(options.script))
    script = parse_script(text, base_dir=base_dir)
    # a missing soul only costs FemWA a warning and an empty persona, but real scripts have
    # souls: one row per actor, in one transaction
    rows = [
        (str(actor.soul), name.lstrip("@"), f"You are {name}.", "u001", "u001")
        for name, actor in script.actors.items()
        if actor.soul and not check_soul_id_exists(str(actor.soul))
    ]
    if rows:
        connection = _get_conn()
        connection.executemany(
            "INSERT INTO souls (soul_id, soul_name, description, user_id, created_by) "
            "VALUES (?, ?, ?, ?, ?)",
            rows,
        )
        connection.commit()
        connection.close()
    result["prep_s"] = time.perf_counter() - began

    began = time.perf_counter()
    try:
        fem_runtime.run_script(script, base_dir=base_dir)
        result["ok"] = True
    except BaseException as error:  # recorded in the result; the exit status says it failed
        result["error"] = f"{type(error).__name__}: {error}"
    result["run_s"] = time.perf_counter() - began
    result["llm_calls"] = calls["n"]
    result["llm_failed"] = calls["failed"]
    final = dict(runners[-1].vm.globals) if runners else {}
    final.update(main_locals)
    result["final_vars"] = {
        key: value
        if isinstance(value, int | float | str | bool) or value is None
        else repr(value)[:200]
        for key, value in final.items()
    }
    result["total_s"] = time.perf_counter() - STARTED
    with open(options.result, "w", encoding="utf-8") as file:
        json.dump(result, file, ensure_ascii=False, indent=1)
    sys.stdout.flush()
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
