"""One AI / human / mind turn end to end, so generated code only describes the turn (§9, §10, §13).

Interface for generated code and `flow.py` (the codegen helper's `Context` calls these):

    spec = TurnSpec(action="wolf_kill", line=40, kind="ai", executor="@wolf", prompt="…",
                    scope=(ScopeItem("actor", "@god"), ScopeItem("var", "wolves")),
                    outs=(OutSpec("kill", type="actor"),))
    result: TurnResult = await run_turn(services, frame, spec)      # dispatches on spec.kind
    result = await run_ai_turn(services, frame, spec)               # kind "ai"
    result = await run_human_turn(services, frame, spec)            # kind "human"
    result = await run_mind_turn(services, frame, spec)             # ai or human by executor type

`services` is one `TurnServices` per run (models, store, session, trace, human I/O, meta blocks,
code loader, memory/context methods); `frame` is the `variables.Frame` the action runs in.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from fems_runtime.signals import OutSpec


@dataclass(frozen=True)
class ScopeItem:
    """One item of `scope:` (§9.3): an actor, a variable, an expanded `{var}`, or `all`."""

    kind: Literal["actor", "var", "expand", "all"]
    name: str = ""


@dataclass(frozen=True)
class ResolveSpec:
    """`resolve: alias.fn(args…)` (§10.5); `args=None` means the default argument set."""

    code: str
    function: str
    args: tuple[str, ...] | None = None


@dataclass(frozen=True)
class InterruptSpec:
    """`interrupt:` (§10.7): any human input, human input except some actors, or a check."""

    kind: Literal["human", "human_except", "check"] = "human"
    actors: tuple[str, ...] = ()
    check: Callable[[], Any] | None = None


@dataclass(frozen=True)
class TurnSpec:
    """Everything an `@ai` / `@human` / `@mind` action declares, already compiled."""

    action: str
    line: int
    kind: Literal["ai", "human", "mind"]
    executor: str
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


@dataclass
class TurnResult:
    """What a turn did: the reply text, applied assignments, rejections, and how it ended."""

    reply: str = ""
    assigned: dict[str, Any] = field(default_factory=dict)
    rejected: list[str] = field(default_factory=list)
    calls: int = 0
    interrupted: bool = False
    fell_back: bool = False
