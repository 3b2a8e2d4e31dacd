"""What every turn of one run shares (:class:`SharedServices`): the model client, the store and
its session, the run's events, the people, the meta blocks, the warnings. Turns read it; the
run opens it as a :class:`~fems_runtime.turns.services.TurnServices`."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, Protocol

from fems_runtime.context import ContextCache
from fems_runtime.events import RunEvents
from fems_runtime.llm import ModelClient
from fems_runtime.records import TraceWriter, TurnLog
from fems_runtime.store import Store
from fems_runtime.tools import DEFAULT_MAX_TOOL_ROUNDS, Toolbox

if TYPE_CHECKING:
    from fems_runtime.flow import Context
    from fems_runtime.human import HumanProvider
    from fems_runtime.specs import TurnResult, TurnSpec


@dataclass(frozen=True)
class HeldCall:
    """A turn's model call as a debugger sees it before it is sent: the turn, who speaks, the
    model, and the messages exactly as they will go out. A call replayed from the session's
    records (§16.4) sends nothing: ``recorded`` is its recorded reply, ``messages`` empty (its
    context is not rebuilt, which could run the script's memory methods again)."""

    ctx: Context
    spec: TurnSpec
    turn: int
    actor: str
    model: str
    prompt: str
    messages: list[dict[str, Any]]
    recorded: str | None = None


class TurnDebugger(Protocol):
    """A debugger of the run (``--debug``, :mod:`fems_runtime.debug`): awaited before a turn
    sends its model call (the call is held while it waits, before any timeout starts) or
    replays its first recorded one (a resumed or forked session stops at the same
    breakpoints), told what the call answered and what the turn did."""

    async def before_call(self, call: HeldCall) -> None: ...

    async def before_replay(self, call: HeldCall) -> None: ...

    def called(self, spec: TurnSpec, reply: str, reasoning: str) -> None: ...

    def turn_ended(self, spec: TurnSpec, result: TurnResult) -> None: ...


class HumanInputs:
    """Tells in-flight model calls that a person just answered (`interrupt: HUMAN`, §10.7)."""

    def __init__(self) -> None:
        self._waiters: list[tuple[asyncio.Future[str], frozenset[str]]] = []

    def notify(self, actor: str) -> None:
        """A human turn by `actor` produced input."""
        for future, excluded in self._waiters:
            if actor not in excluded and not future.done():
                future.set_result(actor)

    async def wait(self, excluded: Iterable[str] = ()) -> str:
        """Wait for the next input by someone not in `excluded`; return who answered."""
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        entry = (future, frozenset(excluded))
        self._waiters.append(entry)
        try:
            return await future
        finally:
            self._waiters.remove(entry)


class RunWarnings:
    """Run warnings on stderr, each distinct text once, with its count if it came back
    ("… (repeated 412 times)"), so a loop that repeats a problem does not bury the output.
    They are printed when the run ends (completed or failed), in the order they first
    happened; the trace keeps every event, and ``--transcript`` shows each problem live."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        self.stream = stream
        self.counts: dict[str, int] = {}

    def __call__(self, text: str) -> None:
        self.counts[text] = self.counts.get(text, 0) + 1

    def flush(self) -> None:
        """At the end of the run: every warning once, with how often it happened."""
        for text, count in self.counts.items():
            line = f"{text} (repeated {count} times)" if count > 1 else text
            print(line, file=self.stream or sys.stderr)
        self.counts.clear()


@dataclass
class SharedServices:
    """What every turn of one run shares: models, store and session, events, people, meta
    blocks. ``trace``, when given, subscribes to ``events`` (a trace of the turns alone)."""

    models: ModelClient
    store: Store
    session: int
    trace: TraceWriter | None = None
    #: where turns tell what they do (:mod:`fems_runtime.events`)
    events: RunEvents = field(default_factory=RunEvents)
    file: str = ""
    safety: str = ""
    style: str = ""
    owners: tuple[str, ...] = ()
    human: HumanProvider | None = None
    code: Callable[[str], Any] | None = None
    warn: Callable[[str], None] = field(default_factory=RunWarnings)
    poll: float = 0.05
    inputs: HumanInputs = field(default_factory=HumanInputs)
    model_calls: int = 0
    log: TurnLog = field(default_factory=TurnLog)
    toolbox: Toolbox = field(default_factory=lambda: Toolbox(".", None))
    all_tools: tuple[str, ...] = ()  # what `tools: true` offers besides read and list (§15.5)
    max_tool_rounds: int = DEFAULT_MAX_TOOL_ROUNDS
    max_tokens: int | None = None  # meta: the cap of every reply without its own (§3, §9.2)
    #: the actors' built-in contexts, made from ``store``
    contexts: ContextCache = field(init=False)
    warned: set[tuple[str, str]] = field(default_factory=set)  # (what, actor) warned once
    debugger: TurnDebugger | None = None  # --debug (fems_runtime.debug)
    #: someone shows the run as it goes (the transcript, the stage): see `warn_now`
    shown_live: bool = False

    def __post_init__(self) -> None:
        self.contexts = ContextCache(self.store)
        events = self.events
        events.file = events.file or self.file
        events.session = self.session if events.session is None else events.session
        if self.trace is not None and self.trace.enabled:
            events.subscribe(self.trace)

    def warn_now(self, text: str) -> None:
        """A located warning that cannot wait for the run's end (a reply running long while
        the run looks stuck, §15.4). A run shown live shows it as an event, and its warnings
        list it at the end; a run nobody shows prints it on stderr at once, and only then."""
        if self.shown_live:
            self.warn(text)
        else:
            print(text, file=sys.stderr, flush=True)

    def warned_once(self, what: str, actor: str) -> bool:
        """Whether ``actor`` was warned about ``what`` already; the first time, False (and it
        now counts as warned): trimming a context is warned once per actor (§13.2a)."""
        if (what, actor) in self.warned:
            return True
        self.warned.add((what, actor))
        return False
