"""The export process (``python -m fems_runtime.otel.exporter``): spans and metrics of the
runs of its parent, made of the events the parent pipes in (:mod:`.forward`) and sent over
OTLP/HTTP.

It reads messages from its standard input: a run's events (a :class:`~.spans.RunSpans` per
run makes its spans), ``flush`` (send everything now, then one line on standard output, which
nothing else writes to: empty, or the warning that no collector answers for a parent that
reports it, :func:`fems_runtime.otel.report_absence`) and ``close``; at ``close`` or the end of
its input (the parent gone, however it went) it sends what it has and exits. Spans are sent in
batches by the loop that reads (:class:`SpanBatches`): while it sends, it does not read, and
the pipe holds what the parent writes meanwhile, so no span is dropped however far behind it
falls.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
from collections.abc import Mapping, Sequence

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter

from fems_runtime.events import RunEnded
from fems_runtime.otel.forward import Record, rebuilt
from fems_runtime.otel.setup import Telemetry, from_environment, quiet_absence
from fems_runtime.otel.spans import RunSpans

BATCH = 512
"""Spans sent in one OTLP request at most."""
IDLE = 1.0
"""Seconds without a message after which the spans made so far are sent."""
Tags = Mapping[str, str | int]


class SpanBatches(SpanProcessor):
    """Ended spans kept until there are :data:`BATCH` of them or the reading loop asks, then
    sent by the exporter in the calling thread (the export process has no other work)."""

    def __init__(self, exporter: SpanExporter) -> None:
        self.exporter = exporter
        self._ended: list[ReadableSpan] = []

    def on_end(self, span: ReadableSpan) -> None:
        self._ended.append(span)
        if len(self._ended) >= BATCH:
            self.force_flush()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        ended, self._ended = self._ended, []
        if ended:
            self.exporter.export(ended)
        return True

    def shutdown(self) -> None:
        self.force_flush()
        self.exporter.shutdown()


class Runs:
    """The runs being exported: each one's spans, made as its events arrive."""

    def __init__(self) -> None:
        self.telemetry: Telemetry | None = None
        self._spans: dict[int, RunSpans] = {}

    def received(
        self, key: int, settings: tuple[str, bool, Tags] | None, records: Sequence[Record]
    ) -> None:
        """Events of run ``key``; ``settings`` (service, capture, tags) with its first ones."""
        if settings is not None:
            service, capture, tags = settings
            if self.telemetry is None:
                self.telemetry = from_environment(service, os.environ, SpanBatches)
            self._spans[key] = RunSpans(self.telemetry, capture=capture, tags=tags)
        spans = self._spans.get(key)
        if spans is None:
            return
        for record in records:
            event = rebuilt(record)
            spans(event)
            if isinstance(event, RunEnded):
                del self._spans[key]

    def send_spans(self) -> None:
        """Send the spans ended so far (metrics go at their reader's pace)."""
        if self.telemetry is not None and self.telemetry.processor is not None:
            self.telemetry.processor.force_flush()

    def flush(self) -> str:
        """Send every span and metric now; the warning to report if no collector answered."""
        if self.telemetry is None:
            return ""
        self.telemetry.flush()
        return self.telemetry.absence.reported() if self.telemetry.absence else ""

    def shutdown(self) -> None:
        if self.telemetry is not None:
            self.telemetry.shutdown()


def _read(fd: int, size: int) -> bytes | None:
    """Exactly ``size`` bytes, None at the end of the input."""
    chunks = []
    while size:
        chunk = os.read(fd, min(size, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def serve(source: int, acks: int) -> None:
    """Read messages from ``source`` until ``close`` or its end; acknowledge flushes on
    ``acks``."""
    runs = Runs()
    try:
        while True:
            if not select.select([source], [], [], IDLE)[0]:
                runs.send_spans()  # the parent is quiet: what it sent goes out now
                continue
            header = _read(source, 4)
            data = _read(source, int.from_bytes(header, "big")) if header else None
            if data is None:
                return
            message = pickle.loads(data)
            if message[0] == "run":
                runs.received(*message[1:])
            elif message[0] == "flush":
                os.write(acks, f"{runs.flush()}\n".encode())
            else:
                return
    finally:
        runs.shutdown()


def main() -> None:
    """Serve the parent: its messages on standard input, acknowledgements on standard output
    (anything printed goes to standard error instead, as do the SDK's warnings but those about
    a collector that is not there, said once in a line of ours). An interrupt is the parent's
    to handle: this process goes on until the parent closes the pipe."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    quiet_absence()
    acks = os.dup(1)
    os.dup2(2, 1)
    serve(0, acks)


if __name__ == "__main__":
    main()
