"""The stage of a run in this process (§17): it watches the run (a run observer and a trace
listener), answers its human turns with what the page sends, and tells the page what changed.

Everything the page shows is read from the store through :class:`SessionView`; the stage itself
keeps only what the store does not hold: the nodes the run is in, the human turns waiting for an
answer, and how the run ended. The page can write exactly one thing: the answer to a waiting
human turn, checked like the terminal checks it (§10.8).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fems_runtime.human import HumanAnswer, HumanRequest, out_name, typed_value
from fems_runtime.records import RunError
from fems_runtime.signals import OutSpec, SignalError, choice_list
from fems_runtime.stage.chart import FlowChart
from fems_runtime.stage.view import SessionView
from fems_runtime.values import format_value

if TYPE_CHECKING:
    from fems_runtime.records import TraceWriter
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


def _out_json(out: OutSpec, frame: Frame | None) -> dict[str, Any]:
    """An out as the page asks for it: a menu of the choices, or a typed field."""
    menu = _menu(out)
    return {
        "label": out.label,
        "name": out_name(out, frame, out.type if menu is None else None),
        "menu": None if menu is None else [format_value(choice) for choice in menu],
        "optional": out.optional,
    }


def _menu(out: OutSpec) -> list[Any] | None:
    """The choices a person picks from (``dropdown``/``enum`` outs), None for typed outs."""
    return choice_list(out) if out.type in ("enum", "dropdown") else None


class LiveStage:
    """Observer of one run, its human-turn provider, and the source of the page's state."""

    def __init__(self, chart: FlowChart) -> None:
        self.chart = chart
        self.view: SessionView | None = None
        self.status = "starting"
        self.error: str | None = None
        self._loop = asyncio.get_running_loop()
        self._running: dict[asyncio.Task[Any], tuple[str, str | None]] = {}
        self._last_calls: dict[str, dict[str, Any]] = {}  # actor → its last model call
        self._waiting: dict[int, _Waiting] = {}
        self._numbers = itertools.count(1)
        self._messages = 0
        self._version = 0
        self._changed = asyncio.Event()

    # ------------------------------------------------------------------ the run's side

    def run_opened(self, store: Store, session: int, trace: TraceWriter) -> None:
        self.view = SessionView(store, session)
        self.status = "running"
        store.listen(self._stored)
        trace.listen(self._traced)
        self._touch()

    def run_closing(self, status: str, error: str | None) -> None:
        if self.view is not None:
            self.view.freeze(status)
        self.status, self.error = status, error
        self._running.clear()
        self._touch()

    async def ask(self, request: HumanRequest) -> HumanAnswer:
        """Answer a human turn (the :class:`~fems_runtime.human.HumanProvider` protocol): wait
        until the page sends an answer that fits, as the terminal waits for a line."""
        for out in request.outs:
            if _menu(out) == []:  # as at the terminal: nothing to pick is the script's fault
                raise RunError(f"{request.action}: out {out.label} has no choices to offer")
        waiting = _Waiting(next(self._numbers), request, self._loop.create_future())
        self._waiting[waiting.number] = waiting
        self._touch()
        try:
            return await waiting.answer
        finally:
            del self._waiting[waiting.number]
            self._touch()

    def _stored(self, messages: list[Message]) -> None:
        self._messages += len(messages)
        self._touch()

    def _traced(self, event: Mapping[str, Any]) -> None:
        """Remember each actor's last model call, exactly as sent, and the node each branch
        of the flow is at: steps come from the branch's own task, and a finished branch task
        leaves the picture."""
        if event.get("event") == "llm_call":
            self._last_calls[str(event.get("actor"))] = {
                key: event.get(key) for key in ("action", "model", "messages")
            }
            return
        if event.get("event") != "step":
            return
        try:
            task = asyncio.current_task()
        except RuntimeError:  # written from a worker thread: not a flow step
            return
        if task is None:
            return
        if task not in self._running:
            task.add_done_callback(self._left)
        node = str(event.get("node"))
        self._running[task] = (node, self.chart.node_id(node, event.get("line")))
        self._touch()

    def _left(self, task: asyncio.Task[Any]) -> None:
        self._running.pop(task, None)
        self._touch()

    def _touch(self) -> None:
        """Note a change; safe from any thread (store writes may come from worker threads)."""
        try:
            on_loop = asyncio.get_running_loop() is self._loop
        except RuntimeError:
            on_loop = False
        if on_loop:
            self._bump()
        else:
            self._loop.call_soon_threadsafe(self._bump)

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
            menu = _menu(out)
            if menu is not None:
                index = int(raw) if str(raw).isdigit() else -1
                if not 0 <= index < len(menu):
                    raise AnswerRefused(f"{name}: pick one of the choices")
                taken[out.label] = menu[index]
                continue
            try:
                taken[out.label] = typed_value(out, str(raw).strip(), request.frame)
            except SignalError as error:
                raise AnswerRefused(f"{name}: {error}") from None
        waiting.answer.set_result(HumanAnswer(text, taken))

    def state(self) -> dict[str, Any]:
        """What the page shows besides the messages: status, running nodes, waiting turns,
        and the count of stored messages (a change tells the page to read its view again)."""
        return {
            "status": self.status,
            "error": self.error,
            "messages": self._messages,
            "running": [
                {"node": node, "id": chart_id} for node, chart_id in self._running.values()
            ],
            "waiting": [waiting.to_json() for waiting in self._waiting.values()],
        }

    async def changes(self) -> AsyncIterator[dict[str, Any]]:
        """The state now, then after each change (changes close together are sent as one)."""
        seen = -1
        while True:
            changed = self._changed
            if seen != self._version:
                seen = self._version
                yield self.state()
                await asyncio.sleep(COALESCE_SECONDS)
                continue
            await changed.wait()

    # ------------------------------------------------------------------ as a stage source

    def sessions(self) -> list[dict[str, Any]]:
        return [self.view.summary()] if self.view is not None else []

    def session_view(self, number: int) -> SessionView:
        if self.view is None or self.view.session != number:
            raise KeyError(number)
        return self.view

    def chart_of(self, number: int) -> FlowChart:
        return self.chart

    def last_call(self, seat: str) -> dict[str, Any] | None:
        """The last model call of actor ``seat`` in this run (it is traced, not stored)."""
        return self._last_calls.get(seat)
