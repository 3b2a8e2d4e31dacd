"""Turns end to end: scope, storage, trace, signals, the validation loop, fallback, interrupts."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from fems_runtime.events import RunEvent, TurnEnded
from fems_runtime.flow import Context
from fems_runtime.human import AnswersFileHuman
from fems_runtime.linetable import LineTable
from fems_runtime.llm import CallResult, ModelChoice, ModelClient, ReplyStream
from fems_runtime.offline import OfflineTurn
from fems_runtime.records import RunError, StepCounter, TraceWriter, TurnLog
from fems_runtime.signals import OutSpec
from fems_runtime.specs import InterruptSpec, ResolveSpec, ScopeItem, TurnSpec
from fems_runtime.store import Store
from fems_runtime.transcript import Transcript
from fems_runtime.turns import (
    INTERRUPTED,
    TurnServices,
)
from fems_runtime.variables import ActorSpec, Frame, Variables

ACTORS = (
    ActorSpec("@god", soul="0"),
    ActorSpec("@eve", soul="1"),
    ActorSpec("@bob", soul="2"),
    ActorSpec("@ann", type="human", soul="9", source="7"),
)
VALUES = {
    "alive": ["@eve", "@bob"],
    "wolves": ["@bob"],
    "kill": "",
    "count": 0,
    "day": 1,
    "night": False,
    "@who": "@ann",
}


@dataclass
class Ctx:
    """The part of flow.Context a turn uses."""

    frame: Frame
    methods: Mapping[str, Any] = field(default_factory=dict)
    node: str = "node1"
    delay: float = 0.0
    path: str = ""
    span: int | None = None
    steps: StepCounter = field(default_factory=StepCounter)


@dataclass
class Run:
    services: TurnServices
    ctx: Ctx
    trace: io.StringIO
    warnings: list[str]

    def events(self, name: str) -> list[dict[str, Any]]:
        lines = self.trace.getvalue().splitlines()
        return [e for e in map(json.loads, lines) if e["event"] == name]

    def messages(self) -> list[tuple[str, str]]:
        store = self.services.store
        return [(m.kind, m.content) for m in store.messages(self.services.session)]

    def visible(self, soul: str) -> list[str]:
        store = self.services.store
        return [m.content for m in store.visible_messages(self.services.session, soul=soul)]

    def turn(self, spec: TurnSpec, kind: str = "ai") -> Any:
        """Run ``spec`` as an ``ai``, ``human`` or ``mind`` turn."""
        run = getattr(self.services, f"{kind}_turn")
        return asyncio.run(run(self.ctx, spec))


def make_run(
    replies: dict[str, list[str]] | None = None,
    *,
    models: ModelClient | None = None,
    code: Mapping[str, Any] | None = None,
    answers: Mapping[str, Any] | None = None,
    owners: tuple[str, ...] = (),
    actors: Sequence[ActorSpec] = ACTORS,
) -> Run:
    variables = Variables(VALUES, actors)
    store = Store(":memory:")
    trace = io.StringIO()
    warnings: list[str] = []
    client = models or ModelClient(
        run_model="fems/script" if replies is not None else "fems/mock", replies=replies, environ={}
    )
    services = TurnServices(
        models=client,
        store=store,
        session=store.open_session("new"),
        trace=TraceWriter(trace),
        file="game.fems",
        owners=owners,
        human=AnswersFileHuman(answers) if answers is not None else None,
        code=(lambda alias: SimpleNamespace(**code[alias])) if code else None,
        warn=warnings.append,
    )
    return Run(services, Ctx(variables.root), trace, warnings)


def spec(**fields: Any) -> TurnSpec:
    base: dict[str, Any] = {"action": "pick", "line": 12, "executor": "@eve"}
    return TurnSpec(**{**base, **fields})


def test_ai_turn_stores_scoped_messages_and_traces_the_call() -> None:
    run = make_run({"pick": ["I choose. SET VARIABLE: <<kill = @bob>>"]}, owners=("5",))
    result = run.turn(
        spec(
            prompt="Day {day}: choose among {alive}.",
            showprompt="Night falls.",
            scope=(ScopeItem("actor", "@god"),),
            outs=(OutSpec("kill", type="actor"),),
        )
    )
    assert run.ctx.frame.get("kill") == "@bob"
    assert result.assigned == {"kill": "@bob"} and result.calls == 1
    assert run.messages() == [
        ("narration", "Night falls."),
        ("prompt", "Day 1: choose among [@eve, @bob]."),
        ("reply", "I choose. SET VARIABLE: <<kill = @bob>>"),
    ]
    # the prompt is private; narration and reply are seen by the scope, not by @bob
    assert run.visible("0") == ["Night falls.", "I choose. SET VARIABLE: <<kill = @bob>>"]
    assert run.visible("1") == run.visible("0")
    assert run.visible("2") == []
    users = run.services.store.visible_messages(run.services.session, user="5")
    assert len(users) == 2
    (event,) = run.events("llm_call")
    assert event["actor"] == "@eve" and event["scope"] == ["@eve", "@god"]
    assert event["model"] == "fems/script" and event["node"] == "node1"
    assert event["messages"] == [
        {"role": "user", "content": "Night falls.\n\nDay 1: choose among [@eve, @bob]."}
    ]


def test_second_turn_sees_the_first_as_context() -> None:
    run = make_run({"*": ["hello there"]})
    run.turn(spec(prompt="Greet.", scope=(ScopeItem("var", "alive"),)))
    run.turn(spec(executor="@bob", prompt="Answer."))
    second = run.events("llm_call")[1]["messages"]
    assert second == [{"role": "user", "content": "[@eve]: hello there\n\nAnswer."}]


def test_wrong_type_then_right_retries_with_feedback() -> None:
    run = make_run({"pick": ["SET VARIABLE: <<count = lots>>", "SET VARIABLE: <<count = 2>>"]})
    result = run.turn(spec(prompt="How many?", outs=(OutSpec("count", type="int"),), max_retries=2))
    assert run.ctx.frame.get("count") == 2 and result.calls == 2
    first, second = (e["messages"] for e in run.events("llm_call"))
    assert second[: len(first)] == first
    assert second[len(first)] == {"role": "assistant", "content": "SET VARIABLE: <<count = lots>>"}
    feedback = second[len(first) + 1]
    assert feedback["role"] == "user" and "not an integer" in feedback["content"]
    # the rejected reply and its feedback are stored as feedback of the actor's soul, and are
    # in nobody's later context, the actor's included (§13.3)
    store, session = run.services.store, run.services.session
    kept = [m for m in store.messages(session) if m.kind == "feedback"]
    assert [m.content for m in kept] == ["SET VARIABLE: <<count = lots>>", feedback["content"]]
    assert all(store.scope_of(m.id) == (["1"], []) for m in kept)
    assert run.visible("1") == ["SET VARIABLE: <<count = 2>>"] and run.visible("2") == []


def test_exhausted_retries_run_the_fallback() -> None:
    run = make_run({"pick": ["no signal"] * 3})
    ran: list[str] = []

    async def fallback() -> None:
        ran.append("fallback")

    result = run.turn(
        spec(
            prompt="Pick.", outs=(OutSpec("kill", type="actor"),), max_retries=2, fallback=fallback
        )
    )
    assert ran == ["fallback"]
    assert result.fell_back and result.calls == 3
    # no attempt was accepted: each reply and each feedback is kept as feedback, in no context
    assert [k for k, _ in run.messages()] == ["prompt"] + ["feedback"] * 5
    assert run.visible("1") == []


def test_exhausted_retries_without_fallback_is_a_run_error() -> None:
    run = make_run({"pick": ["SET VARIABLE: <<kill = @nobody>>", "still nothing"]})
    with pytest.raises(RunError) as caught:
        run.turn(spec(prompt="Pick.", outs=(OutSpec("kill", type="actor"),), max_retries=1))
    message = str(caught.value)
    assert message.startswith("game.fems:12: error: action pick:")
    assert "still nothing" in message and "out 'kill' was not set" in message


def test_rejected_reply_is_rolled_back_before_the_retry() -> None:
    run = make_run(
        {
            "pick": [
                "SET VARIABLE: <<count = 5>> SET VARIABLE: <<day = soon>>",
                "SET VARIABLE: <<count = 1>>",
            ]
        }
    )
    outs = (OutSpec("count", type="int"), OutSpec("day", type="int", optional=True))
    run.turn(spec(prompt="Go.", outs=outs, max_retries=1))
    assert run.ctx.frame.get("count") == 1 and run.ctx.frame.get("day") == 1


def test_resolve_feedback_reaches_the_model() -> None:
    def check(kill: Any) -> list[tuple[bool, bool, str]]:
        return [(kill != "@god", True, "pick someone alive")]

    run = make_run(
        {"pick": ["SET VARIABLE: <<kill = @god>>", "SET VARIABLE: <<kill = @bob>>"]},
        code={"rules": {"check": check}},
    )
    result = run.turn(
        spec(
            prompt="Pick.",
            outs=(OutSpec("kill", type="actor"),),
            resolve=ResolveSpec("rules", "check", ("kill",)),
            max_retries=1,
        )
    )
    assert result.calls == 2 and run.ctx.frame.get("kill") == "@bob"
    feedback = run.events("llm_call")[1]["messages"][-1]["content"]
    assert "pick someone alive" in feedback


def test_lenient_resolve_failure_rolls_back_and_warns() -> None:
    run = make_run(
        {"pick": ["SET VARIABLE: <<kill = @god>>"]},
        code={"rules": {"check": lambda **kw: (False, False, "not the host")}},
    )
    result = run.turn(
        spec(
            prompt="Pick.",
            outs=(OutSpec("kill", type="actor"),),
            resolve=ResolveSpec("rules", "check"),
        )
    )
    assert run.ctx.frame.get("kill") == "" and result.calls == 1
    assert any("not the host" in w for w in run.warnings)


def test_signal_outside_out_is_ignored_and_reported() -> None:
    run = make_run({"pick": ["SET VARIABLE: <<kill = @bob>> SET VARIABLE: <<day = 9>>"]})
    result = run.turn(spec(prompt="Pick.", outs=(OutSpec("kill", type="actor"),)))
    assert run.ctx.frame.get("kill") == "@bob" and run.ctx.frame.get("day") == 1
    assert result.rejected == ["SET VARIABLE: <<day = 9>>"]
    (event,) = run.events("rejected")
    assert "may not be set" in event["problems"][0]
    assert len(run.warnings) == 1 and run.warnings[0].startswith("game.fems:12: warning:")


@pytest.mark.parametrize(
    ("scope", "message"),
    [
        ((ScopeItem("var", "day"),), "scope item 'day' holds 1"),
        ((ScopeItem("actor", "@nobody"),), "@nobody"),
    ],
)
def test_bad_scope_is_a_located_run_error(scope: tuple[ScopeItem, ...], message: str) -> None:
    run = make_run({"*": ["x"]})
    with pytest.raises(RunError, match=message) as caught:
        run.turn(spec(prompt="x", scope=scope))
    assert caught.value.line == 12
    assert run.messages() == []


def test_all_scope_and_role() -> None:
    run = make_run({"*": ["ok"]})
    run.turn(spec(prompt="x", role="@god", scope=(ScopeItem("all"),)))
    (event,) = run.events("llm_call")
    assert event["actor"] == "@god"
    assert event["scope"] == ["@ann", "@bob", "@eve", "@god"]


def test_mock_fills_every_out() -> None:
    run = make_run()
    outs = (OutSpec("kill", type="actor"), OutSpec("count", type="int"), OutSpec("alive"))
    result = run.turn(spec(prompt="Choose among {wolves}.", outs=outs, max_retries=0))
    assert set(result.assigned) == {"kill", "count", "alive"} and result.calls == 1


class FailingModels(ModelClient):
    """A model whose every call fails (what a 500 storm becomes after litellm retries)."""

    async def complete(
        self,
        choice: ModelChoice,
        messages: list[dict[str, Any]],
        turn: OfflineTurn,
        delay: float = 0.0,
        tools: Sequence[Mapping[str, Any]] = (),
        **options: Any,
    ) -> CallResult:
        raise RunError("model openai/test: failed after 5 attempts: status 500")


def test_failed_model_call_stores_nothing() -> None:
    run = make_run(models=FailingModels(run_model="openai/test", environ={}))
    with pytest.raises(RunError, match="action pick: model openai/test: failed after 5"):
        run.turn(spec(prompt="x", showprompt="y"))
    assert run.messages() == []


class HangingModels(ModelClient):
    """A model call that never answers, and counts how often it was cancelled."""

    def __init__(self) -> None:
        super().__init__(run_model="openai/slow", environ={})
        self.cancelled = 0

    async def complete(
        self,
        choice: ModelChoice,
        messages: list[dict[str, Any]],
        turn: OfflineTurn,
        delay: float = 0.0,
        tools: Sequence[Mapping[str, Any]] = (),
        **options: Any,
    ) -> CallResult:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        raise AssertionError("unreachable")


@pytest.mark.parametrize("kind", ["human", "check"])
def test_interrupt_cancels_the_call_and_stores_marker(kind: str) -> None:
    models = HangingModels()
    run = make_run(models=models, answers={"speak": ["I object!"]})
    flag = {"night": False}
    interrupt = (
        InterruptSpec(kind="human")
        if kind == "human"
        else InterruptSpec(kind="check", check=lambda: flag["night"])
    )
    run.services.poll = 0.01

    async def scenario() -> Any:
        ai = asyncio.create_task(
            run.services.ai_turn(run.ctx, spec(prompt="Talk.", interrupt=interrupt))
        )
        await asyncio.sleep(0.05)
        if kind == "human":
            await run.services.human_turn(
                run.ctx, spec(action="speak", executor="@ann", prompt="Say.")
            )
        else:
            flag["night"] = True
        return await ai

    result = asyncio.run(scenario())
    assert result.interrupted and result.reply == INTERRUPTED
    assert models.cancelled == 1
    assert ("reply", INTERRUPTED) in run.messages()
    (event,) = run.events("llm_call")
    assert event["interrupted"] is True


class HalfwayModels(ModelClient):
    """A model that streams a few words (and a thought), then never finishes."""

    def __init__(self) -> None:
        super().__init__(run_model="openai/slow", environ={})

    async def complete(
        self,
        choice: ModelChoice,
        messages: list[dict[str, Any]],
        turn: OfflineTurn,
        delay: float = 0.0,
        tools: Sequence[Mapping[str, Any]] = (),
        *,
        stream: ReplyStream | None = None,
        **options: Any,
    ) -> CallResult:
        assert stream is not None
        stream.add("reasoning", "They suspect me.")
        stream.add("text", "I was asleep, ")
        stream.add("text", "I swear")
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


def test_an_interrupt_keeps_the_text_received_so_far() -> None:
    run = make_run(models=HalfwayModels())
    flag = {"night": False}
    interrupt = InterruptSpec(kind="check", check=lambda: flag["night"])
    run.services.poll = 0.01

    async def scenario() -> Any:
        ai = asyncio.create_task(
            run.services.ai_turn(run.ctx, spec(prompt="Talk.", interrupt=interrupt))
        )
        await asyncio.sleep(0.05)
        flag["night"] = True
        return await ai

    result = asyncio.run(scenario())
    assert result.interrupted and result.reply == "I was asleep, I swear [Interrupted]"
    assert ("reply", "I was asleep, I swear [Interrupted]") in run.messages()
    assert ("reasoning", "They suspect me.") in run.messages()
    assert run.visible("2") == [] and run.visible("1") == ["I was asleep, I swear [Interrupted]"]


def test_human_except_ignores_listed_actors() -> None:
    models = HangingModels()
    run = make_run(models=models, answers={"speak": ["a"]})
    interrupt = InterruptSpec(kind="human_except", actors=("@ann",))

    async def scenario() -> bool:
        ai = asyncio.create_task(
            run.services.ai_turn(run.ctx, spec(prompt="x", interrupt=interrupt))
        )
        await asyncio.sleep(0.05)
        await run.services.human_turn(run.ctx, spec(action="speak", executor="@ann", prompt="Say."))
        await asyncio.sleep(0.05)
        still_running = not ai.done()
        ai.cancel()
        with pytest.raises(asyncio.CancelledError):
            await ai
        return still_running

    assert asyncio.run(scenario()) is True
    assert models.cancelled == 1


def test_human_turn_stores_text_and_applies_answers() -> None:
    run = make_run(answers={"vote@ann": [{"text": "Bob did it.", "vars": {"kill": "@bob"}}]})
    result = run.turn(
        spec(
            action="vote",
            executor="@ann",
            prompt="Who?",
            outs=(OutSpec("kill", type="actor"),),
        ),
        kind="human",
    )
    assert result.reply == "Bob did it." and run.ctx.frame.get("kill") == "@bob"
    assert run.messages() == [("prompt", "Who?"), ("human", "Bob did it.")]
    (event,) = run.events("human")
    assert event["vars"] == {"kill": "@bob"}


@pytest.mark.parametrize(("executor", "kind"), [("@who", "human"), ("@eve", "llm_call")])
def test_mind_turn_follows_executor_type(executor: str, kind: str) -> None:
    run = make_run({"*": ["hi"]}, answers={"*": ["hello"]})
    asyncio.run(run.services.mind_turn(run.ctx, spec(executor=executor, prompt="x")))
    assert len(run.events(kind)) == 1


def test_context_and_memory_methods_feed_the_call() -> None:
    method = SimpleNamespace
    methods = {
        "here": method(
            kind="context",
            name="here",
            code="mem",
            function="ctx",
            inputs={"@actor": None},
            outputs=(),
        ),
        "recall": method(
            kind="memory",
            name="recall",
            code="mem",
            function="recall",
            inputs={"prompt": None},
            outputs=(),
        ),
    }
    calls: list[Callable[..., Any]] = []

    def ctx_fn(actor_info: dict[str, Any]) -> str:
        calls.append(ctx_fn)
        return f"context for {actor_info['name']}"

    run = make_run(
        {"*": ["ok"]}, code={"mem": {"ctx": ctx_fn, "recall": lambda prompt: f"recall {prompt}"}}
    )
    run.ctx.methods = methods
    run.turn(spec(prompt="Go."))
    (event,) = run.events("llm_call")
    assert event["messages"][-1]["content"] == (
        "context for @eve\n\nRelevant memory:\nrecall Go.\n\nGo."
    )


def test_services_open_runs_turns_through_a_flow_context(tmp_path: Path) -> None:
    script = SimpleNamespace(
        file="game.fems",
        sha256="abc",
        meta={"name": "Game", "owner": "001", "system_safety": "Be kind.", "max_concurrency": 2},
    )
    variables = Variables(VALUES, ACTORS)
    trace = io.StringIO()
    services = TurnServices.open(
        SimpleNamespace(script=script, module_file="", project_dir=None),
        variables,
        TraceWriter(trace),
        replies={"pick": ["SET VARIABLE: <<count = 3>>"]},
        db=str(tmp_path / "dialog.db"),
        base_dir=tmp_path,
    )
    run_services = SimpleNamespace(
        file="game.fems",
        events=services.events,
        code=lambda alias: None,
        turns=services,
        lines=LineTable(),
        actions={},
    )
    ctx = Context(run_services, variables.root, StepCounter())
    turn = ctx.ai("@eve", action="pick", prompt="Count.", outs=(OutSpec("count", type="int"),))
    result = asyncio.run(turn)
    assert result.assigned == {"count": 3}
    (event,) = [json.loads(line) for line in trace.getvalue().splitlines()]
    assert event["messages"][0] == {"role": "system", "content": "Be kind."}
    assert services.owners == ("001",)
    session = services.session
    services.finish("completed")
    with Store(str(tmp_path / "dialog.db")) as store:
        assert store.session(session)["status"] == "completed"
        assert store.session(session)["title"] == "Game"
        assert len(store.visible_messages(session, user="001")) == 1


def test_resolve_text_not_shown_to_ai_stays_out_of_the_feedback() -> None:
    def check(kill: Any) -> list[tuple[bool, bool, str]]:
        return [(kill == "@bob", False, "host-only note: wolves never pick @god")]

    run = make_run(
        {"pick": ["SET VARIABLE: <<kill = @god>>", "SET VARIABLE: <<kill = @god>>"]},
        code={"rules": {"check": check}},
    )
    with pytest.raises(RunError, match="host-only note") as caught:
        run.turn(
            spec(
                prompt="Pick.",
                outs=(OutSpec("kill", type="actor"),),
                resolve=ResolveSpec("rules", "check", ("kill",)),
                max_retries=1,
            )
        )
    feedback = run.events("llm_call")[1]["messages"][-1]["content"]
    assert "rules.check rejected the reply" in feedback
    assert "host-only" not in feedback and "was not set" not in feedback
    assert "rules.check rejected the reply" in str(caught.value)
    assert run.ctx.frame.get("kill") == ""


class CountingModels(ModelClient):
    """A remote-looking model that reports usage and cost."""

    async def complete(
        self,
        choice: ModelChoice,
        messages: list[dict[str, Any]],
        turn: OfflineTurn,
        delay: float = 0.0,
        tools: Sequence[Mapping[str, Any]] = (),
        **options: Any,
    ) -> CallResult:
        return CallResult("fine", choice.model, prompt_tokens=30, completion_tokens=4, cost=0.002)


def test_reply_is_stored_with_usage_and_cost() -> None:
    run = make_run(models=CountingModels(model_map={"fast": "openai/x"}, environ={}))
    run.turn(spec(prompt="x", model="fast"))
    reply = run.services.store.messages(run.services.session)[-1]
    assert (reply.kind, reply.model) == ("reply", "openai/x")
    assert (reply.prompt_tokens, reply.completion_tokens, reply.cost) == (30, 4, 0.002)
    (event,) = run.events("llm_call")
    assert (event["prompt_tokens"], event["cost"]) == (30, 0.002)


class CutModels(ModelClient):
    """A remote-looking model whose replies end at the length cap; it keeps what it was asked."""

    def __init__(self, **options: Any) -> None:
        super().__init__(environ={}, **options)
        self.asked: list[dict[str, Any]] = []

    async def complete(
        self,
        choice: ModelChoice,
        messages: list[dict[str, Any]],
        turn: OfflineTurn,
        delay: float = 0.0,
        tools: Sequence[Mapping[str, Any]] = (),
        **options: Any,
    ) -> CallResult:
        self.asked.append({"tools": list(tools), **options})
        return CallResult("I will tell you every", choice.model, finish_reason="length")


@pytest.mark.parametrize(("action_cap", "map_cap", "named"), [(40, 90, "40"), (None, 90, "90")])
def test_a_reply_cut_at_max_tokens_is_a_warning_naming_action_and_cap(
    action_cap: int | None, map_cap: int, named: str
) -> None:
    models = CutModels(model_map={"fast": {"model": "openai/x", "max_tokens": map_cap}})
    run = make_run(models=models)
    result = run.turn(spec(prompt="Tell me everything.", model="fast", max_tokens=action_cap))
    assert result.reply == "I will tell you every"
    assert models.asked[0]["max_tokens"] == action_cap
    assert run.warnings == [
        f"game.fems:12: warning: action pick: the reply of @eve was cut at max_tokens ({named}): "
        "raise max_tokens or ask for less"
    ]
    (event,) = run.events("llm_call")
    assert event["finish_reason"] == "length"


@pytest.mark.parametrize(("entry", "asked"), [("openai/x", "medium"), ("openai/x high", None)])
def test_deep_think_asks_the_model_to_reason_unless_the_model_map_says(
    entry: str, asked: str | None
) -> None:
    model, _, effort = entry.partition(" ")
    table: dict[str, Any] = {"model": model, **({"reasoning": effort} if effort else {})}
    models = CutModels(model_map={"deep": table})
    thinker = ActorSpec("@eve", soul="1", source="deep", tools=("deep_think",))
    run = make_run(models=models, actors=(thinker,))
    run.turn(spec(prompt="Think hard."))
    assert models.asked[0]["reasoning"] == asked
    assert models.asked[0]["tools"] == []  # deep_think is not offered as a tool


def test_the_checks_after_a_turn_see_it_stored_and_may_stop_the_run() -> None:
    run = make_run({"*": ["One.", "Two."]})
    seen: list[tuple[str, int]] = []

    def count(event: RunEvent) -> None:
        if not isinstance(event, TurnEnded):
            return
        run.services.store.flush()
        seen.append((event.where.action, len(run.messages())))
        if len(seen) == 2:
            raise RunError("the session's recorded cost passed the cost limit")

    run.services.events.subscribe(count)
    run.turn(spec(prompt="First."))
    with pytest.raises(RunError, match="passed the cost limit"):
        run.turn(spec(action="again", prompt="Second."))
    assert seen == [("pick", 2), ("again", 4)]  # each turn's prompt and reply stored first


class StreamingModels(ModelClient):
    """A remote-looking model that streams its reply a line at a time; it notes what the
    transcript showed after the first line arrived."""

    def __init__(self, shown: io.StringIO) -> None:
        super().__init__(model_map={"fast": "openai/x"}, environ={})
        self.shown = shown
        self.seen_midway = ""

    async def complete(
        self,
        choice: ModelChoice,
        messages: list[dict[str, Any]],
        turn: OfflineTurn,
        delay: float = 0.0,
        tools: Sequence[Mapping[str, Any]] = (),
        *,
        stream: ReplyStream | None = None,
        **options: Any,
    ) -> CallResult:
        assert stream is not None
        stream.add("reasoning", "Bob is the wolf, I am sure.")
        stream.add("text", "I accuse Bob.\n")
        await asyncio.sleep(0)
        self.seen_midway = self.shown.getvalue()
        stream.add("text", "SET VARIABLE: <<kill = @bob>>")
        reply = "I accuse Bob.\nSET VARIABLE: <<kill = @bob>>"
        return CallResult(reply, choice.model, reasoning="Bob is the wolf, I am sure.")


def test_the_transcript_prints_a_streamed_reply_as_it_arrives() -> None:
    shown = io.StringIO()
    models = StreamingModels(shown)
    run = make_run(models=models)
    run.services.events.subscribe(Transcript(everyone=["@eve", "@bob"], stream=shown))
    run.turn(spec(prompt="Who?", model="fast", outs=(OutSpec("kill", type="actor"),)))
    assert run.ctx.frame.get("kill") == "@bob"
    assert models.seen_midway.splitlines() == [
        "  … @eve is reasoning",
        "@eve ▸ @eve",
        "    I accuse Bob.",
    ]
    assert shown.getvalue().splitlines() == [
        "  … @eve is reasoning",
        "@eve ▸ @eve",
        "    I accuse Bob.",
        "    SET VARIABLE: <<kill = @bob>>",
    ]  # printed once, the reasoning never as text


def test_a_new_sessions_turn_goes_live_without_asking_the_turn_log(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run without records decides once that its turns are live: no call of the turn asks
    the log for a record or tells it that it goes live (§16.4), retries and tool rounds
    included; its records still carry the digest of what each call sent (§16.4a)."""

    def asked(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a live turn of a new session asked the turn log")

    monkeypatch.setattr(TurnLog, "recorded", asked)
    monkeypatch.setattr(TurnLog, "going_live", asked)
    run = make_run({"pick": ["SET VARIABLE: <<count = lots>>", "SET VARIABLE: <<count = 2>>"]})
    digests: list[str] = []
    submit = run.services.store.submit

    def stored(session: int, messages: Any, record: Any = None) -> Any:
        digests.append(record.state["request"])
        return submit(session, messages, record)

    monkeypatch.setattr(run.services.store, "submit", stored)
    result = run.turn(spec(prompt="How many?", outs=(OutSpec("count", type="int"),), max_retries=2))
    assert run.ctx.frame.get("count") == 2 and result.calls == 2
    assert len(digests) == 2 and len(set(digests)) == 2
