"""The action kinds of FEM (§9.1) and what each takes (§9.2): one table for every stage.

The parser reads from it which kinds exist, what a header holds and which fields a kind
accepts; the checker which actions run as an executor; code generation which template
renders an action. Adding an action kind starts with a row here (CONTRIBUTING.md lists the
other places). The runtime keeps its own constant of the kinds it runs as turns,
:data:`fems_runtime.specs.TURN_KINDS`; ``tests/test_kinds.py`` checks the two agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

ActionKindName = Literal["ai", "human", "mind", "assign", "func"]

#: Every action field (§9.2), in the order the parser's hints list them.
FIELD_NAMES = (
    *("prompt", "showprompt", "scope", "in", "out", "resolve", "max_retries", "fallback"),
    *("memory", "context", "interrupt", "model", "max_tool_rounds", "max_tokens"),
)
#: Fields whose value is text to the end of the line (or a ``|`` block), never statements.
TEXT_FIELDS = frozenset({"prompt", "showprompt", "model"})

_TURN_FIELDS = frozenset(FIELD_NAMES)
_HUMAN_FIELDS = frozenset({"prompt", "showprompt", "scope", "in", "out", "resolve", "context"})


@dataclass(frozen=True)
class ActionKind:
    """One action kind.

    ``header`` is what the parentheses after ``@kind`` hold: the executor (``@ai(@x)``), a
    ``code:`` function (``@func(alias.fn)``) or nothing (``@assign``). A kind with an executor
    runs as that actor's turn: the generated code awaits ``ctx.<name>("@x", prompt=…, …)``.
    ``fields`` are the fields it accepts, ``template`` the code generator's
    ``templates/action_<template>.py.jinja``. The stages ask the row's properties, never the
    kind's name.
    """

    name: ActionKindName
    header: Literal["executor", "func", "none"]
    fields: frozenset[str]
    template: str

    @property
    def has_executor(self) -> bool:
        """Whether the action runs as an actor (an ``@ai``/``@human``/``@mind`` turn)."""
        return self.header == "executor"

    @property
    def calls_function(self) -> bool:
        """Whether the action calls a ``code:`` function (``@func``): its ``in:`` are the
        function's arguments, its ``out:`` what it returns."""
        return self.header == "func"

    @property
    def assigns(self) -> bool:
        """Whether the action has no one to ask (``@assign``): its ``out:`` lines are
        assignments evaluated in the flow, not outs a turn or a function fills."""
        return self.header == "none"

    @property
    def written(self) -> str:
        """How its header is written: ``@ai(@x)``, ``@func(alias.fn)``, ``@assign``."""
        argument = {"executor": "(@x)", "func": "(alias.fn)", "none": ""}[self.header]
        return f"@{self.name}{argument}"


ACTION_KINDS: dict[str, ActionKind] = {
    kind.name: kind
    for kind in (
        ActionKind("ai", "executor", _TURN_FIELDS, "turn"),
        ActionKind("human", "executor", _HUMAN_FIELDS, "turn"),
        ActionKind("mind", "executor", _TURN_FIELDS, "turn"),
        ActionKind("assign", "none", frozenset({"out"}), "assign"),
        ActionKind("func", "func", frozenset({"in", "out"}), "func"),
    )
}


def kinds_with(field: str) -> list[str]:
    """The kinds that accept ``field``, in the table's order."""
    return [name for name, kind in ACTION_KINDS.items() if field in kind.fields]
