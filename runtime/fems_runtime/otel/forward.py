"""The run's side of the export: its events handed in batches to an export process that
makes the spans and metrics and sends them (:mod:`.exporter`).

Making a span of an event, recording a call's metrics and encoding them for OTLP cost a
``fems/mock`` call about twice its own time when done in the run's process, in its thread or
in an export thread contending for its GIL (docs/PERFORMANCE.md). Here a run only keeps a
plain record of each event the exporter reads (:data:`EXPORTED`) and, every :data:`BATCH` of
them, at the run's end or at the first event a second after the last send, pickles them into
a pipe to a child process; that process imports OpenTelemetry, so the run's never does. The
child is started at the first run that exports and serves every run of the process; it exits
when the pipe closes (the process's exit, however it exits) after sending everything it
received.

Content is not even sent to the child unless captured, and a model's reasoning never is: the
records leave those fields, and a loop's items (any value), at their defaults.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import io
import itertools
import os
import pickle
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import fields
from operator import attrgetter
from pathlib import Path
from typing import Any

from fems_runtime import events as ev
from fems_runtime.events import RunEnded

BATCH = 256
"""Events a run keeps before it sends them."""
LATEST = 1.0
"""Seconds after a send when the next event sends whatever was kept (a slow model's run)."""
WAIT = 30.0
"""Seconds a flush or the process's exit waits at most for the export process."""
PIPE_BYTES = 1 << 20
"""The pipe's buffer asked of Linux: the events of about a thousand calls, so that a run is
not held up while the export process catches up."""

EXPORTED: frozenset[type[ev.RunEvent]] = frozenset(
    {
        ev.RunBegan,
        ev.RunEnded,
        ev.RunFailed,
        ev.StepBegan,
        ev.StepEnded,
        ev.ForkBegan,
        ev.ForkJoined,
        ev.BranchBegan,
        ev.BranchEnded,
        ev.TurnBegan,
        ev.TurnEnded,
        ev.TurnReplayed,
        ev.FallbackTaken,
        ev.ProblemReported,
        ev.ReplyRejected,
        ev.ModelCallBegan,
        ev.ModelCallFirstChunk,
        ev.ModelCallEnded,
        ev.ToolCallBegan,
        ev.ToolCallEnded,
        ev.HumanWaitBegan,
        ev.HumanWaitEnded,
    }
)
"""The events the spans and metrics are made of (:class:`~.spans.RunSpans` reads no other)."""
_NOT_SENT = frozenset({"items", "item"})
"""Fields left at their defaults whatever is captured: a loop's values, which any Python
value may be (and no span shows)."""


# ---------------------------------------------------------------------- the wire


def _sent_fields(kind: type[ev.RunEvent], capture: bool) -> tuple[str, ...]:
    """The fields of ``kind`` sent to the export process: all but reasoning, a loop's values
    and, unless ``capture``, content."""
    left_out = {
        name
        for name, privacy in ev.content_fields(kind).items()
        if not capture or privacy == ev.REASONING
    }
    return tuple(f.name for f in fields(kind) if f.init and f.name not in left_out | _NOT_SENT)


Record = tuple[type[ev.RunEvent], tuple[str, ...], tuple[Any, ...]]
"""An event as it is sent: its class, the names of the fields sent and their values."""


Recorder = tuple[type[ev.RunEvent], tuple[str, ...], Callable[[Any], tuple[Any, ...]]]
"""How an event of a kind is kept until it is sent: as a :data:`Record` of its kind, the names
of the fields sent and their values, read by one C-level ``attrgetter`` call. Keeping the
record rather than the event lets the content it leaves out (a call's messages: the whole
conversation) go when the run is done with it; keeping the events cost a ``fems/mock`` call a
fifth more CPU time (docs/PERFORMANCE.md)."""


def _recorder(kind: type[ev.RunEvent], capture: bool) -> Recorder:
    names = _sent_fields(kind, capture)
    return (kind, names, attrgetter(*names))


_RECORDERS = {
    capture: {kind: _recorder(kind, capture) for kind in EXPORTED} for capture in (False, True)
}


def rebuilt(record: Record) -> Any:
    """An event as the export process reads it (the fields not sent at their defaults)."""
    kind, names, values = record
    return kind(**dict(zip(names, values, strict=True)))


def _where(where: Any) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """How pickle writes a :class:`~fems_runtime.events.Where`: its fields in order."""
    return (ev.Where, _WHERE_FIELDS(where))


_WHERE_FIELDS = attrgetter(*(f.name for f in fields(ev.Where)))
_DISPATCH: dict[type, Callable[[Any], tuple[Callable[..., Any], tuple[Any, ...]]]] = {
    ev.Where: _where
}


def encoded(message: tuple[Any, ...]) -> bytes:
    """One message to the export process: its length, then its pickle."""
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    pickler = pickle.Pickler(out, pickle.HIGHEST_PROTOCOL)
    pickler.dispatch_table = _DISPATCH
    pickler.dump(message)
    length = out.tell() - 4
    out.seek(0)
    out.write(length.to_bytes(4, "big"))
    return out.getvalue()


# ---------------------------------------------------------------------- the export process


class ExportProcess:
    """The child process that exports this process's runs: a pipe of messages to it (a run's
    events, a flush, the end) and a pipe back on which it says a flush is done."""

    def __init__(self) -> None:
        to_child, self._out = os.pipe()
        self._acks, from_child = os.pipe()
        _widen(self._out)
        runtime = str(Path(__file__).resolve().parents[2])  # fems_runtime's parent folder
        path = os.pathsep.join(filter(None, (runtime, os.environ.get("PYTHONPATH"))))
        self._child = subprocess.Popen(
            [sys.executable, "-m", "fems_runtime.otel.exporter"],
            stdin=to_child,
            stdout=from_child,
            env={**os.environ, "PYTHONPATH": path},
        )
        os.close(to_child)
        os.close(from_child)
        self._lock = threading.Lock()
        self._broken = False
        self._runs = itertools.count(1)

    @property
    def pid(self) -> int:
        """The child's process id."""
        return self._child.pid

    def new_run(self) -> int:
        """A key for a run's messages."""
        return next(self._runs)

    def send(self, data: bytes) -> None:
        """Write one encoded message; a child that is gone drops it (said once on stderr)."""
        with self._lock:
            self._write(data)

    def _write(self, data: bytes) -> None:
        if self._broken:
            return
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._out, view) :]
        except OSError as error:
            self._broken = True
            print(f"fems2py: OpenTelemetry export stopped: {error}", file=sys.stderr)

    def flush(self) -> str:
        """Have the child send all it received, and wait until it has (or :data:`WAIT`); what
        it reports (a collector that is not there), or ``""``."""
        with self._lock:
            self._write(encoded(("flush",)))
            return "" if self._broken else self._acknowledgement()

    def _acknowledgement(self) -> str:
        """The child's answer to a flush: one line, empty unless it reports something."""
        answer = b""
        deadline = time.monotonic() + WAIT
        while not answer.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._acks], [], [], left)[0]:
                return ""
            chunk = os.read(self._acks, 4096)
            if not chunk:
                return ""
            answer += chunk
        return answer.decode("utf-8", "replace").strip()

    def close(self) -> None:
        """Send the end, and wait for the child to have sent everything and exited."""
        with self._lock:
            self._write(encoded(("close",)))
            self._broken = True
            os.close(self._out)
        try:
            self._child.wait(WAIT)
        except subprocess.TimeoutExpired:
            self._child.kill()
        os.close(self._acks)

    def abandon(self) -> None:
        """Forget the child in a forked copy of this process (the parent still uses it)."""
        os.close(self._out)
        os.close(self._acks)


def _widen(pipe: int) -> None:
    """Ask Linux for a pipe of :data:`PIPE_BYTES` (elsewhere, or refused: the default)."""
    setting = getattr(fcntl, "F_SETPIPE_SZ", None)
    if setting is not None:
        with contextlib.suppress(OSError):
            fcntl.fcntl(pipe, setting, PIPE_BYTES)


_process: ExportProcess | None = None
_lock = threading.Lock()


def export_process() -> ExportProcess:
    """This process's export process, started at the first call and closed at exit."""
    global _process
    with _lock:
        if _process is None:
            _process = ExportProcess()
            atexit.register(_process.close)
        return _process


def flush() -> str:
    """Send what this process's runs have handed to the export process, if any did; what it
    reports (:meth:`ExportProcess.flush`)."""
    return _process.flush() if _process is not None else ""


def _forget_after_fork() -> None:
    global _process
    if _process is not None:
        _process.abandon()
        _process = None


os.register_at_fork(after_in_child=_forget_after_fork)


# ---------------------------------------------------------------------- a run


class RunForwarder:
    """Subscriber of one run's events that hands those the exporter reads to the export
    process, in batches (the first message says how to export the run)."""

    def __init__(
        self,
        process: ExportProcess,
        service: str,
        *,
        capture: bool = False,
        tags: Mapping[str, str | int] | None = None,
    ) -> None:
        self.process = process
        self._key = process.new_run()
        self._settings: tuple[str, bool, dict[str, str | int]] | None = (
            service,
            capture,
            dict(tags or {}),
        )
        self._recorders = _RECORDERS[capture]
        self._kept: list[Record] = []
        self._due = 0.0  # when kept events go whatever their number (time.monotonic)

    def __call__(self, event: ev.RunEvent) -> None:
        recorder = self._recorders.get(type(event))
        if recorder is not None:
            kind, names, values = recorder
            kept = self._kept
            kept.append((kind, names, values(event)))
            if len(kept) >= BATCH or event.mono >= self._due or type(event) is RunEnded:
                self.send()

    def send(self) -> None:
        """Hand the kept events to the export process."""
        self.process.send(encoded(("run", self._key, self._settings, self._kept)))
        self._settings = None
        self._kept = []
        self._due = time.monotonic() + LATEST


def forward_run(
    events: ev.RunEvents,
    service: str,
    *,
    capture: bool = False,
    tags: Mapping[str, str | int] | None = None,
) -> None:
    """Export the run of ``events`` through this process's export process."""
    forwarder = RunForwarder(export_process(), service, capture=capture, tags=tags)
    events.subscribe(forwarder, only=EXPORTED, sent=capture)  # content goes only if captured
