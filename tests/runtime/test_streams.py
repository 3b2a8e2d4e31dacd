"""Every call streams (§15.4), on both paths, against the fake server speaking SSE as the real
APIs do: `--timeout` is the longest silence, a stream cut mid-way is retried with its partial
text discarded, a cancelled call closes its connection, and the reply arrives in pieces with
its reasoning cut out (§13.1); the call's own fields (`max_tokens`, reasoning on request,
§15.7) are sent and fems2py's own options are not; a window overflow is `ContextTooLong`."""

from __future__ import annotations

import asyncio
import gc
import time
import warnings
from typing import Any

import pytest
from fems_runtime.llm import CallResult, ContextTooLong, ModelClient, RetryPolicy
from fems_runtime.records import RunError
from fems_runtime.replies import ReplyStream

from .fake_openai import Behaviour, FakeOpenAI, fake_openai
from .test_endpoints import MESSAGES, PATHS, TURN, both_paths, make_client

FAST_RETRY = RetryPolicy(budget=30.0, base=0.01, cap=0.02)


def run_call(
    client: ModelClient, alias: str = "test", stream: ReplyStream | None = None, **options: Any
) -> CallResult:
    async def one() -> CallResult:
        try:
            choice = client.resolve(alias)
            return await client.complete(choice, MESSAGES, TURN, stream=stream, **options)
        finally:
            await client.aclose()

    return asyncio.run(one())


def client_with(server: FakeOpenAI, path: str, **entry: Any) -> ModelClient:
    """A client whose alias ``test`` has the path's entry plus ``entry``."""
    client = make_client(server, path)
    client.model_map["test"] = {**PATHS[path](server.api_base, "test"), **entry}
    return client


def warm_up(client: ModelClient) -> None:
    """A first call sets the path up (litellm's takes long); it is not the endpoint's time."""
    run_call(client)


@both_paths
def test_a_reply_streaming_longer_than_the_timeout_completes(path: str) -> None:
    """The timeout is silence, not the whole reply: 12 words 0.2 s apart under a 1 s timeout
    (as a word every 0.5 s for 30 s under `--timeout 5`)."""
    words = tuple(f"word{i} " for i in range(12))
    with fake_openai() as server:
        client = make_client(server, path, timeout=1.0)
        warm_up(client)
        server.queue(Behaviour(pieces=words, gap=0.2))
        started = time.monotonic()
        result = run_call(client)
        took = time.monotonic() - started
    assert (result.text, result.attempts) == ("".join(words), 1)
    assert took > 1.0  # longer than the timeout as a whole (the shape under test, not a timing)


@both_paths
def test_a_stream_that_goes_silent_is_retried(path: str) -> None:
    with fake_openai() as server:
        client = make_client(server, path, timeout=1.0)
        warm_up(client)
        server.queue(Behaviour(text="too slow", gap=4.0), Behaviour(text="on time"))
        result = run_call(client)
    assert (result.text, result.attempts) == ("on time", 2)


@both_paths
@pytest.mark.parametrize("fault", ["cut", "no_done"])
def test_a_stream_cut_mid_way_is_retried_and_its_partial_text_discarded(
    path: str, fault: str
) -> None:
    told: list[tuple[str, str]] = []
    stream = ReplyStream(lambda kind, chunk: told.append((kind, chunk)))
    with fake_openai() as server:
        server.queue(Behaviour(text="the first words of a reply", fault=fault, cut_after=3))
        server.queue(Behaviour(text="whole reply"))
        result = run_call(make_client(server, path), stream=stream)
    assert (result.text, result.attempts) == ("whole reply", 2)
    assert stream.text == "whole reply"  # the cut attempt's words are gone
    assert ("discard", "") in told
    assert "".join(chunk for _, chunk in told[told.index(("discard", "")) :]) == "whole reply"


@both_paths
@pytest.mark.parametrize("whole", [False, True])
def test_a_stream_cut_mid_way_is_not_taken_for_a_server_that_is_not_running(
    path: str, whole: bool
) -> None:
    """The server answered, then dropped the connection: no 'cannot connect … is the server
    running?' notice (§15.4 says that of a refused connection only), and a give-up says the
    stream broke off."""
    notices: list[str] = []
    cut = Behaviour(text="the first words of a reply", fault="cut", cut_after=3, whole=whole)
    with fake_openai(cut) as server:
        client = make_client(server, path, notice=notices.append)
        client.retry = RetryPolicy(budget=3.0, base=0.2, cap=0.5)
        with pytest.raises(RunError) as error:
            run_call(client)
    assert notices == []
    assert "broke off" in str(error.value) and "running?" not in str(error.value)


@both_paths
def test_a_cancelled_call_closes_its_stream(path: str) -> None:
    """Cancelling the task awaiting the call (an interrupt, join(n), Ctrl-C) closes the
    connection: the server sees it close and stops writing."""
    words = tuple(f"w{i} " for i in range(100))
    with fake_openai(Behaviour(pieces=words, gap=0.05)) as server:
        client = make_client(server, path)

        async def scenario() -> str:
            stream = ReplyStream()
            choice = client.resolve("test")
            task = asyncio.create_task(client.complete(choice, MESSAGES, TURN, stream=stream))
            while len(stream.text) < 6:
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await client.aclose()
            return stream.text

        received = asyncio.run(scenario())
        deadline = time.monotonic() + 30
        while server.closed_early == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.closed_early == 1
    assert received.startswith("w0 w1 ") and len(received) < len("".join(words))


@both_paths
def test_the_reply_stream_is_filled_as_chunks_arrive(path: str) -> None:
    told: list[tuple[str, str]] = []
    stream = ReplyStream(lambda kind, chunk: told.append((kind, chunk)))
    with fake_openai(Behaviour(text="one two three four")) as server:
        result = run_call(make_client(server, path), stream=stream)
    assert [chunk for kind, chunk in told if kind == "text"] == ["one ", "two ", "three ", "four"]
    assert stream.text == result.text == "one two three four"
    assert server.requests[0]["stream"] is True
    assert server.requests[0]["stream_options"] == {"include_usage": True}
    assert (result.prompt_tokens, result.completion_tokens) == (11, 7)  # from the usage chunk


@both_paths
def test_provider_reasoning_is_kept_apart_from_the_reply(path: str) -> None:
    told: list[tuple[str, str]] = []
    stream = ReplyStream(lambda kind, chunk: told.append((kind, chunk)))
    thoughts = "I am secretly the wolf. SET VARIABLE: <<@kill = @bob>>"
    behaviour = Behaviour(text="Good morning, village.", reasoning=thoughts, reasoning_tokens=42)
    with fake_openai(behaviour) as server:
        result = run_call(make_client(server, path), stream=stream)
    assert result.text == "Good morning, village."
    assert result.reasoning == thoughts
    assert result.reasoning_tokens == 42
    assert stream.reasoning == thoughts and stream.text == result.text
    assert told[0][0] == "reasoning" and told[-1] == ("text", "village.")


@both_paths
def test_a_think_block_split_across_chunks_is_cut_out(path: str) -> None:
    pieces = ("\n<thi", "nk>I am the wolf; ", "kill Bob.</th", "ink>\n\n", "I sleep ", "soundly.")
    with fake_openai(Behaviour(pieces=pieces)) as server:
        result = run_call(make_client(server, path))
    assert (result.reasoning, result.text) == ("I am the wolf; kill Bob.", "I sleep soundly.")


def test_openrouters_reasoning_field_is_reasoning_too() -> None:
    behaviour = Behaviour(text="Hi.", reasoning="hmm", reasoning_field="reasoning")
    with fake_openai(behaviour) as server:
        result = run_call(make_client(server, "openai"))
    assert (result.reasoning, result.text) == ("hmm", "Hi.")


def test_a_server_that_answers_json_to_a_stream_request_still_works() -> None:
    told: list[tuple[str, str]] = []
    behaviour = Behaviour(text="<think>plan</think>Whole answer.", whole=True, reasoning="field")
    with fake_openai(behaviour) as server:
        stream = ReplyStream(lambda kind, chunk: told.append((kind, chunk)))
        result = run_call(make_client(server, "openai"), stream=stream)
    assert (result.text, result.reasoning) == ("Whole answer.", "field\n\nplan")
    assert (result.prompt_tokens, result.finish_reason) == (11, "stop")
    assert ("text", "Whole answer.") in told


@both_paths
def test_tool_calls_arrive_in_pieces_and_are_put_together(path: str) -> None:
    calls = (("read", '{"path": "notes.txt"}'), ("grep", '{"pattern": "wolf", "path": "."}'))
    with fake_openai(Behaviour(text="", tool_calls=calls)) as server:
        result = run_call(make_client(server, path))
    assert [(c.name, c.arguments) for c in result.tool_calls] == list(calls)
    assert result.finish_reason == "tool_calls"


@both_paths
def test_max_tokens_argument_wins_over_the_model_map_and_length_is_recorded(path: str) -> None:
    with fake_openai(Behaviour(text="cut", finish_reason="length")) as server:
        first = run_call(client_with(server, path, max_tokens=80))
        run_call(client_with(server, path, max_tokens=80), max_tokens=20)
    sent = [r.get("max_tokens", r.get("max_completion_tokens")) for r in server.requests]
    assert sent == [80, 20]
    assert first.finish_reason == "length"


@both_paths
def test_fems2pys_own_options_are_never_request_fields(path: str) -> None:
    with fake_openai() as server:
        run_call(client_with(server, path, context_window=1500))
    assert "context_window" not in server.requests[0]
    assert "reasoning" not in server.requests[0]


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("openai/qwen3", {"reasoning_effort": "high"}),
        (
            "deepseek/deepseek-reasoner",
            {"reasoning_effort": "high", "thinking": {"type": "enabled"}},
        ),
    ],
)
def test_reasoning_on_request_is_sent(model: str, expected: dict[str, Any]) -> None:
    with fake_openai() as server:
        entry = {"model": model, "api_base": server.api_base, "api_key": "k", "reasoning": "low"}
        client = ModelClient(model_map={"m": entry}, environ={}, retry=FAST_RETRY)
        run_call(client, "m", reasoning="high")  # deep_think's request wins over the entry's
        run_call(client, "m")
    fields = [
        {k: r[k] for k in ("reasoning_effort", "thinking") if k in r} for r in server.requests
    ]
    assert fields == [expected, {**expected, "reasoning_effort": "low"}]
    assert "reasoning" not in server.requests[0]


def test_reasoning_through_litellm_is_sent_as_reasoning_effort() -> None:
    with fake_openai() as server:
        client = client_with(server, "litellm", model="azure/o3-mini", reasoning="medium")
        run_call(client)
    assert server.requests[0]["reasoning_effort"] == "medium"


@both_paths
def test_a_model_without_a_reasoning_mode_is_a_notice_not_an_error(path: str) -> None:
    refusal = {"message": "Unrecognized request argument supplied: reasoning_effort"}
    notices: list[str] = []
    with fake_openai() as server:
        server.queue(Behaviour(400, error=refusal))
        model = {"litellm": "azure/o3-mini"}.get(path, "openai/test")  # one litellm lets reason
        client = client_with(server, path, model=model, reasoning="high")
        client._notice = notices.append
        first, second = run_call(client), run_call(client)
    assert (first.text, first.attempts, second.text) == ("hello", 1, "hello")
    assert len(notices) == 1 and "has no reasoning mode" in notices[0]
    assert ["reasoning_effort" in request for request in server.requests] == [True, False, False]


@both_paths
def test_context_length_exceeded_is_context_too_long_naming_the_model(path: str) -> None:
    error = {
        "message": "This model's maximum context length is 1500 tokens. However, your messages "
        "resulted in 2210 tokens.",
        "type": "invalid_request_error",
        "code": "context_length_exceeded",
    }
    with fake_openai(Behaviour(400, error=error)) as server:
        with pytest.raises(ContextTooLong) as raised:
            run_call(make_client(server, path))
        assert len(server.requests) == 1  # not retried here: the turn halves its context
    model = PATHS[path]("", "test")["model"]
    assert isinstance(raised.value, RunError)
    assert raised.value.model == model
    assert str(raised.value).startswith(f"model {model}: the request is longer than its context")


def test_llama_cpps_wording_of_a_full_context_is_recognised() -> None:
    error = {"message": "the request exceeds the available context size, try increasing it"}
    with fake_openai(Behaviour(400, error=error)) as server, pytest.raises(ContextTooLong):
        run_call(make_client(server, "openai"))


def test_the_window_comes_from_the_model_map_then_the_table() -> None:
    client = ModelClient(
        environ={},
        model_map={
            "small": {"model": "openai/local", "api_base": "http://h/v1", "context_window": 1500},
            "known": "openai/gpt-4o-mini",
            "unknown": "openai/no-such-model",
        },
    )
    assert client.window(client.resolve("small")) == 1500
    assert client.window(client.resolve("known")) == 128000
    assert client.window(client.resolve("unknown")) is None
    assert client.window(client.resolve("fems/mock")) is None


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ({"context_window": "big"}, "context_window must be a positive number of tokens"),
        ({"context_window": 0}, "context_window must be a positive number of tokens"),
        ({"reasoning": "max"}, "reasoning must be one of low, medium, high"),
        ({"max_tokens": "abc"}, "max_tokens must be a positive whole number"),
        ({"max_tokens": -5}, "max_tokens must be a positive whole number"),
        ({"timeout": "x"}, "timeout must be a number of seconds > 0"),
        ({"timeout": 0}, "timeout must be a number of seconds > 0"),
    ],
)
def test_fems2pys_own_options_are_checked(option: dict[str, Any], message: str) -> None:
    client = ModelClient(environ={}, model_map={"m": {"model": "openai/x", **option}})
    with pytest.raises(RunError, match=message):
        client.resolve("m")


def test_an_offline_reply_is_split_and_streamed_at_once() -> None:
    told: list[tuple[str, str]] = []
    replies = {"*": ["<think>I am the wolf.</think>Good night. SET VARIABLE: <<n = 1>>"]}
    client = ModelClient(environ={}, run_model="fems/script", replies=replies)
    result = run_call(client, stream=ReplyStream(lambda kind, chunk: told.append((kind, chunk))))
    assert (result.reasoning, result.text) == (
        "I am the wolf.",
        "Good night. SET VARIABLE: <<n = 1>>",
    )
    assert told == [("reasoning", "I am the wolf."), ("text", result.text)]


def test_a_litellm_run_leaves_no_connection_open_for_the_collector() -> None:
    """litellm caches its clients across event loops and replaces a session whose loop ended
    without being able to close its sockets: each run closes its loop's own at its end
    (`ModelClient.aclose`), so nothing is left for the collector to warn about, even after a
    request refused with a 400 and sent again."""
    refusal = {"message": "Unrecognized request argument supplied: reasoning_effort"}
    gc.collect()  # what earlier tests left is theirs
    with fake_openai() as server:
        server.queue(Behaviour(400, error=refusal))
        client = client_with(server, "litellm", model="azure/o3-mini", reasoning="high")
        client._notice = lambda _: None
        texts = [run_call(client).text for _ in range(3)]  # each run on its own event loop
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        gc.collect()
    assert texts == ["hello"] * 3
    assert [str(w.message) for w in caught if w.category is ResourceWarning] == []
