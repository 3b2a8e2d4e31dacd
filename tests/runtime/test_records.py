"""Run errors, traces, result files, step limits (§3, §11.6, §16.3), and a light import."""

from __future__ import annotations

import io
import json
import threading
from pathlib import Path

import pytest
from fems_helpers import python_output
from fems_runtime.records import RunError, StepCounter, TraceWriter, write_result
from fems_runtime.values import Actor


@pytest.mark.parametrize(
    ("file", "line", "location", "text"),
    [
        ("game.fems", 12, "game.fems:12", "game.fems:12: error: boom"),
        ("game.fems", None, "game.fems", "game.fems: error: boom"),
        (None, 3, "line 3", "line 3: error: boom"),
        (None, None, "", "boom"),
    ],
)
def test_run_error_location(file, line, location, text) -> None:
    error = RunError("boom", file, line)
    assert error.location == location and str(error) == text and error.message == "boom"


def test_located_keeps_the_innermost_location() -> None:
    error = RunError("x", None, 5).located("a.fems", 9)
    assert (error.file, error.line) == ("a.fems", 5)


def test_trace_writer_jsonl(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    with TraceWriter(path) as trace:
        assert trace.enabled
        trace.write(
            "llm_call", action="vote", actor=Actor("@Eve"), scope=(Actor("@Eve"),), node="V"
        )
        threads = [
            threading.Thread(target=trace.write, args=("step",), kwargs={"node": str(i)})
            for i in range(20)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    lines = path.read_text(encoding="utf-8").splitlines()
    first = json.loads(lines[0])
    assert first == {
        "event": "llm_call",
        "action": "vote",
        "actor": "@Eve",
        "scope": ["@Eve"],
        "node": "V",
    }
    assert sorted(json.loads(x)["node"] for x in lines[1:]) == sorted(str(i) for i in range(20))


def test_trace_writer_disabled_and_stream() -> None:
    TraceWriter(None).write("step", node="A")
    stream = io.StringIO()
    trace = TraceWriter(stream)
    trace.write("step", node="中")
    trace.close()
    assert json.loads(stream.getvalue()) == {"event": "step", "node": "中"}
    assert not stream.closed


def test_write_result(tmp_path: Path) -> None:
    path = tmp_path / "result.json"
    write_result(
        path, session=3, status="completed", steps=12, variables={"w": Actor("@a"), "n": 1}
    )
    assert json.loads(path.read_text(encoding="utf-8")) == {
        "session": 3,
        "status": "completed",
        "steps": 12,
        "vars": {"w": "@a", "n": 1},
        "error": None,
    }
    with pytest.raises(ValueError):
        write_result(path, session=1, status="done", steps=0, variables={})


def test_step_counter_names_the_last_nodes() -> None:
    counter = StepCounter(3)
    for node in ("START", "A", "B"):
        counter.step(node)
    with pytest.raises(
        RunError, match=r"max_steps \(3\) exceeded in the run; last nodes: .*\[B\] -> \[C\]"
    ) as info:
        counter.step("C", "g.fems", 7)
    assert info.value.location == "g.fems:7"


def test_module_counter_counts_for_the_run_but_not_for_outer_modules() -> None:
    run = StepCounter(100)
    outer = run.child(3, "module Outer")
    outer.step("IN")
    outer.step("call Inner")
    inner = outer.child(10, "module Inner")
    for _ in range(5):
        inner.step("X")
    outer.step("OUT")
    assert (run.count, outer.count, inner.count) == (8, 3, 5)
    with pytest.raises(RunError, match="module Outer"):
        outer.step("again")


def test_unlimited_module_counter() -> None:
    run = StepCounter(2)
    module = run.child(None, "module M")
    module.step("A")
    module.step("B")
    with pytest.raises(RunError, match="the run"):
        module.step("C")


def test_import_is_light() -> None:
    code = (
        "import sys, fems_runtime\n"
        "import fems_runtime.values, fems_runtime.variables, fems_runtime.prompts\n"
        "import fems_runtime.signals, fems_runtime.store, fems_runtime.context\n"
        "import fems_runtime.human, fems_runtime.funcs, fems_runtime.records\n"
        "heavy = [m for m in ('litellm', 'fems2py', 'sqlalchemy', 'yaml') if m in sys.modules]\n"
        "print(heavy)\n"
    )
    out = python_output(code)
    assert out.strip() == "[]"


def test_package_import_does_not_import_litellm() -> None:
    code = "import sys, fems_runtime; print('litellm' in sys.modules, 'fems2py' in sys.modules)"
    out = python_output(code)
    assert out.strip() == "False False"
