"""Lines of a script's ``code:`` Python files: a ``@func`` action's function runs in a worker
thread (§9.7), and there the standard library's :mod:`bdb` traces it, as any Python debugger
would. A stop blocks the worker thread and holds the branch on the event loop like any other
stop; the client's next command comes back to the thread as bdb's own stepping. Conditions,
logpoints' ``{…}`` and values set are Python there, read in the stopped frame."""

from __future__ import annotations

import asyncio
import bdb
import ctypes
import functools
import os
import re
import sys
from collections.abc import Callable, Coroutine, Mapping
from types import FrameType
from typing import Any

from fems_runtime.debug.expressions import ExpressionError
from fems_runtime.debug.points import Breakpoint

#: Holds the branch at a line of a code file (the code frames, outermost first; the ids of
#: the breakpoints that stopped it) on the event loop; answers how to go on: "continue",
#: "next", "stepIn" or "stepOut".
HoldLine = Callable[[tuple[FrameType, ...], list[int]], Coroutine[Any, Any, str]]
#: Where the tracer's messages go (text, category), from the worker thread.
Say = Callable[[str, str], None]
#: The breakpoints of the code files: real path → line → breakpoint.
CodePoints = Mapping[str, Mapping[int, Breakpoint]]

_REFERENCE = re.compile(r"\{([^{}]+)\}")
#: Frames of their own before Python 3.12 (a generator's still): a line that holds one stops
#: once, in its function's frame.
_COMPREHENSIONS = frozenset({"<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>"})


def canonic(filename: str) -> str:
    return filename if filename.startswith("<") else os.path.realpath(filename)


class CodeTracer(bdb.Bdb):
    """Traces one call of an author's function: stops at the breakpoints of the code files
    whose condition and hit count allow (a logpoint says its message instead) and steps only
    through the code files."""

    def __init__(
        self,
        points: CodePoints,
        code_files: frozenset[str],
        hold: HoldLine,
        say: Say,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        super().__init__()
        self.points = points
        self.code_files = code_files
        self.hold = hold
        self.say = say
        self.loop = loop
        self.entry: FrameType | None = None
        self.hit: list[int] = []  # the breakpoint that stops at this line

    def canonic(self, filename: str) -> str:
        return canonic(filename)

    def break_here(self, frame: FrameType) -> bool:
        point = self.points.get(self.canonic(frame.f_code.co_filename), {}).get(frame.f_lineno)
        if point is None or frame.f_code.co_name in _COMPREHENSIONS:
            return False
        if point.condition:
            try:
                if not python_value(point.condition, frame):
                    return False
            except ExpressionError as error:  # stops, and says why
                self.say(f"breakpoint condition {point.condition!r}: {error}\n", "stderr")
        if not point.hit_allows():
            return False
        if point.log_message is not None:
            self.say(python_message(point.log_message, frame) + "\n", "console")
            return False
        self.hit = [point.id]
        return True

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
        hit, self.hit = self.hit, []
        held = self.hold(tuple(stack), hit)
        command = asyncio.run_coroutine_threadsafe(held, self.loop).result()
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
    points: CodePoints,
    code_files: frozenset[str],
    hold: HoldLine,
    say: Say,
    step_in: bool,
) -> Callable[..., Any]:
    """``function`` as a worker thread runs it under a :class:`CodeTracer`; ``say`` is
    called on the event loop."""
    loop = asyncio.get_running_loop()

    def say_on_loop(text: str, category: str) -> None:
        loop.call_soon_threadsafe(say, text, category)

    @functools.wraps(function)
    def run(**kwargs: Any) -> Any:
        tracer = CodeTracer(points, code_files, hold, say_on_loop, loop)
        return tracer.call(function, kwargs, step_in)

    return run


def python_value(expression: str, frame: FrameType) -> Any:
    """A Python expression in a frame of a ``code:`` file (the console of a Python debugger)."""
    try:
        return eval(expression, frame.f_globals, dict(frame.f_locals))  # noqa: S307
    except Exception as error:  # the author's expression: its error, not a traceback
        raise ExpressionError(f"{type(error).__name__}: {error}") from None


def python_message(message: str, frame: FrameType) -> str:
    """A logpoint's message with each ``{expression}`` replaced by its value in ``frame``."""

    def value(found: re.Match[str]) -> str:
        try:
            return str(python_value(found[1], frame))
        except ExpressionError as error:
            return f"<{error}>"

    return _REFERENCE.sub(value, message)


def set_local(frame: FrameType, name: str, value: Any) -> None:
    """Assign a local of a stopped frame. Before Python 3.13, ``f_locals`` is a copy that the
    interpreter writes back only into the frame being traced, so it is written back here."""
    if name not in frame.f_code.co_varnames + frame.f_code.co_cellvars + frame.f_code.co_freevars:
        raise ExpressionError(f"{name} is not a local of {frame.f_code.co_name}")
    frame.f_locals[name] = value
    if sys.version_info < (3, 13):
        ctypes.pythonapi.PyFrame_LocalsToFast(ctypes.py_object(frame), ctypes.c_int(0))


__all__ = [
    "CodePoints",
    "CodeTracer",
    "HoldLine",
    "canonic",
    "python_message",
    "python_value",
    "set_local",
    "traced",
]
