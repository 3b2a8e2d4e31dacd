"""`fems2py models` (§15.2): the model map as a run would use it, each setting with where it came
from, and `--check`: one short call to each used model, or the exact reason it failed (exit 1)."""

from __future__ import annotations

import socket
import textwrap
from pathlib import Path

import pytest

from fems2py.cli import main
from tests.runtime.fake_local import fake_local, llama_cpp
from tests.runtime.fake_openai import Behaviour

SCRIPT = """
    meta:
        max_tokens = 120
    actors:
        ai @host = source: local
        human @you
    action greet @ai(@host):
        prompt: Greet the guests.
    mainflow:
        [START] -> greet -> [END]
"""


def project(tmp_path: Path, models: str) -> Path:
    (tmp_path / "fems.toml").write_text(textwrap.dedent(models), encoding="utf-8")
    script = tmp_path / "party.fems"
    script.write_text(textwrap.dedent(SCRIPT).lstrip(), encoding="utf-8")
    return script


def run_models(script: Path, capsys: pytest.CaptureFixture[str], *options: str) -> tuple[int, str]:
    status = main(["models", str(script), *options])
    return status, capsys.readouterr().out


@pytest.fixture(autouse=True)
def in_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FEMS_MODEL", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


def test_the_list_says_what_each_model_is_and_where_each_setting_came_from(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with fake_local(llama_cpp(n_ctx=4096, slots=2)) as server:
        script = project(
            tmp_path,
            f"""
            [models]
            local = {{ model = "openai/smollm2", api_base = "{server.api_base}" }}
            fast = "openai/gpt-4o-mini"
            """,
        )
        status, out = run_models(script, capsys)
    assert status == 0
    said = f"said by llama.cpp's server at {server.api_base.removesuffix('/v1')}/props"
    assert out.splitlines()[:6] == [
        "local → openai/smollm2  (used by the script)",
        f"    path         openai SDK, {server.api_base}",
        f"    window       4096 tokens ({said})",
        "    reply cap    max_tokens 120 (the script's meta:, actions may differ)",
        "    price        unknown (counts as free)",
        f"    concurrency  2 at once ({said})",
    ]
    assert "fast → openai/gpt-4o-mini\n" in out
    assert "window       128000 tokens (litellm's model table)" in out
    assert "per million input tokens (litellm's price table)" in out
    assert "check" not in out and not server.requests


def test_check_times_one_short_call_of_each_used_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with fake_local(llama_cpp(), Behaviour(pieces=("Hello ", "everyone", "!"))) as server:
        script = project(
            tmp_path,
            f"""
            [models]
            local = {{ model = "openai/smollm2", api_base = "{server.api_base}" }}
            spare = {{ model = "openai/other", api_base = "{server.api_base}" }}
            """,
        )
        status, out = run_models(script, capsys, "--check")
        calls = list(server.requests)
    assert status == 0
    assert [call["model"] for call in calls] == ["smollm2"]  # only the used one
    assert calls[0]["max_tokens"] == 32 and calls[0]["stream"] is True
    assert "    check        first chunk after " in out and " tokens/s" in out


@pytest.fixture
def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_check_says_exactly_why_a_model_fails_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], closed_port: int
) -> None:
    unknown = Behaviour(status=404, error={"message": "model 'nope' not found"})
    with fake_local({}, unknown) as server:
        script = project(
            tmp_path,
            f"""
            [models]
            local = {{ model = "openai/nope", api_base = "{server.api_base}" }}
            """,
        )
        status, out = run_models(script, capsys, "--check")
    assert status == 1
    assert "check        FAILED: the server does not know model openai/nope" in out
    assert "model 'nope' not found" in out

    base = f"http://127.0.0.1:{closed_port}/v1"
    project(tmp_path, f'[models]\nlocal = {{ model = "openai/x", api_base = "{base}" }}\n')
    status, out = run_models(script, capsys, "--check")
    assert status == 1 and f"FAILED: could not connect to {base} (is the server running?)" in out

    project(tmp_path, '[models]\nlocal = "openai/gpt-4o-mini"\n')
    status, out = run_models(script, capsys, "--check")
    assert (
        status == 1 and "FAILED: model openai/gpt-4o-mini has no API key: set OPENAI_API_KEY" in out
    )


def test_a_broken_entry_or_file_is_an_error_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = project(tmp_path, '[models]\nlocal = { api_base = "http://127.0.0.1:1/v1" }\n')
    status, out = run_models(script, capsys)
    assert status == 1
    assert "local: error: model alias 'local': the table needs a 'model' string" in out
    (tmp_path / "fems.toml").write_text("[models\n", encoding="utf-8")
    status = main(["models", str(script)])
    captured = capsys.readouterr()
    assert status == 1 and "not valid TOML" in captured.err and "Traceback" not in captured.err
    assert captured.err.startswith(f"{tmp_path / 'fems.toml'}:1: error: not valid TOML")


def test_a_script_that_names_no_model_says_what_a_run_plays(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = project(tmp_path, "")
    script.write_text(script.read_text().replace(" = source: local", ""), encoding="utf-8")
    status, out = run_models(script, capsys)
    assert status == 0 and out == "no model map and no model named: a run plays fems/mock\n"
    status, out = run_models(script, capsys, "--model", "openai/gpt-4o-mini")
    assert status == 0 and out.startswith("openai/gpt-4o-mini → openai/gpt-4o-mini  (used")


def test_an_offline_model_is_given_no_advice_on_settings_it_has_no_use_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """§15.3: fems/mock calls nothing, so 'set context_window' or 'set max_tokens' would send
    a newcomer to settings that change nothing."""
    script = project(tmp_path, "")
    script.write_text(script.read_text().replace(" = source: local", ""), encoding="utf-8")
    status, out = run_models(script, capsys, "--model", "fems/mock")
    assert status == 0
    assert out.splitlines()[:6] == [
        "fems/mock → fems/mock  (used by the script)",
        "    path         built in, offline (§15.3)",
        "    window       none (offline: no call is made, nothing is cut)",
        "    reply cap    none (offline: no call is made, its replies are not cut)",
        "    price        free (offline: no call is made)",
        "    concurrency  no limit (offline: no call is made, no turn waits)",
    ]


def test_a_check_of_a_script_that_names_no_model_says_it_checked_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with fake_local(llama_cpp(n_ctx=4096, slots=1)) as server:
        script = project(
            tmp_path,
            f"""
            [models]
            local = {{ model = "openai/smollm2", api_base = "{server.api_base}" }}
            """,
        )
        script.write_text(script.read_text().replace(" = source: local", ""), encoding="utf-8")
        status, out = run_models(script, capsys, "--check")
        assert status == 0 and out.endswith(
            "the script names no model: a run takes --model or FEMS_MODEL\n"
            "--check checked nothing: add --model NAME to check the model you will play\n"
        )
        assert "first chunk" not in out  # no model was sent a request
        status, out = run_models(script, capsys, "--model", "local", "--check")
    assert status == 0 and "first chunk after" in out


def test_a_name_that_is_no_alias_and_no_model_string_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """§15.2: the listing stops on what a run would stop on, naming the close alias."""
    script = project(tmp_path, '[models]\nlocl = "openai/gpt-4o-mini"\n')
    status, out = run_models(script, capsys)
    assert status == 1
    assert (
        "local: error: model local is neither an alias of the model map (fems.toml [models]) "
        "nor a provider/model string litellm knows (openai/gpt-4o-mini, anthropic/…); "
        "did you mean 'locl'?\n"
    ) in out
