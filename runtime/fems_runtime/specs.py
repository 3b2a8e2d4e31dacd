"""What an ``@ai`` / ``@human`` / ``@mind`` action declares (:class:`TurnSpec`) and what its
turn did (:class:`TurnResult`): the data that :mod:`fems_runtime.flow` hands to
:mod:`fems_runtime.turns` and gets back, kept apart so that those two do not import each other.
Generated code never builds a spec: it calls ``ctx.ai(…)``, ``ctx.human(…)`` or ``ctx.mind(…)``
with the action's fields, and the :class:`~fems_runtime.flow.Context` makes the spec.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from fems_runtime.signals import OutSpec

TurnKind = Literal["ai", "human", "mind"]
#: The action kinds that run as their executor's turn (§9.1), each through the ``Context``
#: method of its name; the compiler's table of action kinds agrees (tests/test_kinds.py).
TURN_KINDS: tuple[TurnKind, ...] = get_args(TurnKind)


@dataclass(frozen=True)
class ScopeItem:
    """One item of `scope:` (§9.3): an actor, a variable, an expanded `{var}`, or `all`."""

    kind: Literal["actor", "var", "expand", "all"]
    name: str = ""

    @classmethod
    def of(cls, item: ScopeItem | str) -> ScopeItem:
        """An item as generated code writes it, like the script: ``"@god"``, ``"wolves"``,
        ``"{alive}"`` (expanded), ``"all"``."""
        if isinstance(item, ScopeItem):
            return item
        if item == "all":
            return cls("all", "all")
        if item.startswith("@"):
            return cls("actor", item)
        if item.startswith("{") and item.endswith("}"):
            return cls("expand", item[1:-1])
        return cls("var", item)


@dataclass(frozen=True)
class ResolveSpec:
    """`resolve: alias.fn(args…)` (§10.5); `args=None` means the default argument set."""

    code: str
    function: str
    args: tuple[str, ...] | None = None


@dataclass(frozen=True)
class InterruptSpec:
    """`interrupt:` (§10.7): any human input, human input except some actors, or a check.

    ``check`` is a no-argument callable (a compiled condition or ``alias.fn``) polled while the
    model call is in flight; the call is interrupted as soon as it returns a true value.
    """

    kind: Literal["human", "human_except", "check"] = "human"
    actors: tuple[str, ...] = ()
    check: Callable[[], Any] | None = None


@dataclass(frozen=True)
class TurnSpec:
    """Everything an `@ai` / `@human` / `@mind` action declares, already compiled."""

    executor: str
    # set by the Context method that runs the turn (ctx.ai/human/mind): the action's name and
    # its .fems line
    action: str = ""
    line: int = 0
    role: str | None = None
    prompt: str | None = None
    showprompt: str | None = None
    scope: tuple[ScopeItem, ...] = ()
    inputs: dict[str, Any] | None = None
    outs: tuple[OutSpec, ...] | None = None
    resolve: ResolveSpec | None = None
    max_retries: int | None = None
    fallback: Callable[[], Awaitable[Any]] | None = None
    memory: str | None = None
    context: str | None = None
    interrupt: InterruptSpec | None = None
    model: str | None = None
    max_tool_rounds: int | None = None  # None: meta.max_tool_rounds, else 8 (§15.5)
    max_tokens: int | None = None  # the action's or meta's cap; None: the model map's (§9.2)

    @property
    def strict(self) -> bool:
        """`max_retries` and/or `fallback` make a failed validation retry or fail (§10.6)."""
        return self.max_retries is not None or self.fallback is not None


@dataclass
class TurnResult:
    """What a turn did: the reply text, applied assignments, rejections, and how it ended."""

    reply: str = ""
    assigned: dict[str, Any] = field(default_factory=dict)
    rejected: list[str] = field(default_factory=list)
    calls: int = 0
    interrupted: bool = False
    fell_back: bool = False
    turn: int | None = None  # its id in the session (§14)
