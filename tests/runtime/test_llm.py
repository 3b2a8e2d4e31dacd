"""ModelClient: the §15.2 ladder, .env, model map, pacing (the network paths: test_endpoints)."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest
from fems_helpers import python_output
from fems_runtime.llm import ModelClient, RetryPolicy, load_dotenv
from fems_runtime.offline import OfflineTurn
from fems_runtime.prices import Usage
from fems_runtime.project import ProjectConfig
from fems_runtime.records import RunError
from fems_runtime.replies import Reply

TURN = OfflineTurn(action="talk", actor="@eve")
MESSAGES = [{"role": "user", "content": "Say hello."}]


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
    """A missing key fails at once and names the variable, on the openai path (checked before
    the request) and on litellm's (which raises it as a server error)."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    client = ModelClient(environ={}, retry=RetryPolicy(base=10.0, cap=10.0))
    for model, variable in (
        ("openai/gpt-4o-mini", "OPENAI_API_KEY"),
        ("anthropic/claude-3-5-haiku-latest", "ANTHROPIC_API_KEY"),  # litellm's path
    ):
        monkeypatch.delenv(variable, raising=False)
        with pytest.raises(RunError) as error:
            asyncio.run(client.complete(client.resolve(model), MESSAGES, TURN))
        assert str(error.value).startswith(f"model {model} has no API key: set {variable} (a ")
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
    client = ModelClient(
        model_map=ProjectConfig.read(tmp_path / "fems.toml").models, environ=environ
    )
    choice = client.resolve(None, "local")
    assert choice.model == "openai/qwen"
    assert dict(choice.options) == {
        "api_base": "http://127.0.0.1:9/v1",
        "api_key": "sk-local",
        "temperature": 0.2,
    }
    assert client.resolve(None, "fast").model == "openai/gpt-4o-mini"


def test_a_dotenv_file_in_another_encoding_is_a_run_error_in_words(tmp_path: Path) -> None:
    """A .env saved as UTF-16 (a Windows editor) failed every run with
    'UnicodeDecodeError: 'utf-8' codec can't decode byte 0xff …'; a missing one is no error."""
    load_dotenv(tmp_path / ".env", {})
    (tmp_path / ".env").write_text("OPENAI_API_KEY=sk-x\n", encoding="utf-16")
    with pytest.raises(RunError, match=r"\.env is not UTF-8 text \(byte 0xff at offset 0\)"):
        load_dotenv(tmp_path / ".env", {})


@pytest.mark.parametrize(
    ("entry", "provider"),
    [
        ("gpt-4o-mini", "openai"),
        ("anthropic/claude-3-5-haiku", "anthropic"),
        ("fems/mock", "fems"),
        ({"model": "my-finetune", "custom_llm_provider": "together_ai"}, "together_ai"),
        ({"model": "groq/llama3", "custom_llm_provider": "openai"}, "openai"),
    ],
)
def test_a_resolved_model_names_its_provider_once_as_its_route_does(
    entry: str | dict[str, str], provider: str
) -> None:
    """The provider its call events and traces name is the one its route is decided by: an
    entry's `custom_llm_provider` wins over the model string's prefix."""
    client = ModelClient(model_map={"m": entry}, environ={})
    assert client.resolve(None, "m").provider == provider


def test_each_call_site_is_resolved_once_and_keeps_failing_without_a_key() -> None:
    """Resolution and routing are done once per (action model, source) of a run, not per
    call: the environment is asked once; a route without its key still fails every call."""

    class CountingEnviron(dict[str, str]):
        asked = 0

        def get(self, key: str, default: object = None) -> object:  # type: ignore[override]
            self.asked += 1
            return super().get(key, default)

    environ = CountingEnviron()
    client = ModelClient(environ=environ, retry=RetryPolicy(base=10.0, cap=10.0))
    first = client.resolve(None, "openai/gpt-4o-mini")
    asked = environ.asked
    assert client.resolve(None, "openai/gpt-4o-mini") is first
    assert environ.asked == asked
    for _ in range(2):
        with pytest.raises(RunError, match="has no API key: set OPENAI_API_KEY"):
            asyncio.run(client.complete(first, MESSAGES, TURN))


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
            await client._pacer.wait(model, client.delay)

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

    async def answer(choice, route, messages, timeout, tools=(), **_):  # no network: not here
        return Reply("hi", Usage())

    client = ModelClient(environ={}, delay=1)
    monkeypatch.setattr(client, "_send", answer)
    choice = client.resolve("anthropic/remote-model")  # litellm's path, not sent

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
    client = ModelClient.for_project(
        ProjectConfig.of_folders([script_dir, work_dir]), load_env=False, environ={}
    )
    assert client.resolve("fast").model == "a/work"
    assert client.resolve("only_script").model == "b/script"
    assert client.resolve("only_work").model == "b/work"


def test_the_backoff_stays_at_its_cap_however_many_failures() -> None:
    """A budget that allows thousands of quick failures (a local server that refuses at
    once) waits the cap between them, not an overflow of the doubling step."""
    policy = RetryPolicy(base=0.5, cap=20.0)
    rng = random.Random(0)
    for failures in (1, 6, 64, 1_100, 10_000):
        assert 0.25 <= policy.pause(failures, None, rng) <= 20.0
    assert policy.pause(10_000, None, rng) >= 10.0


@pytest.mark.parametrize(
    ("name", "model_map", "suggestion"),
    [
        ("small", {}, None),  # no fems.toml: an alias that nothing defines
        ("smal", {"small": "openai/gpt-4o-mini"}, "did you mean 'small'?"),
        ("nosuchprovider/x", {}, None),
    ],
)
def test_a_model_litellm_cannot_route_fails_before_any_request(
    name: str, model_map: dict[str, str], suggestion: str | None
) -> None:
    """§15.2: a name that is neither an alias nor a string litellm knows is a clear run error
    (litellm's own is an HTTP 400 "LLM Provider NOT provided"), naming a close alias."""
    client = ModelClient(model_map=model_map, environ={}, retry=RetryPolicy(base=10.0, cap=10.0))
    with pytest.raises(RunError) as error:
        asyncio.run(client.complete(client.resolve(None, name), MESSAGES, TURN))
    message = str(error.value)
    assert message.startswith(
        f"model {name} is neither an alias of the model map (fems.toml [models]) nor a "
        "provider/model string litellm knows (openai/gpt-4o-mini, anthropic/…)"
    )
    assert (suggestion in message) if suggestion else "did you mean" not in message
    assert "HTTP" not in message and "attempts" not in message


KNOWN_MODELS = [
    ("gpt-4o-mini", {}),  # a bare OpenAI name litellm accepts: known from the model table
    ("openai/qwen2.5", {"api_base": "http://127.0.0.1:9/v1"}),  # a local entry
    ("openai/anything", {}),
    ("anthropic/claude-3-5-haiku-latest", {}),
    ("groq/llama3", {}),
    ("my-model", {"custom_llm_provider": "openai"}),
]


def test_models_litellm_can_route_are_known_without_importing_it() -> None:
    """The cheap answers: litellm is imported only for a string they cannot place."""
    code = (
        "import sys\n"
        "from fems_runtime.endpoints import litellm_knows\n"
        "from fems_runtime.prices import PRICES\n"
        f"print(*(litellm_knows(m, o, PRICES) for m, o in {KNOWN_MODELS!r}))\n"
        "print('litellm' in sys.modules)\n"
    )
    assert python_output(code).split() == ["True"] * len(KNOWN_MODELS) + ["False"]
