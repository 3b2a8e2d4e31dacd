"""One model call of a turn (§13.2a, §13.3, §15.4, §10.7, §17.1): what the turn's calls share,
worked out once (:class:`ModelSetup`), what one call sends (:class:`CallPlan`), and the live
call itself: the request cut to the model's window, the reply streamed (as events, to
``--transcript`` and the stage), an `interrupt:` that cancels it, the warnings about it, and its
events (:mod:`fems_runtime.events`). A live call knows nothing of turn records: whether a call is made at
all is decided before (:mod:`fems_runtime.turns.ai`)."""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fems_runtime.context import Request, estimate_messages, estimate_tokens, fit_to_window
from fems_runtime.llm import ContextTooLong
from fems_runtime.records import RunError
from fems_runtime.replies import LongReplyWatch, Piece, ReplyStream, long_reply_warning
from fems_runtime.tools import offered_names
from fems_runtime.turn_events import (
    chunk_listener,
    model_call_began,
    model_call_ended,
    model_call_failed,
)
from fems_runtime.turns.shared import HeldCall
from fems_runtime.turns.turn import Turn
from fems_runtime.values import valid_text

if TYPE_CHECKING:
    from fems_runtime.events import ModelCallBegan
    from fems_runtime.llm import CallResult, ModelChoice
    from fems_runtime.offline import OfflineTurn
    from fems_runtime.specs import InterruptSpec, TurnSpec
    from fems_runtime.tools import Tool
    from fems_runtime.turns.shared import SharedServices
    from fems_runtime.variables import ActorSpec

INTERRUPTED = "[Interrupted]"
DEEP_THINK = "deep_think"  # in `tools:`, asks the model to reason (§15.7)


@dataclass(frozen=True)
class ModelSetup:
    """What every call of one turn shares, worked out once when the turn starts: the model
    ``choice``, the offered ``tools`` and their ``schemas`` (the ``tools`` request parameter,
    §15.5), the reasoning ``effort`` asked by `deep_think` (§15.7), the reply's cap
    (``max_tokens``: the action's, else meta's, §3, §9.2; ``cap``: that or the model map's),
    and the model's ``window`` (§13.2a, None: unknown). A local server that its entry leaves
    to say its window and slots is asked first, once per run (§15.4); a turn with
    `interrupt:` leaves the asking to its call, which the interrupt can cut."""

    choice: ModelChoice
    tools: tuple[Tool, ...] = ()
    schemas: tuple[Mapping[str, Any], ...] = ()
    effort: str | None = None
    max_tokens: int | None = None
    cap: int | None = None
    window: int | None = None

    @classmethod
    async def of(cls, services: SharedServices, spec: TurnSpec, executor: ActorSpec) -> ModelSetup:
        choice = services.models.resolve(spec.model, executor.source)
        if spec.interrupt is None:  # an interrupt must cut the wait: its call asks instead
            await services.models.servers.learn(choice)  # a local server's window (§15.4)
        names = offered_names(executor.tools, services.all_tools) if executor.tools else ()
        effort = None
        if DEEP_THINK in names:  # not a tool: a request to reason, unless the model map's
            names = tuple(name for name in names if name != DEEP_THINK)
            effort = None if choice.options.get("reasoning") else "medium"
        tools = tuple(await services.toolbox.tools(names)) if names else ()
        own = spec.max_tokens if spec.max_tokens is not None else services.max_tokens
        cap = own or choice.options.get("max_tokens")
        return cls(
            choice,
            tools,
            tuple(tool.schema() for tool in tools),
            effort,
            own,
            int(cap) if cap else None,
            services.models.window(choice),
        )

    def reply_room(self, window: int) -> int:
        """Tokens kept free for the reply: its cap, else a quarter of the window."""
        return self.cap or window // 4

    def keep(self, request: Request, added: Sequence[Mapping[str, Any]]) -> int | None:
        """How many context entries the model's window leaves room for (§13.2a); None when
        the window is unknown (everything is sent)."""
        window = self.window
        if window is None:
            return None
        room = self.reply_room(window)
        schemas = self.schemas
        budget = window - room - (estimate_tokens(json.dumps(list(schemas))) if schemas else 0)
        model = self.choice.model
        return fit_to_window(
            request,
            added,
            budget,
            lambda: f"model {model}'s window of {window} tokens less {room} for the reply",
        )


@dataclass(frozen=True)
class CallPlan:
    """What one call sends: the turn's first ``request``, what later calls carry after it
    (``added``: tool calls and results, rejected replies and feedback), and how many of the
    context's newest entries fit the window (``keep``, None: all)."""

    request: Request
    added: tuple[dict[str, Any], ...]
    keep: int | None

    def messages(self, keep: int | None, *, context: bool = True) -> list[dict[str, Any]]:
        return [*self.request.messages(keep, context=context), *self.added]


@dataclass(frozen=True)
class Answer:
    """One model call as the turn stores and traces it: the reply text and the reasoning cut
    out of it; ``call`` None when `interrupt:` cut the call; ``streamed``, the id of the call's
    event when the reply streamed to the run's listeners (who show it as it arrives, and know
    its stored messages by that id)."""

    call: CallResult | None
    text: str
    reasoning: str
    streamed: int | None = None


@dataclass
class CallingTurn(Turn):
    """A turn that calls a model: its :class:`ModelSetup`, and ``halved``, half the context
    once the provider found it too long (kept for the turn's later calls)."""

    setup: ModelSetup = field(kw_only=True)
    halved: int | None = field(default=None, kw_only=True)

    async def live_call(self, plan: CallPlan, offline: OfflineTurn | None, attempt: int) -> Answer:
        """One model call as traced and stored: its reply without the reasoning (§13.1), or
        what had arrived when `interrupt:` cut it (§10.7). The context is cut to the model's
        window (§13.2a); a provider that still finds it too long gets half of it, once."""
        keep = plan.keep
        messages = plan.messages(keep, context=self.context_read())
        debugger = self.services.debugger
        if debugger is not None:  # held here, before the call (and its timeout) starts
            await debugger.before_call(self.held_call(messages))
        began = None
        listener: Callable[[Piece, str], None] | None = None
        if self.services.events.active:
            began = model_call_began(self, messages, attempt)
            listener = chunk_listener(self, began) if began.streamed else None
        streamed = began.id if began is not None and listener is not None else None
        if self.setup.cap is None and not self.setup.choice.offline:  # may run long (§15.4)
            listener = LongReplyWatch(functools.partial(self.say_long_reply, began), listener)
        # what arrives matters only to those who show it and to an interrupt
        watched = listener is not None or self.spec.interrupt is not None
        try:
            while True:
                stream = ReplyStream(listener) if watched else None
                try:
                    call = await self.call(messages, offline, stream)
                    break
                except ContextTooLong as error:
                    if self.halved is not None:
                        raise self.too_long(messages, error) from None
                    count = plan.request.context.count
                    keep = self.halved = (count if keep is None else keep) // 2
                    messages = plan.messages(keep)
        except BaseException as error:  # a failed or cancelled call (join(n), Ctrl-C)
            if began is not None:
                model_call_failed(self, began, error)
            raise
        if call is not None:
            answer = Answer(call, valid_text(call.text), valid_text(call.reasoning), streamed)
        else:  # an interrupt cut it, which watched the stream
            received = stream or ReplyStream()
            text, reasoning = _interrupted(received.text), valid_text(received.reasoning)
            answer = Answer(None, text, reasoning, streamed)
        trimmed = plan.request.context.count - keep if keep is not None else 0
        self.services.model_calls += 1
        if began is not None:
            model_call_ended(self, began, answer, messages, trimmed)
        if debugger is not None:
            debugger.called(self.spec, answer.text, answer.reasoning)
        if trimmed:
            self.warn_trimmed(trimmed)
        if call is not None and call.finish_reason == "length":
            self.warn(self.cut_short())
        return answer

    def context_read(self) -> bool:
        """Whether anything reads the context that a call's messages carry: a model on the
        network, a debugger, a listener of what calls send (the trace, the stage). An
        offline model reads none (`fems/mock` looks at the messages' roles only), and
        joining the actor's whole context for it at every turn made a long run's turns ever
        slower."""
        services = self.services
        offline = self.setup.choice.offline
        return not offline or services.debugger is not None or services.events.reads_sent

    def held_call(self, messages: list[dict[str, Any]], recorded: str | None = None) -> HeldCall:
        """This turn's call as a debugger holds it (``recorded``: the reply it replays)."""
        model = self.setup.choice.model
        return HeldCall(
            self.ctx, self.spec, self.id, self.actor, model, self.texts.prompt, messages, recorded
        )

    def plan(self, request: Request, added: Sequence[dict[str, Any]]) -> CallPlan:
        """The next call: what it sends, and how much of the context fits the window (less
        when the provider refused a longer one, §13.2a)."""
        keep = self.setup.keep(request, added)
        if self.halved is not None:
            keep = self.halved if keep is None else min(keep, self.halved)
        return CallPlan(request, tuple(added), keep)

    def too_long(self, messages: list[dict[str, Any]], error: ContextTooLong) -> RunError:
        """The provider refused half the context too: say what was sent and to which window."""
        window = self.setup.window
        return RunError(
            f"model {self.setup.choice.model} refuses the request as longer than its context "
            f"window ({window if window is not None else 'unknown'} tokens) even with half the "
            f"context: about {estimate_messages(messages)} tokens were sent ({error.detail}); "
            "set context_window in its model-map entry, or shorten the prompt and memory"
        )

    def warn_trimmed(self, trimmed: int) -> None:
        """Trimming is warned once per actor (§13.2a); the trace counts every call's."""
        if self.services.warned_once("window", self.actor):
            return
        self.warn(
            f"the context of {self.actor} is longer than model {self.setup.choice.model}'s "
            f"window ({self.setup.window} tokens): the oldest messages are left out "
            f"({trimmed} on this call)"
        )

    def say_long_reply(self, began: ModelCallBegan | None, tokens: int, seconds: float) -> None:
        """This reply, with no cap, has run long (§15.4): said inside its call (``began``,
        when the run has events) and as a run warning that cannot wait for the run's end."""
        problem = long_reply_warning(self.actor, self.spec.action, tokens, seconds)
        self.warn(problem, inside=None if began is None else began.id, at_once=True)

    def cut_short(self) -> str:
        """The warning for a reply that ended at its length cap (§15.4)."""
        cap = self.setup.cap
        limit = f"max_tokens ({cap})" if cap else "the model's length limit"
        return f"the reply of {self.actor} was cut at {limit}: raise max_tokens or ask for less"

    async def call(
        self,
        messages: list[dict[str, Any]],
        offline: OfflineTurn | None,
        stream: ReplyStream | None,
    ) -> CallResult | None:
        """One model call, filling ``stream`` as the reply arrives; None when `interrupt:`
        fired first (the call is cancelled, which closes its stream, §10.7). The module's
        meta.delay spaces it (§3); the offered tools go with it (§15.5)."""
        setup = self.setup
        request = self.services.models.complete(
            setup.choice,
            messages,
            offline,
            self.ctx.delay,
            setup.schemas,
            stream=stream,
            max_tokens=setup.max_tokens,
            reasoning=setup.effort,
        )
        interrupt = self.spec.interrupt
        if interrupt is None:
            return await request
        call = asyncio.ensure_future(request)
        watch = asyncio.ensure_future(self._interrupt_fired(interrupt))
        try:
            await asyncio.wait({call, watch}, return_when=asyncio.FIRST_COMPLETED)
            return call.result() if call.done() else None
        finally:
            for task in (call, watch):
                task.cancel()
            await asyncio.gather(call, watch, return_exceptions=True)

    async def _interrupt_fired(self, interrupt: InterruptSpec) -> None:
        if interrupt.kind in ("human", "human_except"):
            await self.services.inputs.wait(interrupt.actors)
            return
        if interrupt.check is None:
            raise RunError("interrupt: a check form needs a check function")
        while True:
            await asyncio.sleep(self.services.poll)
            fired = interrupt.check()
            if inspect.isawaitable(fired):
                fired = await fired
            if fired:
                return


def _interrupted(received: str) -> str:
    """What an interrupted call stores: the text that had arrived, marked (§10.7)."""
    text = valid_text(received).rstrip()
    return f"{text} {INTERRUPTED}" if text else INTERRUPTED
