"""An `@ai` turn (§9, §10, §13, §15.5): the model calls of each attempt (tool rounds first, then
the reply), the signals read from the reply, the validation loop, and their records (§16.4)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from fems_runtime.context import model_request, retry_messages
from fems_runtime.events import FallbackTaken, ReplyRejected
from fems_runtime.lineage import model_options, request_digest
from fems_runtime.offline import OfflineTurn, named_actors, offline_out
from fems_runtime.records import RunError
from fems_runtime.signals import aapply_signals
from fems_runtime.specs import TurnResult
from fems_runtime.store import NewMessage
from fems_runtime.tools import ToolCall, ToolOutcome, offered_names
from fems_runtime.turn_events import emit_point, tool_call_began, tool_call_ended
from fems_runtime.turns.calls import Answer, CallingTurn
from fems_runtime.turns.turn import Room, Verdict, finish
from fems_runtime.values import valid_text

if TYPE_CHECKING:
    from fems_runtime.flow import Context
    from fems_runtime.llm import CallResult
    from fems_runtime.specs import TurnSpec
    from fems_runtime.turns.shared import SharedServices

DEEP_THINK = "deep_think"  # in `tools:`, asks the model to reason (§15.7)


async def run_ai_turn(
    services: SharedServices, ctx: Context, spec: TurnSpec, room: Room | None = None
) -> TurnResult:
    """Run an `@ai` turn; ``room`` when the caller has resolved it already (a mind turn)."""
    turn = AiTurn.start(services, ctx, spec, room)
    await turn.begin()
    return await turn.play()


@dataclass
class AiTurn(CallingTurn):
    """An AI turn: each attempt's tool rounds and reply, the validation loop (§10.6, §15.5)
    and the records of its calls (§16.4).

    ``first`` is the turn's first record when a resumed run replays it; the ``request`` is
    built when the turn first goes live. ``unsaved`` are messages stored with the next record,
    ``outputs`` what memory/context methods wrote (kept in the turn's first record).
    """

    first: Mapping[str, Any] | None = None
    sent: str | None = None  # the digest of the live call's request (§16.4a)
    unsaved: list[NewMessage] = field(default_factory=list)
    outputs: list[tuple[str, Any]] = field(default_factory=list)
    saved: bool = False

    async def begin(self) -> None:
        """Take the turn's id and the values its methods wrote from its first record when it
        is replayed (§16.4), else a new id and the first call's messages; a reuse compares
        those with its parent's record, whose turn number the turn takes meanwhile (§16.4a)."""
        services, room = self.services, self.room
        names = offered_names(room.executor_spec.tools, services.all_tools)
        self.choice = services.models.resolve(self.spec.model, room.executor_spec.source)
        if DEEP_THINK in names:  # not a tool: a request to reason, unless the model map's
            names = tuple(name for name in names if name != DEEP_THINK)
            self.effort = None if self.choice.options.get("reasoning") else "medium"
        self.tools = await services.toolbox.tools(names) if names else []
        # its first record is its first tool round's when it called tools, else its reply's
        log = services.log
        first_key = _round_key(self.key, 0) if self.tools else self.key
        self.first = (log.peek(first_key) if self.tools else None) or log.peek(self.key)
        if self.first is not None:
            self.id = int(self.first["turn"])
            for name, value in self.first["result"].get("outputs", ()):
                self.frame.assign(name, "=", self.frame.variables.adopt(value))
        else:
            candidate = log.candidate(first_key) if log.compares else None
            if candidate is not None:
                self.id = int(candidate["turn"])
                log.turns.add(self.id)
            else:
                self.id = services.new_turn()
            self.request = await model_request(self, self.outputs)
        self.unsaved = self.opening_messages()

    async def play(self) -> TurnResult:
        """Call, read the signals, check them; retry with feedback while the action allows."""
        spec, frame = self.spec, self.frame
        base = self.offline_turn()
        result = TurnResult(turn=self.id)
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
        if services.events.active:
            emit_point(self, ReplyRejected, problems=tuple(problems), final=True)
        if spec.fallback is None:
            shown = reply if len(reply) <= 500 else reply[:500] + "…"
            raise RunError(
                f"action {spec.action}: no valid reply from {self.actor} after {result.calls} "
                f"call(s); last reply: {shown!r}; problem: {'; '.join(problems)}"
            )
        if services.events.active:
            emit_point(self, FallbackTaken)
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
            record = await self.recorded_call(offline, rounds)
            if record is not None:
                self.replay(offline, record)
                result.calls += 1
                if "calls" not in record["result"]:
                    return str(record["result"]["reply"]), bool(record["result"].get("interrupted"))
                rounds += 1
                continue
            services.log.going_live()  # first: what a fork took is stored, its `before` known
            await self.rebuild_request()
            self.sent = self.request_digest(offline)
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

    async def recorded_call(self, offline: OfflineTurn, rounds: int) -> Mapping[str, Any] | None:
        """The record of the call about to be made (a tool round's, else the reply's), or None:
        it goes live. A reuse compares what the call would send with its parent's record."""
        log, attempt = self.services.log, offline.attempt
        record = log.recorded(_round_key(self.key, rounds), attempt) or log.recorded(
            self.key, attempt
        )
        if record is None and log.compares:
            await self.rebuild_request()
            digest = self.request_digest(offline)
            record = log.recorded(_round_key(self.key, rounds), attempt, digest) or log.recorded(
                self.key, attempt, digest
            )
        if record is not None and rounds == 0 and attempt == 0:
            self.first = record  # as stored in this session (a fork's copy: its numbering)
        return record

    async def rebuild_request(self) -> None:
        """Earlier calls were replayed: build what the first call sent, from the messages
        stored before the turn."""
        if self.request is None:
            before = self.first.get("before") if self.first is not None else None
            self.request = await model_request(self, self.outputs, last=before)

    def request_digest(self, offline: OfflineTurn) -> str:
        """The digest of the call about to be made (§16.4a): what the model is sent and how,
        and for an offline model what its reply depends on."""
        assert self.choice is not None and self.request is not None
        choice = self.choice
        mock = choice.model == "fems/mock"
        return request_digest(
            {
                "kind": "ai",
                "action": self.spec.action,
                "executor": str(self.room.executor),
                "actor": self.actor,
                "model": choice.model,
                "options": model_options(choice.options),
                "max_tokens": self.max_tokens,
                "reasoning": self.effort,
                "tools": [tool.schema() for tool in self.tools],
                "sent": self.sent_parts(),
                "offline": repr(offline) if choice.offline else None,
                "seed": self.services.models.mock.seed if mock else None,
            }
        )

    def sent_parts(self) -> dict[str, Any]:
        """What decides the messages the call sends (the system text, the context as a digest
        and how much of it fits, memory, prompt, what later calls add): the same parts send
        the same messages, and the context, the longest part, is hashed once as it grows."""
        assert self.request is not None
        request, context = self.request, self.request.context
        return {
            "system": request.system,
            "context": self.services.log.contexts.digest(context.text, context.starts),
            "entries": context.count,
            "keep": self.window_keep(),
            "memory": request.memory,
            "prompt": request.prompt,
            "added": self.added,
        }

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

    def keep_reasoning(self, answer: Answer) -> None:
        """The call's reasoning is stored with the executor's soul only: it is in nobody's
        context, the executor's later turns included (§13.1)."""
        if answer.reasoning:
            thought = self.message("reasoning", answer.reasoning, scope="executor")
            self.unsaved.append(self.shown(thought))

    def shown(self, message: NewMessage) -> NewMessage:
        """``message``, noted as shown already when its call streamed to the run's listeners."""
        if self.streamed_call is not None:
            self.printed.append(message)
        return message

    async def run_tools(self, call: CallResult, rounds: int, attempt: int) -> None:
        """Run the calls of one reply in order, store them with their results, and add them
        to the conversation (§15.5)."""
        services = self.services
        outcomes = []
        events = services.events
        for tool_call in call.tool_calls:
            began = (
                tool_call_began(self, self.tools, tool_call, rounds, attempt)
                if events.active
                else None
            )
            outcome = await services.toolbox.call(self.tools, tool_call)
            if began is not None:
                tool_call_ended(self, began, outcome)
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
        self.save(self.unsaved, done, key=key, attempt=attempt, request=self.sent)
        self.unsaved = []


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
