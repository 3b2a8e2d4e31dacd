"""A local server says what it is (§15.4): llama.cpp, vLLM, Ollama and LM Studio asked once per
run for an entry with an `api_base` that leaves its window or concurrency unsaid, the entry
winning, one notice, and a server that says nothing used as before."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from fems_runtime.endpoints import Failure, ModelCallError
from fems_runtime.llm import ModelClient, ReplyStream
from fems_runtime.serverinfo import LocalServers, ServerFacts, ask_server

from .fake_local import FakeLocalServer, fake_local, llama_cpp, lm_studio, ollama, vllm
from .fake_openai import Behaviour


@pytest.mark.parametrize(
    ("answers", "model", "expected"),
    [
        (llama_cpp(n_ctx=2048, slots=1), "smollm2", ("llama.cpp", "/props", 2048, 1)),
        (llama_cpp(n_ctx=8192, slots=4), "smollm2", ("llama.cpp", "/props", 8192, 4)),
        (vllm(32768), "Qwen/Qwen2.5-7B-Instruct", ("vLLM", "/v1/models", 32768, None)),
        (ollama(loaded=8192), "qwen2.5", ("Ollama", "/api/ps", 8192, None)),
        (ollama(num_ctx=16384), "qwen2.5", ("Ollama", "/api/show", 16384, None)),
        (ollama(trained=131072), "qwen2.5", ("Ollama", "/api/show", 131072, None)),
        (lm_studio(loaded=4096), "qwen2.5-7b-instruct", ("LM Studio", "/api/v0/models", 4096, None)),
        (lm_studio(loaded=None), "qwen2.5-7b-instruct", ("LM Studio", "/api/v0/models", 32768, None)),
    ],
)  # fmt: skip
def test_each_server_says_its_window_and_slots_its_own_way(
    answers: dict[str, Any], model: str, expected: tuple[str, str, int, int | None]
) -> None:
    with fake_local(answers) as server:
        facts = asyncio.run(ask_server(server.api_base, model))
    assert facts is not None
    kind, path, window, slots = expected
    assert (facts.kind, facts.context_window, facts.max_concurrency) == (kind, window, slots)
    assert facts.url == server.root + path


def test_an_address_without_v1_is_asked_at_the_same_paths() -> None:
    with fake_local(llama_cpp(n_ctx=4096)) as server:
        facts = asyncio.run(ask_server(server.root, "smollm2"))
    assert facts is not None and facts.context_window == 4096


@pytest.mark.parametrize(
    "answers",
    [
        {},  # only chat: every question is a 404
        {"GET /props": b"<html>not json</html>"},
        {"GET /props": {"default_generation_settings": {"n_ctx": "big"}, "total_slots": -1}},
        {"GET /props": [1, 2, 3]},
        {"GET /v1/models": {"data": [{"id": "other", "max_model_len": 0}]}},
        {"GET /api/v0/models": {"data": "none"}},
        {"GET /api/ps": {"models": [{"name": "qwen2.5", "context_length": True}]}},
    ],
)
def test_a_server_that_says_nothing_usable_is_used_as_before(answers: dict[str, Any]) -> None:
    with fake_local(answers) as server:
        assert asyncio.run(ask_server(server.api_base, "qwen2.5")) is None
        client = local_client(server)
        choice = client.resolve("local")
        asyncio.run(learn_and_close(client, choice))
        assert client.window(choice) is None and client.servers.told(choice) is None


@pytest.fixture
def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that takes connections and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield int(listener.getsockname()[1])


def test_a_refused_or_silent_server_says_nothing(closed_port: int, silent_port: int) -> None:
    for port in (closed_port, silent_port):
        base = f"http://127.0.0.1:{port}/v1"
        assert asyncio.run(ask_server(base, "m", seconds=0.2)) is None


def local_client(server: FakeLocalServer, **entry: Any) -> ModelClient:
    notices: list[str] = []
    table = {"model": "openai/smollm2", "api_base": server.api_base, **entry}
    client = ModelClient(model_map={"local": table}, environ={}, notice=notices.append)
    client.notices = notices  # type: ignore[attr-defined]
    return client


async def learn_and_close(client: ModelClient, *choices: Any) -> None:
    await asyncio.gather(*(client.servers.learn(choice) for choice in choices))
    await client.aclose()


def test_the_server_is_asked_once_and_named_in_one_notice() -> None:
    with fake_local(llama_cpp(n_ctx=2048, slots=1)) as server:
        client = local_client(server)
        choice = client.resolve("local")
        asyncio.run(learn_and_close(client, *[choice] * 5))
        asyncio.run(learn_and_close(client, choice))
        assert server.asked == {"GET /props": 1, "GET /v1/models": 1}
    told = client.servers.told(choice)
    assert client.window(choice) == 2048 and told is not None
    assert told.max_concurrency == 1
    assert client.notices == [  # type: ignore[attr-defined]
        f"fems: model openai/smollm2: context_window 2048, max_concurrency 1, as llama.cpp's "
        f"server at {server.root}/props says (set them in its model-map entry to decide yourself)"
    ]


def test_what_the_entry_says_wins_and_a_full_entry_asks_nothing() -> None:
    with fake_local(llama_cpp(n_ctx=2048, slots=4)) as server:
        client = local_client(server, context_window=1000)
        choice = client.resolve("local")
        asyncio.run(learn_and_close(client, choice))
        told = client.servers.told(choice)
        assert client.window(choice) == 1000 and told is not None
        assert told.max_concurrency == 4
        assert "max_concurrency 4, as llama.cpp's" in client.notices[0]  # type: ignore[attr-defined]
        assert "context_window" not in client.notices[0]  # type: ignore[attr-defined]
        full = local_client(server, context_window=1000, max_concurrency=2)
        asyncio.run(learn_and_close(full, full.resolve("local")))
        assert server.asked == {"GET /props": 1, "GET /v1/models": 1}  # the first client's
        assert full.notices == []  # type: ignore[attr-defined]


def test_a_hosted_model_is_never_asked() -> None:
    async def never(*args: Any, **kwargs: Any) -> ServerFacts | None:
        raise AssertionError("a hosted model's server was asked")

    client = ModelClient(model_map={"fast": "openai/gpt-4o-mini"}, environ={})
    client.servers = LocalServers(print, {}, ask=never)
    for choice in (client.resolve("fast"), client.resolve("deepseek/deepseek-chat")):
        asyncio.run(client.servers.learn(choice))
        assert client.window(choice) != 0


READING = Behaviour(text="ready now", reading=1.5, progress_every=0.25)
"""A server that reads the prompt for 1.5 s before it writes: longer than the 0.6 s the
entries below wait for a first chunk, or let a stream be silent."""


async def call_and_close(client: ModelClient) -> str:
    choice = client.resolve("local")
    await client.servers.learn(choice)
    try:
        messages = [{"role": "user", "content": "Say ready."}]
        return (await client.try_once(choice, messages, ReplyStream(), 16)).text
    finally:
        await client.aclose()


def test_a_llama_cpp_server_reading_a_long_prompt_is_asked_for_its_progress() -> None:
    """Each batch of the prompt it has read comes as a chunk: a sign of life, not a reply."""
    with fake_local(llama_cpp(n_ctx=8192, slots=1), READING) as server:
        client = local_client(server, timeout=0.6)
        assert asyncio.run(call_and_close(client)) == "ready now"
    (request,) = server.requests
    assert request["return_progress"] is True


def test_a_server_not_known_to_show_its_progress_is_not_asked_and_its_silence_is_cut() -> None:
    """The same reading on a server that did not say it is llama.cpp: nothing comes for
    1.5 s, and the wait for the first chunk ends the call."""
    for answers in ({}, vllm(8192, model="smollm2")):
        with fake_local(answers, READING) as server:
            client = local_client(server, timeout=0.6)
            with pytest.raises(ModelCallError) as raised:
                asyncio.run(call_and_close(client))
        assert raised.value.kind is Failure.TIMEOUT
        assert "return_progress" not in server.requests[0]
