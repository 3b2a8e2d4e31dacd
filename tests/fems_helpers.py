"""Build a ``.fems`` source in a temporary directory and run the generated module in-process."""

from __future__ import annotations

import importlib.util
import itertools
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

from fems2py.build import build_file

_numbers = itertools.count(1)


def build_script(
    directory: Path, source: str, files: dict[str, str] | None = None, name: str = "t.fems"
) -> Path:
    """Write the script (dedented) and its helper files, build it, return the module path."""
    for file_name, text in (files or {}).items():
        (directory / file_name).write_text(textwrap.dedent(text), encoding="utf-8")
    script = directory / name
    script.write_text(textwrap.dedent(source).lstrip("\n"), encoding="utf-8")
    output = directory / (Path(name).stem + "_gen.py")
    build_file(script, output)
    return output


def load(module_path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"fems_test_{next(_numbers)}", module_path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_script(
    directory: Path, source: str, files: dict[str, str] | None = None, **options: Any
) -> tuple[Any, list[dict[str, Any]]]:
    """Build and run; return the run result and the trace events."""
    module = load(build_script(directory, source, files))
    trace = directory / "trace.jsonl"
    options.setdefault("db", ":memory:")
    result = module.run(trace=str(trace), **options)
    return result, read_trace(trace)


def read_trace(trace: Path) -> list[dict[str, Any]]:
    """The events of a JSON-lines trace file, in order."""
    return [json.loads(line) for line in trace.read_text(encoding="utf-8").splitlines()]


def run_program(module_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the generated module as a program, in its own folder; capture its output."""
    return subprocess.run(
        [sys.executable, str(module_path), *args],
        capture_output=True,
        text=True,
        cwd=module_path.parent,
        check=False,
        timeout=120,
    )


def python_output(code: str) -> str:
    """Run ``code`` in a fresh interpreter (it must succeed); return what it printed."""
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout


def llm_calls(events: list[dict[str, Any]], action: str | None = None) -> list[dict[str, Any]]:
    """The llm_call events (of one action)."""
    return [
        e for e in events if e["event"] == "llm_call" and (action is None or e["action"] == action)
    ]


def sent_text(call: dict[str, Any]) -> str:
    """Everything an ``llm_call`` event sent: all message contents, joined."""
    return "\n".join(str(message.get("content", "")) for message in call["messages"])


def steps_of(events: list[dict[str, Any]], node: str) -> int:
    return sum(1 for e in events if e["event"] == "step" and e["node"] == node)
