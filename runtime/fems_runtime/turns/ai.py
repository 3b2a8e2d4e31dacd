"""An `@ai` turn (§9, §10, §13, §15.5): the model calls of each attempt (tool rounds first, then
the reply), the signals read from the reply, the validation loop, and their records (§16.4)."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from fems_runtime.context import (
    Request,
    estimate_messages,
    estimate_tokens,
    fit_to_window,
    model_request,
    retry_messages,
)
from fems_runtime.llm import ContextTooLong, ReplyStream
from fems_runtime.offline import OfflineTurn, named_actors, offline_out
from fems_runtime.records import RunError
from fems_runtime.signals import aapply_signals
from fems_runtime.specs import TurnResult
from fems_runtime.store import NewMessage
from fems_runtime.tools import Tool, ToolCall, ToolOutcome, offered_names
from fems_runtime.turns.turn import Room, Turn, Verdict, finish
from fems_runtime.values import valid_text

if TYPE_CHECKING:
    from fems_runtime.flow import Context
    from fems_runtime.llm import CallResult, ModelChoice
    from fems_runtime.specs import InterruptSpec, TurnSpec
    from fems_runtime.transcript import LiveReply
    from fems_runtime.turns.services import TurnServices

INTERRUPTED = "[Interrupted]"
DEEP_THINK = "deep_think"  # in `tools:`, asks the model to reason (§15.7)


async def run_ai_turn(
    services: TurnServices, ctx: Context, spec: TurnSpec, room: Room | None = None
) -> TurnResult:
    """Run an `@ai` turn; ``room`` when the caller has resolved it already (a mind turn)."""
    turn = AiTurn.start(services, ctx, spec, room)
    await turn.begin()
    return await turn.play()


@dataclass
class AiTurn(Turn):
    """An AI turn and its model calls: each attempt's tool rounds and reply (§10.6, §15.5).

    ``first`` is the turn's first record when a resumed run replays it. ``request`` is
    what the first call sends (built when the turn first goes live), ``added`` what later calls
    carry after them: tool calls and results, rejected replies and feedback. ``unsaved`` are
    messages stored with the next record, ``outputs`` what memory/context methods wrote (kept
    in the turn's first record, for ``--resume``).
    """

    tools: list[Tool] = field(default_factory=list)
    choice: ModelChoice | None = None
    first: Mapping[str, Any] | None = None
    request: Request | None = None
    halved: int | None = None  # the provider found the context too long: half of it is sent
    added: list[dict[str, Any]] = field(default_factory=list)
    unsaved: list[NewMessage] = field(default_factory=list)
    outputs: list[tuple[str, Any]] = field(default_factory=list)
    saved: bool = False
    effort: str | None = None  # reasoning asked for by `deep_think` (§15.7)
    shown_live: bool = False  # the transcript printed the last call's reply as it arrived

    async def begin(self) -> None:
        """Take the turn's id and the values its methods wrote from its first record when it
        is replayed (§16.4), else a new id and the first call's messages."""
        services, room = self.services, self.room
        names = offered_names(room.executor_spec.tools, services.all_tools)
        self.choice = services.models.resolve(self.spec.model, room.executor_spec.source)
        if DEEP_THINK in names:  # not a tool: a request to reason, unless the model map's
            names = tuple(name for name in names if name != DEEP_THINK)
            self.effort = None if self.choice.options.get("reasoning") else "medium"
        self.tools = services.toolbox.tools(names) if names else []
        # its first record is its first tool round's when it called tools, else its reply's
        log = services.log
        self.first = (log.peek(_round_key(self.key, 0)) if self.tools else None) or log.peek(
            self.key
        )
        if self.first is not None:
            self.id = int(self.first["turn"])
            for name, value in self.first["result"].get("outputs", ()):
                self.frame.assign(name, "=", self.frame.variables.adopt(value))
        else:
            self.id = services.new_turn()
            self.request = await model_request(self, self.outputs)
        self.unsaved = self.opening_messages()

    async def play(self) -> TurnResult:
        """Call, read the signals, check them; retry with feedback while the action allows."""
        spec, frame = self.spec, self.frame
        base = self.offline_turn()
        result = TurnResult()
        attempt = 0
        while True:
            offline = base if attempt == 0 else replace(base, attempt=attempt)
            reply, interrupted = await self.reply(offline, result)
            result.reply = reply
            if interrupted:
                result.interrupted = True
                return result
            outcome = await aapply_signals(reply, frame, spec.outs)
            verdict = await self.check(reply, outcome)
            if not verdict.problems:
                return finish(result, outcome)
            if not spec.strict:
                self.report(verdict.problems)
                return finish(result, outcome)
            outcome.rollback()
            result.rejected = outcome.SET_VARIABLE
            if attempt >= (spec.max_retries or 0):
                return await self.give_up(reply, verdict, result)
            attempt += 1
            self.retry_with(reply, verdict)

    def retry_with(self, reply: str, verdict: Verdict) -> None:
        """The next attempt carries the rejected reply and the feedback; the feedback is stored
        with the next reply, visible to the executor only (§13.1)."""
        note = _feedback_text(verdict.shown)
        self.unsaved.append(self.message("feedback", note, scope="executor", speaker=False))
        self.added = retry_messages(self.added, reply, note)

    async def give_up(self, reply: str, verdict: Verdict, result: TurnResult) -> TurnResult:
        """Retries exhausted: run the fallback, or stop the run naming action, reply and problem."""
        services, spec, problems = self.services, self.spec, verdict.problems
        node = self.ctx.node
        services.trace.write(
            "rejected",
            node=node,
            action=spec.action,
            actor=self.actor,
            problems=problems,
            final=True,
        )
        if spec.fallback is None:
            shown = reply if len(reply) <= 500 else reply[:500] + "…"
            raise RunError(
                f"action {spec.action}: no valid reply from {self.actor} after {result.calls} "
                f"call(s); last reply: {shown!r}; problem: {'; '.join(problems)}"
            )
        services.trace.write("fallback", node=node, action=spec.action, actor=self.actor)
        await spec.fallback()
        result.fell_back = True
        return result

    def offline_turn(self) -> OfflineTurn:
        """What `fems/mock` and `fems/script` may know: outs, current values, candidate actors.

        Candidates are the actors the rendered prompt names, else the others in scope (§15.3).
        """
        room, frame = self.room, self.frame
        others = [str(a) for a in room.actors if a != room.voice]
        candidates = named_actors(self.texts.shown, frame) or others or [self.actor]
        outs = tuple(offline_out(out, frame) for out in self.spec.outs or ())
        return OfflineTurn(self.spec.action, self.actor, self.id, 0, outs, tuple(candidates))

    # ------------------------------------------------------------------ one attempt

    async def reply(self, offline: OfflineTurn, result: TurnResult) -> tuple[str, bool]:
        """The attempt's final reply (and whether `interrupt:` cut it), replayed from the
        session's records or live; tool rounds come first, each one recorded (§16.4)."""
        services, spec, attempt = self.services, self.spec, offline.attempt
        limit = spec.max_tool_rounds
        if limit is None:
            limit = services.max_tool_rounds
        rounds = 0
        while True:
            record = services.log.recorded(_round_key(self.key, rounds), attempt)
            if record is None:
                record = services.log.recorded(self.key, attempt)
            if record is not None:
                self.replay(offline, record)
                result.calls += 1
                if "calls" not in record["result"]:
                    return str(record["result"]["reply"]), bool(record["result"].get("interrupted"))
                rounds += 1
                continue
            answer = await self.live_call(offline)
            result.calls += 1
            call = answer.call
            self.keep_reasoning(answer)
            if call is None or not call.tool_calls:
                self.unsaved.append(self.shown(self.message("reply", answer.text, call=call)))
                done = {"reply": answer.text, "interrupted": call is None}
                self.save_call(done, self.key, attempt)
                return answer.text, call is None
            if rounds >= limit:
                raise RunError(
                    f"action {spec.action}: the model still calls tools after {limit} rounds "
                    f"(max_tool_rounds {limit}); raise max_tool_rounds or ask for an answer"
                )
            await self.run_tools(call, rounds, attempt)
            rounds += 1

    def replay(self, offline: OfflineTurn, record: Mapping[str, Any]) -> None:
        """A recorded call of a resumed run: nothing is stored again, the conversation gets
        its tool round, and a ``fems/script`` reply is consumed as the first run did."""
        self.trace_replay(offline.attempt)
        script = getattr(self.services.models, "script", None)
        if self.choice is not None and self.choice.model == "fems/script" and script is not None:
            with contextlib.suppress(RunError):  # the recorded reply stands
                script.reply(offline)
        self.unsaved = []  # stored by the interrupted run
        done = record["result"]
        if "calls" in done:
            calls = [ToolCall(c["id"], c["name"], c["arguments"]) for c in done["calls"]]
            outcomes = [
                ToolOutcome(call, c["tool"], c["result"])
                for call, c in zip(calls, done["calls"], strict=True)
            ]
            self.added += _tool_messages(str(done.get("text", "")), outcomes)

    async def live_call(self, offline: OfflineTurn) -> Answer:
        """One model call as traced and stored: its reply without the reasoning (§13.1), or
        what had arrived when `interrupt:` cut it (§10.7). The context is cut to the model's
        window (§13.2a); a provider that still finds it too long gets half of it, once."""
        if self.request is None:  # earlier calls were replayed: rebuild what was sent
            before = self.first.get("before") if self.first is not None else None
            self.request = await model_request(self, self.outputs, last=before)
        keep = self.window_keep()
        live = self.live_printer()
        self.shown_live = False
        while True:
            messages = [*self.request.messages(keep), *self.added]
            stream = ReplyStream(live.feed if live is not None else None)
            try:
                call = await self.call(messages, offline, stream)
                break
            except ContextTooLong as error:
                if self.halved is not None:
                    raise self.too_long(messages, error) from None
                keep = self.halved = (self.request.context.count if keep is None else keep) // 2
        if call is None:
            answer = Answer(None, _interrupted(stream.text), valid_text(stream.reasoning))
        else:
            answer = Answer(call, valid_text(call.text), valid_text(call.reasoning))
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

    def live_printer(self) -> LiveReply | None:
        """Where ``--transcript`` prints the reply as it arrives (§15.4); the offline models
        answer at once, so their replies are printed as stored."""
        transcript = self.services.transcript
        if transcript is None or self.choice is None or self.choice.offline:
            return None
        return transcript.live(self.actor, self.room.names)

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
        cap = self.spec.max_tokens or self.choice.options.get("max_tokens")
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
        cap = self.spec.max_tokens or self.choice.options.get("max_tokens")
        limit = f"max_tokens ({cap})" if cap else "the model's length limit"
        return f"the reply of {self.actor} was cut at {limit}: raise max_tokens or ask for less"

    async def call(
        self, messages: list[dict[str, Any]], offline: OfflineTurn, stream: ReplyStream
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
            max_tokens=self.spec.max_tokens,
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

    def keep_reasoning(self, answer: Answer) -> None:
        """The call's reasoning is stored with the executor's soul only: it is in nobody's
        context, the executor's later turns included (§13.1)."""
        if answer.reasoning:
            thought = self.message("reasoning", answer.reasoning, scope="executor")
            self.unsaved.append(self.shown(thought))

    def shown(self, message: NewMessage) -> NewMessage:
        """``message``, noted as printed already when the transcript showed its call live."""
        if self.shown_live:
            self.printed.append(message)
        return message

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

    async def run_tools(self, call: CallResult, rounds: int, attempt: int) -> None:
        """Run the calls of one reply in order, store them with their results, and add them
        to the conversation (§15.5)."""
        services, spec = self.services, self.spec
        outcomes = []
        for tool_call in call.tool_calls:
            outcome = await services.toolbox.call(self.tools, tool_call)
            services.trace.write(
                "tool_call",
                node=self.ctx.node,
                action=spec.action,
                actor=self.actor,
                name=outcome.tool,
                arguments=tool_call.arguments,
                result=outcome.result,
                round=rounds,
                attempt=attempt,
            )
            outcomes.append(outcome)
        for index, outcome in enumerate(outcomes):
            said = valid_text(f"{outcome.tool}({outcome.call.arguments})")
            usage = call if index == 0 else None  # the model call's figures, stored once
            self.unsaved.append(self.message("tool_call", said, call=usage))
            self.unsaved.append(self.message("tool_result", outcome.result, name=outcome.tool))
        done: dict[str, Any] = {"text": call.text, "calls": [_done_call(o) for o in outcomes]}
        self.save_call(done, _round_key(self.key, rounds), attempt)
        self.added += _tool_messages(call.text, outcomes)

    def save_call(self, done: dict[str, Any], key: Sequence[Any], attempt: int) -> None:
        """Store the unsaved messages with the record of one call; the turn's first record
        keeps what its memory/context methods wrote."""
        if not self.saved and self.outputs:
            done["outputs"] = [list(pair) for pair in self.outputs]
        self.saved = True
        self.save(self.unsaved, done, key=key, attempt=attempt)
        self.unsaved = []


@dataclass(frozen=True)
class Answer:
    """One model call as the turn stores and traces it: the reply text and the reasoning cut
    out of it; ``call`` None when `interrupt:` cut the call."""

    call: CallResult | None
    text: str
    reasoning: str


def _interrupted(received: str) -> str:
    """What an interrupted call stores: the text that had arrived, marked (§10.7)."""
    text = valid_text(received).rstrip()
    return f"{text} {INTERRUPTED}" if text else INTERRUPTED


def _round_key(key: Sequence[Any], rounds: int) -> list[Any]:
    """The record key of a turn's tool round: the turn's key, then ``tools`` and the round."""
    return [*key, "tools", rounds]


def _done_call(outcome: ToolOutcome) -> dict[str, Any]:
    """One tool call and its result as the round's record keeps it."""
    call = outcome.call
    return {
        "id": call.id,
        "name": call.name,
        "arguments": call.arguments,
        "tool": outcome.tool,
        "result": outcome.result,
    }


def _tool_messages(text: str, outcomes: Sequence[ToolOutcome]) -> list[dict[str, Any]]:
    """A tool round as the next call carries it: the assistant's calls, then one ``tool``
    message per result (OpenAI protocol)."""
    asked = {
        "role": "assistant",
        "content": text or None,
        "tool_calls": [o.call.as_message() for o in outcomes],
    }
    return [asked, *(o.as_message() for o in outcomes)]


def _feedback_text(problems: Sequence[str]) -> str:
    lines = ["Your previous reply could not be accepted:"]
    lines += [f"- {p}" for p in problems]
    lines.append("Answer again; set each required variable with SET VARIABLE: <<name = value>>.")
    return "\n".join(lines)
