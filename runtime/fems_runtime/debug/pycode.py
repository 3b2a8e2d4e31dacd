"""Lines of a script's ``code:`` Python files: a ``@func`` action's function runs in a worker
thread (§9.7), and there the standard library's :mod:`bdb` traces it, as any Python debugger
would. A stop blocks the worker thread and holds the branch on the event loop like any other
stop; the client's next command comes back to the thread as bdb's own stepping."""

from __future__ import annotations

import asyncio
import bdb
import functools
import os
import sys
from collections.abc import Callable, Coroutine
from types import FrameType
from typing import Any

#: Holds the branch at a line of a code file (the code frames, outermost first) on the event
#: loop; answers how to go on: "continue", "next", "stepIn" or "stepOut".
HoldLine = Callable[[tuple[FrameType, ...]], Coroutine[Any, Any, str]]


def canonic(filename: str) -> str:
    return filename if filename.startswith("<") else os.path.realpath(filename)


class CodeTracer(bdb.Bdb):
    """Traces one call of an author's function: stops at the breakpoints of the code files
    (``points``: real path → lines) and steps only through the code files."""

    def __init__(
        self,
        points: dict[str, set[int]],
        code_files: frozenset[str],
        hold: HoldLine,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        super().__init__()
        self.points = points
        self.code_files = code_files
        self.hold = hold
        self.loop = loop
        self.entry: FrameType | None = None

    def canonic(self, filename: str) -> str:
        return canonic(filename)

    def break_here(self, frame: FrameType) -> bool:
        return frame.f_lineno in self.points.get(self.canonic(frame.f_code.co_filename), ())

    def break_anywhere(self, frame: FrameType) -> bool:
        return self.canonic(frame.f_code.co_filename) in self.points

    def stop_here(self, frame: FrameType) -> bool:
        mine = self.canonic(frame.f_code.co_filename) in self.code_files
        return mine and super().stop_here(frame)

    def user_line(self, frame: FrameType) -> None:
        stack: list[FrameType] = []
        current: FrameType | None = frame
        while current is not None:
            if self.canonic(current.f_code.co_filename) in self.code_files:
                stack.append(current)
            if current is self.entry:
                break
            current = current.f_back
        stack.reverse()
        command = asyncio.run_coroutine_threadsafe(self.hold(tuple(stack)), self.loop).result()
        if command == "next":
            self.set_next(frame)
        elif command == "stepIn":
            self.set_step()
        elif command == "stepOut":
            self.set_return(frame)
        else:
            self.set_continue()

    def call(self, function: Callable[..., Any], kwargs: dict[str, Any], step_in: bool) -> Any:
        """Run ``function(**kwargs)`` traced, in the calling (worker) thread; ``step_in``:
        stop at its first line."""
        self.reset()
        self.breaks = {path: sorted(lines) for path, lines in self.points.items()}
        if not step_in:  # only breakpoints stop: bdb's set_continue, before the trace starts
            self._set_stopinfo(sys._getframe(), None, -1)  # type: ignore[attr-defined]

        def start(frame: FrameType, event: str, arg: Any) -> Any:
            if self.entry is None and event == "call":
                self.entry = frame
            return self.trace_dispatch(frame, event, arg)

        sys.settrace(start)
        try:
            return function(**kwargs)
        finally:
            sys.settrace(None)


def traced(
    function: Callable[..., Any],
    points: dict[str, set[int]],
    code_files: frozenset[str],
    hold: HoldLine,
    step_in: bool,
) -> Callable[..., Any]:
    """``function`` as a worker thread runs it under a :class:`CodeTracer`."""
    loop = asyncio.get_running_loop()

    @functools.wraps(function)
    def run(**kwargs: Any) -> Any:
        return CodeTracer(points, code_files, hold, loop).call(function, kwargs, step_in)

    return run


__all__ = ["CodeTracer", "HoldLine", "canonic", "traced"]
