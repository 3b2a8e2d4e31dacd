"""The OpenTelemetry exporter as a subscriber of run events (issue 31): the spans it makes of
hand-made events, read back from the SDK's in-memory exporter."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fems_runtime import events as ev
from fems_runtime.otel.setup import Telemetry, session_ids
from fems_runtime.otel.spans import RunSpans
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

SECRET_REASONING = "I secretly think Bob is the wolf"
PROMPT = "You are @wolf. Who do you kill tonight?"
REPLY = "I kill @Bob."
ARGS = '{"path": "rules.md"}'


class Recorder:
    """A run's events as a real run emits them: a bus with the exporter subscribed."""

    def __init__(self, *, capture: bool = False, tags: dict[str, Any] | None = None) -> None:
        self.spans_out = InMemorySpanExporter()
        self.metrics = InMemoryMetricReader()
        self.telemetry = Telemetry(
            Resource({"service.name": "test"}), self.spans_out, self.metrics, SimpleSpanProcessor
        )
        self.bus = ev.RunEvents("werewolf.fems")
        self.bus.subscribe(RunSpans(self.telemetry, capture=capture, tags=tags))

    def where(self, **values: Any) -> ev.Where:
        return self.bus.where(**values)

    def begin(self, event: type[ev.Began], parent: int | None, /, **values: Any) -> ev.Began:
        where = values.pop("where", None) or self.where()
        return self.bus.emit(event(id=self.bus.new_id(), parent=parent, where=where, **values))

    def end(self, event: type[ev.Ended], began: ev.Began, /, **values: Any) -> None:
        self.bus.emit(event.after(began, values.pop("failure", None), **values))

    def finished(self) -> dict[str, ReadableSpan]:
        return {span.name: span for span in self.spans_out.get_finished_spans()}


def play_a_night(recorder: Recorder, *, fail_call: bool = False, session: int = 7) -> None:
    """A run with a step, a fork of two branches, a turn with a chat and a tool call."""
    recorder.bus.session = session
    run = recorder.begin(ev.RunBegan, None, sha256="abc", session_created=1000.5)
    night = recorder.where(node="Night", line=4)
    step = recorder.begin(ev.StepBegan, run.id, step=1, where=night)
    fork = recorder.begin(
        ev.ForkBegan, step.id, kind="fork", targets=("Wolves", "Seer"), where=night
    )
    branches = [
        recorder.begin(ev.BranchBegan, fork.id, index=index, target=target)
        for index, target in enumerate(("Wolves", "Seer"))
    ]
    where = recorder.where(node="Wolves", action="wolf_kill", actor="@wolf", line=12)
    turn = recorder.begin(ev.TurnBegan, branches[0].id, kind="ai", where=where)
    call = recorder.begin(
        ev.ModelCallBegan,
        turn.id,
        where=where,
        provider="fems",
        request_model="fems/mock",
        scope=("@wolf",),
        messages=({"role": "user", "content": PROMPT, "reasoning_content": SECRET_REASONING},),
    )
    recorder.bus.emit(ev.ModelCallFirstChunk(id=recorder.bus.new_id(), parent=call.id, where=where))
    recorder.bus.emit(
        ev.ReplyChunk(id=0, parent=call.id, where=where, kind="reasoning", chunk=SECRET_REASONING)
    )
    failure = TimeoutError("the model did not answer in 60 s") if fail_call else None
    recorder.end(
        ev.ModelCallEnded,
        call,
        failure=failure,
        provider="fems",
        request_model="fems/mock",
        response_model="fems/mock-1",
        input_tokens=120,
        output_tokens=8,
        reasoning_tokens=30,
        finish_reason="stop",
        reply=REPLY,
        reasoning=SECRET_REASONING,
    )
    tool = recorder.begin(
        ev.ToolCallBegan,
        turn.id,
        where=where,
        tool="read",
        kind="builtin",
        call_id="c1",
        arguments='{"path": "rules.md"}',
    )
    recorder.end(ev.ToolCallEnded, tool, tool="read", result="the rules")
    recorder.end(ev.TurnEnded, turn, kind="ai", turn=3, calls=1)
    for branch in branches:
        recorder.end(ev.BranchEnded, branch)
    recorder.end(ev.ForkJoined, fork)
    recorder.end(ev.StepEnded, step)
    recorder.end(ev.RunEnded, run, steps=1, model_calls=1)


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    recorder = Recorder()
    yield recorder
    recorder.telemetry.shutdown()


def test_each_part_of_the_run_is_a_span_named_by_the_conventions(recorder: Recorder) -> None:
    play_a_night(recorder)
    spans = recorder.finished()
    assert set(spans) == {
        "invoke_workflow werewolf",
        "fork Night",
        "branch Wolves",
        "branch Seer",
        "invoke_agent @wolf",
        "chat fems/mock",
        "execute_tool read",
    }
    workflow = spans["invoke_workflow werewolf"].attributes or {}
    assert workflow["gen_ai.operation.name"] == "invoke_workflow"
    assert workflow["gen_ai.conversation.id"] == "7"
    agent = spans["invoke_agent @wolf"].attributes or {}
    assert agent["gen_ai.agent.name"] == "@wolf"
    assert agent["fems.action"] == "wolf_kill"
    assert agent["code.file.path"] == "werewolf.fems" and agent["code.line.number"] == 12
    chat = spans["chat fems/mock"].attributes or {}
    assert chat["gen_ai.provider.name"] == "fems"
    assert chat["gen_ai.request.model"] == "fems/mock"
    assert chat["gen_ai.response.model"] == "fems/mock-1"
    assert chat["gen_ai.usage.input_tokens"] == 120
    assert chat["gen_ai.usage.output_tokens"] == 8
    assert chat["gen_ai.usage.reasoning.output_tokens"] == 30
    assert chat["gen_ai.response.finish_reasons"] == ("stop",)
    assert chat["fems.scope"] == ("@wolf",)
    assert chat["gen_ai.response.time_to_first_chunk"] >= 0
    tool = spans["execute_tool read"].attributes or {}
    assert tool["gen_ai.tool.name"] == "read" and tool["gen_ai.tool.call.id"] == "c1"
    assert (spans["fork Night"].attributes or {})["fems.step"] == 1  # steps fold into spans


def test_spans_nest_as_the_run_does_and_branches_are_siblings(recorder: Recorder) -> None:
    play_a_night(recorder)
    spans = recorder.finished()

    def parent(name: str) -> str | None:
        span = spans[name]
        if span.parent is None:
            return None
        return next(s.name for s in spans.values() if s.context.span_id == span.parent.span_id)

    assert parent("invoke_workflow werewolf") is None
    assert parent("fork Night") == "invoke_workflow werewolf"
    assert parent("branch Wolves") == parent("branch Seer") == "fork Night"
    assert parent("invoke_agent @wolf") == "branch Wolves"
    assert parent("chat fems/mock") == parent("execute_tool read") == "invoke_agent @wolf"
    assert len({span.context.trace_id for span in spans.values()}) == 1


def test_a_failed_call_ends_its_span_with_error_status_and_type(recorder: Recorder) -> None:
    play_a_night(recorder, fail_call=True)
    chat = recorder.finished()["chat fems/mock"]
    assert chat.status.status_code is StatusCode.ERROR
    assert chat.status.description == "the model did not answer in 60 s"
    assert (chat.attributes or {})["error.type"] == "TimeoutError"
    assert recorder.finished()["invoke_agent @wolf"].status.status_code is StatusCode.UNSET


def test_a_failed_run_carries_the_located_message(recorder: Recorder) -> None:
    recorder.bus.session = 1
    run = recorder.begin(ev.RunBegan, None)
    step = recorder.begin(ev.StepBegan, run.id, step=1)
    recorder.begin(ev.TurnBegan, step.id, kind="ai", where=recorder.where(actor="@a"))
    message = "werewolf.fems:30: error: flow stuck at [Day]"
    recorder.bus.emit(
        ev.RunFailed(
            id=recorder.bus.new_id(), parent=run.id, where=recorder.where(), message=message
        )
    )
    recorder.end(ev.RunEnded, run, failure=RuntimeError("stuck"))
    spans = recorder.finished()
    workflow = spans["invoke_workflow werewolf"]
    assert workflow.status.status_code is StatusCode.ERROR
    assert workflow.status.description == message
    assert "invoke_agent @a" in spans  # the turn a failure left open ended with the run


def _everything_exported(recorder: Recorder) -> str:
    """Every name and value of every span, span event and link, as one text."""
    parts = []
    for span in recorder.spans_out.get_finished_spans():
        parts.append(json.dumps(span.to_json()))
    return "\n".join(parts)


def test_no_content_is_exported_unless_asked_and_reasoning_never(recorder: Recorder) -> None:
    play_a_night(recorder)
    exported = _everything_exported(recorder)
    for private in (PROMPT, REPLY, SECRET_REASONING, "rules.md", "the rules"):
        assert private not in exported
    assert "gen_ai.input.messages" not in exported


def test_content_is_exported_when_asked_but_reasoning_still_not() -> None:
    recorder = Recorder(capture=True)
    play_a_night(recorder)
    spans = recorder.finished()
    chat = spans["chat fems/mock"].attributes or {}
    assert json.loads(chat["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [{"type": "text", "content": PROMPT}]}
    ]
    output = json.loads(chat["gen_ai.output.messages"])
    assert output[0]["parts"] == [{"type": "text", "content": REPLY}]
    tool = spans["execute_tool read"].attributes or {}
    assert tool["gen_ai.tool.call.result"] == "the rules"
    assert SECRET_REASONING not in _everything_exported(recorder)
    recorder.telemetry.shutdown()


def test_sent_messages_are_the_conventions_parts_tool_calls_and_results_too() -> None:
    """A turn's second round: the system text, the prompt, the model's tool call and the tool's
    result go out in the same shape as the reply (role and parts), none of its reasoning."""
    recorder = Recorder(capture=True)
    call = {"id": "c1", "type": "function", "function": {"name": "read", "arguments": ARGS}}
    messages = (
        {"role": "system", "content": "You are @wolf."},
        {"role": "user", "content": PROMPT},
        {"role": "assistant", "content": "", "tool_calls": [call], "reasoning_content": "hm"},
        {"role": "tool", "tool_call_id": "c1", "content": "the rules"},
    )
    run = recorder.begin(ev.RunBegan, None)
    began = recorder.begin(
        ev.ModelCallBegan, run.id, provider="fems", request_model="fems/mock", messages=messages
    )
    recorder.end(ev.ModelCallEnded, began, provider="fems", reply=REPLY, finish_reason="stop")
    recorder.end(ev.RunEnded, run)
    chat = recorder.finished()["chat fems/mock"].attributes or {}
    assert json.loads(chat["gen_ai.input.messages"]) == [
        {"role": "system", "parts": [{"type": "text", "content": "You are @wolf."}]},
        {"role": "user", "parts": [{"type": "text", "content": PROMPT}]},
        {
            "role": "assistant",
            "parts": [{"type": "tool_call", "id": "c1", "name": "read", "arguments": ARGS}],
        },
        {
            "role": "tool",
            "parts": [{"type": "tool_call_response", "id": "c1", "response": "the rules"}],
        },
    ]
    assert "gen_ai.system_instructions" not in chat  # the system text is in the chat history
    recorder.telemetry.shutdown()


def test_a_session_s_first_run_has_its_derived_trace_and_later_runs_link_to_it() -> None:
    recorder = Recorder(tags={"batch.name": "night-50", "batch.index": 3})
    recorder.bus.session = 4
    first = recorder.begin(ev.RunBegan, None, session_created=99.25)
    recorder.end(ev.RunEnded, first)
    resumed = recorder.begin(ev.RunBegan, None, session_created=99.25, resumed=True)
    recorder.end(ev.RunEnded, resumed)
    recorder.bus.session = 5
    forked = recorder.begin(
        ev.RunBegan, None, session_created=120.0, parent_session=4, parent_created=99.25
    )
    recorder.end(ev.RunEnded, forked)
    first_span, resumed_span, forked_span = recorder.spans_out.get_finished_spans()
    trace_id, span_id = session_ids(4, 99.25)
    assert (first_span.context.trace_id, first_span.context.span_id) == (trace_id, span_id)
    assert resumed_span.context.trace_id != trace_id
    assert [(link.context.trace_id, link.context.span_id) for link in resumed_span.links] == [
        (trace_id, span_id)
    ]
    assert forked_span.context.trace_id == session_ids(5, 120.0)[0]
    assert [link.context.trace_id for link in forked_span.links] == [trace_id]
    assert (first_span.attributes or {})["fems.batch.name"] == "night-50"
    assert (first_span.attributes or {})["fems.batch.index"] == 3
    recorder.telemetry.shutdown()


def test_calls_record_duration_tokens_and_time_to_first_chunk(recorder: Recorder) -> None:
    play_a_night(recorder)
    data = recorder.metrics.get_metrics_data()
    assert data is not None
    points: dict[str, list[Any]] = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                points[metric.name] = list(metric.data.data_points)
    assert points["gen_ai.client.operation.duration"][0].count == 1
    tokens = {p.attributes["gen_ai.token.type"]: p.sum for p in points["gen_ai.client.token.usage"]}
    assert tokens == {"input": 120, "output": 8}
    assert points["gen_ai.client.operation.time_to_first_chunk"][0].count == 1
