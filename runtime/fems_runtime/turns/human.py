"""A `@human` turn (§10.8): the person is shown the prompt and their context, answers with free
text and out values, and the answer is stored and applied; a `@mind` turn is one or the other by
the executor's type (§9.1)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from fems_runtime.context import context_view
from fems_runtime.events import HumanAnswered, HumanWaitBegan, HumanWaitEnded
from fems_runtime.human import AnswersFileHuman, HumanAnswer, HumanRequest
from fems_runtime.lineage import request_digest
from fems_runtime.records import RunError
from fems_runtime.signals import Rejected, apply_values
from fems_runtime.specs import TurnResult
from fems_runtime.turn_events import emit_point
from fems_runtime.turns.ai import run_ai_turn
from fems_runtime.turns.turn import Room, Turn, finish

if TYPE_CHECKING:
    from fems_runtime.flow import Context
    from fems_runtime.human import HumanProvider
    from fems_runtime.specs import TurnSpec
    from fems_runtime.turns.shared import SharedServices


async def run_mind_turn(services: SharedServices, ctx: Context, spec: TurnSpec) -> TurnResult:
    """`@mind(@x)`: an AI turn or a human turn by the executor's `type` (§9.1)."""
    room = Room.of(services, ctx.frame, spec)
    if room.executor_spec.type == "human":
        return await run_human_turn(services, ctx, spec, room)
    return await run_ai_turn(services, ctx, spec, room)


async def run_human_turn(
    services: SharedServices, ctx: Context, spec: TurnSpec, room: Room | None = None
) -> TurnResult:
    """Run a `@human` turn; ``room`` when the caller has resolved it already (a mind turn)."""
    turn = HumanTurn.start(services, ctx, spec, room)
    human = services.human
    if human is None:
        raise RunError("human turns need --human terminal or an answers file")
    log = services.log
    record = log.recorded(turn.key)
    request = None
    if record is None and log.compares:  # a reuse: replayed if the person sees the same
        candidate = log.candidate(turn.key)
        turn.id = (
            int(candidate["turn"])
            if candidate is not None
            else log.new_turn(services.store, services.session)
        )
        log.turns.add(turn.id)
        request = await turn.request()
        record = log.recorded(turn.key, request=turn.digest(request))
    answer = turn.replay(record) if record is not None else await turn.ask(human, request)
    return await turn.apply(answer)


class HumanTurn(Turn):
    """A person's turn: asked live, or replayed from a resumed run's record (§16.4)."""

    record_kind: ClassVar[str] = "human"

    def replay(self, record: Mapping[str, Any]) -> HumanAnswer:
        """The recorded answer; an answers file gives up this answer as the first run did."""
        self.id = int(record["turn"])
        values = record["result"].get("vars") or {}
        adopt = self.frame.variables.adopt
        answer = HumanAnswer(
            str(record["result"].get("text", "")),
            {name: adopt(value) for name, value in values.items()},
        )
        self.trace_replay()
        human = self.services.human
        if isinstance(human, AnswersFileHuman):
            with contextlib.suppress(RunError):
                human.next_answer(self.spec.action, str(self.room.executor))
        return answer

    async def request(self) -> HumanRequest:
        """What the person is shown: the prompt, the outs to answer and their context."""
        spec, room = self.spec, self.room
        return HumanRequest(
            action=spec.action,
            actor=str(room.executor),
            prompt=self.texts.shown,
            outs=tuple(spec.outs or ()),
            context=(await context_view(self, [])).text,
            role=self.actor if spec.role else None,
            frame=self.frame,
        )

    def digest(self, request: HumanRequest) -> str:
        """The digest of what the person is asked (§16.4a)."""
        return request_digest(
            {
                "kind": "human",
                "action": request.action,
                "executor": request.actor,
                "prompt": request.prompt,
                "outs": list(request.outs),
                "context": request.context,
                "role": request.role,
            }
        )

    async def ask(self, human: HumanProvider, request: HumanRequest | None = None) -> HumanAnswer:
        """Ask the person through ``human`` (``request``: built already), then store the
        opening, their text and the turn's record."""
        services = self.services
        services.log.going_live()
        if not self.id:
            self.id = services.log.new_turn(services.store, services.session)
        if request is None:
            request = await self.request()
        events = services.events
        if not events.active:
            answer = await human.ask(request)
        else:
            waiting = emit_point(self, HumanWaitBegan, turn=self.id, prompt=request.prompt)
            try:
                answer = await human.ask(request)
            except BaseException as error:
                events.emit(HumanWaitEnded.after(waiting, error, turn=self.id))
                raise
            events.emit(HumanWaitEnded.after(waiting, turn=self.id))
        said = self.message("human", answer.text)
        done = {"text": answer.text, "vars": answer.vars}
        self.save([*self.opening_messages(), said], done, request=self.digest(request))
        return answer

    async def apply(self, answer: HumanAnswer) -> TurnResult:
        """Trace the answer, wake `interrupt: HUMAN` watchers, write the out values."""
        services, spec = self.services, self.spec
        executor = str(self.room.executor)
        if services.events.wants(HumanAnswered):
            answered: dict[str, Any] = {"turn": self.id, "text": answer.text, "values": answer.vars}
            emit_point(self, HumanAnswered, actor=executor, **answered)
        services.inputs.notify(executor)
        outcome = apply_values(answer.vars, self.frame, spec.outs)
        if outcome.rejected and isinstance(services.human, AnswersFileHuman):
            raise self._unfit_answer(services.human, outcome.rejected[0])
        verdict = await self.check(answer.text, outcome)
        if verdict.problems:
            self.report(verdict.problems)
        return finish(TurnResult(reply=answer.text, turn=self.id), outcome)

    def _unfit_answer(self, answers: AnswersFileHuman, rejected: Rejected) -> RunError:
        """An answers file's value that does not fit its out (§10.8): a run error, not the
        lenient warning a model's signal gets, since a file cannot be asked again."""
        out, _, value = rejected.raw.partition(" = ")  # apply_values' "name = value"
        return RunError(
            f"action {self.spec.action}: {answers.origin} answers out {out} with {value}, which "
            f"does not fit: {rejected.reason}; correct the answer in {answers.origin}"
        )
