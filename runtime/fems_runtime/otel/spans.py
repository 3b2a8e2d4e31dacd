"""A run's events as OpenTelemetry spans and metrics, per the GenAI semantic conventions.

A span per begin/end pair of :mod:`fems_runtime.events`, nested as the events' ``parent``
ids nest them::

    invoke_workflow werewolf          the run (a session), gen_ai.conversation.id
      fork Night / par Vote / for …   branches start (fems.fork.kind)
        branch Wolves, branch 0 …     a fork's or par's branches: sibling spans
          invoke_agent @wolf          a turn (gen_ai.agent.name); func/assign turns: "func deal"
            chat fems/mock            a model call: provider, models, tokens, finish reasons
            execute_tool read         a tool call
            wait_human @you           a person is asked

Steps and a ``for`` loop's iterations make no span of their own (their spans would be half of
a game's): the spans inside them carry ``fems.step`` and ``fems.branch.index``.
Every span has ``code.file.path``/``code.line.number`` (the ``.fems`` position) and the
``fems.*`` attributes of where it happened. A part that failed ends with status ERROR, its
message and ``error.type``. Content (prompts, replies, tool arguments and results) is set only
when asked (``capture``); reasoning never is: no field marked ``reasoning`` is read here.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv._incubating.metrics import gen_ai_metrics
from opentelemetry.semconv.attributes import code_attributes as code
from opentelemetry.semconv.attributes import error_attributes as error
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode

from fems_runtime import events as ev
from fems_runtime.otel.record import SAMPLED, OpenSpan, new_span_id, new_trace_id
from fems_runtime.otel.setup import Telemetry, session_ids

Operation = gen_ai.GenAiOperationNameValues
_NS = 1_000_000_000


def _ns(wall: float) -> int:
    return int(wall * _NS)


class RunSpans:
    """Subscriber of one run's events that makes its spans and records its metrics.

    ``tags`` are set on the run's span (a batch's name and index); ``capture`` exports the
    content fields of the events (prompts, replies, tool arguments and results)."""

    def __init__(
        self,
        telemetry: Telemetry,
        *,
        capture: bool = False,
        tags: Mapping[str, str | int] | None = None,
    ) -> None:
        self.telemetry = telemetry
        self.capture = capture
        self.tags = dict(tags or {})
        self._spans: dict[int, OpenSpan] = {}
        self._folded: dict[int, tuple[int | None, dict[str, Any]]] = {}
        self._loops: set[int] = set()
        self._conversation: str | None = None
        self._first_chunk: dict[int, float] = {}
        self._failure: str | None = None
        meter = telemetry.meter
        self._duration = gen_ai_metrics.create_gen_ai_client_operation_duration(meter)
        self._tokens = gen_ai_metrics.create_gen_ai_client_token_usage(meter)
        self._to_first_chunk = gen_ai_metrics.create_gen_ai_client_operation_time_to_first_chunk(
            meter
        )
        self._handlers: dict[type[ev.RunEvent], Callable[[Any], None]] = {
            ev.RunBegan: self._run_began,
            ev.StepBegan: self._step_began,
            ev.ForkBegan: self._fork_began,
            ev.BranchBegan: self._branch_began,
            ev.TurnBegan: self._turn_began,
            ev.ModelCallBegan: self._call_began,
            ev.ModelCallFirstChunk: self._first_chunk_came,
            ev.ModelCallEnded: self._call_ended,
            ev.TurnEnded: self._turn_ended,
            ev.ToolCallBegan: self._tool_began,
            ev.ToolCallEnded: self._tool_ended,
            ev.HumanWaitBegan: self._wait_began,
            ev.RunFailed: self._run_failed,
            ev.RunEnded: self._run_ended,
            ev.TurnReplayed: self._point("fems.turn.replayed", "turn", "attempt"),
            ev.FallbackTaken: self._point("fems.fallback"),
            ev.ProblemReported: self._point("fems.problem", "problem"),
            ev.ReplyRejected: self._rejected,
        }

    def __call__(self, event: ev.RunEvent) -> None:
        handler = self._handlers.get(type(event))
        if handler is not None:
            handler(event)
        elif isinstance(event, ev.Ended):
            self._end(event)

    # ------------------------------------------------------------------ spans

    def _start(
        self,
        event: ev.Began,
        name: str,
        attributes: dict[str, Any],
        kind: SpanKind = SpanKind.INTERNAL,
        where: bool = True,
    ) -> OpenSpan:
        """The span of ``event``, a child of its parent's, with the attributes of ``where``
        (a model or tool call's are its turn's) and those of the folded parts it is in."""
        parent, inherited = self._parent(event.parent)
        attributes.update(inherited)
        if where:
            attributes.update(_where(event.where))
        start = _ns(event.wall)
        if parent is None:  # a part whose parent is gone (the run failed around it)
            context = SpanContext(new_trace_id(), new_span_id(), False, SAMPLED)
            span = OpenSpan(self.telemetry, name, context, None, attributes, start, kind)
        else:
            span = OpenSpan.child(parent, name, attributes, start, kind)
        self._spans[event.id] = span
        return span

    def _fold(self, event: ev.Began, attributes: dict[str, Any]) -> None:
        """Make no span of ``event`` (a step, a ``for`` loop's iteration): the spans inside
        it are its parent's children, with ``attributes``. A span costs a run more than a
        mock model call does; these would double the spans of a game."""
        self._folded[event.id] = (event.parent, attributes)

    def _parent(self, parent: int | None) -> tuple[OpenSpan | None, dict[str, Any]]:
        """The span a child of event ``parent`` belongs in, and the attributes of the folded
        events between them."""
        inherited: dict[str, Any] = {}
        while parent is not None and parent in self._folded:
            parent, attributes = self._folded[parent]
            inherited = {**attributes, **inherited}
        return (self._spans.get(parent) if parent is not None else None), inherited

    def _end(self, event: ev.Ended, span: OpenSpan | None = None) -> None:
        """End the span of ``event`` (ERROR with the message when its part failed)."""
        span = span or self._spans.pop(event.id, None)
        if span is None:
            self._folded.pop(event.id, None)
            return
        self._loops.discard(event.id)
        if event.outcome == "error":
            span.set_attribute(error.ERROR_TYPE, event.error_type or "_OTHER")
            span.set_status(Status(StatusCode.ERROR, event.error or event.error_type))
        span.end(end_time=_ns(event.wall))

    def _point(self, name: str, *fields: str) -> Callable[[ev.RunEvent], None]:
        """A handler adding ``name`` with ``fields`` as an event of the parent's span."""

        def add(event: ev.RunEvent) -> None:
            span = self._spans.get(event.parent) if event.parent is not None else None
            if span is not None:
                values = {f"fems.{field}": getattr(event, field) for field in fields}
                span.add_event(name, _defined(values), timestamp=_ns(event.wall))

        return add

    # ------------------------------------------------------------------ the run and the flow

    def _run_began(self, event: ev.RunBegan) -> None:
        """The session's span: the root of its own trace, whose ids a first run derives from
        the session so that later runs and branches can link to it (span links)."""
        where = event.where
        self._conversation = str(where.session) if where.session is not None else None
        workflow = where.file.removesuffix(".fems") or "script"
        attributes: dict[str, Any] = {
            gen_ai.GEN_AI_OPERATION_NAME: Operation.INVOKE_WORKFLOW.value,
            gen_ai.GEN_AI_WORKFLOW_NAME: workflow,
            "fems.script.sha256": event.sha256,
            "fems.resumed": event.resumed,
            **{f"fems.{name}": value for name, value in self.tags.items()},
        }
        if self._conversation is not None:
            attributes[gen_ai.GEN_AI_CONVERSATION_ID] = self._conversation
        if event.parent_session is not None:
            attributes["fems.parent_session"] = event.parent_session
        links = []
        own = None
        if where.session is not None and event.session_created is not None:
            own = session_ids(where.session, event.session_created)
            if event.resumed:  # a later run of the session: its own trace, linked to the first
                links.append(_link(own, "resumed"))
                own = None
        if event.parent_session is not None and event.parent_created is not None:
            links.append(_link(session_ids(event.parent_session, event.parent_created), "fork"))
        name = f"{Operation.INVOKE_WORKFLOW.value} {workflow}"
        attributes.update(_where(where))
        trace_id, span_id = own if own is not None else (new_trace_id(), new_span_id())
        context = SpanContext(trace_id, span_id, False, SAMPLED)
        start = _ns(event.wall)
        span = OpenSpan(self.telemetry, name, context, None, attributes, start, links=links)
        self._spans[event.id] = span

    def _run_failed(self, event: ev.RunFailed) -> None:
        self._failure = event.message

    def _run_ended(self, event: ev.RunEnded) -> None:
        span = self._spans.pop(event.id, None)
        if span is None:
            return
        span.set_attribute("fems.steps", event.steps)
        span.set_attribute("fems.model_calls", event.model_calls)
        if event.outcome == "error" and self._failure is not None:
            event = _with_message(event, self._failure)
        self._end(event, span)
        self._folded.clear()
        self._loops.clear()
        for orphan in self._spans.values():  # parts a failure left open end with the run
            orphan.end(end_time=_ns(event.wall))
        self._spans.clear()

    def _step_began(self, event: ev.StepBegan) -> None:
        self._fold(event, {"fems.step": event.step})

    def _fork_began(self, event: ev.ForkBegan) -> None:
        attributes: dict[str, Any] = {"fems.fork.kind": event.kind}
        if event.targets:
            attributes["fems.fork.targets"] = tuple(event.targets)
        if event.var is not None:
            attributes["fems.fork.var"] = event.var
        self._start(event, f"{event.kind} {event.where.node}", attributes)
        if event.kind == "for":
            self._loops.add(event.id)

    def _branch_began(self, event: ev.BranchBegan) -> None:
        if event.parent in self._loops:  # one iteration after another: no siblings
            self._fold(event, {"fems.branch.index": event.index})
            return
        label = event.target if event.target is not None else str(event.index)
        attributes: dict[str, Any] = {"fems.branch.index": event.index}
        if event.target is not None:
            attributes["fems.branch.target"] = event.target
        self._start(event, f"branch {label}", attributes)

    # ------------------------------------------------------------------ turns and calls

    def _turn_began(self, event: ev.TurnBegan) -> None:
        actor = event.where.actor
        attributes: dict[str, Any] = {"fems.kind": event.kind}
        if actor is None or event.kind not in ev.ACTOR_TURNS:
            self._start(event, f"{event.kind} {event.where.action}", attributes)
            return
        attributes[gen_ai.GEN_AI_OPERATION_NAME] = Operation.INVOKE_AGENT.value
        attributes[gen_ai.GEN_AI_AGENT_NAME] = actor
        self._conversation_of(attributes)
        self._start(event, f"{Operation.INVOKE_AGENT.value} {actor}", attributes)

    def _turn_ended(self, event: ev.TurnEnded) -> None:
        span = self._spans.get(event.id)
        if span is not None:
            values = {"fems.turn": event.turn, "fems.calls": event.calls}
            span.set_attributes(_defined(values))
            if event.fell_back:
                span.set_attribute("fems.fell_back", True)
        self._end(event)

    def _call_began(self, event: ev.ModelCallBegan) -> None:
        attributes: dict[str, Any] = {
            gen_ai.GEN_AI_OPERATION_NAME: Operation.CHAT.value,
            gen_ai.GEN_AI_PROVIDER_NAME: event.provider,
            gen_ai.GEN_AI_REQUEST_MODEL: event.request_model,
            gen_ai.GEN_AI_REQUEST_STREAM: event.streamed,
            "fems.turn": event.turn,
            "fems.attempt": event.attempt,
            "fems.scope": tuple(event.scope),
        }
        self._conversation_of(attributes)
        if self.capture:
            attributes[gen_ai.GEN_AI_INPUT_MESSAGES] = _json(
                [_input_message(message) for message in event.messages]
            )
        turn = self._spans.get(event.parent) if event.parent is not None else None
        if turn is not None:  # the turn's id is known once it calls
            turn.set_attribute("fems.turn", event.turn)
        name = f"{Operation.CHAT.value} {event.request_model}"
        self._start(event, name, attributes, SpanKind.CLIENT, where=False)

    def _first_chunk_came(self, event: ev.ModelCallFirstChunk) -> None:
        span = self._spans.get(event.parent) if event.parent is not None else None
        if span is not None and event.parent is not None:
            self._first_chunk[event.parent] = event.mono

    def _call_ended(self, event: ev.ModelCallEnded) -> None:
        span = self._spans.pop(event.id, None)
        if span is None:
            return
        usage = {
            gen_ai.GEN_AI_USAGE_INPUT_TOKENS: event.input_tokens,
            gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS: event.output_tokens,
            gen_ai.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: event.reasoning_tokens,
            gen_ai.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: event.cached_tokens,
            gen_ai.GEN_AI_RESPONSE_MODEL: event.response_model,
            "fems.cost_usd": event.cost,
            "fems.tries": event.tries,
        }
        span.set_attributes(_defined(usage))
        if event.finish_reason is not None:
            span.set_attribute(gen_ai.GEN_AI_RESPONSE_FINISH_REASONS, (event.finish_reason,))
        if event.interrupted:
            span.set_attribute("fems.interrupted", True)
        first = self._first_chunk.pop(event.id, None)
        began = event.mono - event.duration
        if first is not None:
            span.set_attribute(gen_ai.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK, first - began)
        if self.capture:
            span.set_attribute(gen_ai.GEN_AI_OUTPUT_MESSAGES, _json([_output_message(event)]))
        self._end(event, span)
        self._record_call(event, first - began if first is not None else None)

    def _record_call(self, event: ev.ModelCallEnded, to_first_chunk: float | None) -> None:
        """The call's metrics: its duration, its tokens, its time to the first chunk."""
        attributes = _defined(
            {
                gen_ai.GEN_AI_OPERATION_NAME: Operation.CHAT.value,
                gen_ai.GEN_AI_PROVIDER_NAME: event.provider,
                gen_ai.GEN_AI_REQUEST_MODEL: event.request_model,
                gen_ai.GEN_AI_RESPONSE_MODEL: event.response_model,
                error.ERROR_TYPE: event.error_type if event.outcome == "error" else None,
            }
        )
        self._duration.record(event.duration, attributes)
        if to_first_chunk is not None:
            self._to_first_chunk.record(to_first_chunk, attributes)
        for kind, count in (("input", event.input_tokens), ("output", event.output_tokens)):
            if count is not None:
                self._tokens.record(count, {**attributes, gen_ai.GEN_AI_TOKEN_TYPE: kind})

    def _tool_began(self, event: ev.ToolCallBegan) -> None:
        attributes: dict[str, Any] = {
            gen_ai.GEN_AI_OPERATION_NAME: Operation.EXECUTE_TOOL.value,
            gen_ai.GEN_AI_TOOL_NAME: event.tool,
            gen_ai.GEN_AI_TOOL_TYPE: "extension" if event.kind == "mcp" else "function",
            "fems.tool.kind": event.kind,
            "fems.tool.round": event.round,
            "fems.attempt": event.attempt,
        }
        if event.call_id:
            attributes[gen_ai.GEN_AI_TOOL_CALL_ID] = event.call_id
        if self.capture:
            attributes[gen_ai.GEN_AI_TOOL_CALL_ARGUMENTS] = event.arguments
        self._start(event, f"{Operation.EXECUTE_TOOL.value} {event.tool}", attributes, where=False)

    def _tool_ended(self, event: ev.ToolCallEnded) -> None:
        span = self._spans.pop(event.id, None)
        if span is None:
            return
        if self.capture:
            span.set_attribute(gen_ai.GEN_AI_TOOL_CALL_RESULT, event.result)
        self._end(event, span)

    def _wait_began(self, event: ev.HumanWaitBegan) -> None:
        attributes: dict[str, Any] = {"fems.turn": event.turn}
        self._start(event, f"wait_human {event.where.actor}", attributes)

    def _rejected(self, event: ev.ReplyRejected) -> None:
        span = self._spans.get(event.parent) if event.parent is not None else None
        if span is None:
            return
        values: dict[str, Any] = {"fems.final": event.final, "fems.problems": len(event.problems)}
        if self.capture:  # a problem may quote the reply
            values["fems.problems"] = tuple(event.problems)
        span.add_event("fems.reply.rejected", values, timestamp=_ns(event.wall))

    def _conversation_of(self, attributes: dict[str, Any]) -> None:
        if self._conversation is not None:
            attributes[gen_ai.GEN_AI_CONVERSATION_ID] = self._conversation


def _where(where: ev.Where) -> dict[str, Any]:
    """The attributes of where an event happened: the ``.fems`` position and the flow's."""
    return _defined(
        {
            code.CODE_FILE_PATH: where.file or None,
            code.CODE_LINE_NUMBER: where.line,
            "fems.node": where.node,
            "fems.action": where.action,
            "fems.actor": where.actor,
            "fems.path": where.path or None,
        }
    )


def _defined(values: Mapping[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in values.items() if value is not None}


def _link(ids: tuple[int, int], why: str) -> Link:
    """A link to the root span ``ids`` of another run's trace."""
    trace_id, span_id = ids
    context = SpanContext(trace_id, span_id, is_remote=True, trace_flags=SAMPLED)
    return Link(context, {"fems.link": why})


def _with_message(event: ev.RunEnded, message: str) -> ev.RunEnded:
    """``event`` with the located message of the run error (``file:line: error: …``)."""
    return replace(event, error=message)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _input_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """A sent message (OpenAI protocol) as the conventions' input message: role and parts.

    Only the content and the tool calls are read, so no reasoning a provider keeps on a message
    goes out (§13.1). A system message stays here with its role: the conventions keep
    ``gen_ai.system_instructions`` for instructions an API takes apart from the chat history,
    and a chat completion's system text is part of it."""
    role = message.get("role") or "user"
    parts: list[dict[str, Any]] = []
    if role == "tool":
        parts.append(
            {
                "type": "tool_call_response",
                "id": message.get("tool_call_id"),
                "response": message.get("content"),
            }
        )
    else:
        parts.extend(_content_parts(message.get("content")))
        parts.extend(_tool_call_part(call) for call in message.get("tool_calls") or ())
    converted: dict[str, Any] = {"role": role, "parts": parts}
    if message.get("name"):
        converted["name"] = message["name"]
    return converted


def _content_parts(content: Any) -> list[dict[str, Any]]:
    """A message's content as text parts. The runtime sends a string; of a list of parts only
    the texts are kept, since a part of another kind may be a provider's reasoning block."""
    if isinstance(content, str):
        return [{"type": "text", "content": content}] if content else []
    return [
        {"type": "text", "content": part.get("text")}
        for part in content or ()
        if isinstance(part, Mapping) and part.get("type") == "text"
    ]


def _tool_call_part(call: Mapping[str, Any]) -> dict[str, Any]:
    """A tool call (OpenAI protocol) as the conventions' tool call part."""
    function = call.get("function") or {}
    return {
        "type": "tool_call",
        "id": call.get("id"),
        "name": function.get("name"),
        "arguments": function.get("arguments"),
    }


def _output_message(event: ev.ModelCallEnded) -> dict[str, Any]:
    """The reply as the conventions' output message: its text and tool calls, no reasoning."""
    parts: list[dict[str, Any]] = []
    if event.reply:
        parts.append({"type": "text", "content": event.reply})
    parts.extend(_tool_call_part(call) for call in event.tool_calls)
    return {"role": "assistant", "parts": parts, "finish_reason": event.finish_reason or ""}
