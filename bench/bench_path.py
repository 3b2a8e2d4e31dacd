"""The hallway of one AI turn: what the runtime does before the turn's HTTP request (#30 item 1).

golden/01_sequence runs twice in one process with ``--model openai/fake-model`` against
``bench/fake_server.py`` on 127.0.0.1 (an in-memory SQLite store): the first run warms the
imports, the second is watched with ``sys.setprofile`` from the moment ``@Bob``'s turn begins
(``Context.ai``) until the `openai` SDK is asked to ``post`` its request. The same is then
watched for a later turn of @Bob's, in the script with a second action of his: what the first
turn does once per run (resolving the model, its route and client) is not in it. Counted are the
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
AGAIN = """
action reply_again @ai(@Bob):
    prompt: Answer Ann again, in a {mood} voice.
    scope: [@Ann, @Bob]
    out: mood
"""  # the same shape as his first, `reply`


@dataclass
class TurnPath:
    """A profile function that follows one turn from ``Context.ai`` to the SDK's ``post``."""

    turn: int = 1  # which of the actor's turns (1: the run's first)
    files: set[str] = field(default_factory=set)
    functions: set[tuple[str, int, str]] = field(default_factory=set)
    crossings: int = 0
    started: bool = False
    ended: bool = False
    passed: list[FrameType] = field(default_factory=list)  # the turns before it

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or self.ended:
            return
        code = frame.f_code
        name = code.co_filename
        if not self.started:
            if name != FLOW or code.co_name != "ai" or frame.f_locals["executor"] != WATCHED:
                return
            if not any(turn is frame for turn in self.passed):  # not a resumption of one
                self.passed.append(frame)
            self.started = len(self.passed) == self.turn
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


def watch_turn(turn: int = 1) -> TurnPath:
    """Run the golden script twice against a fake server; the second run's path of @Bob's
    ``turn`` (his second: in the script with `AGAIN` added)."""
    source = SCRIPT.read_text(encoding="utf-8")
    if turn > 1:
        source = source.replace("-> reply ->", "-> reply -> reply_again ->") + AGAIN
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
            module = load_module(Path(folder), "sequence", source)
            module.run(model="openai/fake-model", db=":memory:")  # warm-up: imports, caches
            path = TurnPath(turn)
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
        raise RuntimeError(f"turn {turn} of {WATCHED} never reached the SDK's post")
    return path


def main() -> list[Figure]:
    path = watch_turn()
    for name in sorted(path.files):
        entered = sorted(f for f in path.functions if f[0] == name)
        print(f"   {name.removeprefix(RUNTIME)}: {', '.join(f[2] for f in entered)}")
    files, functions = len(path.files), len(path.functions)
    print(f"   {files} files, {functions} functions, {path.crossings} cross-file calls")
    later = watch_turn(2)
    print(
        f"   a later turn of {WATCHED}'s: {len(later.files)} files, {len(later.functions)} "
        f"functions, {later.crossings} cross-file calls (the first's once-per-run work left out)"
    )
    return [
        Figure("one AI turn before its request: runtime files", str(files), "≤ 15"),
        Figure("one AI turn before its request: functions", str(functions), "≤ 80"),
        Figure("one AI turn before its request: cross-file calls", str(path.crossings), "≤ 40"),
        Figure("a later turn before its request: files / functions", _pair(later), "—"),
    ]


def _pair(path: TurnPath) -> str:
    return f"{len(path.files)} / {len(path.functions)}"


if __name__ == "__main__":
    main()
