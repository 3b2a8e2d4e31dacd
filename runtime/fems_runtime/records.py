"""What a run leaves behind and how it fails: run errors, JSONL traces, result files, step limits.

Every failure that is the script's fault is a :class:`RunError` carrying the ``.fems`` location,
so the generated module prints ``script.fems:LINE: error: …`` instead of a Python traceback
(§16.2, §16.3).
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from fems_runtime.values import to_json


class RunError(Exception):
    """A run-time failure caused by the script or its inputs, located in the ``.fems`` file."""

    def __init__(self, message: str, file: str | None = None, line: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.file = file
        self.line = line

    @property
    def location(self) -> str:
        """``file:line``, ``file``, ``line N`` or ``""``: where the error points in the script."""
        if self.file and self.line:
            return f"{self.file}:{self.line}"
        if self.file:
            return self.file
        if self.line:
            return f"line {self.line}"
        return ""

    def located(self, file: str | None, line: int | None) -> RunError:
        """Fill in a location that is still unknown (the innermost location wins) and return self."""
        if self.file is None:
            self.file = file
        if self.line is None:
            self.line = line
        return self

    def __str__(self) -> str:
        where = self.location
        return f"{where}: error: {self.message}" if where else self.message


class TraceWriter:
    """Writes one JSON object per event to a JSONL file (§16.3); safe to call from any thread.

    A path is truncated when the run starts, so the file holds exactly this run's events.
    """

    def __init__(self, target: str | Path | IO[str] | None) -> None:
        self._lock = threading.Lock()
        self._owned = False
        self._stream: IO[str] | None
        if target is None:
            self._stream = None
        elif isinstance(target, str | Path):
            self._stream = open(target, "w", encoding="utf-8")  # noqa: SIM115 - closed in close()
            self._owned = True
        else:
            self._stream = target

    @property
    def enabled(self) -> bool:
        return self._stream is not None

    def write(self, event: str, **fields: Any) -> None:
        """Write ``{"event": event, **fields}`` as one line; actors become ``"@name"``."""
        if self._stream is None:
            return
        line = json.dumps({"event": event, **to_json(fields)}, ensure_ascii=False)
        with self._lock:
            self._stream.write(line + "\n")
            self._stream.flush()

    def close(self) -> None:
        with self._lock:
            if self._owned and self._stream is not None:
                self._stream.close()
            self._stream = None

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_result(
    path: str | Path,
    *,
    session: int | None,
    status: str,
    steps: int,
    variables: Mapping[str, Any],
    error: str | None = None,
) -> None:
    """Write the ``--result`` file: ``{"session", "status", "steps", "vars", "error"}`` (§16.3)."""
    if status not in ("completed", "failed"):
        raise ValueError(f"status must be 'completed' or 'failed', not {status!r}")
    data = {
        "session": session,
        "status": status,
        "steps": steps,
        "vars": to_json(dict(variables)),
        "error": error,
    }
    Path(path).write_text(json.dumps(data, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")


class StepCounter:
    """Counts node executions against ``max_steps`` (§3, §11.6, §12.10).

    The run has one root counter; each module call gets a :meth:`child` with the module's own
    limit. A step taken in a child also counts for the root, but not for the modules in between
    (a nested call counts as one step of its caller: the call node itself).
    """

    KEEP = 5

    def __init__(
        self,
        max_steps: int | None = 100_000,
        label: str = "the run",
        *,
        root: StepCounter | None = None,
    ) -> None:
        self.max_steps = max_steps
        self.label = label
        self.count = 0
        self._root = root
        self._last: deque[str] = deque(maxlen=self.KEEP)
        self._lock = threading.Lock()

    @property
    def last_nodes(self) -> list[str]:
        return list(self._last)

    def child(self, max_steps: int | None, label: str) -> StepCounter:
        """A counter for one module call (``max_steps`` None: only the run's limit applies)."""
        return StepCounter(max_steps, label, root=self._root or self)

    def step(self, node: str, file: str | None = None, line: int | None = None) -> None:
        """Count one execution of ``node``; raise :class:`RunError` past the limit."""
        if self._root is not None:
            self._root.step(node, file, line)
        with self._lock:
            self.count += 1
            self._last.append(node)
            over = self.max_steps is not None and self.count > self.max_steps
        if over:
            nodes = " -> ".join(f"[{n}]" for n in self._last)
            raise RunError(
                f"max_steps ({self.max_steps}) exceeded in {self.label}; last nodes: {nodes}",
                file,
                line,
            )
