"""The hallway of one AI turn: what the runtime does before the turn's HTTP request (#30 item 1).

golden/01_sequence runs twice in one process with ``--model openai/fake-model`` against
``bench/fake_server.py`` on 127.0.0.1 (an in-memory SQLite store): the first run warms the
imports, the second is watched with ``sys.setprofile`` from the moment ``@Bob``'s turn begins
(``Context.ai``) until the `openai` SDK is asked to ``post`` its request. Counted are the
runtime files the turn enters, the distinct runtime functions it calls, and the calls that go
from one runtime file into another (each resumption of a coroutine counts as a call, as the
profiler reports it). The figures are counts, not times: they are the same on every run of
the same commit, so a change to the turn's path shows in them exactly.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from tempfile import TemporaryDirectory
from types import FrameType
from typing import Any

from bench import Figure
from bench.modules import load_module

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "golden" / "01_sequence" / "input.fems"
RUNTIME = str(ROOT / "runtime" / "fems_runtime") + os.sep
FLOW = RUNTIME + "flow.py"
WATCHED = "@Bob"  # the actor whose turn goes to the fake server (@Ann's source is fems/mock)


@dataclass
class TurnPath:
    """A profile function that follows one turn from ``Context.ai`` to the SDK's ``post``."""

    files: set[str] = field(default_factory=set)
    functions: set[tuple[str, int, str]] = field(default_factory=set)
    crossings: int = 0
    started: bool = False
    ended: bool = False

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or self.ended:
            return
        code = frame.f_code
        name = code.co_filename
        if not self.started:
            self.started = (
                name == FLOW and code.co_name == "ai" and frame.f_locals["executor"] == WATCHED
            )
            if not self.started:
                return
        if code.co_name == "post" and f"{os.sep}openai{os.sep}" in name:
            self.ended = True  # the request leaves
            return
        if not name.startswith(RUNTIME):
            return
        self.files.add(name)
        self.functions.add((name, code.co_firstlineno, code.co_qualname))
        caller = frame.f_back
        if caller is not None:
            where = caller.f_code.co_filename
            self.crossings += where != name and where.startswith(RUNTIME)


def watch_turn() -> TurnPath:
    """Run the golden script twice against a fake server; the second run's turn path."""
    server = subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "fake_server.py"), "0"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None and server.stdin is not None
    saved = {name: os.environ.get(name) for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY")}
    try:
        os.environ["OPENAI_BASE_URL"] = f"http://127.0.0.1:{server.stdout.readline().strip()}/v1"
        os.environ["OPENAI_API_KEY"] = "fake-key"
        with TemporaryDirectory() as folder:
            module = load_module(Path(folder), "sequence", SCRIPT.read_text(encoding="utf-8"))
            module.run(model="openai/fake-model", db=":memory:")  # warm-up: imports, caches
            path = TurnPath()
            sys.setprofile(path)
            try:
                module.run(model="openai/fake-model", db=":memory:")
            finally:
                sys.setprofile(None)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        server.stdin.close()
        server.wait()
    if not path.ended:
        raise RuntimeError(f"the turn of {WATCHED} never reached the SDK's post")
    return path


def main() -> list[Figure]:
    path = watch_turn()
    for name in sorted(path.files):
        entered = sorted(f for f in path.functions if f[0] == name)
        print(f"   {name.removeprefix(RUNTIME)}: {', '.join(f[2] for f in entered)}")
    files, functions = len(path.files), len(path.functions)
    print(f"   {files} files, {functions} functions, {path.crossings} cross-file calls")
    return [
        Figure("one AI turn before its request: runtime files", str(files), "≤ 15"),
        Figure("one AI turn before its request: functions", str(functions), "≤ 80"),
        Figure("one AI turn before its request: cross-file calls", str(path.crossings), "≤ 40"),
    ]


if __name__ == "__main__":
    main()
