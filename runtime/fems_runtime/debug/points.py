"""Where a run can stop, in ``.fems`` lines, and the breakpoints an editor set there.

The generated module is read once with :mod:`ast`: each flow function's ``ctx.step``,
``ctx.loop`` and ``ctx.call`` is a node (its ``.fems`` line from the module's line table), each
action function spans the ``.fems`` lines from its header to its last field. A breakpoint on
another line moves to the next line that has something to stop on (the protocol's answer
carries the line), or is unverified when nothing follows.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fems_runtime.linetable import LineTable
from fems_runtime.names import DeclaredNames

_NODE_CALLS = frozenset({"step", "loop", "call", "fork"})
_MODEL_CALLS = frozenset({"ai", "mind"})
_ACTION_CALLS = frozenset({*_MODEL_CALLS, "human", "func", "assign"})


@dataclass(frozen=True)
class ActionSpan:
    """One action's ``.fems`` lines. An ``@ai`` or ``@mind`` turn stops where its model call
    is about to be sent, except a ``@mind`` whose ``executor`` is a person; other actions stop
    at their node."""

    name: str
    function: str
    first: int
    last: int
    turn: bool
    executor: str | None = None

    def __contains__(self, line: int) -> bool:
        return self.first <= line <= self.last


class StopMap:
    """The stop lines of one generated module."""

    def __init__(self, module_file: str, lines: LineTable, names: DeclaredNames) -> None:
        self.node_lines: set[int] = set()
        self.actions: dict[str, ActionSpan] = {}  # by generated function name
        tree = ast.parse(Path(module_file).read_text(encoding="utf-8"))
        for function in ast.walk(tree):
            if isinstance(function, ast.AsyncFunctionDef):
                self._read(function, lines, names)

    def _read(self, function: ast.AsyncFunctionDef, lines: LineTable, names: DeclaredNames) -> None:
        calls = [
            node
            for node in ast.walk(function)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "ctx"
        ]
        called = {call.func.attr for call in calls}  # type: ignore[attr-defined]
        if called & _NODE_CALLS:
            for call in calls:
                if call.func.attr in _NODE_CALLS:  # type: ignore[attr-defined]
                    line = lines.line(call.lineno)
                    if line is not None:
                        self.node_lines.add(line)
        elif called & _ACTION_CALLS:
            first = lines.line(function.lineno)
            end = function.end_lineno or function.lineno
            spanned = [lines.line(n) for n in range(function.lineno, end + 1)]
            if first is not None:
                last = max(line for line in spanned if line is not None)
                turn = bool(called & _MODEL_CALLS)
                name = names.of(function.name)
                executor = _executor(calls)
                span = ActionSpan(name, function.name, first, last, turn, executor)
                self.actions[function.name] = span

    def place(self, line: int) -> int | None:
        """Where a breakpoint asked for at ``line`` stops: this line or the next with a node
        or an action on it (None: nothing from here on)."""
        candidates = [n for n in self.node_lines if n >= line]
        for span in self.actions.values():
            if line in span:
                return line
            if span.first >= line:
                candidates.append(span.first)
        return min(candidates, default=None)

    def action_lines(self, function: str) -> ActionSpan | None:
        return self.actions.get(function)


def _executor(calls: list[ast.Call]) -> str | None:
    """The executor a model call (``ctx.mind("@x", …)``) names: the generated code writes it
    as text. A ``@mind``'s decides whether it stops at its model call or at its node."""
    for call in calls:
        if call.func.attr in _MODEL_CALLS and call.args:  # type: ignore[attr-defined]
            first = call.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                return first.value
    return None


_HIT = re.compile(r"\s*(==|>=|>|%)?\s*(\d+)\s*")
HIT_COUNT_HELP = "hit count: give N, >= N, == N or % N"


@dataclass
class Breakpoint:
    """One breakpoint as the editor set it, with how often it was reached (its condition
    holding)."""

    id: int
    line: int
    condition: str | None = None
    hit_condition: str | None = None
    log_message: str | None = None
    hits: int = field(default=0)

    def hit_allows(self) -> bool:
        """Count one hit; whether the hit condition (``5``: the fifth, ``>= 5``, ``% 2``) lets
        it stop."""
        self.hits += 1
        if not self.hit_condition:
            return True
        found = _HIT.fullmatch(self.hit_condition)
        if found is None:
            return True
        op, number = found[1] or "==", int(found[2])  # a bare N: the N-th hit
        if op == "%":
            return number > 0 and self.hits % number == 0
        if op == "==":
            return self.hits == number
        if op == ">":
            return self.hits > number
        return self.hits >= number


def valid_hit_condition(text: str | None) -> bool:
    return not text or _HIT.fullmatch(text) is not None


def place_code_points(
    path: str, asked: list[dict[str, Any]], new_id: Callable[[], int]
) -> tuple[list[dict[str, Any]], dict[int, Breakpoint]]:
    """Breakpoints in a ``code:`` file: on a line of code, or moved to the next one; their
    conditions and logpoints' ``{…}`` are Python. The protocol's answers, and the
    breakpoints by line."""
    lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
    code = [
        n for n, text in enumerate(lines, 1) if text.strip() and not text.lstrip().startswith("#")
    ]
    answers: list[dict[str, Any]] = []
    placed: dict[int, Breakpoint] = {}
    for item in asked:
        line = next((n for n in code if n >= int(item.get("line", 0))), None)
        ident = new_id()
        problem = "no code from here on" if line is None else _python_point_problem(item)
        if line is None or problem is not None:
            answers.append({"id": ident, "verified": False, "message": problem})
            continue
        placed[line] = Breakpoint(
            ident, line, item.get("condition"), item.get("hitCondition"), item.get("logMessage")
        )
        source = {"name": Path(path).name, "path": path}
        answers.append({"id": ident, "verified": True, "line": line, "source": source})
    return answers, placed


def _python_point_problem(item: dict[str, Any]) -> str | None:
    """Why a breakpoint in a ``code:`` file cannot be set as asked (None: it can)."""
    if not valid_hit_condition(item.get("hitCondition")):
        return HIT_COUNT_HELP
    condition = item.get("condition")
    try:
        if condition:
            compile(str(condition), "<condition>", "eval")
    except SyntaxError as error:
        return f"condition: {error.msg}"
    return None


__all__ = [
    "HIT_COUNT_HELP",
    "ActionSpan",
    "Breakpoint",
    "StopMap",
    "place_code_points",
    "valid_hit_condition",
]
