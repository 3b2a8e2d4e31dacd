"""Which ``.fems`` line each line of a generated module stands for (§16.2).

A generated module ends with one table, ``LINES = "12=5 20=7 …"`` (the model is the
``debug_info`` line Jinja2 puts at the end of a compiled template): module line 12 and the
lines after it come from ``.fems`` line 5, from module line 20 on from line 7, and so on. The
body of the module names no positions, so a one-line edit of the script changes the table and
the source hash, not the code. The runtime reads the table wherever it needs a location: the
line of a step, a loop or a "flow stuck" error comes from the generated line that asked for
it (its caller's frame), an action's from its function's first line, a Python error's from the
innermost generated frame of its traceback.
"""

from __future__ import annotations

import bisect
import os
from types import CodeType, FrameType, TracebackType


class LineTable:
    """The line table of one generated module (the file at ``module_file``)."""

    def __init__(self, table: str = "", module_file: str | None = None) -> None:
        pairs = sorted(
            (int(module_line), int(script_line))
            for module_line, script_line in (item.split("=") for item in table.split())
        )
        self._module_lines = [module_line for module_line, _ in pairs]
        self._script_lines = [script_line for _, script_line in pairs]
        self._target = os.path.realpath(module_file) if module_file else None
        self._files: dict[str, bool] = {}  # co_filename → whether it is the module
        # (code, line) of a frame → its .fems line: every step asks, from a handful of places
        self._at: dict[tuple[CodeType, int], int | None] = {}

    def line(self, module_line: int) -> int | None:
        """The ``.fems`` line of ``module_line`` (that of the nearest entry at or above it)."""
        index = bisect.bisect_right(self._module_lines, module_line) - 1
        return self._script_lines[index] if index >= 0 else None

    def owns(self, code: CodeType) -> bool:
        """Whether ``code`` was compiled from this table's module."""
        known = self._files.get(code.co_filename)
        if known is None:
            known = self._target is not None and os.path.realpath(code.co_filename) == self._target
            self._files[code.co_filename] = known
        return known

    def at(self, frame: FrameType | None) -> int | None:
        """The ``.fems`` line a frame of the module is executing (None for other frames)."""
        if frame is None:
            return None
        key = (frame.f_code, frame.f_lineno)
        try:
            return self._at[key]
        except KeyError:
            line = self._at[key] = self.line(key[1]) if self.owns(key[0]) else None
            return line

    def of_function(self, code: CodeType) -> int | None:
        """The ``.fems`` line of a generated function (its construct: action, module, flow)."""
        return self.line(code.co_firstlineno) if self.owns(code) else None

    def in_traceback(self, tb: TracebackType | None) -> int | None:
        """The ``.fems`` line of the innermost frame of the module in a traceback."""
        line = None
        while tb is not None:
            if self.owns(tb.tb_frame.f_code):
                line = self.line(tb.tb_lineno) or line
            tb = tb.tb_next
        return line


__all__ = ["LineTable"]
