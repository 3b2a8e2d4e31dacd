"""Where each branch of a run is: its thread id (each live ``par``/``fork`` branch is an
asyncio task, so a thread of the protocol), and its stack as the flow path at ``.fems``
positions (mainflow → loop body or module → node or action).

A branch's own Python frames end at its task; the frames above it (the node that forked it)
are the stack its parent had when it created the task, which a context variable carries into
the task as asyncio copies the context at creation.
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType

from fems_runtime.flow import Context
from fems_runtime.linetable import LineTable
from fems_runtime.names import DeclaredNames
from fems_runtime.variables import Frame

MAIN_THREAD = 1
#: the generated module's top level: below the run when the module is the program run
#: (``python game.py --debug``), but no part of its flow path
MODULE_TOP = "<module>"


@dataclass(frozen=True)
class Place:
    """One frame of the flow path: a generated function at a ``.fems`` line."""

    name: str
    line: int | None
    function: str


@dataclass
class Branch:
    """One live branch (a protocol thread)."""

    id: int
    name: str
    task: asyncio.Task[object]
    prefix: tuple[Place, ...]
    done: bool = False


# (task, its stack at its last hook): inherited by the tasks it creates
_STACK: contextvars.ContextVar[tuple[asyncio.Task[object] | None, tuple[Place, ...]]] = (
    contextvars.ContextVar("fems_debug_stack", default=(None, ()))
)


@dataclass
class Branches:
    """The run's branches, registered as they first reach a hook."""

    lines: LineTable
    names: DeclaredNames
    started: Callable[[Branch], None]
    ended: Callable[[Branch], None]
    by_task: dict[asyncio.Task[object], Branch] = field(default_factory=dict)
    _next_id: int = MAIN_THREAD

    def current(self, ctx: Context) -> Branch:
        """The branch running now (registered on its first hook)."""
        task = asyncio.current_task()
        assert task is not None
        branch = self.by_task.get(task)
        if branch is None:
            owner, stack = _STACK.get()
            prefix = stack if owner is not task else ()
            branch = Branch(self._next_id, _thread_name(ctx), task, prefix)
            self._next_id += 1
            self.by_task[task] = branch
            task.add_done_callback(self._finish)
            self.started(branch)
        return branch

    def _finish(self, task: asyncio.Task[object]) -> None:
        branch = self.by_task.pop(task, None)
        if branch is not None:
            branch.done = True
            self.ended(branch)

    def stack(self, branch: Branch, ctx: Context) -> tuple[Place, ...]:
        """The branch's flow path now (outermost first), remembered for the tasks it starts."""
        own: list[Place] = []
        frame: FrameType | None = sys._getframe(1)
        while frame is not None:
            if self.lines.owns(frame.f_code) and frame.f_code.co_name != MODULE_TOP:
                own.append(self._place(frame))
            frame = frame.f_back
        own.reverse()
        stack = (*branch.prefix, *own)
        _STACK.set((branch.task, stack))
        return stack

    def _place(self, frame: FrameType) -> Place:
        function = frame.f_code.co_name
        name = self.names.of(function)
        if function == "main_flow" or function.startswith("main_flow_"):  # a loop body's
            name = "mainflow" + function.removeprefix("main_flow").replace("_", " ", 1)
        return Place(name, self.lines.at(frame), function)

    def live(self) -> list[Branch]:
        return sorted(self.by_task.values(), key=lambda branch: branch.id)


def _thread_name(ctx: Context) -> str:
    """``main``, else the branch's path with the loop variable it binds (``par @voter =
    @Cleo``)."""
    if not ctx.path:
        return "main"
    frame: Frame | None = ctx.frame
    while frame is not None and frame.kind != "loop":
        frame = frame.parent
    bound = ", ".join(f"{k} = {v}" for k, v in frame.names.items()) if frame is not None else ""
    return f"{ctx.path} ({bound})" if bound else ctx.path


__all__ = ["MAIN_THREAD", "Branch", "Branches", "Place"]
