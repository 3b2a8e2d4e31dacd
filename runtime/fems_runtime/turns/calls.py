"""One model call of a turn (§13.2a, §13.3, §15.4, §10.7, §17.1): the request cut to the model's
window, the reply streamed (to ``--transcript`` and the stage as it arrives), an `interrupt:`
that cancels it, the warnings about it, and its ``llm_call`` trace event."""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fems_runtime.context import Request, estimate_messages, estimate_tokens, fit_to_window
from fems_runtime.llm import ContextTooLong, ReplyStream
from fems_runtime.longreply import long_reply_watch
from fems_runtime.records import LiveReplyListener, RunError, StreamedReply
from fems_runtime.turns.turn import Turn
from fems_runtime.values import valid_text

if TYPE_CHECKING:
    from fems_runtime.llm import CallResult, ModelChoice
    from fems_runtime.offline import OfflineTurn
    from fems_runtime.specs import InterruptSpec
    from fems_runtime.tools import Tool
    from fems_runtime.transcript import LiveReply

INTERRUPTED = "[Interrupted]"


@dataclass
class CallingTurn(Turn):
    """A turn that calls a model: the offered ``tools``, the model ``choice``, the
    ``request`` of its first call and what later calls carry after it (``added``: tool calls
    and results, rejected replies and feedback), and what its calls ask for and showed."""

    tools: list[Tool] = field(default_factory=list)
    choice: ModelChoice | None = None
    request: Request | None = None
    added: list[dict[str, Any]] = field(default_factory=list)
    halved: int | None = None  # the provider found the context too long: half of it is sent
    effort: str | None = None  # reasoning asked for by `deep_think` (§15.7)
    shown_live: bool = False  # the transcript printed the last call's reply as it arrived

    async def live_call(self, offline: OfflineTurn) -> Answer:
        """One model call as traced and stored: its reply without the reasoning (§13.1), or
        what had arrived when `interrupt:` cut it (§10.7). The context is cut to the model's
        window (§13.2a); a provider that still finds it too long gets half of it, once."""
        assert self.request is not None and self.choice is not None
        await self.services.models.servers.learn(self.choice)  # its window, once (§15.4)
        keep = self.window_keep()
        live = self.live_printer()
        watchers = self.reply_watchers()
        shown: list[LiveReplyListener] = [live, *watchers] if live is not None else [*watchers]
        shown += long_reply_watch(self, watchers)  # an uncapped reply that runs on (§15.4)
        self.shown_live = False
        # what arrives matters only to those who show it and to an interrupt
        watched = bool(shown) or self.spec.interrupt is not None
        try:
            while True:
                messages = [*self.request.messages(keep), *self.added]
                stream = ReplyStream(_fan_out(shown)) if watched else None
                try:
                    call = await self.call(messages, offline, stream)
                    break
                except ContextTooLong as error:
                    if self.halved is not None:
                        raise self.too_long(messages, error) from None
                    keep = self.halved = (self.request.context.count if keep is None else keep) // 2
        except BaseException:  # a failed or cancelled call (join(n), Ctrl-C) leaves no reply
            for watcher in watchers:
                watcher.feed("discard", "")
            raise
        if call is None:
            assert stream is not None  # an interrupt watched it
            answer = Answer(None, _interrupted(stream.text), valid_text(stream.reasoning))
        else:
            answer = Answer(call, valid_text(call.text), valid_text(call.reasoning))
        for watcher in watchers:  # the stored reply replaces it (an interrupt's marker added)
            watcher.finish(answer.text)
        if live is not None and (call is None or not call.tool_calls or answer.text):
            live.finish(answer.text)
            self.shown_live = True
        trimmed = self.request.context.count - keep if keep is not None else 0
        self.trace_call(messages, answer, offline.attempt, trimmed)
        if trimmed:
            self.warn_trimmed(trimmed)
        if call is not None and call.finish_reason == "length":
            self.warn(self.cut_short())
        return answer

    @property
    def max_tokens(self) -> int | None:
        """The reply's cap: the action's, else meta's (§3, §9.2); None: the model map's."""
        own = self.spec.max_tokens
        return own if own is not None else self.services.max_tokens

    def live_printer(self) -> LiveReply | None:
        """Where ``--transcript`` prints the reply as it arrives (§15.4); the offline models
        answer at once, so their replies are printed as stored."""
        transcript = self.services.transcript
        if transcript is None or self.choice is None or self.choice.offline:
            return None
        return transcript.live(self.actor, self.room.names)

    def reply_watchers(self) -> list[LiveReplyListener]:
        """The run's reply watchers (the stage, §17.1), each told that this call starts, with
        its turn, speaker and room, so only the room's seats see it being written. The
        offline models answer at once, so their replies are shown as stored."""
        watchers = self.services.reply_watchers
        if not watchers or self.choice is None or self.choice.offline:
            return []
        room = self.room
        reply = StreamedReply(
            turn=self.id,
            action=self.spec.action,
            node=self.ctx.node,
            speaker=self.actor,
            speaker_soul=room.voice_soul,
            souls=frozenset(room.souls),
            users=frozenset(room.users),
        )
        return [watch(reply) for watch in watchers]

    def window_keep(self) -> int | None:
        """How many context entries the model's window leaves room for (§13.2a); None when
        the window is unknown (everything is sent)."""
        assert self.choice is not None and self.request is not None
        window = self.services.models.window(self.choice)
        if window is None:
            return self.halved
        room = self.reply_room(window)
        schemas = [tool.schema() for tool in self.tools]
        budget = window - room - (estimate_tokens(json.dumps(schemas)) if schemas else 0)
        model = self.choice.model
        keep = fit_to_window(
            self.request,
            self.added,
            budget,
            lambda: f"model {model}'s window of {window} tokens less {room} for the reply",
        )
        return keep if self.halved is None else min(keep, self.halved)

    def reply_room(self, window: int) -> int:
        """Tokens kept free for the reply: its cap, else a quarter of the window."""
        assert self.choice is not None
        cap = self.max_tokens or self.choice.options.get("max_tokens")
        return int(cap) if cap else window // 4

    def too_long(self, messages: list[dict[str, Any]], error: ContextTooLong) -> RunError:
        """The provider refused half the context too: say what was sent and to which window."""
        assert self.choice is not None
        window = self.services.models.window(self.choice)
        return RunError(
            f"model {self.choice.model} refuses the request as longer than its context window "
            f"({window if window is not None else 'unknown'} tokens) even with half the "
            f"context: about {estimate_messages(messages)} tokens were sent ({error.detail}); "
            "set context_window in its model-map entry, or shorten the prompt and memory"
        )

    def warn_trimmed(self, trimmed: int) -> None:
        """Trimming is warned once per actor (§13.2a); the trace counts every call's."""
        assert self.choice is not None
        if self.services.warned_once("window", self.actor):
            return
        window = self.services.models.window(self.choice)
        self.warn(
            f"the context of {self.actor} is longer than model {self.choice.model}'s window "
            f"({window} tokens): the oldest messages are left out ({trimmed} on this call)"
        )

    def cut_short(self) -> str:
        """The warning for a reply that ended at its length cap (§15.4)."""
        assert self.choice is not None
        cap = self.max_tokens or self.choice.options.get("max_tokens")
        limit = f"max_tokens ({cap})" if cap else "the model's length limit"
        return f"the reply of {self.actor} was cut at {limit}: raise max_tokens or ask for less"

    async def call(
        self, messages: list[dict[str, Any]], offline: OfflineTurn, stream: ReplyStream | None
    ) -> CallResult | None:
        """One model call, filling ``stream`` as the reply arrives; None when `interrupt:`
        fired first (the call is cancelled, which closes its stream, §10.7). The module's
        meta.delay spaces it (§3); the offered tools go with it (§15.5)."""
        assert self.choice is not None
        schemas = [tool.schema() for tool in self.tools]
        request = self.services.models.complete(
            self.choice,
            messages,
            offline,
            self.ctx.delay,
            schemas,
            stream=stream,
            max_tokens=self.max_tokens,
            reasoning=self.effort,
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

    def trace_call(
        self, messages: list[dict[str, Any]], answer: Answer, attempt: int, trimmed: int
    ) -> None:
        services = self.services
        services.model_calls += 1
        if not services.trace.active:
            return  # the event (the scope sorted, the tool calls as messages) is not built
        assert self.choice is not None
        call = answer.call
        services.trace.write(
            "llm_call",
            node=self.ctx.node,
            action=self.spec.action,
            turn=self.id,
            actor=self.actor,
            scope=self.room.names,
            model=self.choice.model,
            messages=messages,
            reply=answer.text,
            reasoning=answer.reasoning,
            attempt=attempt,
            trimmed=trimmed,
            interrupted=call is None,
            tries=call.attempts if call else None,
            prompt_tokens=call.prompt_tokens if call else None,
            completion_tokens=call.completion_tokens if call else None,
            reasoning_tokens=call.reasoning_tokens if call else None,
            finish_reason=call.finish_reason if call else None,
            cost=call.cost if call else None,
            tool_calls=[c.as_message() for c in call.tool_calls] if call else [],
        )


@dataclass(frozen=True)
class Answer:
    """One model call as the turn stores and traces it: the reply text and the reasoning cut
    out of it; ``call`` None when `interrupt:` cut the call."""

    call: CallResult | None
    text: str
    reasoning: str


def _fan_out(shown: Sequence[LiveReplyListener]) -> Callable[[str, str], None] | None:
    """The stream's listener: every piece to each of ``shown`` (None: nobody shows it)."""
    if len(shown) <= 1:
        return shown[0].feed if shown else None

    def feed(kind: str, chunk: str) -> None:
        for listener in shown:
            listener.feed(kind, chunk)

    return feed


def _interrupted(received: str) -> str:
    """What an interrupted call stores: the text that had arrived, marked (§10.7)."""
    text = valid_text(received).rstrip()
    return f"{text} {INTERRUPTED}" if text else INTERRUPTED
