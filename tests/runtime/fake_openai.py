"""A scripted OpenAI-compatible chat server on 127.0.0.1 with a fault injector, so tests exercise
the real network paths (the `openai` SDK and litellm) without a network.

A request that asks for a stream (``"stream": true``, as the runtime's always do) is answered
as the real APIs answer it (§15.4): server-sent events over chunked HTTP, one `data: {chunk}`
per piece of the reply (reasoning first, then the content word by word, then tool calls with
their arguments in two pieces), a usage chunk with no choices when ``stream_options`` asks for
it, and `data: [DONE]`. Other requests get the whole chat completion as JSON.

Each request is answered by a `Behaviour`: from the queue (`queue`), else from the fault injector
(`Faults`: a seeded share of requests fail), else the default. A reply text given as `None` comes
from the prompt: the text inside the last `REPLY[[...]]` marker of the last message, so a script's
replies do not depend on the order in which requests arrive.
"""

from __future__ import annotations

import json
import random
import re
import select
import socket
import struct
import sys
import threading
from collections import Counter, deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

REPLY_MARKER = re.compile(r"REPLY\[\[(.*?)\]\]", re.S)


@dataclass(frozen=True)
class Behaviour:
    """How the server answers one request.

    ``status``: the HTTP status; ``text``: the reply (None: from the prompt's marker);
    ``pause``: seconds to wait before answering (a hang, when longer than the client's timeout);
    ``retry_after``: a `Retry-After` header (seconds); ``fault``: ``"reset"`` drops the
    connection without an answer, ``"bad_json"`` answers 200 with a body that is not JSON;
    ``tool_calls``: the reply's tool calls, as ``(name, arguments JSON)`` pairs.

    Streams: ``pieces`` are the content's chunks (default: word by word); ``gap`` is the wait
    before each chunk; ``reasoning`` goes first, in the ``reasoning_field`` of the deltas;
    ``finish_reason`` ends the choice (default ``stop``, or ``tool_calls``);
    ``reasoning_tokens`` and ``cached_tokens`` go in the usage. ``fault="cut"`` drops the connection after
    ``cut_after`` chunks, ``fault="no_done"`` ends the body there without `[DONE]`;
    ``whole`` answers JSON even to a request for a stream (some local servers do; with
    ``fault="cut"``, half of it);
    ``error`` answers with this error object (and ``status``); ``hold`` (an event the test
    sets) keeps the stream waiting before its last piece of content, so a test can look at a
    reply half-written. ``reading`` is how long the server reads the prompt before it writes
    (a local server on a CPU): it sends nothing meanwhile, unless the request asks for
    llama.cpp's `return_progress`, when a `prompt_progress` chunk comes at once and another
    every ``progress_every`` seconds, as llama.cpp's server sends one per batch it has read.
    """

    status: int = 200
    text: str | None = "hello"
    pause: float = 0.0
    retry_after: float | None = None
    fault: str | None = None
    tool_calls: tuple[tuple[str, str], ...] = ()
    pieces: tuple[str, ...] | None = None
    gap: float = 0.0
    reasoning: str = ""
    reasoning_field: str = "reasoning_content"
    finish_reason: str | None = None
    reasoning_tokens: int | None = None
    cached_tokens: int | None = None
    cut_after: int = 1
    whole: bool = False
    error: dict[str, Any] | None = None
    hold: threading.Event | None = None
    reading: float = 0.0
    progress_every: float = 0.5


@dataclass(frozen=True)
class Faults:
    """Fail a seeded share ``rate`` of requests, each fault drawn from the kinds below.

    ``hang`` is how long a hanging request waits before it answers (give the client a smaller
    timeout); ``retry_after`` is the `Retry-After` a 429 carries.
    """

    rate: float
    seed: int = 0
    hang: float = 1.0
    retry_after: float = 0.01

    def kinds(self) -> tuple[Behaviour, ...]:
        """One behaviour per kind of fault: 500, 503, 429 with Retry-After, reset, bad JSON, hang."""
        return (
            Behaviour(500),
            Behaviour(503),
            Behaviour(429, retry_after=self.retry_after),
            Behaviour(fault="reset"),
            Behaviour(fault="bad_json"),
            Behaviour(text=None, pause=self.hang),
        )


class _Server(ThreadingHTTPServer):
    request_queue_size = 1024  # as a real endpoint: many clients connecting at once are queued

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that drops its connection (a timeout, a closed pool) is not an error."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class FakeOpenAI:
    """Serves /v1/chat/completions from a queue of behaviours and records what it saw."""

    def __init__(self, default: Behaviour | None = None, faults: Faults | None = None) -> None:
        self.default = default or Behaviour()
        self.faults = faults
        self.script: deque[Behaviour] = deque()
        self.requests: list[dict[str, Any]] = []
        self.injected: Counter[str] = Counter()
        self.connections = 0
        self.closed_early = 0  # streams the client closed before their end (a cancelled call)
        self.in_flight = 0
        self.max_in_flight = 0
        self._rng = random.Random(faults.seed if faults else 0)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._server = _Server(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def api_base(self) -> str:
        """The base URL to give a client as `api_base`."""
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def queue(self, *behaviours: Behaviour) -> None:
        """Answer the next requests with these behaviours, then with the default."""
        self.script.extend(behaviours)

    def _next(self, body: dict[str, Any]) -> Behaviour:
        with self._lock:
            self.requests.append(body)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            if self.script:
                return self.script.popleft()
            if self.faults and self._rng.random() < self.faults.rate:
                fault = self._rng.choice(self.faults.kinds())
                self.injected[_fault_name(fault)] += 1
                return fault
            return self.default

    def _wait_for(self, hold: threading.Event) -> None:
        """Wait until the test sets ``hold`` (or the server stops)."""
        while not hold.wait(0.05) and not self._stop.is_set():
            pass

    def _done(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as real endpoints: pooled clients reuse it
            disable_nagle_algorithm = True  # no 40 ms delayed-ACK stall between header and body

            def log_message(self, format: str, *args: Any) -> None:
                """Keep test output quiet."""

            def setup(self) -> None:
                super().setup()
                with fake._lock:
                    fake.connections += 1

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                data = self.rfile.read(length)
                if not self.path.split("?")[0].rstrip("/").endswith("/chat/completions"):
                    self._not_found()  # as a real endpoint: only chat is served
                    return
                body = json.loads(data or b"{}")
                behaviour = fake._next(body)
                try:
                    if behaviour.pause:
                        fake._stop.wait(behaviour.pause)
                    if behaviour.fault == "reset":
                        self._reset()
                        return
                    self._answer(behaviour, body)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True  # the client gave up before the answer
                finally:
                    fake._done()

            def _not_found(self) -> None:
                answer = b'{"error": {"message": "not found"}}'
                self.send_response(404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def _answer(self, behaviour: Behaviour, body: dict[str, Any]) -> None:
                if behaviour.status == 200 and body.get("stream") and not behaviour.whole:
                    self._stream(behaviour, body)
                    return
                if behaviour.fault == "bad_json":
                    data = b'{"id": "chatcmpl-test", "choices": [{"message": '
                elif behaviour.status == 200:
                    text = behaviour.text if behaviour.text is not None else prompt_reply(body)
                    model = body.get("model", "test")
                    answer = completion(model, text, behaviour.tool_calls, behaviour.reasoning)
                    data = json.dumps(answer).encode()
                else:
                    error = behaviour.error or {
                        "message": f"status {behaviour.status}",
                        "type": "fake_error",
                    }
                    data = json.dumps({"error": error}).encode()
                self.send_response(behaviour.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if behaviour.retry_after is not None:
                    self.send_header("Retry-After", f"{behaviour.retry_after:g}")
                self.end_headers()
                if behaviour.fault == "cut":  # half the body, then the connection drops
                    self.wfile.write(data[: len(data) // 2])
                    self._reset()
                    return
                self.wfile.write(data)

            def _stream(self, behaviour: Behaviour, body: dict[str, Any]) -> None:
                """The reply as server-sent events, each in its own HTTP chunk."""
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                if behaviour.reading:
                    self._read_prompt(behaviour, body)
                events = stream_events(behaviour, body)
                if behaviour.fault in ("cut", "no_done"):
                    events = events[: behaviour.cut_after]
                held = _last_content(events) if behaviour.hold is not None else -1
                for index, event in enumerate(events):
                    if index == held and behaviour.hold is not None:
                        fake._wait_for(behaviour.hold)
                    if behaviour.gap and self._client_left(behaviour.gap):
                        with fake._lock:
                            fake.closed_early += 1
                        self.close_connection = True
                        return
                    if behaviour.fault == "bad_json" and event is events[-1]:
                        event = "{not json"
                    self._chunk(f"data: {event}\n\n".encode())
                if behaviour.fault == "cut":
                    self._reset()
                    return
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

            def _read_prompt(self, behaviour: Behaviour, body: dict[str, Any]) -> None:
                """``behaviour.reading`` seconds of reading the prompt, in batches: each one a
                progress chunk when the request asked for them, else silence."""
                batches = max(1, round(behaviour.reading / behaviour.progress_every))
                for batch in range(batches + 1):
                    if body.get("return_progress"):
                        event = progress_event(body, batch, batches, behaviour.reading)
                        self._chunk(f"data: {event}\n\n".encode())
                    if batch < batches:
                        fake._stop.wait(behaviour.reading / batches)

            def _chunk(self, data: bytes) -> None:
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def _client_left(self, wait: float) -> bool:
                """Wait ``wait`` seconds, or until the client closes the connection (True)."""
                readable, _, _ = select.select([self.connection], [], [], wait)
                return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""

            def _reset(self) -> None:
                """Drop the connection with a TCP reset, before any answer."""
                self.connection.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                )
                self.close_connection = True

        return Handler

    def start(self) -> None:
        """Serve in a background thread."""
        self._thread.start()

    def stop(self) -> None:
        """Release paused answers and shut the server down."""
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()


def _fault_name(fault: Behaviour) -> str:
    if fault.fault:
        return fault.fault
    return "hang" if fault.pause else str(fault.status)


def _last_content(events: list[str]) -> int:
    """The index of a stream's last event with a piece of the reply's content."""
    return max(
        index
        for index, event in enumerate(events)
        if event != "[DONE]"
        and any(choice["delta"].get("content") for choice in json.loads(event)["choices"])
    )


def prompt_reply(body: dict[str, Any]) -> str:
    """The text inside the last `REPLY[[...]]` marker of the last message (else "hello")."""
    messages = body.get("messages") or [{}]
    found = REPLY_MARKER.findall(str(messages[-1].get("content", "")))
    return found[-1] if found else "hello"


def completion(
    model: str, text: str, tool_calls: tuple[tuple[str, str], ...] = (), reasoning: str = ""
) -> dict[str, Any]:
    """A minimal chat.completion body with usage figures (and tool calls and reasoning, when
    given)."""
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if reasoning:
        message["reasoning_content"] = reasoning
    if tool_calls:
        message["tool_calls"] = [
            {"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": a}}
            for i, (n, a) in enumerate(tool_calls)
        ]
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if tool_calls else "stop",
            }
        ],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
    }


def progress_event(body: dict[str, Any], batch: int, batches: int, reading: float) -> str:
    """llama.cpp's progress chunk after ``batch`` of ``batches`` of the prompt: an empty delta
    of the assistant, and `prompt_progress` (its server README's four values)."""
    total = 2048 * batches
    choice = {"finish_reason": None, "index": 0, "delta": {"role": "assistant", "content": None}}
    progress = {
        "total": total,
        "cache": 0,
        "processed": 2048 * batch,
        "time_ms": round(1000 * reading * batch / batches, 3),
    }
    base = {"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 0}
    chunk = {**base, "model": body.get("model", "test"), "choices": [choice]}
    return json.dumps({**chunk, "prompt_progress": progress})


def stream_events(behaviour: Behaviour, body: dict[str, Any]) -> list[str]:
    """The events (JSON texts, then `[DONE]`) of a streamed answer to ``body``."""
    model = body.get("model", "test")
    text = behaviour.text if behaviour.text is not None else prompt_reply(body)

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        base = {"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 0}
        return json.dumps({**base, "model": model, "choices": [choice]})

    events = [chunk({"role": "assistant", "content": ""})]
    if behaviour.reasoning:
        for piece in re.findall(r"\S+\s*|\s+", behaviour.reasoning):
            events.append(chunk({behaviour.reasoning_field: piece}))
    pieces = behaviour.pieces if behaviour.pieces is not None else re.findall(r"\S+\s*|\s+", text)
    events += [chunk({"content": piece}) for piece in pieces]
    for index, (name, arguments) in enumerate(behaviour.tool_calls):
        half = len(arguments) // 2
        first = {"name": name, "arguments": arguments[:half]}
        call = {"index": index, "id": f"call_{index}", "type": "function", "function": first}
        events.append(chunk({"tool_calls": [call]}))
        rest = {"index": index, "function": {"arguments": arguments[half:]}}
        events.append(chunk({"tool_calls": [rest]}))
    default = "tool_calls" if behaviour.tool_calls else "stop"
    events.append(chunk({}, behaviour.finish_reason or default))
    if (body.get("stream_options") or {}).get("include_usage"):
        usage: dict[str, Any] = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
        if behaviour.reasoning_tokens is not None:
            usage["completion_tokens_details"] = {"reasoning_tokens": behaviour.reasoning_tokens}
        if behaviour.cached_tokens is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": behaviour.cached_tokens}
        base = {"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 0}
        events.append(json.dumps({**base, "model": model, "choices": [], "usage": usage}))
    return [*events, "[DONE]"]


@contextmanager
def fake_openai(
    default: Behaviour | None = None, faults: Faults | None = None
) -> Iterator[FakeOpenAI]:
    """Run a `FakeOpenAI` for the duration of a `with` block."""
    server = FakeOpenAI(default, faults)
    server.start()
    try:
        yield server
    finally:
        server.stop()
