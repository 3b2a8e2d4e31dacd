"""A run's events handed to the export process (issue 31, item 6): only those its spans are
made of, never a model's reasoning, content only when captured, every span at the collector
once a flush returns; and the bus that lets a run build only the events someone reads."""

from __future__ import annotations

import pickle
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from fems_runtime import events as ev
from fems_runtime.otel.forward import EXPORTED, ExportProcess, RunForwarder, rebuilt
from fems_runtime.otel.setup import Telemetry
from fems_runtime.otel.spans import RunSpans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.runtime.test_otel_spans import PROMPT, REPLY, SECRET_REASONING, Recorder, play_a_night


def _every_subclass(kind: type[ev.RunEvent]) -> set[type[ev.RunEvent]]:
    found = set(kind.__subclasses__())
    for sub in list(found):
        found |= _every_subclass(sub)
    return found


def test_every_event_the_spans_are_made_of_is_forwarded() -> None:
    telemetry = Telemetry(Resource({}), InMemorySpanExporter(), None, SimpleSpanProcessor)
    handled = set(RunSpans(telemetry)._handlers)
    assert handled <= EXPORTED
    assert _every_subclass(ev.Ended) <= EXPORTED  # every span's end
    assert not EXPORTED & {ev.MessagesStored, ev.ReplyChunk, ev.Assigned, ev.HumanAnswered}


class Pipe:
    """What a forwarder sends, kept."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def new_run(self) -> int:
        return 1

    def send(self, data: bytes) -> None:
        self.sent.append(data)


def _through_the_pipe(event: ev.RunEvent, capture: bool) -> Any:
    """``event`` as the export process reads it."""
    forwarder = RunForwarder(Pipe(), "werewolf", capture=capture)  # type: ignore[arg-type]
    forwarder(event)
    forwarder.send()
    records = []
    for data in forwarder.process.sent:
        assert int.from_bytes(data[:4], "big") == len(data) - 4
        records += pickle.loads(data[4:])[3]
    (record,) = records
    return rebuilt(record)


def _a_call() -> ev.ModelCallEnded:
    where = ev.Where(7, "/Vote#0", "Den", "wolf_kill", "@wolf", "werewolf.fems", 12)
    began = ev.ModelCallBegan(id=3, parent=2, where=where, request_model="fems/mock")
    return ev.ModelCallEnded.after(
        began,
        request_model="fems/mock",
        input_tokens=120,
        messages=({"role": "user", "content": PROMPT},),
        reply=REPLY,
        reasoning=SECRET_REASONING,
    )


def test_content_is_sent_only_when_captured_and_reasoning_never() -> None:
    call = _a_call()
    private = _through_the_pipe(call, capture=False)
    assert (private.id, private.parent, private.where, private.mono) == (
        call.id,
        call.parent,
        call.where,
        call.mono,
    )
    assert private.input_tokens == 120 and private.request_model == "fems/mock"
    assert (private.reply, private.messages, private.reasoning) == ("", (), "")
    captured = _through_the_pipe(call, capture=True)
    assert (captured.reply, captured.messages) == (REPLY, call.messages)
    assert captured.reasoning == ""


def test_a_loop_s_items_stay_in_the_run() -> None:
    where = ev.Where(1)
    fork = ev.ForkBegan(id=1, parent=None, where=where, kind="for", items=(threading.Lock(),))
    assert _through_the_pipe(fork, capture=True).items == ()


def test_the_bus_wants_only_what_its_subscribers_read() -> None:
    bus = ev.RunEvents()
    assert not bus.wants(ev.TurnBegan)
    stop_spans = bus.subscribe(lambda event: None, only=EXPORTED)
    assert bus.wants(ev.TurnBegan) and not bus.wants(ev.MessagesStored)
    stop_all = bus.subscribe(lambda event: None)
    assert bus.wants(ev.MessagesStored) and bus.wants(ev.ReplyChunk)
    stop_all()
    assert not bus.wants(ev.MessagesStored)
    stop_spans()
    assert not bus.active and not bus.wants(ev.TurnBegan)


def test_what_calls_send_is_read_only_by_a_subscriber_that_says_so() -> None:
    """An exporter that captures no content reads no call's messages: an offline call may
    leave its context out (the one part whose cost grows with the run)."""
    bus = ev.RunEvents()
    stop_spans = bus.subscribe(lambda event: None, only=EXPORTED, sent=False)
    assert bus.active and not bus.reads_sent
    stop_trace = bus.subscribe(lambda event: None)
    assert bus.reads_sent
    stop_trace()
    assert not bus.reads_sent
    stop_spans()


class Collector:
    """An OTLP/HTTP receiver on 127.0.0.1 keeping the names of the spans it receives."""

    def __init__(self) -> None:
        self.names: list[str] = []
        names = self.names

        class Receive(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                request = ExportTraceServiceRequest.FromString(body)
                for resource in request.resource_spans:
                    for scope in resource.scope_spans:
                        names.extend(span.name for span in scope.spans)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Receive)
        self.address = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def collector(monkeypatch: pytest.MonkeyPatch) -> Iterator[Collector]:
    collector = Collector()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.address)
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "none")
    yield collector
    collector.server.shutdown()
    collector.server.server_close()


class Forwarded(Recorder):
    """A run's events as a real run emits them, with the forwarder to an export process."""

    def __init__(self, process: ExportProcess) -> None:
        self.bus = ev.RunEvents("werewolf.fems")
        self.bus.subscribe(RunForwarder(process, "werewolf"), only=EXPORTED)


def test_spans_are_at_the_collector_when_a_flush_returns(collector: Collector) -> None:
    process = ExportProcess()
    try:
        play_a_night(Forwarded(process))
        process.flush()
        assert sorted(collector.names) == [
            "branch Seer",
            "branch Wolves",
            "chat fems/mock",
            "execute_tool read",
            "fork Night",
            "invoke_agent @wolf",
            "invoke_workflow werewolf",
        ]
        play_a_night(Forwarded(process), session=8)  # a second run: sent at the exit
    finally:
        process.close()
    assert collector.names.count("invoke_workflow werewolf") == 2
