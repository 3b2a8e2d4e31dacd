"""The events a turn emits (:mod:`fems_runtime.events`), built from the turn's state: where it
is, its model calls and their streamed pieces, its tool calls, its points. The turn modules
call these at the one place each thing happens, and only while someone listens."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from fems_runtime.events import (
    ModelCallBegan,
    ModelCallEnded,
    ModelCallFirstChunk,
    ReplyChunk,
    RunEvent,
    RunEvents,
    ToolCallBegan,
    ToolCallEnded,
    ToolKind,
    Where,
)
from fems_runtime.replies import Piece
from fems_runtime.tools import BUILTIN_TOOLS, Toolbox

if TYPE_CHECKING:
    from fems_runtime.flow import Context
    from fems_runtime.llm import CallResult, ModelChoice
    from fems_runtime.specs import TurnSpec
    from fems_runtime.tools import Tool, ToolCall, ToolOutcome

_Point = TypeVar("_Point", bound=RunEvent)


class EventServices(Protocol):
    """What a turn's events need of the run's services
    (:class:`~fems_runtime.turns.shared.SharedServices`): the bus they go out on."""

    @property
    def events(self) -> RunEvents: ...


class Turn(Protocol):
    """What a turn's events need of a :class:`~fems_runtime.turns.turn.Turn`."""

    @property
    def services(self) -> EventServices: ...

    @property
    def ctx(self) -> Context: ...

    @property
    def spec(self) -> TurnSpec: ...

    @property
    def actor(self) -> str: ...


class Room(Protocol):
    """Who hears a turn (:class:`~fems_runtime.turns.turn.Room`)."""

    @property
    def souls(self) -> Collection[str]: ...

    @property
    def users(self) -> Collection[str]: ...

    @property
    def names(self) -> list[str]: ...

    @property
    def voice_soul(self) -> str: ...


class Setup(Protocol):
    """What a turn's calls share (:class:`~fems_runtime.turns.calls.ModelSetup`)."""

    @property
    def choice(self) -> ModelChoice: ...

    @property
    def cap(self) -> int | None: ...


class CallingTurn(Turn, Protocol):
    """What a model call's events need of a :class:`~fems_runtime.turns.calls.CallingTurn`."""

    @property
    def id(self) -> int: ...

    @property
    def room(self) -> Room: ...

    @property
    def setup(self) -> Setup: ...


class Answer(Protocol):
    """A model call's answer (:class:`~fems_runtime.turns.calls.Answer`)."""

    @property
    def call(self) -> CallResult | None: ...

    @property
    def text(self) -> str: ...

    @property
    def reasoning(self) -> str: ...


def turn_where(turn: Turn, actor: str | None = None) -> Where:
    """Where ``turn`` is: its branch and node, its action and line, who speaks (``actor``:
    another name, such as a human turn's executor)."""
    ctx, spec = turn.ctx, turn.spec
    return turn.services.events.where(
        ctx.path, ctx.node, spec.line, spec.action, actor or turn.actor
    )


def emit_point(
    turn: Turn,
    point: type[_Point],
    /,
    actor: str | None = None,
    parent: int | None = None,
    **values: Any,
) -> _Point:
    """Emit an event of ``turn`` (a replay, a rejected reply, a human wait …) inside its
    span, or inside the event ``parent`` of it (a model call); ``actor`` when another than
    the turn's voice is meant (a human turn's executor)."""
    events = turn.services.events
    where = turn_where(turn, actor)
    inside = turn.ctx.span if parent is None else parent
    return events.emit(point(id=events.new_id(), parent=inside, where=where, **values))


def model_call_began(
    turn: CallingTurn, messages: Sequence[Mapping[str, Any]], attempt: int
) -> ModelCallBegan:
    """Emit the start of a model call of ``turn``."""
    events, room, choice = turn.services.events, turn.room, turn.setup.choice
    began = ModelCallBegan(
        id=events.new_id(),
        parent=turn.ctx.span,
        where=turn_where(turn),
        turn=turn.id,
        attempt=attempt,
        provider=choice.provider,
        request_model=choice.model,
        streamed=not choice.offline,
        max_tokens=turn.setup.cap,
        speaker_soul=room.voice_soul,
        souls=frozenset(room.souls),
        users=frozenset(room.users),
        scope=tuple(room.names),
        messages=tuple(messages),
    )
    return events.emit(began)


def model_call_ended(
    turn: CallingTurn,
    began: ModelCallBegan,
    answer: Answer,
    messages: Sequence[Mapping[str, Any]],
    trimmed: int,
) -> ModelCallEnded:
    """Emit the end of a model call that answered (``answer.call`` None: `interrupt:` cut it).
    Built directly, not by :meth:`~fems_runtime.events.Ended.after`: handing its twenty fields
    on through ``**values`` doubled what the event cost a watched ``fems/mock`` call."""
    call = answer.call
    now = time.monotonic()
    ended = ModelCallEnded(
        id=began.id,
        parent=began.parent,
        where=began.where,
        mono=now,
        duration=now - began.mono,
        turn=turn.id,
        attempt=began.attempt,
        provider=began.provider,
        request_model=began.request_model,
        response_model=call.model if call else None,
        scope=began.scope,
        input_tokens=call.prompt_tokens if call else None,
        output_tokens=call.completion_tokens if call else None,
        reasoning_tokens=call.reasoning_tokens if call else None,
        cached_tokens=call.cached_tokens if call else None,
        cost=call.cost if call else None,
        finish_reason=call.finish_reason if call else None,
        tries=call.attempts if call else None,
        trimmed=trimmed,
        interrupted=call is None,
        tool_calls=tuple(c.as_message() for c in call.tool_calls) if call else (),
        messages=tuple(messages),
        reply=answer.text,
        reasoning=answer.reasoning,
    )
    return turn.services.events.emit(ended)


def model_call_failed(turn: CallingTurn, began: ModelCallBegan, error: BaseException) -> None:
    """Emit the end of a model call that failed or was cancelled (no reply is left of it)."""
    ended = ModelCallEnded.after(
        began,
        error,
        turn=turn.id,
        attempt=began.attempt,
        provider=began.provider,
        request_model=began.request_model,
        scope=began.scope,
    )
    turn.services.events.emit(ended)


def chunk_listener(turn: CallingTurn, began: ModelCallBegan) -> Callable[[Piece, str], None]:
    """The listener of a streamed call's pieces: each one a :class:`ReplyChunk`, the first
    one also a :class:`ModelCallFirstChunk` (time to first chunk)."""
    events, where = turn.services.events, began.where
    first = True
    wanted = events.wants(ReplyChunk)

    def feed(kind: Piece, chunk: str) -> None:
        nonlocal first
        if first and kind != Piece.DISCARD:
            first = False
            arrived = ModelCallFirstChunk(
                id=events.new_id(), parent=began.id, where=where, kind=kind
            )
            events.emit(arrived)
        if wanted:
            piece = ReplyChunk(
                id=events.new_id(), parent=began.id, where=where, kind=kind, chunk=chunk
            )
            events.emit(piece)

    return feed


def tool_call_began(
    turn: Turn, tools: Sequence[Tool], call: ToolCall, rounds: int, attempt: int
) -> ToolCallBegan:
    """Emit the start of a model's tool call in ``turn`` (``tools``: those it was offered)."""
    events = turn.services.events
    tool = Toolbox.find(tools, call.name)
    began = ToolCallBegan(
        id=events.new_id(),
        parent=turn.ctx.span,
        where=turn_where(turn),
        tool=tool.name if tool is not None else call.name,
        kind=_tool_kind(tool),
        call_id=call.id,
        round=rounds,
        attempt=attempt,
        arguments=call.arguments,
    )
    return events.emit(began)


def _tool_kind(tool: Tool | None) -> ToolKind:
    """Where a tool comes from: a built-in, an MCP server (called in the run's loop), else a
    ``code:`` function (an unknown tool's call fails as a function's would)."""
    if tool is not None and tool.name in BUILTIN_TOOLS:
        return "builtin"
    if tool is not None and not tool.threaded:
        return "mcp"
    return "function"


def tool_call_ended(turn: Turn, began: ToolCallBegan, outcome: ToolOutcome) -> None:
    """Emit the end of a tool call with its result."""
    ended = ToolCallEnded.after(
        began,
        tool=outcome.tool,
        kind=began.kind,
        round=began.round,
        attempt=began.attempt,
        arguments=began.arguments,
        result=outcome.result,
    )
    turn.services.events.emit(ended)
