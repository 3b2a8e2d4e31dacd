"""The two network paths (§15.1, §15.4) against a fake OpenAI server on 127.0.0.1: the `openai`
SDK for the OpenAI protocol, litellm for other providers (here `azure/…`, whose protocol the
fake server answers too). Both must retry, time out, fail, count usage and cost the same way,
and so must the SDK's two transports: httpx, and aiohttp for runs of `WIDE_RUN` calls in flight
(`openai_wide`)."""

from __future__ import annotations

import asyncio
import json
import random
import re
import socket
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import aiohttp  # noqa: F401  # before the SDK loads in this process: `openai_wide` needs it
import pytest
from fems_helpers import python_output
from fems_runtime.endpoints import (
    WIDE_RUN,
    ModelCallError,
    missing_key,
    openai_route,
    parse_retry_after,
    speaks_deepseek,
)
from fems_runtime.llm import CallResult, ModelClient, RetryPolicy, no_answer
from fems_runtime.offline import OfflineTurn
from fems_runtime.prices import PriceTable, Usage, litellm_price_file
from fems_runtime.records import RunError

from .fake_openai import Behaviour, FakeOpenAI, fake_openai

TURN = OfflineTurn(action="talk", actor="@eve")
MESSAGES = [{"role": "user", "content": "Say hello."}]
FAST_RETRY = RetryPolicy(budget=30.0, base=0.01, cap=0.02)


def openai_entry(api_base: str, name: str) -> dict[str, Any]:
    return {"model": f"openai/{name}", "api_base": api_base, "api_key": "sk-test"}


def litellm_entry(api_base: str, name: str) -> dict[str, Any]:
    return {
        "model": f"azure/{name}",
        "api_base": api_base.removesuffix("/v1"),
        "api_key": "sk-test",
        "api_version": "2024-06-01",
    }


PATHS: dict[str, Callable[[str, str], dict[str, Any]]] = {
    "openai": openai_entry,
    "openai_wide": openai_entry,
    "litellm": litellm_entry,
}
both_paths = pytest.mark.parametrize("path", sorted(PATHS))


def make_client(server: FakeOpenAI, path: str, **options: Any) -> ModelClient:
    entry = PATHS[path]
    model_map = {
        "test": entry(server.api_base, "test"),
        "priced": entry(server.api_base, "gpt-4o-mini"),
        "own": {**entry(server.api_base, "test"), "input_cost_per_token": 0.5},
    }
    model_map["own"]["output_cost_per_token"] = 2.0
    if path == "openai_wide":
        options.setdefault("max_concurrency", WIDE_RUN)
    return ModelClient(**{"model_map": model_map, "environ": {}, "retry": FAST_RETRY, **options})


def call(client: ModelClient, alias: str = "test") -> CallResult:
    async def one() -> CallResult:
        try:
            return await client.complete(client.resolve(alias), MESSAGES, TURN)
        finally:
            await client.aclose()

    return asyncio.run(one())


def table_price(model: str) -> float:
    """11 prompt and 7 completion tokens at the price the bundled JSON gives ``model``."""
    path = litellm_price_file()
    assert path is not None
    entry = json.loads(path.read_text(encoding="utf-8"))[model]
    return 11 * entry["input_cost_per_token"] + 7 * entry["output_cost_per_token"]


@both_paths
def test_reply_usage_and_cost(path: str) -> None:
    with fake_openai() as server:
        server.queue(Behaviour(text="first"))
        first = call(make_client(server, path), "priced")
        second = call(make_client(server, path), "own")
        third = call(make_client(server, path))
    assert (first.text, first.attempts) == ("first", 1)
    assert (first.prompt_tokens, first.completion_tokens) == (11, 7)
    priced_as = "gpt-4o-mini" if path == "openai" else "azure/gpt-4o-mini"
    assert first.cost == pytest.approx(table_price(priced_as))
    assert second.cost == pytest.approx(11 * 0.5 + 7 * 2.0)  # the model map's own prices
    assert third.cost is None  # a model without a price
    assert server.requests[0]["messages"] == MESSAGES
    assert "api_version" not in server.requests[0]  # an option of litellm's, not a request field


@both_paths
def test_every_kind_of_transient_error_is_retried(path: str) -> None:
    with fake_openai() as server:
        # a timeout that cuts the hang, with room for a loaded machine's slowest good answer
        client = make_client(server, path, timeout=1.0)
        call(client)  # the first call sets the path up (litellm's takes long): not under test
        server.requests.clear()
        server.queue(
            Behaviour(500),
            Behaviour(429, retry_after=0.01),
            Behaviour(fault="reset"),
            Behaviour(fault="bad_json"),
            Behaviour(pause=5),  # a hang, cut by the request timeout
            Behaviour(503),
            Behaviour(text="at last"),
        )
        result = call(client)
    assert (result.text, result.attempts) == ("at last", 7)
    assert len(server.requests) == 7


def test_a_litellm_call_cancelled_early_leaves_no_warning_behind() -> None:
    """A call cut by its timeout or `interrupt:` can leave the inner coroutine of litellm's
    handler (``acompletion``, ``async_streaming``) never awaited: the runtime says nothing
    of it (the cancellation working), in a process without the tests' own warning filters."""
    program = (
        "import inspect\n"
        "from fems_runtime.endpoints import import_litellm\n"
        "import_litellm()\n"
        "from litellm.llms.azure.azure import AzureChatCompletion\n"
        "from litellm.llms.openai.openai import OpenAIChatCompletion\n"
        "for handler in (AzureChatCompletion, OpenAIChatCompletion):\n"
        "    for name in ('acompletion', 'async_streaming'):\n"
        "        method = getattr(handler, name)\n"
        "        params = inspect.signature(method).parameters.values()\n"
        "        needed = [p for p in params if p.default is p.empty and p.kind is p.POSITIONAL_OR_KEYWORD]\n"
        "        unawaited = method(*[None] * len(needed))  # made, never run: a cancelled call\n"
        "        del unawaited\n"
        "print('made', flush=True)\n"
    )
    completed = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)
    assert (completed.returncode, completed.stdout, completed.stderr) == (0, "made\n", "")


@both_paths
@pytest.mark.parametrize("status", [400, 401, 403, 404])
def test_errors_that_retrying_cannot_fix_fail_at_once(path: str, status: int) -> None:
    with fake_openai(Behaviour(status)) as server:
        with pytest.raises(RunError) as error:
            call(make_client(server, path))
        assert len(server.requests) == 1
    hint = " (check the API key)" if status in (401, 403) else ""
    model = PATHS[path]("", "test")["model"]
    assert str(error.value) == f"model {model}: HTTP {status}: status {status}{hint}"


@both_paths
def test_an_error_storm_ends_when_the_retry_budget_is_spent(path: str) -> None:
    with fake_openai() as server:
        client = make_client(server, path, retry=RetryPolicy(budget=3.0, base=0.01, cap=0.02))
        call(client)  # the first call sets the SDK up; that is not the endpoint's time
        server.default = Behaviour(500)
        with pytest.raises(RunError, match=r"gave up after \d+ attempts \(3 s retry budget\)"):
            call(client)
        assert len(server.requests) >= 3  # the call and at least two attempts


@both_paths
def test_a_server_not_listening_is_said_at_once_and_named_when_the_budget_ends(path: str) -> None:
    """A refused connection (a local server not started, a wrong port) is retried within the
    budget, as a dropped one is, but said at once, once, with the address; so is the error."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))  # bound, not listening: every connection is refused
        entry = PATHS[path](f"http://127.0.0.1:{taken.getsockname()[1]}/v1", "test")
        notices: list[str] = []
        retry = RetryPolicy(budget=0.5, base=0.01, cap=0.02)
        client = ModelClient(
            model_map={"test": entry}, environ={}, retry=retry, notice=notices.append
        )
        with pytest.raises(RunError) as error:
            call(client)
    where = entry["api_base"]
    attempts = re.search(r"gave up after (\d+) attempts?", str(error.value))
    assert attempts is not None, error.value
    assert str(error.value).endswith(f"(is the server at {where} running?)")
    assert len(notices) == (int(attempts[1]) > 1)  # a call that retries says it at once
    for notice in notices:
        assert notice.startswith(f"fems: model {entry['model']}: cannot connect to {where} (")
        assert notice.endswith("is the server running? Retrying for up to 0.5 s (--retry-budget)")


@both_paths
def test_an_endpoint_that_never_answers_fails_within_the_budget(path: str) -> None:
    budget = RetryPolicy(budget=0.5, base=0.01, cap=0.02)
    with fake_openai(Behaviour(pause=30)) as server:
        with pytest.raises(RunError, match=r"gave up .*: no answer within 0\.2 s"):
            call(make_client(server, path, timeout=0.2, retry=budget))
        # attempts of 0.2 s fit the 0.5 s budget at most three times; on a loaded machine a
        # request may not even reach the server in time (litellm's first call sets up a lot),
        # so fewer is no failure of the retry logic
        assert len(server.requests) <= 3


@both_paths
def test_giving_up_names_the_timeout_set_and_the_budget_that_cut_the_last_attempt(
    path: str,
) -> None:
    """--timeout 1 --retry-budget 1.5: the second attempt has only what is left of the budget
    (about 0.5 s); the message says the 1 s the user set, and that, rounded."""
    with fake_openai() as server:
        client = make_client(
            server, path, timeout=1.0, retry=RetryPolicy(budget=1.5, base=0.01, cap=0.02)
        )
        call(client)  # the first call sets the path up (litellm's takes long): not under test
        server.default = Behaviour(pause=5)
        with pytest.raises(RunError) as error:
            call(client)
    model = PATHS[path]("", "test")["model"]
    assert re.fullmatch(
        rf"model {model}: gave up after 2 attempts \(1\.5 s retry budget\): no answer within "
        r"1 s \(the last attempt: (0\.\d s|less than 0\.1 s), what was left of the retry budget\)",
        str(error.value),
    ), error.value


def test_an_attempt_without_an_answer_says_the_limit_it_had() -> None:
    assert no_answer(1.0, 1.0) == "no answer within 1 s"
    assert no_answer(2.5, 2.5) == "no answer within 2.5 s"
    cut = "(the last attempt: {}, what was left of the retry budget)"
    assert no_answer(0.415015, 1.0) == f"no answer within 1 s {cut.format('0.4 s')}"
    assert no_answer(0.96, 1.0) == "no answer within 1 s"  # cut by too little to say
    assert no_answer(0.94, 1.0) == f"no answer within 1 s {cut.format('0.9 s')}"
    assert no_answer(0.0123, 30.0) == f"no answer within 30 s {cut.format('less than 0.1 s')}"


@both_paths
def test_a_retry_after_beyond_the_budget_gives_up_without_waiting(path: str) -> None:
    with fake_openai(Behaviour(429, retry_after=30)) as server:
        with pytest.raises(RunError, match=r"gave up after 1 attempt \(.*HTTP 429") as raised:
            call(make_client(server, path))
        assert "the server asked to wait 30 s (Retry-After), longer than what" in str(raised.value)
        assert len(server.requests) == 1


def test_the_pause_honours_retry_after_up_to_its_cap_else_backs_off() -> None:
    policy, rng = RetryPolicy(base=0.5, cap=4.0, retry_after_cap=60.0), random.Random(1)
    for _ in range(50):
        assert 2.0 <= policy.pause(1, 2.0, rng) <= 2.2
        assert 60.0 <= policy.pause(1, 3600.0, rng) <= 66.0
        assert 0.25 <= policy.pause(1, None, rng) <= 0.5
        assert 1.0 <= policy.pause(3, None, rng) <= 2.0
        assert 2.0 <= policy.pause(10, None, rng) <= 4.0


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"retry-after": "7"}, 7.0),
        ({"retry-after": "0.5"}, 0.5),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
        ({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, 0.0),  # a date in the past
        ({"retry-after": "soon"}, None),
        ({}, None),
    ],
)
def test_retry_after_forms(headers: dict[str, str], seconds: float | None) -> None:
    assert parse_retry_after(headers) == seconds


@both_paths
def test_concurrency_cap_and_cancellation_release_slots(path: str) -> None:
    with fake_openai(Behaviour(pause=0.2)) as server:
        client = make_client(server, path, max_concurrency=2)

        async def scenario() -> list[CallResult]:
            choice = client.resolve("test")
            stuck = [asyncio.create_task(client.complete(choice, MESSAGES, TURN)) for _ in range(2)]
            while server.in_flight < 2:
                await asyncio.sleep(0.01)
            for task in stuck:
                task.cancel()
            for task in stuck:
                with pytest.raises(asyncio.CancelledError):
                    await task
            while server.in_flight:
                await asyncio.sleep(0.01)
            # both slots were taken by the cancelled calls: a leak would hang here
            results = await asyncio.gather(
                *(client.complete(choice, MESSAGES, TURN) for _ in range(5))
            )
            await client.aclose()
            return results

        results = asyncio.run(scenario())
    assert [r.text for r in results] == ["hello"] * 5
    assert server.max_in_flight <= 2
    assert len(server.requests) == 7


@both_paths
def test_a_model_map_cap_queues_calls_before_they_reach_the_server(path: str) -> None:
    """`max_concurrency` in an entry (§15.4): a one-slot local server gets one request at a
    time, shared by the aliases of its api_base, and the wait for the cap is not silence: with
    `--timeout` shorter than the queue, every call still completes."""
    with fake_openai(Behaviour(pause=0.3)) as server:
        client = make_client(server, path, timeout=0.6)
        for alias in ("test", "priced"):
            client.model_map[alias]["max_concurrency"] = 1

        async def scenario() -> list[CallResult]:
            choices = [client.resolve(alias) for alias in ("test", "priced")] * 3
            try:
                await client.complete(choices[0], MESSAGES, TURN)  # litellm's first call is slow
                return await asyncio.gather(*(client.complete(c, MESSAGES, TURN) for c in choices))
            finally:
                await client.aclose()

        results = asyncio.run(scenario())
    assert [r.attempts for r in results] == [1] * 6
    assert server.max_in_flight == 1
    assert all("max_concurrency" not in request for request in server.requests)


@pytest.mark.parametrize("cap", [0, -2, 1.5, True, "2"])
def test_a_model_map_cap_must_be_a_positive_whole_number(cap: object) -> None:
    client = ModelClient(model_map={"local": {"model": "openai/x", "max_concurrency": cap}})
    with pytest.raises(RunError, match="max_concurrency must be a positive whole number"):
        client.resolve("local")


def test_one_pooled_client_per_base_url_keeps_its_connection() -> None:
    # The entries state what a server would say of itself, so the run does not ask (§15.4):
    # the question is once per run, on connections of its own; this test counts the calls'.
    stated = {"context_window": 8192, "max_concurrency": 4}
    with fake_openai() as server, fake_openai() as other:
        client = ModelClient(
            model_map={
                "a": openai_entry(server.api_base, "a") | stated,
                "b": openai_entry(server.api_base, "b") | stated,
                "c": openai_entry(other.api_base, "c") | stated,
            },
            environ={},
        )

        async def calls() -> None:
            for alias in ("a", "b", "a", "c", "b", "c"):
                await client.complete(client.resolve(alias), MESSAGES, TURN)
            await client.aclose()

        asyncio.run(calls())
    assert (len(server.requests), len(other.requests)) == (4, 2)
    assert (server.connections, other.connections) == (1, 1)


def _run_in_a_new_process(api_base: str, max_concurrency: int) -> list[str]:
    """One call over the openai path in a fresh interpreter: its reply, whether it was priced,
    and which of openai, litellm, aiohttp, h2 it loaded."""
    code = (
        "import asyncio, sys\n"
        "from fems_runtime.llm import ModelClient\n"
        "from fems_runtime.offline import OfflineTurn\n"
        f"c = ModelClient(environ={{'OPENAI_API_KEY': 'k', 'OPENAI_BASE_URL': {api_base!r}}}, "
        f"max_concurrency={max_concurrency})\n"
        "async def main():\n"
        "    r = await c.complete(c.resolve('openai/gpt-4o-mini'), [], OfflineTurn('a', '@x'))\n"
        "    await c.aclose()\n"
        "    return r\n"
        "r = asyncio.run(main())\n"
        "print(r.text, r.cost is not None, *(m in sys.modules for m in ('openai', 'litellm', "
        "'aiohttp', 'h2')))\n"
    )
    return python_output(code).split()


def test_a_run_on_the_openai_path_never_imports_litellm_aiohttp_nor_h2() -> None:
    with fake_openai(Behaviour(text="over the SDK")) as server:
        out = _run_in_a_new_process(server.api_base, 8)
    assert out == ["over", "the", "SDK", "True", "True", "False", "False", "False"]


def test_a_wide_run_sends_through_the_sdks_aiohttp_transport() -> None:
    with fake_openai(Behaviour(text="over aiohttp")) as server:
        out = _run_in_a_new_process(server.api_base, WIDE_RUN)
        assert server.requests[0]["messages"] == []
    assert out == ["over", "aiohttp", "True", "True", "False", "True", "False"]


def test_a_wide_run_after_a_narrow_one_in_the_same_process_keeps_httpx() -> None:
    """The SDK loaded without aiohttp has no aiohttp transport: a later wide run goes on
    through httpx rather than fail."""
    with fake_openai(Behaviour(text="still answered")) as server:
        code = (
            "import asyncio, sys\n"
            "from fems_runtime.llm import ModelClient\n"
            "from fems_runtime.offline import OfflineTurn\n"
            f"env = {{'OPENAI_API_KEY': 'k', 'OPENAI_BASE_URL': {server.api_base!r}}}\n"
            "async def call(width):\n"
            "    c = ModelClient(environ=env, max_concurrency=width)\n"
            "    r = await c.complete(c.resolve('openai/m'), [], OfflineTurn('a', '@x'))\n"
            "    await c.aclose()\n"
            "    return r.text\n"
            f"print(asyncio.run(call(8)), asyncio.run(call({WIDE_RUN})), 'aiohttp' in sys.modules)\n"
        )
        out = python_output(code).split()
    assert out == ["still", "answered", "still", "answered", "False"]


def test_one_tls_context_per_process_and_none_trusted_for_plain_http() -> None:
    """Clients share the TLS context (CA certificates read once); a plain http:// endpoint
    never needs one, so its context reads none, yet would still verify a certificate."""
    import ssl

    from fems_runtime.endpoints import _tls_context, import_openai

    openai = import_openai()
    secure = _tls_context(openai, plain=False)
    assert _tls_context(openai, plain=False) is secure
    assert secure.cert_store_stats()["x509_ca"] > 0
    plain = _tls_context(openai, plain=True)
    assert plain.cert_store_stats()["x509_ca"] == 0
    assert (plain.verify_mode, plain.check_hostname) == (ssl.CERT_REQUIRED, True)


def test_a_wide_run_has_a_connection_for_every_call_in_flight() -> None:
    """httpx's and the SDK's pools stop at 1,000 connections: a wider run gets a larger one."""
    from fems_runtime.endpoints import OpenAIClients, OpenAIRoute

    async def pool_size(width: int) -> int:
        clients = OpenAIClients(width)
        client = clients.client(OpenAIRoute("http://127.0.0.1:9/v1", "k", "m"))
        try:
            return client._client._transport.limits.max_connections
        finally:
            await clients.aclose()

    assert asyncio.run(pool_size(2000)) == 2000
    assert asyncio.run(pool_size(WIDE_RUN)) == 1000


@pytest.mark.parametrize(
    ("model", "options", "environ", "expected"),
    [
        ("openai/gpt-4o", {}, {}, ("https://api.openai.com/v1", "gpt-4o")),
        ("openai/gpt-4o", {}, {"OPENAI_API_BASE": "http://h/v1/"}, ("http://h/v1", "gpt-4o")),
        ("groq/llama-3", {}, {}, ("https://api.groq.com/openai/v1", "llama-3")),
        ("openrouter/openai/gpt-4o", {}, {}, ("https://openrouter.ai/api/v1", "openai/gpt-4o")),
        (
            "meta-llama/Llama-3",
            {"api_base": "http://h/v1"},
            {},
            ("http://h/v1", "meta-llama/Llama-3"),
        ),
        ("qwen", {"api_base": "http://h/v1"}, {}, ("http://h/v1", "qwen")),
        ("hosted_vllm/qwen", {}, {"HOSTED_VLLM_API_BASE": "http://h/v1"}, ("http://h/v1", "qwen")),
        ("x/y", {"api_base": "http://h", "custom_llm_provider": "openai"}, {}, ("http://h", "x/y")),
        ("anthropic/claude-3-5-haiku", {}, {}, None),
        ("anthropic/claude-3-5-haiku", {"api_base": "http://h"}, {}, None),
        ("ollama/llama3", {"api_base": "http://h"}, {}, None),
        ("hosted_vllm/qwen", {}, {}, None),  # no address: litellm says what is missing
        ("gpt-4o", {}, {}, None),  # no provider: litellm's own inference
    ],
)
def test_which_models_take_the_openai_path(
    model: str, options: dict[str, str], environ: dict[str, str], expected: tuple | None
) -> None:
    route = openai_route(model, options, environ)
    assert (route and (route.base_url, route.model)) == expected


def test_request_fields_are_the_model_map_options_that_are_not_litellms() -> None:
    options = {"api_base": "http://h", "api_key": "k", "temperature": 0.2, "num_retries": 3}
    route = openai_route("openai/m", options, {})
    assert route is not None
    assert (route.api_key, dict(route.fields)) == ("k", {"temperature": 0.2})


@pytest.mark.parametrize(
    "model",
    ["openai/gpt-4o-mini", "gpt-4o", "anthropic/claude-3-5-sonnet-20240620", "azure/gpt-4o"],
)
def test_prices_match_litellms_own_computation(model: str) -> None:
    from fems_runtime.endpoints import import_litellm

    litellm = import_litellm()
    usage = Usage(prompt_tokens=1100, completion_tokens=700, cached_tokens=100)
    response = litellm.ModelResponse(
        model=model,
        usage={
            "prompt_tokens": 1100,
            "completion_tokens": 700,
            "total_tokens": 1800,
            "prompt_tokens_details": {"cached_tokens": 100},
        },
    )
    try:
        expected = litellm.completion_cost(completion_response=response, model=model)
    except Exception:  # litellm has no price for it either
        expected = None
    assert PriceTable().cost(model, usage) == pytest.approx(expected)


def test_each_model_is_looked_up_once_per_table(monkeypatch: pytest.MonkeyPatch) -> None:
    table, lookups = PriceTable(), []
    real_find = table._find
    monkeypatch.setattr(table, "_find", lambda names: lookups.append(names) or real_find(names))
    for _ in range(3):
        assert table.cost("openai/gpt-4o-mini", Usage(11, 7)) == pytest.approx(
            table_price("gpt-4o-mini")
        )
        assert table.cost("openai/no-such-model", Usage(11, 7)) is None
    assert lookups == [
        ["openai/gpt-4o-mini", "gpt-4o-mini"],
        ["openai/no-such-model", "no-such-model"],
    ]


def test_a_key_split_across_chunks_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    from fems_runtime import prices

    path = litellm_price_file()
    assert path is not None
    text = path.read_bytes()
    at = text.index(b'\n    "gpt-4o-mini": {')
    monkeypatch.setattr(prices, "CHUNK", at + 5)  # the first chunk ends inside the key
    assert PriceTable(path).entry("gpt-4o-mini") == json.loads(text)["gpt-4o-mini"]


def test_model_call_errors_say_whether_to_retry() -> None:
    assert ModelCallError("status", "x", status=429).transient
    assert ModelCallError("malformed", "x").transient
    assert not ModelCallError("status", "x", status=401).transient
    assert not ModelCallError("key", "x").transient


def test_one_rule_decides_the_provider_for_the_route_its_key_and_its_thinking_switch() -> None:
    """`custom_llm_provider` names the provider everywhere: the route's address, the key it
    needs (reported when missing) and DeepSeek's thinking switch."""
    options = {"custom_llm_provider": "groq"}
    route = openai_route("my-llama", options, {})
    assert route is not None and route.base_url == "https://api.groq.com/openai/v1"
    assert route.model == "my-llama"
    assert missing_key(route) == "GROQ_API_KEY"
    keyed = openai_route("my-llama", options, {"GROQ_API_KEY": "k"})
    assert keyed is not None and missing_key(keyed) is None
    assert speaks_deepseek("chat", {"custom_llm_provider": "deepseek"})
    assert not speaks_deepseek("deepseek/chat", {"custom_llm_provider": "groq"})
