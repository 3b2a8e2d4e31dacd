"""An `@ai` turn (§9, §10, §13, §15.5): the model calls of each attempt (tool rounds first, then
the reply), the signals read from the reply, the validation loop, and their records (§16.4).

Whether a call is replayed from the session's records (a resumed run, §16.4; a fork or a reuse,
§16.4a) is decided before it is made, by the turn's :class:`Replay`; once a call goes live the
turn's later calls are live too, and the live call (:mod:`fems_runtime.turns.calls`) knows
nothing of records."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from fems_runtime.context import Request, model_request, retry_messages
from fems_runtime.events import FallbackTaken, ReplyRejected
from fems_runtime.lineage import model_options, request_digest
from fems_runtime.offline import OfflineTurn, named_actors, offline_out, safe_tool_names
from fems_runtime.records import RunError, TurnLog
from fems_runtime.signals import aapply_signals
from fems_runtime.specs import TurnResult
from fems_runtime.store import NewMessage
from fems_runtime.tools import ToolCall, ToolOutcome
from fems_runtime.turn_events import emit_point, tool_call_began, tool_call_ended
from fems_runtime.turns.calls import Answer, CallingTurn, CallPlan, ModelSetup
from fems_runtime.turns.turn import Room, Texts, Verdict, finish, turn_key
from fems_runtime.values import valid_text

if TYPE_CHECKING:
    from fems_runtime.flow import Context
    from fems_runtime.llm import CallResult
    from fems_runtime.specs import TurnSpec
    from fems_runtime.turns.shared import SharedServices


async def run_ai_turn(
    services: SharedServices, ctx: Context, spec: TurnSpec, room: Room | None = None
) -> TurnResult:
    """Run an `@ai` turn: who acts (``room`` when the caller has resolved it already, a mind
    turn), what its calls share, its id and whether it replays, then its attempts."""
    room = room or Room.of(services, ctx.frame, spec)
    setup = await ModelSetup.of(services, spec, room.executor_spec)
    texts = Texts.of(ctx.frame, spec)
    key = turn_key(services, ctx, spec, room)
    log = services.log
    replay = Replay.of(log, key, bool(setup.tools)) if log.replays else None
    turn_id = _turn_id(services, key, setup, replay)
    turn = AiTurn(services, ctx, spec, room, texts, key, turn_id, setup=setup, replay=replay)
    await turn.begin()
    return await turn.play()


def _turn_id(
    services: SharedServices, key: list[Any], setup: ModelSetup, replay: Replay | None
) -> int:
    """A turn's id: its first record's when it is replayed (§16.4); a reuse's parent's turn
    when its first call matches, which it takes meanwhile (§16.4a); else a new one."""
    log = services.log
    first = replay.first if replay is not None else None
    if first is not None:
        return int(first["turn"])
    if replay is not None and log.compares:
        candidate = log.candidate(_round_key(key, 0) if setup.tools else key)
        if candidate is not None:
            log.turns.add(int(candidate["turn"]))
            return int(candidate["turn"])
    return log.new_turn(services.store, services.session)


@dataclass
class Replay:
    """The records a turn replays before it goes live (§16.4, §16.4a), asked call by call
    until a call has none. ``first`` is the turn's first record: its id, what its
    memory/context methods wrote, and ``before``, where the context of its first call ended."""

    log: TurnLog
    key: list[Any]
    first: Mapping[str, Any] | None

    @classmethod
    def of(cls, log: TurnLog, key: list[Any], tools: bool) -> Replay:
        """The replay of a turn in a run with records to replay (``log.replays``)."""
        # its first record is its first tool round's when it called tools, else its reply's
        first = (log.peek(_round_key(key, 0)) if tools else None) or log.peek(key)
        return cls(log, key, first)

    def record(
        self, rounds: int, attempt: int, request: str | None = None
    ) -> Mapping[str, Any] | None:
        """The record of a call (a tool round's, else the reply's), or None: it goes live.
        ``request``: the digest of what the call would send, which a reuse compares."""
        log = self.log
        record = log.recorded(_round_key(self.key, rounds), attempt, request) or log.recorded(
            self.key, attempt, request
        )
        if record is not None and rounds == 0 and attempt == 0:
            self.first = record  # as stored in this session (a fork's copy: its numbering)
        return record


@dataclass
class Answered:
    """A strict turn's reply whose verdict is not known yet, with what its call's record
    holds: both are stored once the reply is accepted or rejected (§13.3), so a rejected
    reply is never in a later context, a concurrent branch's included."""

    reply: NewMessage
    done: dict[str, Any]
    attempt: int
    sent: str


@dataclass
class AiTurn(CallingTurn):
    """An AI turn: each attempt's tool rounds and reply, the validation loop (§10.6, §15.5)
    and the records of its calls (§16.4).

    ``replay`` holds the records still to replay (None: the turn is live); the ``request`` of
    its first call is built when the turn first goes live, and ``added`` is what later calls
    carry after it. ``unsaved`` are messages stored with the next record, ``outputs`` what
    memory/context methods wrote (kept in the turn's first record); ``answered`` the live
    reply of a strict turn, stored with its record once its verdict is known.
    """

    replay: Replay | None = field(default=None, kw_only=True)
    request: Request | None = field(default=None, kw_only=True)
    added: list[dict[str, Any]] = field(default_factory=list, kw_only=True)
    unsaved: list[NewMessage] = field(default_factory=list, kw_only=True)
    outputs: list[tuple[str, Any]] = field(default_factory=list, kw_only=True)
    answered: Answered | None = field(default=None, kw_only=True)

    async def begin(self) -> None:
        """A replayed turn takes the values its memory/context methods wrote from its first
        record (§16.4); any other builds its first call's request. Its opening messages
        wait for its first record."""
        first = self.replay.first if self.replay is not None else None
        if first is not None:
            for name, value in first["result"].get("outputs", ()):
                self.frame.assign(name, "=", self.frame.variables.adopt(value))
        else:
            self.request = await model_request(self, self.outputs)
        self.unsaved = self.opening_messages()

    async def play(self) -> TurnResult:
        """Call, read the signals, check them; retry with feedback while the action allows."""
        spec, frame = self.spec, self.ctx.frame
        base = self.offline_turn() if self.setup.choice.offline else None
        result = TurnResult(turn=self.id)
        attempt = 0
        while True:
            offline = base if base is None or not attempt else replace(base, attempt=attempt)
            reply, interrupted = await self.reply(offline, attempt, result)
            result.reply = reply
            if interrupted:
                result.interrupted = True
                return result
            outcome = await aapply_signals(reply, frame, spec.outs)
            verdict = await self.check(reply, outcome)
            if not verdict.problems:
                await self.keep_answer()
                return finish(result, outcome)
            if not spec.strict:
                self.report(verdict.problems)
                return finish(result, outcome)
            outcome.rollback()
            result.rejected = outcome.SET_VARIABLE
            if attempt >= (spec.max_retries or 0):
                return await self.give_up(reply, verdict, result)
            attempt += 1
            await self.retry_with(reply, verdict)

    async def retry_with(self, reply: str, verdict: Verdict) -> None:
        """The next attempt carries the rejected reply and the feedback; both are stored with
        the rejected call's record, as feedback in nobody's context (§13.1, §13.3)."""
        note = _feedback_text(verdict.shown)
        await self.keep_answer(rejected=True, feedback=note)
        self.added = retry_messages(self.added, reply, note)

    async def keep_answer(self, *, rejected: bool = False, feedback: str | None = None) -> None:
        """Store the reply that awaited its verdict with its call's record: an accepted one for
        the room; a rejected one, then ``feedback`` on it, as ``feedback`` messages of the
        executor's soul, in nobody's later context (§13.3). A replayed or lenient reply is
        stored already."""
        answered, self.answered = self.answered, None
        if answered is None:
            return
        message = answered.reply
        if rejected:
            kept = replace(message, kind="feedback", souls=(self.room.voice_soul,), users=())
            self.printed = [(kept if m is message else m, call) for m, call in self.printed]
            message = kept
        self.unsaved.append(message)
        if feedback is not None:
            self.unsaved.append(self.message("feedback", feedback, scope="executor", speaker=False))
        await self.save_call(answered.done, self.key, answered.attempt, answered.sent)

    async def give_up(self, reply: str, verdict: Verdict, result: TurnResult) -> TurnResult:
        """Retries exhausted: run the fallback, or stop the run naming action, reply and problem."""
        services, spec, problems = self.services, self.spec, verdict.problems
        await self.keep_answer(rejected=True)
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
        """What `fems/mock` and `fems/script` may know: outs, current values, candidate actors,
        and which offered tools the mock may call (§15.3).

        Candidates are the actors the rendered prompt names, else the others in scope (§15.3).
        """
        room, frame = self.room, self.frame
        others = [str(a) for a in room.actors if a != room.voice]
        candidates = named_actors(self.texts.shown, frame) or others or [self.actor]
        outs = tuple(offline_out(out, frame) for out in self.spec.outs or ())
        safe = safe_tool_names(self.setup.tools)
        return OfflineTurn(
            self.spec.action, self.actor, self.id, 0, outs, tuple(candidates), safe_tools=safe
        )

    # ------------------------------------------------------------------ one attempt

    async def reply(
        self, offline: OfflineTurn | None, attempt: int, result: TurnResult
    ) -> tuple[str, bool]:
        """The attempt's final reply (and whether `interrupt:` cut it), replayed from the
        session's records or live; tool rounds come first, each one recorded (§16.4)."""
        limit = self.spec.max_tool_rounds
        if limit is None:
            limit = self.services.max_tool_rounds
        rounds = 0
        while True:
            if self.replay is not None:
                record = await self.replayed(self.replay, offline, attempt, rounds)
                if record is not None:
                    result.calls += 1
                    done = record["result"]
                    if "calls" not in done:
                        return str(done["reply"]), bool(done.get("interrupted"))
                    rounds += 1
                    continue
            plan = self.plan(await self.live_request(), self.added)
            answer = await self.live_call(plan, offline, attempt)
            result.calls += 1
            call = answer.call
            sent = self.digest(plan, offline)
            self.keep_reasoning(answer)
            if call is None or not call.tool_calls:
                reply = self.shown(self.message("reply", answer.text, call=call), answer)
                done = {"reply": answer.text, "interrupted": call is None}
                if self.spec.strict and call is not None:  # stored once it is judged
                    self.answered = Answered(reply, done, attempt, sent)
                else:
                    self.unsaved.append(reply)
                    await self.save_call(done, self.key, attempt, sent)
                return answer.text, call is None
            if rounds >= limit:
                raise RunError(
                    f"action {self.spec.action}: the model still calls tools after {limit} "
                    f"rounds (max_tool_rounds {limit}); raise max_tool_rounds or ask for an "
                    "answer"
                )
            await self.run_tools(call, rounds, attempt, sent)
            rounds += 1

    async def replayed(
        self, replay: Replay, offline: OfflineTurn | None, attempt: int, rounds: int
    ) -> Mapping[str, Any] | None:
        """The record of the call about to be made, replayed; or None: the turn goes live
        from this call on. A reuse compares what the call would send with its parent's
        record."""
        record = replay.record(rounds, attempt)
        if record is None and self.services.log.compares:
            plan = self.plan(await self.live_request(), self.added)
            record = replay.record(rounds, attempt, self.digest(plan, offline))
        if record is None:
            self.services.log.going_live()  # first: what a fork took is stored, its `before` known
            await self.live_request()
            self.replay = None
            return None
        debugger = self.services.debugger
        if debugger is not None and rounds == 0 and attempt == 0:  # the turn's first call
            recorded = str(record["result"].get("reply", ""))  # "": a tool round
            await debugger.before_replay(self.held_call([], recorded))
        self.replay_call(offline, attempt, record)
        return record

    async def live_request(self) -> Request:
        """What the turn's first call sends: built when the turn began, or, when earlier calls
        were replayed, from the messages stored before the turn."""
        if self.request is None:
            first = self.replay.first if self.replay is not None else None
            before = first.get("before") if first is not None else None
            self.request = await model_request(self, self.outputs, last=before)
        return self.request

    def digest(self, plan: CallPlan, offline: OfflineTurn | None) -> str:
        """The digest of a call (§16.4a), kept in its record: what the model is sent and how
        (the context as a digest, hashed once as it grows), and for an offline model what its
        reply depends on."""
        setup, request = self.setup, plan.request
        choice, context = setup.choice, request.context
        return request_digest(
            {
                "kind": "ai",
                "action": self.spec.action,
                "executor": str(self.room.executor),
                "actor": self.actor,
                "model": choice.model,
                "options": model_options(choice.options),
                "max_tokens": setup.max_tokens,
                "reasoning": setup.effort,
                "tools": list(setup.schemas),
                "sent": {
                    "system": request.system,
                    "context": self.services.log.contexts.digest(context.entries, context.count),
                    "entries": context.count,
                    "keep": plan.keep,
                    "memory": request.memory,
                    "prompt": request.prompt,
                    "added": list(plan.added),
                },
                "offline": repr(offline) if choice.offline else None,
                "seed": self.services.models.mock.seed if choice.model == "fems/mock" else None,
            }
        )

    def replay_call(
        self, offline: OfflineTurn | None, attempt: int, record: Mapping[str, Any]
    ) -> None:
        """A recorded call of a resumed run: nothing is stored again, the conversation gets
        its tool round, and a ``fems/script`` reply is consumed as the first run did."""
        self.trace_replay(attempt)
        script = self.services.models.script
        if offline is not None and script is not None and self.setup.choice.model == "fems/script":
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
            self.unsaved.append(self.shown(thought, answer))

    def shown(self, message: NewMessage, answer: Answer) -> NewMessage:
        """``message``, noted as shown already when its call streamed to the run's listeners."""
        if answer.streamed is not None:
            self.printed.append((message, answer.streamed))
        return message

    async def run_tools(self, call: CallResult, rounds: int, attempt: int, sent: str) -> None:
        """Run the calls of one reply in order, store them with their results and the round's
        record (``sent``: the digest of the call), and add them to the conversation (§15.5)."""
        services, tools = self.services, self.setup.tools
        outcomes = []
        for tool_call in call.tool_calls:
            began = None
            if services.events.active:
                began = tool_call_began(self, tools, tool_call, rounds, attempt)
            outcome = await services.toolbox.call(tools, tool_call)
            if began is not None:
                tool_call_ended(self, began, outcome)
            outcomes.append(outcome)
        for index, outcome in enumerate(outcomes):
            said = valid_text(f"{outcome.tool}({outcome.call.arguments})")
            usage = call if index == 0 else None  # the model call's figures, stored once
            self.unsaved.append(self.message("tool_call", said, call=usage))
            self.unsaved.append(self.message("tool_result", outcome.result, name=outcome.tool))
        done: dict[str, Any] = {"text": call.text, "calls": [_done_call(o) for o in outcomes]}
        await self.save_call(done, _round_key(self.key, rounds), attempt, sent)
        self.added += _tool_messages(call.text, outcomes)

    async def save_call(
        self, done: dict[str, Any], key: Sequence[Any], attempt: int, sent: str
    ) -> None:
        """Store the unsaved messages with the record of one call (``sent``: the digest of
        its request); the turn's first record keeps what its memory/context methods wrote.
        A store still opening behind the run's first requests is awaited, so the other
        turns' requests go out meanwhile."""
        await self.services.store.opened()
        if self.outputs:
            done["outputs"] = [list(pair) for pair in self.outputs]
            self.outputs = []
        self.save(self.unsaved, done, key=key, attempt=attempt, request=sent)
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
