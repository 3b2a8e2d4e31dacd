"""Fake local model servers on 127.0.0.1: the scripted chat server of `fake_openai`, answering
besides what llama.cpp, vLLM, Ollama or LM Studio answer when asked what they are (§15.4).

The answers have the shapes the servers' documentation shows (llama.cpp's server README for
`/props`, vLLM's OpenAI-compatible `/v1/models`, Ollama's API reference for `/api/ps` and
`/api/show`, LM Studio's REST API v0 for `/api/v0/models`), trimmed to a few fields each.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from typing import Any

from .fake_openai import Behaviour, FakeOpenAI


def llama_cpp(n_ctx: int = 2048, slots: int = 1, model: str = "smollm2") -> dict[str, Any]:
    """llama.cpp's `llama-server`: `/props`, and a `/v1/models` without a window."""
    return {
        "GET /props": {
            "default_generation_settings": {
                "id": 0,
                "id_task": -1,
                "n_ctx": n_ctx,
                "speculative": False,
                "is_processing": False,
                "params": {"n_predict": -1, "temperature": 0.8, "top_k": 40},
            },
            "total_slots": slots,
            "model_path": "/models/smollm2-135m-instruct-q8_0.gguf",
            "chat_template": "{% for message in messages %}…{% endfor %}",
            "modalities": {"vision": False, "audio": False},
            "build_info": "b5000-0123abcd",
        },
        "GET /v1/models": {
            "object": "list",
            "data": [
                {
                    "id": model,
                    "object": "model",
                    "created": 1735689600,
                    "owned_by": "llamacpp",
                    "meta": {"vocab_type": 2, "n_vocab": 49152, "n_ctx_train": 8192},
                }
            ],
        },
    }


def vllm(max_model_len: int = 32768, model: str = "Qwen/Qwen2.5-7B-Instruct") -> dict[str, Any]:
    """vLLM's OpenAI-compatible server: `/v1/models` with each model's `max_model_len`."""
    return {
        "GET /v1/models": {
            "object": "list",
            "data": [
                {
                    "id": model,
                    "object": "model",
                    "created": 1735689600,
                    "owned_by": "vllm",
                    "root": model,
                    "parent": None,
                    "max_model_len": max_model_len,
                    "permission": [{"id": "modelperm-1", "object": "model_permission"}],
                }
            ],
        }
    }


def ollama(
    *, loaded: int | None = None, num_ctx: int | None = None, trained: int = 32768
) -> dict[str, Any]:
    """Ollama: `/api/ps` (the loaded models, with the context each was loaded with) and
    `/api/show` (parameters as Modelfile lines, and the model's own metadata)."""
    running = []
    if loaded is not None:
        running.append(
            {
                "name": "qwen2.5:latest",
                "model": "qwen2.5:latest",
                "size": 5618579456,
                "digest": "845dbda0ea48ed749caafd9e6037047aa19acfcfd82e704d7ca97d631a0b697e",
                "details": {"format": "gguf", "family": "qwen2", "parameter_size": "7.6B"},
                "expires_at": "2026-12-05T12:00:00Z",
                "size_vram": 5618579456,
                "context_length": loaded,
            }
        )
    parameters = 'stop "<|im_start|>"\nstop "<|im_end|>"'
    if num_ctx is not None:
        parameters = f"num_ctx {num_ctx}\n{parameters}"
    return {
        "GET /api/ps": {"models": running},
        "POST /api/show": {
            "modelfile": "FROM qwen2.5",
            "parameters": parameters,
            "template": "{{ .Prompt }}",
            "details": {"format": "gguf", "family": "qwen2", "parameter_size": "7.6B"},
            "model_info": {
                "general.architecture": "qwen2",
                "general.parameter_count": 7615616512,
                "qwen2.context_length": trained,
                "qwen2.embedding_length": 3584,
            },
            "capabilities": ["completion", "tools"],
        },
        "GET /v1/models": {
            "object": "list",
            "data": [{"id": "qwen2.5:latest", "object": "model", "owned_by": "library"}],
        },
    }


def lm_studio(*, loaded: int | None = 4096, largest: int = 32768) -> dict[str, Any]:
    """LM Studio: `/api/v0/models`, each with its largest context and, once loaded, the
    context it was loaded with."""
    model: dict[str, Any] = {
        "id": "qwen2.5-7b-instruct",
        "object": "model",
        "type": "llm",
        "publisher": "lmstudio-community",
        "arch": "qwen2",
        "compatibility_type": "gguf",
        "quantization": "Q4_K_M",
        "state": "loaded" if loaded else "not-loaded",
        "max_context_length": largest,
    }
    if loaded:
        model["loaded_context_length"] = loaded
    other = {**model, "id": "text-embedding-nomic", "type": "embeddings", "state": "not-loaded"}
    other.pop("loaded_context_length", None)
    return {
        "GET /api/v0/models": {"object": "list", "data": [other, model]},
        "GET /v1/models": {
            "object": "list",
            "data": [{"id": "qwen2.5-7b-instruct", "object": "model", "owned_by": "me"}],
        },
    }


class FakeLocalServer(FakeOpenAI):
    """The chat server of `FakeOpenAI`, plus ``answers``: ``"METHOD /path"`` → the JSON body
    of a 200 answer (a `bytes` body is sent as it is); any other GET is a 404. ``asked``
    counts the requests of each such path."""

    def __init__(self, answers: Mapping[str, Any], default: Behaviour | None = None) -> None:
        self.answers = dict(answers)
        self.asked: dict[str, int] = {}
        self._asked_lock = threading.Lock()
        super().__init__(default)

    @property
    def root(self) -> str:
        """The server's address without `/v1`."""
        return self.api_base.removesuffix("/v1")

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        chat = super()._handler()
        fake = self

        class Handler(chat):  # type: ignore[misc, valid-type]
            def do_GET(self) -> None:
                self._known(f"GET {self.path}") or self._send(404, b'{"error": "not found"}')

            def do_POST(self) -> None:
                if not self._known(f"POST {self.path}"):
                    super().do_POST()

            def _known(self, route: str) -> bool:
                if route not in fake.answers:
                    return False
                with fake._asked_lock:
                    fake.asked[route] = fake.asked.get(route, 0) + 1
                if route.startswith("POST"):
                    self.rfile.read(int(self.headers.get("Content-Length", "0")))
                body = fake.answers[route]
                self._send(200, body if isinstance(body, bytes) else json.dumps(body).encode())
                return True

            def _send(self, status: int, data: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler


@contextmanager
def fake_local(
    answers: Mapping[str, Any], default: Behaviour | None = None
) -> Iterator[FakeLocalServer]:
    """Run a `FakeLocalServer` for the duration of a `with` block."""
    server = FakeLocalServer(answers, default)
    server.start()
    try:
        yield server
    finally:
        server.stop()
