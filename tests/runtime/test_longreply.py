"""A reply that runs on without a cap is shown while it runs (§15.4): one warning naming the
actor, the action, the tokens so far and the fix, in the transcript, the run's warnings and on
the stage; the reply goes on and is stored whole."""

from __future__ import annotations

import asyncio
import io
import re
from typing import Any

import pytest
from fems_runtime.llm import ModelClient
from fems_runtime.longreply import LONG_REPLY_TOKENS, LongReplyWatch
from fems_runtime.records import StreamedReply
from fems_runtime.stage.chart import FlowChart
from fems_runtime.stage.live import LiveStage
from fems_runtime.transcript import Transcript

from .fake_openai import Behaviour, fake_openai
from .test_turns import make_run, spec


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_watch_warns_once_when_the_reply_passes_its_size() -> None:
    warned: list[tuple[int, float]] = []
    watch = LongReplyWatch(lambda *said: warned.append(said), tokens=10, clock=Clock())
    for _ in range(4):
        watch.feed("text", "abcdef")  # about 2 tokens each
    assert warned == []
    watch.feed("reasoning", "abcdef")  # reasoning is reply too: 10 tokens
    watch.feed("text", "abcdef" * 20)
    assert warned == [(10, 0.0)]


def test_the_watch_warns_when_the_reply_takes_longer_than_its_time() -> None:
    warned: list[tuple[int, float]] = []
    clock = Clock()
    watch = LongReplyWatch(lambda *said: warned.append(said), seconds=60, clock=clock)
    watch.feed("text", "")  # an empty piece does not start the clock
    clock.now += 30
    watch.feed("text", "one")
    clock.now += 59
    watch.feed("text", " two")
    assert warned == []
    clock.now += 1
    watch.feed("text", " three")
    assert warned == [(4, 60.0)]


def test_a_broken_stream_starts_the_count_again_but_a_warning_stays_given() -> None:
    warned: list[tuple[int, float]] = []
    watch = LongReplyWatch(lambda *said: warned.append(said), tokens=10)
    watch.feed("text", "x" * 27)
    watch.feed("discard", "")
    watch.feed("text", "x" * 27)
    assert warned == []
    watch.feed("text", "x" * 3)
    watch.feed("discard", "")
    watch.feed("text", "x" * 300)
    assert len(warned) == 1


class StageWatcher:
    """A reply watcher as the stage is one: it records what it is told."""

    def __init__(self) -> None:
        self.told: list[tuple[str, str]] = []

    def __call__(self, reply: StreamedReply) -> StageWatcher:
        return self

    def feed(self, kind: str, chunk: str) -> None:
        if kind != "text":
            self.told.append((kind, chunk))

    def finish(self, final: str) -> None:
        self.told.append(("finish", final[:20]))


LONG = tuple(f"word{index} " for index in range(LONG_REPLY_TOKENS))  # about 2,300 tokens


def play(run: Any, turn: Any) -> None:
    """One AI turn, the model client's connections closed after it."""

    async def scenario() -> None:
        try:
            await run.services.ai_turn(run.ctx, turn)
        finally:
            await run.services.models.aclose()

    asyncio.run(scenario())


def long_run(server: Any, entry: dict[str, Any]) -> tuple[Any, StageWatcher, io.StringIO]:
    table = {"model": "openai/fake", "api_base": server.api_base, "api_key": "sk", **entry}
    models = ModelClient(model_map={"local": table}, environ={})
    run = make_run(models=models)
    watcher = StageWatcher()
    printed = io.StringIO()
    run.services.reply_watchers.append(watcher)
    run.services.transcript = Transcript(("@eve", "@bob"), printed)
    return run, watcher, printed


def test_an_uncapped_long_reply_is_warned_once_everywhere_and_goes_on() -> None:
    with fake_openai(Behaviour(pieces=LONG)) as server:
        run, watcher, printed = long_run(server, {})
        play(run, spec(prompt="Tell everything.", model="local"))
    assert run.messages()[-1] == ("reply", "".join(LONG))  # the reply went on, whole
    [warning] = run.warnings
    said = re.fullmatch(
        r"game\.fems:12: warning: action pick: (the reply of @eve has run to about (\d+) "
        r"tokens in \d+ s without ending, and no max_tokens caps it: set max_tokens in meta:, "
        r"in the action or in the model's model-map entry \(the reply goes on\))",
        warning,
    )
    assert said is not None and 1000 <= int(said[2]) < 1010
    assert watcher.told == [("warning", said[1]), ("finish", "word0 word1 word2 wo")]
    shown = printed.getvalue()
    assert shown.count("the reply of @eve has run to about") == 1
    assert "pick by @eve" in shown


@pytest.mark.parametrize(
    ("entry", "fields"), [({}, {"max_tokens": 4000}), ({"max_tokens": 4000}, {})]
)
def test_a_capped_reply_is_never_warned_however_long(
    entry: dict[str, Any], fields: dict[str, Any]
) -> None:
    with fake_openai(Behaviour(pieces=LONG)) as server:
        run, watcher, printed = long_run(server, entry)
        play(run, spec(prompt="Tell everything.", model="local", **fields))
    assert run.warnings == [] and [kind for kind, _ in watcher.told] == ["finish"]
    assert "has run to about" not in printed.getvalue()


def test_the_stage_shows_the_warning_under_the_reply_being_written() -> None:
    """The stage's own listener keeps the warning beside the text, for every seat that sees
    the reply; the stream's text is untouched by it."""

    async def scenario() -> dict[str, Any]:
        stage = LiveStage(FlowChart(missing="not drawn in this test"))
        reply = StreamedReply(1, "pick", "Pick", "@eve", "1", frozenset({"1"}), frozenset())
        partial = stage.reply_started(reply)
        partial.feed("text", "once upon")
        partial.feed("warning", "the reply of @eve has run to about 1000 tokens")
        partial.feed("text", " a time")
        return stage.state()["writing"][0]

    shown = asyncio.run(scenario())
    assert shown["text"] == "once upon a time"
    assert shown["warning"] == "the reply of @eve has run to about 1000 tokens"
