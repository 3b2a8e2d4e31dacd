"""The stage of a run in this process (§17): it watches the run (a subscriber of its events,
:mod:`fems_runtime.events`, and a listener of its store), answers its human turns with what the page sends, and tells the page what changed.

Everything the page shows is read from the store through :class:`SessionView`; the stage itself
keeps only what the store does not hold: the nodes the run is in, the human turns waiting for an
answer, the replies being written (streamed, §15.4, until the stored reply replaces them), and
how the run ended. The page can write exactly one thing: the answer to a waiting
human turn, checked like the terminal checks it (§10.8).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fems_runtime.events import ModelCallEnded, RunEnded, RunEvent, RunEvents, StepBegan
from fems_runtime.human import HumanAnswer, HumanRequest, menu, out_name, typed_value
from fems_runtime.out_types import SignalError
from fems_runtime.records import RunError, StreamedReply, WatchedReplies
from fems_runtime.replies import Piece
from fems_runtime.signals import OutSpec
from fems_runtime.stage.chart import FlowChart
from fems_runtime.stage.view import DIRECTOR, SessionView
from fems_runtime.values import format_value, to_json

if TYPE_CHECKING:
    from fems_runtime.store import Message, Store
    from fems_runtime.variables import Frame

COALESCE_SECONDS = 0.1
"""How long the page's event stream gathers changes before it sends the next state."""


class AnswerRefused(Exception):
    """The page's answer cannot be taken (no such turn, a value that does not fit): the message
    is shown in the page, which asks again."""


@dataclass
class _Waiting:
    """A human turn waiting for the page."""

    number: int
    request: HumanRequest
    answer: asyncio.Future[HumanAnswer]

    def to_json(self) -> dict[str, Any]:
        request = self.request
        return {
            "id": self.number,
            "action": request.action,
            "actor": request.actor,
            "role": request.role,
            "prompt": request.prompt,
            "context": request.context,
            "outs": [_out_json(out, request.frame) for out in request.outs],
        }


@dataclass
class _Partial:
    """A reply being written (§17.1): what has arrived of it, shown until the messages of its
    turn are stored (``done``: its call is over), under its speaker and only to the seats of
    its turn's room; its reasoning only to the director."""

    number: int
    reply: StreamedReply
    stage: LiveStage
    text: str = ""
    reasoning: str = ""
    done: bool = False
    warning: str = ""

    def feed(self, kind: Piece, chunk: str) -> None:
        """A piece of the stream: of the reply, of its reasoning, or a discard."""
        if kind == Piece.DISCARD:  # the stream broke off: what it said never counts
            self.text = self.reasoning = ""
        elif kind == Piece.REASONING:
            self.reasoning += chunk
        else:
            self.text += chunk
        self.stage.touch()

    def finish(self, final: str) -> None:
        """The call is over; ``final`` is the reply as it is stored."""
        self.text, self.done = final, True
        self.stage.touch()

    def warn(self, problem: str) -> None:
        """A warning about the reply (it runs long without `max_tokens`, §15.4), shown with
        it to the seats that see it being written."""
        self.warning = problem
        self.stage.touch()

    def seen_by(self, soul: str | None, user: str | None) -> bool:
        """Whether a seat with ``soul`` and ``user`` sees the stored reply (as the store's
        visibility query decides, §13.2)."""
        reply = self.reply
        return soul in reply.souls or (user is not None and user in reply.users)

    def to_json(self, director: bool) -> dict[str, Any]:
        reply = self.reply
        shown = {
            "id": self.number,
            "turn": reply.turn,
            "action": reply.action,
            "node": reply.node,
            "speaker": reply.speaker,
            "soul": reply.speaker_soul,
            "text": self.text,
            "done": self.done,
            "warning": self.warning,
        }
        if director:
            shown["reasoning"] = self.reasoning
        return shown


def _out_json(out: OutSpec, frame: Frame | None) -> dict[str, Any]:
    """An out as the page asks for it: a menu of the choices, or a typed field."""
    choices = menu(out)
    return {
        "label": out.label,
        "name": out_name(out, frame, out.type if choices is None else None),
        "menu": None if choices is None else [format_value(choice) for choice in choices],
        "optional": out.optional,
    }


class LiveStage:
    """Observer of one run, its human-turn provider, and the source of the page's state."""

    def __init__(self, chart: FlowChart, module: str | None = None) -> None:
        """``chart``: the flow picture; ``module``: the generated module's file as a command
        line names it (for the page's fork commands), None when the run did not start from
        one the user has (``fems2py run``)."""
        self.chart = chart
        self.module = module
        self.view: SessionView | None = None
        self.status = "starting"
        self.error: str | None = None
        self._loop = asyncio.get_running_loop()
        self._running: dict[asyncio.Task[Any], tuple[str, str | None]] = {}
        self._last_calls: dict[str, dict[str, Any]] = {}  # actor → its last model call
        self._waiting: dict[int, _Waiting] = {}
        self._numbers = itertools.count(1)
        self._partials: dict[asyncio.Task[Any] | None, _Partial] = {}  # by the turn's task
        self._partial_numbers = itertools.count(1)
        self._writers: set[asyncio.Task[Any]] = set()  # tasks whose end is watched
        self._messages = 0
        self._version = 0
        self._changed = asyncio.Event()

    # ------------------------------------------------------------------ the run's side

    def run_opened(self, store: Store, session: int, events: RunEvents) -> None:
        self.view = SessionView(store, session, self.module)
        self.status = "running"
        store.listen(self._stored)
        events.subscribe(self._happened)
        events.subscribe(WatchedReplies(self.reply_started))
        self.touch()

    def run_closing(self, status: str, error: str | None) -> None:
        if self.view is not None:
            self.view.freeze(status)
        self.status, self.error = status, error
        self._running.clear()
        self._partials.clear()
        self.touch()

    async def ask(self, request: HumanRequest) -> HumanAnswer:
        """Answer a human turn (the :class:`~fems_runtime.human.HumanProvider` protocol): wait
        until the page sends an answer that fits, as the terminal waits for a line."""
        for out in request.outs:
            if menu(out) == []:  # as at the terminal: nothing to pick is the script's fault
                raise RunError(f"{request.action}: out {out.label} has no choices to offer")
        waiting = _Waiting(next(self._numbers), request, self._loop.create_future())
        self._waiting[waiting.number] = waiting
        self.touch()
        try:
            return await waiting.answer
        finally:
            del self._waiting[waiting.number]
            self.touch()

    def reply_started(self, reply: StreamedReply) -> _Partial:
        """A model call starts streaming (a :data:`~fems_runtime.records.ReplyWatcher`): its
        pieces are shown as they arrive. The call's task has moved on from its last reply."""
        task = asyncio.current_task()
        partial = _Partial(next(self._partial_numbers), reply, self)
        if task is not None and task not in self._writers:
            self._writers.add(task)
            task.add_done_callback(self._left_reply)
        self._partials[task] = partial
        self.touch()
        return partial

    def _left_reply(self, task: asyncio.Task[Any]) -> None:
        """A branch that ended (or was cancelled, ``join(n)``) writes no more."""
        self._writers.discard(task)
        if self._partials.pop(task, None) is not None:
            self.touch()

    def _stored(self, messages: list[Message]) -> None:
        self.on_loop(self._settle, messages)

    def _settle(self, messages: list[Message]) -> None:
        """Stored messages replace the finished replies of their turns (their speakers')."""
        self._messages += len(messages)
        said = {(m.turn, m.speaker_soul) for m in messages}
        for task, partial in list(self._partials.items()):
            if partial.done and (partial.reply.turn, partial.reply.speaker_soul) in said:
                del self._partials[task]
        self.touch()

    def _happened(self, event: RunEvent) -> None:
        """Remember each actor's last model call, exactly as sent, and the node each branch
        of the flow is at: steps come from the branch's own task, and a finished branch task
        leaves the picture. The run's end freezes the view."""
        match event:
            case ModelCallEnded(outcome="ok"):
                where = event.where
                self._last_calls[str(where.actor)] = {
                    "action": where.action,
                    "model": event.request_model,
                    "messages": to_json(list(event.messages)),
                }
            case StepBegan():
                self._stepped(event)
            case RunEnded():
                status = "completed" if event.outcome == "ok" else "failed"
                self.run_closing(status, event.error)

    def _stepped(self, event: StepBegan) -> None:
        try:
            task = asyncio.current_task()
        except RuntimeError:  # written from a worker thread: not a flow step
            return
        if task is None:
            return
        if task not in self._running:
            task.add_done_callback(self._left)
        node = str(event.where.node)
        self._running[task] = (node, self.chart.node_id(node, event.where.line))
        self.touch()

    def _left(self, task: asyncio.Task[Any]) -> None:
        self._running.pop(task, None)
        self.touch()

    def on_loop(self, call: Callable[..., None], *args: Any) -> None:
        """Run ``call(*args)`` on the stage's event loop: now when already there, else soon
        (store writes and some streams come from worker threads)."""
        try:
            on_loop = asyncio.get_running_loop() is self._loop
        except RuntimeError:
            on_loop = False
        if on_loop:
            call(*args)
        else:
            self._loop.call_soon_threadsafe(call, *args)

    def touch(self) -> None:
        """Note a change (from any thread): the page's event streams send the state again."""
        self.on_loop(self._bump)

    def _bump(self) -> None:
        self._version += 1
        self._changed.set()
        self._changed = asyncio.Event()

    # ------------------------------------------------------------------ the page's side

    def answer(self, number: int, text: str, values: Mapping[str, Any]) -> None:
        """Take the page's answer to waiting turn ``number``: free text plus, per out label,
        the index of a menu choice or the typed text; raise :class:`AnswerRefused`."""
        waiting = self._waiting.get(number)
        if waiting is None or waiting.answer.done():
            raise AnswerRefused("this turn is not waiting for an answer (any more)")
        request = waiting.request
        taken: dict[str, Any] = {}
        for out in request.outs:
            name = out_name(out, request.frame)
            raw = values.get(out.label)
            if raw is None or str(raw).strip() == "":
                if out.optional:
                    continue
                raise AnswerRefused(f"{name}: an answer is needed")
            choices = menu(out)
            if choices is not None:
                index = int(raw) if str(raw).isdigit() else -1
                if not 0 <= index < len(choices):
                    raise AnswerRefused(f"{name}: pick one of the choices")
                taken[out.label] = choices[index]
                continue
            try:
                taken[out.label] = typed_value(out, str(raw).strip(), request.frame)
            except SignalError as error:
                raise AnswerRefused(f"{name}: {error}") from None
        waiting.answer.set_result(HumanAnswer(text, taken))

    def state(self, seat: str = DIRECTOR) -> dict[str, Any]:
        """What the page shows besides the stored messages, from ``seat``'s view: status,
        running nodes, waiting turns, the replies being written that ``seat`` may see, the
        count of stored messages (a change tells the page to read its view again) and of the
        stage's changes (every seat's state of one change has the same ``version``)."""
        return {
            "version": self._version,
            "status": self.status,
            "error": self.error,
            "messages": self._messages,
            "running": [
                {"node": node, "id": chart_id} for node, chart_id in self._running.values()
            ],
            "waiting": [waiting.to_json() for waiting in self._waiting.values()],
            "seat": seat,
            "writing": self._writing(seat),
        }

    def _writing(self, seat: str) -> list[dict[str, Any]]:
        """The replies being written that ``seat`` sees (it is in their turn's room), oldest
        first, with their reasoning so far for the director only (§13.1)."""
        partials = sorted(self._partials.values(), key=lambda partial: partial.number)
        shown = [partial for partial in partials if partial.text or partial.reasoning]
        if seat == DIRECTOR or not shown or self.view is None:
            return [partial.to_json(director=True) for partial in shown]
        found = next((s for s in self.view.seats() if s["name"] == seat), None)
        if found is None:
            return []
        return [
            partial.to_json(director=False)
            for partial in shown
            if partial.text and partial.seen_by(found["soul"], found["user"])
        ]

    async def changes(self, seat: str = DIRECTOR) -> AsyncIterator[dict[str, Any]]:
        """``seat``'s state now, then after each change (changes close together are sent as
        one)."""
        seen = -1
        while True:
            changed = self._changed
            if seen != self._version:
                seen = self._version
                yield self.state(seat)
                await asyncio.sleep(COALESCE_SECONDS)
                continue
            await changed.wait()

    # ------------------------------------------------------------------ as a stage source

    def sessions(self) -> list[dict[str, Any]]:
        """The run's session: the only one this stage shows."""
        return [{**self.view.summary(), "children": []}] if self.view is not None else []

    def session_view(self, number: int) -> SessionView:
        if self.view is None or self.view.session != number:
            raise KeyError(number)
        return self.view

    def chart_of(self, number: int) -> FlowChart:
        return self.chart

    def last_call(self, seat: str) -> dict[str, Any] | None:
        """The last model call of actor ``seat`` in this run (it is traced, not stored)."""
        return self._last_calls.get(seat)
