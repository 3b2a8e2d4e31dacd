"""ModelClient: the §15.2 ladder, .env, and the real litellm path against a local fake server."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from fems_helpers import python_output
from fems_runtime.llm import CallResult, ModelClient, RetryPolicy, load_dotenv, load_model_map
from fems_runtime.offline import OfflineTurn
from fems_runtime.records import RunError

from .fake_openai import Behaviour, fake_openai

TURN = OfflineTurn(action="talk", actor="@eve")
MESSAGES = [{"role": "user", "content": "Say hello."}]
FAST_RETRY = RetryPolicy(attempts=3, base=0.01, cap=0.02)


@pytest.mark.parametrize(
    ("client_options", "action_model", "source", "expected", "rung"),
    [
        ({"meta_model": "m/meta", "run_model": "m/run"}, "m/action", "m/src", "m/action", "action"),
        ({"meta_model": "m/meta", "run_model": "m/run"}, None, "m/src", "m/src", "source"),
        ({"meta_model": "m/meta", "run_model": "m/run"}, None, None, "m/meta", "meta"),
        ({"run_model": "m/run"}, None, None, "m/run", "run"),
        ({"environ": {"FEMS_MODEL": "m/env"}}, None, None, "m/env", "run"),
        ({"run_model": "m/run", "environ": {"FEMS_MODEL": "m/env"}}, None, None, "m/run", "run"),
        (
            {"model_map": {"fast": "openai/gpt-4o-mini"}},
            None,
            "fast",
            "openai/gpt-4o-mini",
            "source",
        ),
        (
            {"environ": {"FEMS_MODEL_DEEP_SEEK": "deepseek/chat"}},
            None,
            "deep-seek",
            "deepseek/chat",
            "source",
        ),
        (
            {"model_map": {"fast": "a/b"}, "environ": {"FEMS_MODEL_FAST": "c/d"}},
            None,
            "fast",
            "a/b",
            "source",
        ),
        ({"model_map": {"fast": "a/b"}}, "fast", None, "a/b", "action"),
    ],
)
def test_resolution_ladder(
    client_options: dict, action_model: str | None, source: str | None, expected: str, rung: str
) -> None:
    options = {"environ": {}, **client_options}
    choice = ModelClient(**options).resolve(action_model, source)
    assert (choice.model, choice.rung) == (expected, rung)


@pytest.mark.parametrize(
    ("client_options", "expected"),
    [
        ({"run_model": "fems/mock"}, "fems/mock"),
        ({"run_model": "fems/script", "replies": {"*": ["ok"]}}, "fems/script"),
        ({"environ": {"FEMS_MODEL": "fems/mock"}}, "fems/mock"),
    ],
)
def test_an_offline_run_model_replaces_every_rung(client_options: dict, expected: str) -> None:
    """Decision: `--model fems/mock` / `--replies` make any script runnable offline."""
    client = ModelClient(**{"environ": {}, "meta_model": "m/meta", **client_options})
    for action_model, source in ((None, None), (None, "openai/gpt-4o"), ("m/action", "fast")):
        assert client.resolve(action_model, source).model == expected


def test_a_missing_provider_key_fails_at_once_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """litellm raises a missing key as a server error: no retries, the variable is named."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    client = ModelClient(environ={}, retry=RetryPolicy(attempts=5, base=10.0, cap=10.0))
    choice = client.resolve("openai/gpt-4o-mini")
    with pytest.raises(RunError, match=r"has no API key: .*OPENAI_API_KEY") as error:
        asyncio.run(client.complete(choice, MESSAGES, TURN))
    assert "attempts" not in str(error.value)  # a retry would have slept 10 s first


def test_offline_default_prints_one_notice() -> None:
    notices: list[str] = []
    client = ModelClient(environ={}, notice=notices.append)
    assert client.resolve().model == "fems/mock"
    assert client.resolve().rung == "default"
    assert len(notices) == 1 and "fems/mock" in notices[0]


def test_fems_toml_table_entry_and_env_key(tmp_path: Path) -> None:
    (tmp_path / "fems.toml").write_text(
        '[models]\nfast = "openai/gpt-4o-mini"\n'
        '[models.local]\nmodel = "openai/qwen"\napi_base = "http://127.0.0.1:9/v1"\n'
        'api_key_env = "LOCAL_KEY"\ntemperature = 0.2\n',
        encoding="utf-8",
    )
    (tmp_path / ".env").write_text(
        '# keys\nexport LOCAL_KEY="sk-local"\nOPENAI_API_KEY=from-dotenv\n', encoding="utf-8"
    )
    environ = {"OPENAI_API_KEY": "already-set"}
    load_dotenv(tmp_path / ".env", environ)
    assert environ == {"OPENAI_API_KEY": "already-set", "LOCAL_KEY": "sk-local"}
    client = ModelClient(model_map=load_model_map(tmp_path / "fems.toml"), environ=environ)
    choice = client.resolve(None, "local")
    assert choice.model == "openai/qwen"
    assert dict(choice.options) == {
        "api_base": "http://127.0.0.1:9/v1",
        "api_key": "sk-local",
        "temperature": 0.2,
    }
    assert client.resolve(None, "fast").model == "openai/gpt-4o-mini"


def test_missing_api_key_env_is_a_run_error() -> None:
    client = ModelClient(model_map={"x": {"model": "openai/x", "api_key_env": "NOPE"}}, environ={})
    with pytest.raises(RunError, match="NOPE"):
        client.resolve("x")


def test_offline_run_never_imports_litellm() -> None:
    code = (
        "import asyncio, sys\n"
        "import fems_runtime\n"
        "from fems_runtime.llm import ModelClient\n"
        "from fems_runtime.offline import OfflineTurn\n"
        "c = ModelClient(environ={}, notice=lambda t: None)\n"
        "r = asyncio.run(c.complete(c.resolve(), [], OfflineTurn('a', '@x')))\n"
        "assert r.text, r\n"
        "print('litellm' in sys.modules)\n"
    )
    out = python_output(code)
    assert out.strip() == "False"


def _client(api_base: str, **options: object) -> ModelClient:
    model_map = {
        alias: {"model": model, "api_base": api_base, "api_key": "sk-test"}
        for alias, model in (("test", "openai/test"), ("priced", "openai/gpt-4o-mini"))
    }
    return ModelClient(**{"model_map": model_map, "environ": {}, "retry": FAST_RETRY, **options})


async def _call(client: ModelClient, alias: str = "test") -> CallResult:
    return await client.complete(client.resolve(alias), MESSAGES, TURN)


def test_real_path_normal_reply_and_transient_retries() -> None:
    with fake_openai() as server:
        server.queue(Behaviour(text="first"), Behaviour(429), Behaviour(429), Behaviour(text="ok"))
        client = _client(server.api_base)

        async def both() -> tuple:
            return await _call(client, "priced"), await _call(client)

        first, second = asyncio.run(both())
    assert first.text == "first" and first.attempts == 1
    assert (first.prompt_tokens, first.completion_tokens) == (11, 7)
    assert first.cost is not None and first.cost > 0  # from litellm's bundled price table
    assert second.cost is None  # a model litellm has no price for
    assert second.text == "ok" and second.attempts == 3
    assert len(server.requests) == 4
    assert server.requests[0]["messages"] == MESSAGES


def test_server_error_storm_exhausts_retries() -> None:
    with (
        fake_openai(Behaviour(500)) as server,
        pytest.raises(RunError, match="openai/test: failed after 3 attempts"),
    ):
        asyncio.run(_call(_client(server.api_base)))
    assert len(server.requests) == 3


def test_slow_reply_hits_timeout() -> None:
    with fake_openai(Behaviour(pause=30)) as server:
        client = _client(server.api_base, timeout=0.3, retry=RetryPolicy(2, 0.01, 0.01))
        with pytest.raises(RunError, match="timed out"):
            asyncio.run(_call(client))
    assert len(server.requests) == 2


def test_concurrency_cap_and_cancellation_release_slots() -> None:
    with fake_openai(Behaviour(pause=0.2)) as server:
        client = _client(server.api_base, max_concurrency=2)

        async def scenario() -> list:
            stuck = [asyncio.create_task(_call(client)) for _ in range(2)]
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
            return await asyncio.gather(*(_call(client) for _ in range(5)))

        results = asyncio.run(scenario())
    assert [r.text for r in results] == ["hello"] * 5
    assert server.max_in_flight <= 2
    assert len(server.requests) == 7


def test_delay_spaces_starts_per_model(monkeypatch: pytest.MonkeyPatch) -> None:
    waits: list[float] = []
    real_sleep = asyncio.sleep

    async def record(seconds: float) -> None:
        waits.append(seconds)
        await real_sleep(0)

    client = ModelClient(environ={}, delay=10)

    async def starts() -> None:
        monkeypatch.setattr(asyncio, "sleep", record)
        for model in ("a", "a", "b", "a"):
            await client._pace(model, client.delay)

    asyncio.run(starts())
    assert len(waits) == 2 and all(5 < w <= 10 for w in waits)


def test_a_module_delay_larger_than_the_scripts_spaces_the_calls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """complete(..., delay=) is a module's meta.delay (§3): the larger of it and meta.delay."""
    waits: list[float] = []
    real_sleep = asyncio.sleep

    async def record(seconds: float) -> None:
        waits.append(seconds)
        await real_sleep(0)

    class Reply:
        choices = [type("Choice", (), {"message": type("Message", (), {"content": "hi"})()})()]
        usage = None

    async def answer(choice, messages):  # no network: the call itself is not under test
        return Reply()

    client = ModelClient(environ={}, delay=1)
    monkeypatch.setattr(client, "_acompletion", answer)
    monkeypatch.setattr(client, "_result", lambda choice, response, attempts: CallResult("hi", "m"))
    choice = client.resolve("remote/model")

    async def calls() -> None:
        monkeypatch.setattr(asyncio, "sleep", record)
        await client.complete(choice, MESSAGES, TURN, delay=10)
        await client.complete(choice, MESSAGES, TURN, delay=10)
        await client.complete(choice, MESSAGES, TURN)

    asyncio.run(calls())
    assert len(waits) == 2
    assert 5 < waits[0] <= 10 and 0 < waits[1] <= 1


def test_for_project_reads_several_folders_the_later_wins(tmp_path: Path) -> None:
    script_dir, work_dir = tmp_path / "script", tmp_path / "work"
    for folder, fast in ((script_dir, "a/script"), (work_dir, "a/work")):
        folder.mkdir()
        (folder / "fems.toml").write_text(
            f'[models]\nfast = "{fast}"\nonly_{folder.name} = "b/{folder.name}"\n',
            encoding="utf-8",
        )
    client = ModelClient.for_project(script_dir, work_dir, load_env=False, environ={})
    assert client.resolve("fast").model == "a/work"
    assert client.resolve("only_script").model == "b/script"
    assert client.resolve("only_work").model == "b/work"
