"""The model's window (§13.2a): the oldest context messages are left out, whole, so that a
request fits the model's context window; a line says how many; the fixed blocks never shrink."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from fems_helpers import build_script, llm_calls, load, read_trace
from fems_runtime.context import (
    ContextView,
    Request,
    estimate_messages,
    estimate_tokens,
    fit_to_window,
)
from fems_runtime.llm import CallResult, ContextTooLong, ModelChoice, ModelClient
from fems_runtime.offline import OfflineTurn
from fems_runtime.records import RunError
from fems_runtime.store import NewMessage

from .fake_openai import Behaviour, fake_openai
from .test_turns import make_run, spec

WINDOW = 1500
FILLER = "the harvest is good and the well is full, so the village has no worry this autumn"
SCRIPT = f"""
    vars:
        n = 0
    actors:
        ai @ann = source:chatty
        ai @bob = source:chatty
    action ann_talk @ai(@ann):
        prompt: "Turn {{n}}. REPLY[[Ann at turn {{n}}: {FILLER}. SET VARIABLE: <<n += 1>>]]"
        scope: [@bob]
    action bob_talk @ai(@bob):
        prompt: "Turn {{n}}. REPLY[[Bob at turn {{n}}: {FILLER}. SET VARIABLE: <<n += 1>>]]"
        scope: [@ann]
    mainflow:
        [A]: ann_talk
        [B]: bob_talk
        [START] -> [A] -> [B]
        [B] -> if (n < 30) -> [A]
        [B] -> if (n >= 30) -> [END]
"""


def test_estimates_err_high_for_latin_and_count_cjk_characters() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("a" * 400) >= 100  # about 4 characters a token, erring high
    assert estimate_tokens("狼人今晚杀谁") == 6
    assert estimate_tokens("狼人 wolf") == 2 + estimate_tokens(" wolf")


def test_a_view_keeps_the_newest_entries_whole_and_says_how_many_are_left_out() -> None:
    view = ContextView.of(["[@a]: one", "[@b]: two", "[@a]: three"])
    assert view.block() == "[@a]: one\n\n[@b]: two\n\n[@a]: three"
    assert view.block(2) == "(1 earlier message is not shown)\n\n[@b]: two\n\n[@a]: three"
    assert view.block(0) == "(3 earlier messages are not shown)"
    assert view.newest_within(view.tokens) == 3
    last = estimate_tokens("[@a]: three") + 1
    assert view.newest_within(last) == 1 and view.newest_within(last - 1) == 0
    assert view.newest_within(-5) == 0


def test_the_fixed_blocks_that_do_not_fit_are_a_run_error_naming_the_sizes() -> None:
    request = Request.of(
        prompt="x" * 3000, system=("Be kind.",), context=ContextView(), memory="", narration=""
    )
    with pytest.raises(RunError, match=r"alone are about \d+ tokens, more than model m's window"):
        fit_to_window(request, [], 500, lambda: "model m's window of 600 tokens less 100")


def test_a_30_turn_chatty_room_fits_a_1500_token_window(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module = load(build_script(tmp_path, SCRIPT))
    trace = tmp_path / "trace.jsonl"
    with fake_openai(Behaviour(text=None)) as server:
        entry = f'model = "openai/fake", api_key = "sk-test", api_base = "{server.api_base}"'
        (tmp_path / "fems.toml").write_text(
            f"[models]\nchatty = {{ {entry}, context_window = {WINDOW} }}\n", encoding="utf-8"
        )
        result = module.PROGRAM.run(db=":memory:", trace=trace)
        requests = list(server.requests)
    assert result.variables["n"] == 30 and len(requests) == 30
    room = WINDOW // 4  # no max_tokens: a quarter of the window is kept for the reply
    assert max(estimate_messages(r["messages"]) for r in requests) <= WINDOW - room
    calls = llm_calls(read_trace(trace))
    assert calls[-1]["trimmed"] > 0 and calls[0]["trimmed"] == 0
    last = calls[-1]["messages"][-1]["content"]
    assert last.startswith(f"({calls[-1]['trimmed']} earlier messages are not shown)\n\n[@")
    assert f"Turn 29. REPLY[[Bob at turn 29: {FILLER}" in last  # the prompt is whole
    warned = [line for line in capsys.readouterr().err.splitlines() if "left out" in line]
    assert len(warned) == 2  # once per actor
    assert all(f"window ({WINDOW} tokens)" in line for line in warned)


class TooLong(ModelClient):
    """A provider that answers context_length_exceeded for requests over ``limit`` tokens."""

    def __init__(self, limit: int) -> None:
        super().__init__(model_map={"small": {"model": "openai/small"}}, environ={})
        self.limit = limit
        self.sizes: list[int] = []

    async def complete(
        self,
        choice: ModelChoice,
        messages: list[dict[str, Any]],
        turn: OfflineTurn,
        delay: float = 0.0,
        tools: Sequence[Mapping[str, Any]] = (),
        **options: Any,
    ) -> CallResult:
        self.sizes.append(estimate_messages(messages))
        if self.sizes[-1] > self.limit:
            raise ContextTooLong(choice.model, "context_length_exceeded")
        return CallResult("Fine.", choice.model)


def _chatty_run(models: TooLong) -> Any:
    """A run in which @eve has seen 40 messages of about 35 tokens each."""
    run = make_run(models=models)
    said = [
        NewMessage("reply", f"message {index}: {FILLER}", souls=["1"], speaker_name="@bob")
        for index in range(40)
    ]
    run.services.store.submit(run.services.session, said)
    return run


def test_context_length_exceeded_is_retried_once_with_half_the_context() -> None:
    models = TooLong(limit=900)
    run = _chatty_run(models)
    result = run.turn(spec(prompt="Speak.", model="small"))
    assert result.reply == "Fine." and len(models.sizes) == 2
    assert models.sizes[1] < models.sizes[0] / 2 + 40
    (event,) = run.events("llm_call")
    assert event["trimmed"] == 20
    assert event["messages"][-1]["content"].startswith("(20 earlier messages are not shown)")


def test_context_length_exceeded_twice_is_a_run_error_naming_action_model_and_sizes() -> None:
    models = TooLong(limit=10)
    run = _chatty_run(models)
    with pytest.raises(RunError) as caught:
        run.turn(spec(prompt="Speak.", model="small"))
    message = str(caught.value)
    assert message.startswith("game.fems:12: error: action pick: model openai/small refuses")
    assert "context window (unknown tokens)" in message
    assert f"about {models.sizes[1]} tokens were sent" in message
    assert len(models.sizes) == 2 and len(run.messages()) == 40  # the turn stored nothing
