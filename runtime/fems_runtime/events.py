"""What happens in a run, defined once: typed run events and the bus that carries them.

A run tells what it does by emitting these events on its :class:`RunEvents` bus; the JSONL
trace (``--trace``), the transcript, the stage and the cost limit are subscribers of it, and
so is any exporter (OpenTelemetry). Nothing else tells them what happened.

Most events come in pairs, a ``…Began`` and its ``…Ended``, which share an ``id`` so that a
subscriber can make a span of them; ``parent`` is the ``id`` of the span the event happens
in, which nests them::

    run → step → turn → model call | tool call | human wait
    run → step (a par loop's) → fork → branch → step → …

The other events (:class:`Assigned`, :class:`TurnReplayed`, :class:`ReplyChunk` …) are points
inside a span. Every event says where it happened (:class:`Where`: the session, the branch
path, node, action and actor, the ``.fems`` file and line) and when (``mono``, seconds of
:func:`time.monotonic`, for durations; ``wall``, seconds since the epoch, for timestamps); an
end also says how its part of the run went (``outcome`` and ``error``) and how long it took.

Content (prompts, replies, tool arguments and results, people's answers) travels on events
as fields a subscriber may use or leave out: each such field is marked ``content`` in its
metadata (:func:`content_fields`), and a model's reasoning ``reasoning``, which exporters
leave out in every mode (§13.1).

Emitting is synchronous, in the thread (and asyncio task) where the thing happens, so a
subscriber may ask :func:`asyncio.current_task` which branch an event belongs to. Emitters
build an event only when :attr:`RunEvents.active` says someone listens: a run nobody watches
pays one attribute read per point (``python -m bench mock_calls``). Every subscriber gets the
same event object, which none may change; they are not frozen dataclasses only because a
frozen one's ``__init__`` costs two to four times as much, and a watched run builds about ten
events per model call.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Literal, Self, TypeVar

from fems_runtime.replies import Piece

Outcome = Literal["ok", "error"]
#: The kinds of turn (§9.1): ``mind`` turns say which of ``ai``/``human`` they ran as.
TurnEventKind = Literal["ai", "human", "mind", "func", "assign"]
#: The turns an actor takes, a model or a person answering; ``func`` and ``assign`` run code.
ACTOR_TURNS: frozenset[TurnEventKind] = frozenset({"ai", "human", "mind"})
#: Where a tool comes from (§15.5): a built-in, a ``code:`` function, an MCP server's tool.
ToolKind = Literal["builtin", "function", "mcp"]
#: What starts concurrent or repeated branches: a ``fork`` (§12.3), ``par`` or ``for`` (§12.7).
ForkKind = Literal["fork", "par", "for"]

CONTENT = "content"
"""Metadata mark of a field holding what people or models said (prompts, replies, answers)."""
REASONING = "reasoning"
"""Metadata mark of a field holding a model's reasoning: never exported (§13.1)."""


def _content(default: Any = None) -> Any:
    return field(default=default, metadata={"privacy": CONTENT})


def _reasoning() -> Any:
    return field(default="", metadata={"privacy": REASONING})


@dataclass(slots=True)
class Where:
    """Where in the run and in the script an event happened."""

    #: the session's number (§14), None before the session is open
    session: int | None = None
    #: the concurrent branches it happened in (``/Vote#0>Wolves``, see records.TurnLog);
    #: empty on the main path
    path: str = ""
    #: the flow node (``Den``, ``for_wolf``, ``&Night``), None before the first step
    node: str | None = None
    #: the action being run, None outside one
    action: str | None = None
    #: the actor who acts (the voice of a turn with ``as``), None when nobody does
    actor: str | None = None
    #: the ``.fems`` file (as the script names it)
    file: str = ""
    #: the ``.fems`` line of the node, action or statement, None when unknown
    line: int | None = None


@dataclass(slots=True, kw_only=True)
class RunEvent:
    """Anything that happens in a run."""

    #: the event's own id; a ``…Began`` and its ``…Ended`` share it (unique within the run)
    id: int
    #: the id of the span this one happens in (the run's span has none)
    parent: int | None
    #: where it happened
    where: Where
    #: when, in seconds of :func:`time.monotonic` (for durations)
    mono: float = field(default_factory=time.monotonic)
    #: when, in seconds since the epoch (for timestamps)
    wall: float = field(default_factory=time.time)


@dataclass(slots=True, kw_only=True)
class Began(RunEvent):
    """The start of a span of the run."""


@dataclass(slots=True, kw_only=True)
class Ended(RunEvent):
    """The end of a span: how its part of the run went and how long it took."""

    #: ``ok``, or ``error`` when the part failed (or was cancelled: a lost ``join(n)`` race,
    #: an interrupt of the whole run)
    outcome: Outcome = "ok"
    #: the error's message when ``outcome`` is ``error``
    error: str | None = None
    #: the error's type (``RunError``, ``TimeoutError``, ``CancelledError`` …)
    error_type: str | None = None
    #: seconds since the matching ``…Began`` (monotonic)
    duration: float = 0.0

    @classmethod
    def after(cls, began: Began, failure: BaseException | None = None, **values: Any) -> Self:
        """The end of ``began``'s span now, ``failure`` its error if it failed."""
        now = time.monotonic()
        if failure is not None:
            values.setdefault("outcome", "error")
            values.setdefault("error", str(failure) or type(failure).__name__)
            values.setdefault("error_type", type(failure).__name__)
        return cls(
            id=began.id,
            parent=began.parent,
            where=began.where,
            mono=now,
            duration=now - began.mono,
            **values,
        )


# ---------------------------------------------------------------------- the run


@dataclass(slots=True, kw_only=True)
class RunBegan(Began):
    """A run of the script starts, its session open (new, resumed or branched, §16.4)."""

    #: the script's sha256 (its source, as compiled)
    sha256: str = ""
    #: whether the run continues an interrupted session (``--resume``)
    resumed: bool = False
    #: the session this one was forked or reused from (§16.4a), None for a fresh one
    parent_session: int | None = None
    #: when the session and its parent were created (seconds since the epoch, as the store
    #: keeps them): with the numbers, they name a session across databases (the exporter
    #: derives a session's trace id from them, so a resumed or forked run can link to it)
    session_created: float | None = None
    parent_created: float | None = None


@dataclass(slots=True, kw_only=True)
class RunEnded(Ended):
    """The run is over: ``outcome`` ok means completed."""

    #: the steps the run counted (§12.10)
    steps: int = 0
    #: the model calls it made (replayed ones not counted)
    model_calls: int = 0


@dataclass(slots=True, kw_only=True)
class RunFailed(RunEvent):
    """The run error that ends a failed run, located in the script (before :class:`RunEnded`)."""

    #: the error as the user reads it (``file:line: error: …``)
    message: str
    #: the error's type
    error_type: str = "RunError"


# ---------------------------------------------------------------------- the flow


@dataclass(slots=True, kw_only=True)
class StepBegan(Began):
    """One execution of a flow node (§12.10); its span holds the node's action, loop or
    module call."""

    #: the run's step count with this one
    step: int = 0


@dataclass(slots=True, kw_only=True)
class StepEnded(Ended):
    """The node's action, loop or module call is over."""


@dataclass(slots=True, kw_only=True)
class ForkBegan(Began):
    """Branches start: a fork's targets (§12.3), a ``par`` loop's or a ``for`` loop's
    iterations (§12.7, §12.8); each branch is a :class:`BranchBegan` inside it."""

    #: ``fork``, ``par`` (concurrent iterations) or ``for`` (one after another)
    kind: ForkKind
    #: a fork's target nodes
    targets: tuple[str, ...] = ()
    #: the fork's merge node (§12.5), None when its paths do not meet
    merge: str | None = None
    #: the loop variable of a ``par``/``for``
    var: str | None = None
    #: the items a loop iterates over, as snapshotted
    items: tuple[Any, ...] = ()


@dataclass(slots=True, kw_only=True)
class ForkJoined(Ended):
    """Every branch of the fork has ended (the join, §12.5, §12.6)."""

    #: the kind of its :class:`ForkBegan`
    kind: ForkKind = "fork"
    #: where the flow goes on: the merge node when a branch reached it, else the fork's node
    node: str | None = None
    #: whether a branch reached the merge node
    reached: bool = False
    #: the targets whose branches a ``join(n)`` cancelled
    cancelled: tuple[str, ...] = ()


@dataclass(slots=True, kw_only=True)
class BranchBegan(Began):
    """One branch of a fork (``parent`` is the fork's id): a target, or a loop's iteration."""

    #: the branch's place among the fork's (0-based)
    index: int
    #: the fork target it starts at, None for a loop's iteration
    target: str | None = None
    #: the loop item of this iteration
    item: Any = None


@dataclass(slots=True, kw_only=True)
class BranchEnded(Ended):
    """The branch ended (reached the merge node, a terminal node, or was cancelled)."""

    #: the node it stopped at (the merge node, ``END``, ``OUT`` …), None when it just ended
    reached: str | None = None


# ---------------------------------------------------------------------- turns


@dataclass(slots=True, kw_only=True)
class TurnBegan(Began):
    """An action runs as a turn: ``@ai``, ``@human``, ``@mind`` (§9.1), ``@func`` (§9.7) or
    ``@assign`` (§9.6, one statement)."""

    #: the action's kind
    kind: TurnEventKind


@dataclass(slots=True, kw_only=True)
class TurnEnded(Ended):
    """The turn is over (its messages submitted to the store)."""

    #: the action's kind; a ``mind`` turn says ``ai`` or ``human``, the kind it ran as
    kind: TurnEventKind
    #: the turn's id in the session (§14), None for turns without one (``@func``, ``@assign``)
    #: and for a turn that failed before it had one
    turn: int | None = None
    #: the model calls it made or replayed
    calls: int = 0
    #: whether its validation loop gave up and ran the fallback (§10.6)
    fell_back: bool = False


@dataclass(slots=True, kw_only=True)
class TurnReplayed(RunEvent):
    """A turn's call or answer is taken from the session's records instead of made (§16.4,
    §16.4a)."""

    #: the turn's id
    turn: int | None = None
    #: the validation attempt it belongs to (0: the first)
    attempt: int = 0


@dataclass(slots=True, kw_only=True)
class Assigned(RunEvent):
    """One ``@assign`` statement wrote a variable (§9.6)."""

    #: the variable, with its key (``votes[@eve]``)
    target: str
    #: ``=``, ``+=`` …
    op: str
    #: the value on the right-hand side
    value: Any = None


@dataclass(slots=True, kw_only=True)
class FuncCalled(RunEvent):
    """An ``@func`` action calls its function live (§9.7, §9.8)."""

    #: the function's inputs by parameter
    inputs: Mapping[str, Any] = _content(None)


@dataclass(slots=True, kw_only=True)
class ReplyRejected(RunEvent):
    """A reply (or answer) failed its checks (§10.4–§10.6)."""

    #: what was wrong with it
    problems: tuple[str, ...] = ()
    #: whether the retries are exhausted (the fallback or a run error follows)
    final: bool = False


@dataclass(slots=True, kw_only=True)
class FallbackTaken(RunEvent):
    """A turn's retries are exhausted and its ``fallback:`` module runs (§10.6)."""


@dataclass(slots=True, kw_only=True)
class ProblemReported(RunEvent):
    """A run warning about a turn (a reply problem the lenient default lets pass, a cut
    context, a reply cut at its length cap)."""

    #: the problem, as the warning says it
    problem: str


@dataclass(slots=True)
class StoredMessage:
    """One message a turn stored (§14), as people read it."""

    #: its kind (``reply``, ``narration``, ``reasoning``, ``tool_call`` …, words.MESSAGE_KINDS)
    kind: str
    #: who says it (``@wolf``, ``narrator``, a tool's name)
    speaker: str
    #: the actors of the room it was said in, sorted
    room: tuple[str, ...]
    #: what it says (a reasoning message's text is reasoning, see :func:`content_fields`)
    content: str = _content("")
    #: the model call whose streamed reply it is (:class:`ModelCallBegan` id), None otherwise
    call: int | None = None
    #: a strict turn's reply its checks rejected, kept as feedback, not the feedback on it (§13.3)
    rejected: bool = False

    @property
    def private(self) -> bool:
        """Whether its content is a model's reasoning, never exported (§13.1)."""
        return self.kind == "reasoning"


@dataclass(slots=True, kw_only=True)
class MessagesStored(RunEvent):
    """A turn handed messages to the store, with its record (one transaction, §16.4)."""

    #: the turn's id
    turn: int | None = None
    #: the messages, in order
    messages: tuple[StoredMessage, ...] = ()


# ---------------------------------------------------------------------- model calls


@dataclass(slots=True, kw_only=True)
class ModelCallBegan(Began):
    """A request to a model is sent (§15.4); its parent is the turn."""

    #: the turn's id
    turn: int = 0
    #: the validation attempt (0: the first)
    attempt: int = 0
    #: who provides the model (``openai``, ``anthropic``, ``fems`` for the offline ones)
    provider: str = ""
    #: the model asked for (``openai/gpt-4o-mini``, ``fems/mock``)
    request_model: str = ""
    #: whether its reply streams in (offline models answer at once: no chunks)
    streamed: bool = False
    #: the reply's cap in tokens (§15.4), None when it has none: the model writes until it ends
    max_tokens: int | None = None
    #: the soul of the speaker, and the souls and users of the turn's room: who will see
    #: the stored reply (so the only seats that may see it being written, §17.1)
    speaker_soul: str = ""
    souls: frozenset[str] = frozenset()
    users: frozenset[str] = frozenset()
    #: the actors in the turn's scope, sorted
    scope: tuple[str, ...] = ()
    #: the messages sent (OpenAI protocol), as cut to the model's window; an offline
    #: model's without the context while no subscriber reads them (:attr:`RunEvents.reads_sent`)
    messages: tuple[Mapping[str, Any], ...] = _content(())


@dataclass(slots=True, kw_only=True)
class ModelCallFirstChunk(RunEvent):
    """The first piece of a streamed reply arrived (time to first chunk); ``parent`` is the
    model call."""

    #: ``text`` or ``reasoning``
    kind: str = "text"


@dataclass(slots=True, kw_only=True)
class ReplyChunk(RunEvent):
    """A piece of a streamed reply; ``parent`` is the model call. Kind ``discard``: the
    stream broke off and the call is made again, what arrived so far does not count."""

    #: what the piece is: the reply's text, its reasoning, or a discard (no text)
    kind: Piece
    #: the piece (a reasoning piece is reasoning: never exported)
    chunk: str = _content("")

    @property
    def private(self) -> bool:
        """Whether the piece is reasoning (§13.1)."""
        return self.kind == Piece.REASONING


@dataclass(slots=True, kw_only=True)
class ModelCallEnded(Ended):
    """The model answered (or failed, or `interrupt:` cut it, §10.7)."""

    #: the turn's id
    turn: int = 0
    #: the validation attempt (0: the first)
    attempt: int = 0
    #: who provides the model
    provider: str = ""
    #: the model asked for, and the model that answered (as the provider names it)
    request_model: str = ""
    response_model: str | None = None
    #: the actors in the turn's scope, sorted
    scope: tuple[str, ...] = ()
    #: tokens sent, received, spent reasoning and read from the provider's cache (None:
    #: not reported; cached tokens also None when the cache served none)
    input_tokens: int | None = None
    output_tokens: int | None = None
    reasoning_tokens: int | None = None
    cached_tokens: int | None = None
    #: US dollars, from the model table (None: no known price, §15.6)
    cost: float | None = None
    #: why the reply ended (``stop``, ``length``, ``tool_calls``)
    finish_reason: str | None = None
    #: requests it took, retries included (§15.4)
    tries: int | None = None
    #: context entries left out to fit the window (§13.2a)
    trimmed: int = 0
    #: whether `interrupt:` cut it (§10.7)
    interrupted: bool = False
    #: the tools it calls (OpenAI protocol)
    tool_calls: tuple[Mapping[str, Any], ...] = _content(())
    #: the messages sent, as on :class:`ModelCallBegan`
    messages: tuple[Mapping[str, Any], ...] = _content(())
    #: the reply as stored, its reasoning cut out (with an interrupt's marker)
    reply: str = _content("")
    #: the reasoning cut out of the reply: never exported (§13.1)
    reasoning: str = _reasoning()


# ---------------------------------------------------------------------- tools, people


@dataclass(slots=True, kw_only=True)
class ToolCallBegan(Began):
    """A model's tool call runs (§15.5); its parent is the turn."""

    #: the tool's name as the script writes it (``read``, ``notes.lookup``, ``files.*``'s)
    tool: str
    #: built-in, ``code:`` function or MCP server tool
    kind: ToolKind = "function"
    #: the provider's id of the call
    call_id: str = ""
    #: the tool round of the turn (0: the first) and the validation attempt
    round: int = 0
    attempt: int = 0
    #: the arguments as the model wrote them (JSON text)
    arguments: str = _content("")


@dataclass(slots=True, kw_only=True)
class ToolCallEnded(Ended):
    """The tool returned; a failing tool's error is its result (``error: …``), so the call
    still ends ok."""

    #: the tool's name
    tool: str = ""
    #: built-in, ``code:`` function or MCP server tool
    kind: ToolKind = "function"
    #: the tool round and the validation attempt
    round: int = 0
    attempt: int = 0
    #: the arguments as the model wrote them
    arguments: str = _content("")
    #: the result the model reads
    result: str = _content("")


@dataclass(slots=True, kw_only=True)
class HumanWaitBegan(Began):
    """A person is asked and the run waits for the answer (§10.8); its parent is the turn."""

    #: the turn's id
    turn: int = 0
    #: what the person is shown
    prompt: str = _content("")


@dataclass(slots=True, kw_only=True)
class HumanWaitEnded(Ended):
    """The person answered."""

    #: the turn's id
    turn: int = 0


@dataclass(slots=True, kw_only=True)
class HumanAnswered(RunEvent):
    """A person's answer (live or replayed) is about to be applied (§10.8)."""

    #: the turn's id
    turn: int = 0
    #: their free text
    text: str = _content("")
    #: the out values they gave, by out label
    values: Mapping[str, Any] = _content(None)


# ---------------------------------------------------------------------- the bus

Subscriber = Callable[[RunEvent], None]
WHERES = 1024
"""The places a bus remembers (:meth:`RunEvents.where`); a ``par`` loop's branches are
places of their own, so past this many it forgets them all."""
_Event = TypeVar("_Event", bound=RunEvent)


class RunEvents:
    """The run's event bus: subscribers are called in order, synchronously, with each event.

    A subscriber may stop the run by raising (the cost limit raises a ``RunError`` at a
    turn's end); emitters build events only while :attr:`active`, and a point that only some
    subscribers read (stored messages, reply chunks, assignments) only when :meth:`wants` it.
    An offline model's call carries its context only while :attr:`reads_sent`.
    """

    #: what the JSONL trace writes as ``format`` on its first line (``run``)
    TRACE_FORMAT: ClassVar[int] = 2

    def __init__(self, file: str = "") -> None:
        self.file = file
        #: the session, once open (filled into every :class:`Where`)
        self.session: int | None = None
        #: the run's span id (parent of its top-level steps)
        self.run_id: int | None = None
        self._subscribers: list[tuple[Subscriber, frozenset[type[RunEvent]], bool]] = []
        self._calls: tuple[Subscriber, ...] = ()
        self._wheres: dict[tuple[Any, ...], Where] = {}
        self._wanted: frozenset[type[RunEvent]] = frozenset()
        #: a fresh event id: the C-level step of a counter, called for every event
        self.new_id: Callable[[], int] = itertools.count(1).__next__
        #: whether anyone listens: a plain attribute, read at every point of the run
        self.active = False
        #: whether a subscriber reads what model calls send (their events' ``messages``)
        self.reads_sent = False

    def subscribe(
        self,
        subscriber: Subscriber,
        only: Iterable[type[RunEvent]] | None = None,
        *,
        sent: bool = True,
    ) -> Callable[[], None]:
        """Call ``subscriber`` with each event from now on (``only``: the types it reads; it
        may still be called with others, which it ignores); returns the call that stops it.
        ``sent`` False: it never reads what a model call sends, so an offline model's call
        may leave its context out (the one part whose cost grows with the run)."""
        wanted = frozenset(only) if only is not None else _every_event_type()
        entry = (subscriber, wanted, sent)
        self._subscribers.append(entry)
        self._listened()

        def unsubscribe() -> None:
            if entry in self._subscribers:
                self._subscribers.remove(entry)
            self._listened()

        return unsubscribe

    def _listened(self) -> None:
        self.active = bool(self._subscribers)
        self.reads_sent = any(sent for _, _, sent in self._subscribers)
        self._calls = tuple(subscriber for subscriber, _, _ in self._subscribers)
        self._wanted = frozenset().union(*(wanted for _, wanted, _ in self._subscribers))

    def wants(self, kind: type[RunEvent]) -> bool:
        """Whether a subscriber reads events of type ``kind``: a point nobody reads is not
        built (an exporter alone reads no stored messages: building them is most of what
        events cost a ``fems/mock`` call)."""
        return kind in self._wanted

    def emit(self, event: _Event) -> _Event:
        """Hand ``event`` to every subscriber; returns it (a begin is kept for its end)."""
        for subscriber in self._calls:
            subscriber(event)
        return event

    def where(
        self,
        path: str = "",
        node: str | None = None,
        line: int | None = None,
        action: str | None = None,
        actor: str | None = None,
    ) -> Where:
        """A :class:`Where` in this run's session and file: the same object for the same
        place (events never change theirs), so a place met again costs a look-up, not a
        new object, and the export pickles it once per batch."""
        key = (self.session, self.file, path, node, line, action, actor)
        where = self._wheres.get(key)
        if where is None:
            if len(self._wheres) >= WHERES:
                self._wheres.clear()
            where = self._wheres[key] = Where(
                self.session, path, node, action, actor, self.file, line
            )
        return where


def _every_event_type() -> frozenset[type[RunEvent]]:
    """:class:`RunEvent` and all its subclasses (what a subscriber of everything reads)."""
    found: set[type[RunEvent]] = set()
    pending: list[type[RunEvent]] = [RunEvent]
    while pending:
        kind = pending.pop()
        found.add(kind)
        pending.extend(kind.__subclasses__())
    return frozenset(found)


def content_fields(event: type[RunEvent] | type[StoredMessage]) -> dict[str, str]:
    """The fields of an event type that hold content, by name: ``content`` (what people and
    models said, exported only when asked) or ``reasoning`` (never exported)."""
    return {f.name: f.metadata["privacy"] for f in fields(event) if "privacy" in f.metadata}


__all__ = [
    "CONTENT",
    "REASONING",
    "Assigned",
    "Began",
    "BranchBegan",
    "BranchEnded",
    "Ended",
    "FallbackTaken",
    "ForkBegan",
    "ForkJoined",
    "FuncCalled",
    "HumanAnswered",
    "HumanWaitBegan",
    "HumanWaitEnded",
    "MessagesStored",
    "ModelCallBegan",
    "ModelCallEnded",
    "ModelCallFirstChunk",
    "ProblemReported",
    "ReplyChunk",
    "ReplyRejected",
    "RunBegan",
    "RunEnded",
    "RunEvent",
    "RunEvents",
    "RunFailed",
    "StepBegan",
    "StepEnded",
    "StoredMessage",
    "ToolCallBegan",
    "ToolCallEnded",
    "TurnBegan",
    "TurnEnded",
    "TurnReplayed",
    "Where",
    "content_fields",
]
