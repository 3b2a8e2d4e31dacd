"""A scripted OpenAI-compatible chat server on 127.0.0.1, so tests exercise the real litellm path."""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Behaviour:
    """How the server answers one request: a status code, an optional pause, a reply text."""

    status: int = 200
    text: str = "hello"
    pause: float = 0.0


class FakeOpenAI:
    """Serves /v1/chat/completions from a queue of behaviours and records what it saw."""

    def __init__(self, default: Behaviour | None = None) -> None:
        self.default = default or Behaviour()
        self.script: deque[Behaviour] = deque()
        self.requests: list[dict[str, Any]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def api_base(self) -> str:
        """The base URL to give litellm as `api_base`."""
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def queue(self, *behaviours: Behaviour) -> None:
        """Answer the next requests with these behaviours, then with the default."""
        self.script.extend(behaviours)

    def _next(self, body: dict[str, Any]) -> Behaviour:
        with self._lock:
            self.requests.append(body)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            return self.script.popleft() if self.script else self.default

    def _done(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                """Keep test output quiet."""

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                behaviour = fake._next(body)
                try:
                    if behaviour.pause:
                        fake._stop.wait(behaviour.pause)
                    if behaviour.status == 200:
                        payload = completion(body.get("model", "test"), behaviour.text)
                    else:
                        payload = {"error": {"message": f"status {behaviour.status}"}}
                    data = json.dumps(payload).encode()
                    self.send_response(behaviour.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout or cancellation) before the answer
                finally:
                    fake._done()

        return Handler

    def start(self) -> None:
        """Serve in a background thread."""
        self._thread.start()

    def stop(self) -> None:
        """Release paused answers and shut the server down."""
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()


def completion(model: str, text: str) -> dict[str, Any]:
    """A minimal chat.completion body with usage figures."""
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
    }


@contextmanager
def fake_openai(default: Behaviour | None = None) -> Iterator[FakeOpenAI]:
    """Run a `FakeOpenAI` for the duration of a `with` block."""
    server = FakeOpenAI(default)
    server.start()
    try:
        yield server
    finally:
        server.stop()
