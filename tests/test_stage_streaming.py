"""Replies shown as they stream in (§15.4, §17.1).

What a turn tells the run's reply watchers: each live call's room and speaker, its pieces, a
stream cut and asked again, the interrupted reply as stored (§10.7), a cancelled call; nothing
for the offline models. Then a ``--serve`` run against a streaming model: ``python game.py
--serve`` in its own process calls the fake OpenAI server, which holds each reply's last word;
meanwhile the stage's event streams, one per seat, show the reply being written to the director
(with its reasoning) and to the seat in its room (without), and nothing of it to the seat
outside; then the stored reply replaces it. The page is tested in Chromium
(test_stage_browser.py)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
from fems_helpers import build_script
from fems_runtime.llm import ModelClient, RetryPolicy
from fems_runtime.records import StreamedReply, WatchedReplies
from fems_runtime.specs import InterruptSpec
from stage_helpers import (
    FAREWELL,
    STAGE_URL,
    THOUGHT,
    WAIT_SECONDS,
    WHISPER,
    WHISPERED,
    before_last_word,
    remote_model,
    serving,
)

from tests.runtime.fake_openai import Behaviour, fake_openai
from tests.runtime.test_endpoints import openai_entry
from tests.runtime.test_turns import HalfwayModels, make_run, spec

State = dict[str, Any]


@dataclass
class Watcher:
    """A reply watcher that records what it is told, as the stage would show it."""

    replies: list[StreamedReply] = field(default_factory=list)
    told: list[tuple[str, str]] = field(default_factory=list)

    def __call__(self, reply: StreamedReply) -> Watcher:
        self.replies.append(reply)
        return self

    def feed(self, kind: str, chunk: str) -> None:
        self.told.append((kind, chunk))

    def finish(self, final: str) -> None:
        self.told.append(("finish", final))

    def warn(self, problem: str) -> None:
        self.told.append(("warn", problem))


def test_a_watcher_sees_the_call_of_a_room_and_the_interrupted_reply_as_stored() -> None:
    run = make_run(models=HalfwayModels())
    watcher = Watcher()
    run.services.events.subscribe(WatchedReplies(watcher))
    run.services.poll = 0.01
    night = {"fallen": False}
    interrupt = InterruptSpec(kind="check", check=lambda: night["fallen"])

    async def scenario() -> None:
        turn = asyncio.create_task(
            run.services.ai_turn(run.ctx, spec(prompt="Talk.", interrupt=interrupt))
        )
        while len(watcher.told) < 3:
            await asyncio.sleep(0.01)
        night["fallen"] = True
        await turn

    asyncio.run(scenario())
    (reply,) = watcher.replies
    assert (reply.action, reply.node, reply.speaker, reply.speaker_soul) == (
        "pick",
        "node1",
        "@eve",
        "1",
    )
    assert reply.souls == {"1"} and reply.turn == 1  # the scope of `pick` is its executor
    assert watcher.told == [
        ("reasoning", "They suspect me."),
        ("text", "I was asleep, "),
        ("text", "I swear"),
        ("finish", "I was asleep, I swear [Interrupted]"),
    ]


def test_a_cancelled_call_leaves_no_reply_being_written() -> None:
    """`join(n)` or Ctrl-C cancels the turn's task: what it showed is discarded."""
    run = make_run(models=HalfwayModels())
    watcher = Watcher()
    run.services.events.subscribe(WatchedReplies(watcher))

    async def scenario() -> None:
        turn = asyncio.create_task(run.services.ai_turn(run.ctx, spec(prompt="Talk.")))
        while len(watcher.told) < 3:
            await asyncio.sleep(0.01)
        turn.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await turn

    asyncio.run(scenario())
    assert watcher.told[-1] == ("discard", "")


def test_a_stream_cut_mid_way_is_discarded_and_its_retry_shown() -> None:
    with fake_openai() as server:
        server.queue(Behaviour(text="lost words here", fault="cut", cut_after=3))
        server.queue(Behaviour(text="kept words"))
        models = ModelClient(
            model_map={"test": openai_entry(server.api_base, "test")},
            run_model="test",
            environ={},
            retry=RetryPolicy(budget=30.0, base=0.01, cap=0.02),
        )
        run = make_run(models=models)
        watcher = Watcher()
        run.services.events.subscribe(WatchedReplies(watcher))

        async def talk() -> None:
            try:
                await run.services.ai_turn(run.ctx, spec(prompt="Talk."))
            finally:
                await models.aclose()

        asyncio.run(talk())
    assert watcher.told == [
        ("text", "lost "),
        ("text", "words "),
        ("discard", ""),
        ("text", "kept "),
        ("text", "words"),
        ("finish", "kept words"),
    ]
    assert len(watcher.replies) == 1, "one reply being written per call, retries included"


def test_the_offline_models_are_shown_as_stored_not_as_written() -> None:
    run = make_run({"pick": ["At once."]})
    watcher = Watcher()
    run.services.events.subscribe(WatchedReplies(watcher))
    run.turn(spec(prompt="Talk."))
    assert (watcher.replies, watcher.told) == ([], [])
    assert ("reply", "At once.") in run.messages()


@dataclass
class SeatEvents:
    """The states one seat's event stream (``/api/events?seat=…``) has sent so far."""

    seat: str
    states: list[State] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    async def read(self, client: httpx.AsyncClient, url: str) -> None:
        query = {"seat": self.seat, "token": url.split("token=")[1]}
        async with client.stream("GET", "/api/events", params=query) as response:
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    self.states.append(json.loads(line.removeprefix("data: ")))
                    self.arrived.set()

    async def first(self, fits: Callable[[State], bool]) -> State:
        """The first state sent (before or still to come) that ``fits``."""
        seen = 0
        async with asyncio.timeout(WAIT_SECONDS):
            while True:
                for state in self.states[seen:]:
                    if fits(state):
                        return state
                seen = len(self.states)
                self.arrived.clear()
                await self.arrived.wait()


@contextlib.asynccontextmanager
async def watching(url: str, seats: list[str]) -> AsyncIterator[dict[str, SeatEvents]]:
    """The event streams of ``seats`` ("" the director's), read while the block runs."""
    parts = urlsplit(url)
    base = f"{parts.scheme}://{parts.netloc}"
    streams = {seat: SeatEvents(seat) for seat in seats}
    async with httpx.AsyncClient(base_url=base, timeout=httpx.Timeout(None)) as client:
        readers = [asyncio.create_task(s.read(client, url)) for s in streams.values()]
        try:
            yield streams
        finally:
            for reader in readers:
                reader.cancel()
            await asyncio.gather(*readers, return_exceptions=True)


def writing(state: State) -> list[tuple[str, str]]:
    return [(reply["speaker"], reply["text"]) for reply in state["writing"]]


def test_a_served_run_streams_a_reply_only_to_the_seats_of_its_room(tmp_path: Path) -> None:
    whisper, farewell = threading.Event(), threading.Event()
    with fake_openai() as server:
        server.queue(
            Behaviour(text=WHISPERED, reasoning=THOUGHT, hold=whisper),
            Behaviour(text=FAREWELL, hold=farewell),
        )
        remote_model(tmp_path, server.api_base)
        module = build_script(tmp_path, WHISPER)
        command = [sys.executable, str(module), "--db", "game.db", "--serve"]
        with serving(command, tmp_path) as run:
            url = run.wait_for(STAGE_URL.pattern).group(1)

            async def watch() -> None:
                async with watching(url, ["", "@Bob", "@Max"]) as seats:
                    director, bob, max_ = seats[""], seats["@Bob"], seats["@Max"]
                    whispering = [("@Ann", before_last_word(WHISPERED))]
                    shown = await director.first(lambda s: writing(s) == whispering)
                    partial = shown["writing"][0]
                    assert (partial["reasoning"], partial["done"]) == (THOUGHT, False)
                    seen = await bob.first(lambda s: writing(s) == whispering)
                    assert "reasoning" not in seen["writing"][0], "reasoning is the director's"
                    # Max's state of the same change, or of a later one while the word is held
                    outside = await max_.first(lambda s: s["version"] >= shown["version"])
                    assert outside["writing"] == []

                    whisper.set()
                    stored = await bob.first(lambda s: s["messages"] > seen["messages"])
                    assert partial["turn"] not in [w["turn"] for w in stored["writing"]], (
                        "the stored reply replaced the one being written"
                    )
                    said = [("@Ann", before_last_word(FAREWELL))]
                    await max_.first(lambda s: writing(s) == said)  # Max's room now
                    farewell.set()
                    await max_.first(lambda s: s["status"] == "completed")
                    assert not any(
                        w["turn"] == partial["turn"] for s in max_.states for w in s["writing"]
                    )

            asyncio.run(watch())
            run.wait_for("the run has ended")

            def said(seat: str) -> list[dict[str, Any]]:
                query = {"seat": seat, "token": url.split("token=")[1]}
                answer = httpx.get(f"{url.split('/?')[0]}/api/sessions/1/messages", params=query)
                return [m for m in answer.json()["messages"] if m["kind"] != "prompt"]

            # stored: the replies for their rooms, the reasoning folded in the director's view
            assert [(m["content"], m.get("reasoning")) for m in said("")] == [
                (WHISPERED, THOUGHT),
                (FAREWELL, None),
            ]
            assert [m["content"] for m in said("@Bob")] == [WHISPERED, FAREWELL]
            assert [m["content"] for m in said("@Max")] == [FAREWELL]
    assert [request["stream"] for request in server.requests] == [True, True]
