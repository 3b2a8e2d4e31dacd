"""One turn's state (:class:`Turn`): who acts and who hears it (:class:`Room`), its rendered
texts, its record key and id; storing its messages and record, checking a reply (§10.4–§10.6)
and reporting what was wrong with it."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Self

from fems_runtime.events import (
    MessagesStored,
    ProblemReported,
    ReplyRejected,
    StoredMessage,
    TurnReplayed,
)
from fems_runtime.prompts import render
from fems_runtime.records import RunError, TurnLog
from fems_runtime.signals import SignalOutcome, run_resolve
from fems_runtime.store import Checkpoint, NewMessage
from fems_runtime.turn_events import emit_point
from fems_runtime.values import ACTOR_NAME, Actor
from fems_runtime.words import NARRATOR

if TYPE_CHECKING:
    from fems_runtime.flow import Context
    from fems_runtime.llm import CallResult
    from fems_runtime.specs import ResolveSpec, TurnResult, TurnSpec
    from fems_runtime.turns.shared import SharedServices
    from fems_runtime.variables import ActorSpec, Frame

_SPEAKERS = {"narration": NARRATOR}
Scope = Literal["room", "executor", "nobody"]


@dataclass(frozen=True)
class Room:
    """Who acts and who is in scope for one turn, resolved when the action runs (§9.3);
    ``voice_soul`` is the soul the turn speaks with (its role's, with `as`)."""

    executor: Actor
    executor_spec: ActorSpec
    voice: Actor
    voice_spec: ActorSpec
    actors: list[Actor]
    souls: set[str]
    users: set[str]
    voice_soul: str

    @classmethod
    def of(cls, services: SharedServices, frame: Frame, spec: TurnSpec) -> Room:
        executor = voice = frame.resolve_actor(spec.executor, "the executor")
        known = {spec.executor: executor}
        if spec.role:
            voice = known[spec.role] = frame.resolve_actor(spec.role, "the role (as)")
        actors = _scope_actors(frame, spec, known)
        for who in (executor, voice):
            if who not in actors:
                actors.insert(0, who)
        registry = frame.variables.actors
        souls, users = set(), set(services.owners)
        for actor in actors:
            actor_spec = registry[actor]
            souls.add(str(actor_spec.soul))
            if actor_spec.user:
                users.add(actor_spec.user)
        voice_spec = registry[voice]
        return cls(
            executor,
            registry[executor],
            voice,
            voice_spec,
            actors,
            souls,
            users,
            str(voice_spec.soul),
        )

    @property
    def names(self) -> list[str]:
        return sorted(str(a) for a in self.actors)


def _scope_actors(frame: Frame, spec: TurnSpec, known: Mapping[str, Actor]) -> list[Actor]:
    """The actors of the action's `scope:` (§9.3), each once, in the order written; ``known``:
    the names resolved already (the executor, the role), not looked up again."""
    variables = frame.variables
    found: list[Actor] = []
    for item in spec.scope:
        if item.kind == "actor":  # a defined actor, or a run error
            actors = [known.get(item.name) or frame.resolve_actor(item.name, "an actor in scope")]
        elif item.kind == "all" and not frame.declared("all"):
            # `all` is every defined actor unless a variable named `all` is declared (§9.3)
            actors = list(variables.refs.values())
        else:
            value = frame.get(item.name or item.kind)
            held = list(value) if isinstance(value, list | tuple | set | frozenset) else [value]
            actors = []
            for value in held:
                if not variables.is_actor(value):
                    raise RunError(
                        f"action {spec.action}: scope item '{item.name or item.kind}' holds "
                        f"{value!r}, which is not an actor"
                    )
                actors.append(variables.actor(str(value)))
        for actor in actors:
            if actor not in found:
                found.append(actor)
    return found


@dataclass(frozen=True)
class Texts:
    """A turn's rendered texts (§9.2): the instruction (stored privately), the narration (stored
    for the scope) and ``lead``, the narration prepended to the instruction for the executor
    (empty when `showprompt` is itself the instruction)."""

    prompt: str
    narration: str
    lead: str

    @classmethod
    def of(cls, frame: Frame, spec: TurnSpec) -> Texts:
        """`showprompt` is narration, and also the instruction when `prompt` is absent."""
        only = spec.inputs
        narration = render(spec.showprompt, frame, only) if spec.showprompt else ""
        if spec.prompt is None:
            return cls(narration, narration, "")
        return cls(render(spec.prompt, frame, only), narration, narration)

    @property
    def shown(self) -> str:
        """What the executor reads: narration, then the instruction."""
        return "\n\n".join(t for t in (self.lead, self.prompt) if t)


@dataclass
class Verdict:
    """A reply's problems: those the model is told, and resolve texts with `show_to_ai` false."""

    shown: list[str] = field(default_factory=list)
    hidden: list[str] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        return self.shown + self.hidden


@dataclass
class Turn:
    """What one turn needs: the run's services, the flow context it runs in, the action's
    spec, its room and texts, its record key (§16.4) and its turn id (0 until it has one)."""

    #: the ``kind`` of the turn's records (records.TurnLog)
    record_kind: ClassVar[str] = "ai"

    services: SharedServices
    ctx: Context
    spec: TurnSpec
    room: Room
    texts: Texts
    key: list[Any]
    id: int = 0
    #: messages streamed to the run's listeners already, with the id of their call's event
    printed: list[tuple[NewMessage, int]] = field(default_factory=list)

    @classmethod
    def start(
        cls,
        services: SharedServices,
        ctx: Context,
        spec: TurnSpec,
        room: Room | None = None,
    ) -> Self:
        """The turn of ``spec`` starting now (its key counts this occurrence); ``room`` when
        the caller has resolved it already (a mind turn)."""
        frame = ctx.frame
        room = room or Room.of(services, frame, spec)
        texts = Texts.of(frame, spec)
        return cls(services, ctx, spec, room, texts, turn_key(services, ctx, spec, room))

    @property
    def frame(self) -> Frame:
        return self.ctx.frame

    @property
    def actor(self) -> str:
        """The name the turn speaks under (its role's, with `as`)."""
        return str(self.room.voice)

    # ------------------------------------------------------------------ storing

    def message(
        self,
        kind: str,
        content: str,
        *,
        scope: Scope = "room",
        speaker: bool = True,
        call: CallResult | None = None,
        name: str | None = None,
    ) -> NewMessage:
        """A message of this turn seen by ``scope``: the room, the executor's soul only
        (feedback, reasoning) or nobody (the prompt, §13.1). ``speaker`` False for narration,
        prompts and feedback; ``name`` the speaker name of a message the executor does not say
        (a tool's result)."""
        room = self.room
        said = speaker and not name
        in_room = scope == "room"
        return NewMessage(
            kind,
            content,
            souls=room.souls if in_room else [room.voice_soul] if scope == "executor" else (),
            users=room.users if in_room else (),
            turn=self.id,
            action=self.spec.action,
            node=self.ctx.node,
            speaker_soul=room.voice_soul if said else None,
            speaker_user=room.executor_spec.user if said else None,
            speaker_name=name or (str(room.voice) if speaker else _SPEAKERS.get(kind, kind)),
            model=call.model if call else None,
            prompt_tokens=call.prompt_tokens if call else None,
            completion_tokens=call.completion_tokens if call else None,
            cost=call.cost if call else None,
        )

    def opening_messages(self) -> list[NewMessage]:
        """The narration (visible to the scope) and the private prompt, stored with the reply.

        They are stored once the model (or person) has answered, so a failed call leaves nothing
        behind half-way; the narration reaches the executor inside the prompt anyway (§9.2).
        """
        opening = []
        if self.texts.narration:
            opening.append(self.message("narration", self.texts.narration, speaker=False))
        opening.append(self.message("prompt", self.texts.prompt, scope="nobody"))
        return opening

    def save(
        self,
        messages: Sequence[NewMessage],
        result: Mapping[str, Any],
        *,
        key: Sequence[Any] | None = None,
        attempt: int = 0,
        request: str | None = None,
    ) -> None:
        """Store ``messages`` with the turn's record (``result`` under ``key``, by default the
        turn's; ``request`` the digest of what it sent, §16.4a) in one transaction, written by
        the store's writer without waiting for it, and tell the run's listeners."""
        state = TurnLog.entry(self.record_kind, key or self.key, self.id, result, attempt, request)
        record = Checkpoint(state, step=self.ctx.steps.total, node=self.ctx.node)
        services = self.services
        services.store.submit(services.session, messages, record)
        if services.events.wants(MessagesStored):
            emit_point(self, MessagesStored, turn=self.id, messages=self.stored(messages))

    def stored(self, messages: Sequence[NewMessage]) -> tuple[StoredMessage, ...]:
        """``messages`` as people read them; those shown as their call streamed name it."""
        room = tuple(self.room.names)
        return tuple(
            StoredMessage(
                message.kind,
                # feedback is stored without a speaker but is addressed to the executor
                self.actor if message.kind == "feedback" else str(message.speaker_name),
                room,
                message.content,
                next((call for shown, call in self.printed if shown is message), None),
                # the executor said it: a rejected reply, where the feedback note says nobody
                rejected=message.kind == "feedback" and message.speaker_soul is not None,
            )
            for message in messages
        )

    def trace_replay(self, attempt: int = 0) -> None:
        if self.services.events.active:
            emit_point(self, TurnReplayed, turn=self.id, attempt=attempt)

    # ------------------------------------------------------------------ checking a reply

    async def check(self, reply: str, outcome: SignalOutcome) -> Verdict:
        """Check a reply (§10.4–§10.6); a failed resolve rolls the reply's assignments back.
        Scripts that declare `SET_VARIABLE` see this reply's rejected signals in it (§10.5)."""
        spec = self.spec
        verdict = Verdict([f"rejected signal {r.raw!r}: {r.reason}" for r in outcome.rejected])
        if spec.strict:
            verdict.shown += [f"out '{o.label}' was not set" for o in outcome.unset]
        if spec.resolve is not None:
            name = f"{spec.resolve.code}.{spec.resolve.function}"
            checked = await run_resolve(
                self._resolve_function(spec.resolve),
                spec.resolve.args,
                self.frame,
                prompt=self.texts.prompt,
                llm_output=reply,
                set_variable=outcome.SET_VARIABLE,
                inputs=spec.inputs,
                name=name,
            )
            if not checked.ok:
                outcome.rollback()
                told = f": {'; '.join(checked.feedback)}" if checked.feedback else ""
                verdict.shown.append(f"{name} rejected the reply{told}")
                verdict.hidden += [m for m in checked.messages if m not in checked.feedback]
        if self.frame.declared("SET_VARIABLE"):
            self.frame.assign("SET_VARIABLE", "=", outcome.SET_VARIABLE)
        return verdict

    def _resolve_function(self, resolve: ResolveSpec) -> Callable[..., Any]:
        code = self.services.code
        if code is None:
            raise RunError(
                f"resolve {resolve.code}.{resolve.function} needs the script's code: files"
            )
        function = getattr(code(resolve.code), resolve.function, None)
        if not callable(function):
            raise RunError(f"resolve: {resolve.code}.{resolve.function} is not a function")
        return function

    def report(self, problems: Sequence[str]) -> None:
        """Lenient default (§10.6): problems go to the run's events and a warning, and the flow
        goes on."""
        if self.services.events.active:
            emit_point(self, ReplyRejected, problems=tuple(problems))
        for problem in problems:
            self.warn(problem)

    def warn(self, problem: str, *, inside: int | None = None, at_once: bool = False) -> None:
        """A run warning located at the action, also an event (shown live in the transcript):
        inside the event ``inside`` (a model call: the stage shows it with the reply being
        written), else the turn's; ``at_once`` when it cannot wait for the run's end."""
        services = self.services
        (services.warn_now if at_once else services.warn)(self.located(problem))
        if services.events.active:
            emit_point(self, ProblemReported, parent=inside, problem=problem)

    def located(self, problem: str) -> str:
        """``problem`` as a run warning says it: the file and line, the action."""
        services, spec = self.services, self.spec
        where = f"{services.file}:{spec.line}" if services.file else f"line {spec.line}"
        return f"{where}: warning: action {spec.action}: {problem}"


def turn_key(services: SharedServices, ctx: Context, spec: TurnSpec, room: Room) -> list[Any]:
    """The record key of a turn of ``spec`` starting now (§16.4); it counts this occurrence of
    the action on the branch's path."""
    return services.log.key(ctx.path, ctx.node, spec.action, str(room.executor))


def assigned(outcome: SignalOutcome) -> dict[str, Any]:
    """A turn's applied assignments by label (``kill``, ``votes.@eve``, ``scores[3]``)."""
    return {_label(a.target, a.key): a.value for a in outcome.applied}


def _label(target: str, key: Any) -> str:
    if key is None:
        return target
    return f"{target}.{key}" if ACTOR_NAME.fullmatch(str(key)) else f"{target}[{key}]"


def finish(result: TurnResult, outcome: SignalOutcome) -> TurnResult:
    """``result`` with the reply's rejected signals and applied assignments."""
    result.rejected = outcome.SET_VARIABLE
    result.assigned = assigned(outcome)
    return result
