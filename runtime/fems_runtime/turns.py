"""One AI / human / mind turn end to end, so generated code only describes the turn (§9, §10, §13).

Interface for generated code, ``flow.py`` and ``app.py``::

    spec = TurnSpec("@wolf", kind="ai", action="wolf_kill", line=40, prompt="…",
                    scope=(ScopeItem("actor", "@god"), ScopeItem("var", "wolves")),
                    outs=(OutSpec("kill", type="actor"),))

    services = TurnServices.open(program, variables, trace, model=…, replies=…, db=…,
                                 session=…, human=…, seed=…)   # once per run (app.py)
    services.session                                    # the session id
    result: TurnResult = await services.run(ctx, spec)  # = run_turn(services, ctx, spec)
    services.finish("completed" | "failed")             # session status, close the store

    await run_turn(services, ctx, spec)        # dispatches on spec.kind
    await run_ai_turn(services, ctx, spec)     # kind "ai"
    await run_human_turn(services, ctx, spec)  # kind "human"
    await run_mind_turn(services, ctx, spec)   # ai or human by the executor's type

``ctx`` is the :class:`fems_runtime.flow.Context` the action runs in: the turn reads and writes
``ctx.frame``, uses ``ctx.methods`` (memory/context methods, §8) and ``ctx.node`` for the trace.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from fems_runtime.context import (
    ContextCache,
    build_messages,
    call_method,
    method_kwargs,
    method_outputs,
    method_text,
    retry_messages,
)
from fems_runtime.human import (
    AnswersFileHuman,
    HumanAnswer,
    HumanProvider,
    HumanRequest,
    MockHuman,
    TerminalHuman,
)
from fems_runtime.llm import (
    DEFAULT_RETRY_BUDGET,
    DEFAULT_TIMEOUT,
    CallResult,
    ModelChoice,
    ModelClient,
    RetryPolicy,
)
from fems_runtime.mcp import project_servers
from fems_runtime.offline import OfflineTurn, named_actors, offline_out
from fems_runtime.prompts import render
from fems_runtime.records import RunError, TraceWriter, TurnLog
from fems_runtime.signals import (
    Rejected,
    SignalOutcome,
    aapply_signals,
    apply_values,
    run_resolve,
)
from fems_runtime.specs import (
    InterruptSpec,
    ResolveSpec,
    TurnResult,
    TurnSpec,
)
from fems_runtime.store import Checkpoint, NewMessage, Store, parse_session_spec
from fems_runtime.tools import (
    DEFAULT_MAX_TOOL_ROUNDS,
    Tool,
    Toolbox,
    ToolCall,
    ToolOutcome,
    offered_names,
)
from fems_runtime.transcript import Transcript
from fems_runtime.values import ACTOR_NAME, Actor, valid_text

if TYPE_CHECKING:
    from fems_runtime.flow import Context, MethodSpec
    from fems_runtime.variables import ActorSpec, BlueprintSpec, Frame, Variables

INTERRUPTED = "[Interrupted]"
_SPEAKERS = {"narration": "narrator"}


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
class TurnServices:
    """What every turn of one run shares: models, store and session, trace, people, meta blocks."""

    models: ModelClient
    store: Store
    session: int
    trace: TraceWriter
    file: str = ""
    safety: str = ""
    style: str = ""
    owners: tuple[str, ...] = ()
    human: HumanProvider | None = None
    code: Callable[[str], Any] | None = None
    warn: Callable[[str], None] = field(default_factory=RunWarnings)
    poll: float = 0.05
    inputs: HumanInputs = field(default_factory=HumanInputs)
    transcript: Transcript | None = None
    model_calls: int = 0
    log: TurnLog = field(default_factory=TurnLog)
    toolbox: Toolbox = field(default_factory=lambda: Toolbox(".", None))
    all_tools: tuple[str, ...] = ()  # what `tools: true` offers besides read and list (§15.5)
    max_tool_rounds: int = DEFAULT_MAX_TOOL_ROUNDS
    contexts: ContextCache | None = None  # the actors' built-in contexts (made from `store`)

    def __post_init__(self) -> None:
        if self.contexts is None:
            self.contexts = ContextCache(self.store)

    @classmethod
    def open(
        cls,
        program: Any,
        variables: Variables,
        trace: TraceWriter,
        *,
        model: str | None = None,
        replies: str | Path | Mapping[str, Any] | None = None,
        db: str | None = None,
        session: str | int | None = None,
        human: str | Mapping[str, Any] | HumanProvider | None = None,
        seed: int | None = None,
        code: Callable[[str], Any] | None = None,
        base_dir: str | Path = ".",
        resume: bool = False,
        timeout: float | None = None,
        retry_budget: float | None = None,
        root: str | Path | None = None,
    ) -> TurnServices:
        """Build the run's services from a generated module's `Program` and the run options.

        The model map and `.env` are read next to the generated module and in `base_dir` (the
        working directory), which wins on a conflict (§15.2). A failure here (a session that
        does not exist, a database that cannot be opened) is a run error located in the script.
        ``resume`` continues the session's last run from its turn records (§16.4): ``session``
        (or ``meta.session``) names it, else the newest session of this script.
        ``timeout`` and ``retry_budget`` (seconds) win over ``meta:`` (§15.4). ``root`` is the
        folder the built-in tools may reach (default: the script's folder, §15.5).
        """
        script = program.script
        meta = dict(script.meta)
        if replies is not None and model is None:
            model = "fems/script"
        project_dirs = _project_dirs(program, base_dir)
        try:
            models = ModelClient.for_project(
                *project_dirs,
                meta_model=_text(meta.get("model")) or None,
                run_model=model,
                max_concurrency=int(meta.get("max_concurrency", 8)),
                delay=float(meta.get("delay", 0) or 0),
                timeout=float(timeout or meta.get("timeout") or DEFAULT_TIMEOUT),
                retry=RetryPolicy(
                    budget=float(retry_budget or meta.get("retry_budget") or DEFAULT_RETRY_BUDGET)
                ),
                seed=seed or 0,
                replies=replies,
            )
            store, number, log = _open_store(program, variables, db, session, resume)
        except RunError as error:
            raise error.located(script.file, None) from None
        owners = meta.get("owner", ())
        owners = owners if isinstance(owners, list | tuple) else (owners,)
        return cls(
            models=models,
            store=store,
            session=number,
            trace=trace,
            file=script.file,
            safety=_text(meta.get("system_safety")),
            style=_text(meta.get("output_style")),
            owners=tuple(str(o) for o in owners if o not in (None, "")),
            human=_human_provider(human, seed or 0),
            code=code,
            log=log,
            toolbox=Toolbox(
                root if root is not None else project_dirs[0], code, project_servers(project_dirs)
            ),
            all_tools=_script_tools(variables),
            max_tool_rounds=int(meta.get("max_tool_rounds", DEFAULT_MAX_TOOL_ROUNDS)),
        )

    async def run(self, ctx: Context, spec: TurnSpec) -> TurnResult:
        """Run one turn (the `turn_runner` app.py plugs into the Context's services)."""
        if self.code is None:
            self.code = ctx.services.code
        return await run_turn(self, ctx, spec)

    def finish(self, status: str) -> None:
        """Print the run's warnings, record how the session ended, release the database."""
        if isinstance(self.warn, RunWarnings):
            self.warn.flush()
        if self.log.turns:  # a resumed run: never hand out a replayed turn id again
            self.store.set_last_turn(self.session, max(self.log.turns), at_least=True)
        self.store.set_status(self.session, status)
        self.store.close()


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _script_tools(variables: Variables) -> tuple[str, ...]:
    """Every tool the script names in an actor's or a blueprint's `tools:` list."""
    specs: list[ActorSpec | BlueprintSpec] = [
        *variables.actors.values(),
        *variables.blueprints.values(),
    ]
    named = [name for spec in specs if isinstance(spec.tools, tuple | list) for name in spec.tools]
    return tuple(dict.fromkeys(named))


def _project_dirs(program: Any, base_dir: str | Path) -> list[Path]:
    """Where `fems.toml` and `.env` are looked for: the script's folder (the program's
    ``project_dir`` when ``fems2py run`` set it, else the generated module's), then
    `base_dir`."""
    dirs = [Path(base_dir).resolve()]
    module_file = getattr(program, "module_file", None)
    project_dir = getattr(program, "project_dir", None)
    if project_dir or module_file:
        module_dir = Path(str(project_dir or module_file)).resolve()
        if not project_dir:
            module_dir = module_dir.parent
        if module_dir != dirs[0]:
            dirs.insert(0, module_dir)
    return dirs


def _open_store(
    program: Any,
    variables: Variables,
    db: str | None,
    session: str | int | None,
    resume: bool = False,
) -> tuple[Store, int, TurnLog]:
    """Open the database and the session (§3 `database`, `session`), recording the actors;
    a new run marks its start, a resumed one loads the records to replay (§16.4)."""
    script = program.script
    meta = script.meta
    store = Store(db or _text(meta.get("database")) or None)
    spec = meta.get("session") if session is None else session
    try:
        if resume:
            number, log = _resume_session(store, script, spec)
        else:
            number = store.open_session(
                spec,
                title=_text(meta.get("name")) or None,
                script=script.file,
                script_hash=script.sha256,
            )
            store.start_run(number)
            log = TurnLog()
        store.record_actors(
            number,
            {
                spec.name: {
                    "type": spec.type,
                    "soul_id": str(spec.soul),
                    "source": spec.source,
                    "blueprint": spec.blueprint,
                }
                for spec in variables.actors.values()
            },
        )
        store.load_personas(str(spec.soul) for spec in variables.actors.values())
    except BaseException:
        store.close()
        raise
    return store, number, log


def _resume_session(store: Store, script: Any, spec: str | int | None) -> tuple[int, TurnLog]:
    """Check that session ``spec`` (or the newest of this script) can be resumed, then make
    it ready: status running, turn counter back at its last run's start."""
    number, _ = parse_session_spec(spec)
    if number is None:
        number = store.latest_session(script.file)
        if number is None:
            raise RunError(f"--resume: no session of {script.file} in this database to resume")
    row = store.session(number)
    if row is None:
        raise RunError(f"--resume: session {number} does not exist")
    if row["status"] == "completed":
        raise RunError(
            f"--resume: session {number} is completed; there is nothing to resume "
            "(run without --resume to start a new run)"
        )
    if row["script_hash"] != script.sha256:
        raise RunError(
            f"--resume: session {number} was run from a different script "
            f"({row['script'] or 'unknown'}, sha256 {str(row['script_hash'])[:12]}…); "
            f"this is {script.file}, sha256 {script.sha256[:12]}…: resume with the module "
            "built from the same source, or start a new session"
        )
    found = store.run_records(number)
    if found is None:
        raise RunError(f"--resume: session {number} has no checkpoints to resume from")
    start, records = found
    store.set_last_turn(number, int(start.get("turn") or 0))
    store.set_status(number, "running")
    return number, TurnLog(records, resumed=True)


def _human_provider(
    human: str | Mapping[str, Any] | HumanProvider | None, seed: int
) -> HumanProvider:
    if human is None or human == "terminal":
        return TerminalHuman()
    if human == "fems/mock":
        return MockHuman(seed)
    if isinstance(human, str | Mapping):
        return AnswersFileHuman(human)
    return human  # a provider object: the stage's page (§17)


# ---------------------------------------------------------------------- dispatch


async def run_turn(services: TurnServices, ctx: Context, spec: TurnSpec) -> TurnResult:
    """Run `spec` as an AI, human or mind turn."""
    if spec.kind == "ai":
        return await run_ai_turn(services, ctx, spec)
    if spec.kind == "human":
        return await run_human_turn(services, ctx, spec)
    return await run_mind_turn(services, ctx, spec)


async def run_mind_turn(services: TurnServices, ctx: Context, spec: TurnSpec) -> TurnResult:
    """`@mind(@x)`: an AI turn or a human turn by the executor's `type` (§9.1)."""
    return await _at_action(services, spec, _mind_turn(services, ctx, spec))


async def _mind_turn(services: TurnServices, ctx: Context, spec: TurnSpec) -> TurnResult:
    room = _Room.of(services, ctx.frame, spec)
    if room.executor_spec.type == "human":
        return await _human_turn(services, ctx, spec, room)
    return await _ai_turn(services, ctx, spec, room)


# ---------------------------------------------------------------------- the room


@dataclass
class _Room:
    """Who acts and who is in scope for one turn, resolved when the action runs (§9.3)."""

    executor: Actor
    executor_spec: ActorSpec
    voice: Actor
    voice_spec: ActorSpec
    actors: list[Actor]
    souls: set[str]
    users: set[str]

    @classmethod
    def of(cls, services: TurnServices, frame: Frame, spec: TurnSpec) -> _Room:
        executor = frame.resolve_actor(spec.executor, "the executor")
        voice = executor
        if spec.role:
            voice = frame.resolve_actor(spec.role, "the role (as)")
        actors = _scope_actors(frame, spec)
        registry = frame.variables.actors
        for who in (executor, voice):
            if who not in actors:
                actors.insert(0, who)
        souls = {str(registry[a].soul) for a in actors}
        users = {u for a in actors if (u := registry[a].user)} | set(services.owners)
        return cls(executor, registry[executor], voice, registry[voice], actors, souls, users)

    @property
    def names(self) -> list[str]:
        return sorted(str(a) for a in self.actors)


def _scope_actors(frame: Frame, spec: TurnSpec) -> list[Actor]:
    variables = frame.variables
    found: list[Actor] = []
    for item in spec.scope:
        if item.kind == "all" and not frame.declared("all"):
            # `all` is every defined actor unless a variable named `all` is declared (§9.3)
            values: list[Any] = [variables.actor(name) for name in variables.actors]
        elif item.kind == "actor":
            values = [frame.resolve_actor(item.name, "an actor in scope")]
        else:
            value = frame.get(item.name or item.kind)
            values = list(value) if isinstance(value, list | tuple | set | frozenset) else [value]
        for value in values:
            if not variables.is_actor(value):
                raise RunError(
                    f"action {spec.action}: scope item '{item.name or item.kind}' holds "
                    f"{value!r}, which is not an actor"
                )
            actor = variables.actor(str(value))
            if actor not in found:
                found.append(actor)
    return found


# ---------------------------------------------------------------------- shared steps


@dataclass(frozen=True)
class _Texts:
    """A turn's rendered texts (§9.2): the instruction (stored privately), the narration (stored
    for the scope) and ``lead``, the narration prepended to the instruction for the executor
    (empty when `showprompt` is itself the instruction)."""

    prompt: str
    narration: str
    lead: str

    @property
    def shown(self) -> str:
        """What the executor reads: narration, then the instruction."""
        return "\n\n".join(t for t in (self.lead, self.prompt) if t)


def _render_texts(frame: Frame, spec: TurnSpec) -> _Texts:
    """`showprompt` is narration, and also the instruction when `prompt` is absent."""
    only = spec.inputs
    narration = render(spec.showprompt, frame, only) if spec.showprompt else ""
    if spec.prompt is None:
        return _Texts(narration, narration, "")
    return _Texts(render(spec.prompt, frame, only), narration, narration)


def _method(ctx: Context, kind: str, name: str | None) -> MethodSpec | None:
    methods = ctx.methods
    if name is not None:
        method = methods.get(name)
        if method is None or method.kind != kind:
            raise RunError(f"no {kind} method named '{name}'")
        return method
    return next((m for m in methods.values() if m.kind == kind), None)


async def _method_block(
    services: TurnServices,
    ctx: Context,
    method: MethodSpec,
    *,
    prompt: str,
    turn: int,
    voice: Actor,
    outputs: list[tuple[str, Any]] | None = None,
) -> str:
    """Call a memory/context method (§8) and return its block text; outs are assigned (and
    listed in ``outputs``, for the turn record)."""
    frame = ctx.frame
    kwargs: dict[str, Any] = {}
    for name, compute in method.inputs.items():
        if compute is not None:
            kwargs[name.lstrip("@")] = compute(ctx)
        else:
            kwargs.update(
                method_kwargs(
                    [name],
                    frame,
                    prompt=prompt,
                    session=services.session,
                    turn=turn,
                    actor_info=voice.state(),
                )
            )
    if services.code is None:
        raise RunError(f"{method.kind} method {method.name} needs the script's code: files")
    function = getattr(services.code(method.code), method.function, None)
    if not callable(function):
        raise RunError(
            f"{method.kind} method {method.name}: {method.code}.{method.function} is not a function"
        )
    label = f"{method.kind} method {method.name}"
    value = await call_method(function, kwargs, name=label)
    for out, out_value in method_outputs(value, method.outputs, name=label).items():
        frame.assign(out, "=", out_value)
        if outputs is not None:
            outputs.append((out, out_value))
    return method_text(value)


async def _context_block(
    services: TurnServices,
    ctx: Context,
    spec: TurnSpec,
    room: _Room,
    prompt: str,
    turn: int,
    outputs: list[tuple[str, Any]] | None = None,
    *,
    last: int | None = None,
) -> str:
    method = _method(ctx, "context", spec.context)
    if method is not None:
        return await _method_block(
            services, ctx, method, prompt=prompt, turn=turn, voice=room.voice, outputs=outputs
        )
    assert services.contexts is not None
    return services.contexts.text(
        services.session, soul=str(room.voice_spec.soul), user=room.executor_spec.user, last=last
    )


def _message(
    spec: TurnSpec,
    ctx: Context,
    kind: str,
    content: str,
    *,
    turn: int,
    room: _Room,
    souls: Iterable[str],
    users: Iterable[str] = (),
    speaker: bool = True,
    call: CallResult | None = None,
    name: str | None = None,
) -> NewMessage:
    """A message of this turn; ``speaker`` False for narration, prompts and feedback; ``name``
    the speaker name of a message the executor does not say (a tool's result)."""
    return NewMessage(
        kind,
        content,
        souls=souls,
        users=users,
        turn=turn,
        action=spec.action,
        node=ctx.node,
        speaker_soul=str(room.voice_spec.soul) if speaker and not name else None,
        speaker_user=room.executor_spec.user if speaker and not name else None,
        speaker_name=name or (str(room.voice) if speaker else _SPEAKERS.get(kind, kind)),
        model=call.model if call else None,
        prompt_tokens=call.prompt_tokens if call else None,
        completion_tokens=call.completion_tokens if call else None,
        cost=call.cost if call else None,
    )


def _save(
    services: TurnServices,
    room: _Room,
    messages: Sequence[NewMessage],
    record: Checkpoint | None = None,
) -> None:
    """Store messages (and the turn's record) in one transaction, written by the store's
    writer without waiting for it, and show them in the transcript."""
    services.store.submit(services.session, messages, record)
    if services.transcript is not None:
        for message in messages:
            # feedback is stored without a speaker but is addressed to the executor
            shown = str(room.voice) if message.kind == "feedback" else message.speaker_name
            services.transcript.message(message.kind, str(shown), room.names, message.content)


def _opening(
    spec: TurnSpec, ctx: Context, room: _Room, turn: int, texts: _Texts
) -> list[NewMessage]:
    """The narration (visible to the scope) and the private prompt, stored with the reply.

    They are stored once the model (or person) has answered, so a failed call leaves nothing
    behind half-way; the narration reaches the executor inside the prompt anyway (§9.2).
    """
    opening = []
    if texts.narration:
        opening.append(
            _message(
                spec,
                ctx,
                "narration",
                texts.narration,
                turn=turn,
                room=room,
                souls=room.souls,
                users=room.users,
                speaker=False,
            )
        )
    opening.append(_message(spec, ctx, "prompt", texts.prompt, turn=turn, room=room, souls=()))
    return opening


def _in_action(services: TurnServices, spec: TurnSpec, error: RunError) -> RunError:
    """Locate an error at the action; an error not yet located also gets the action's name."""
    if error.line is not None or error.message.startswith(f"action {spec.action}"):
        return error.located(services.file, spec.line)
    return RunError(
        f"action {spec.action}: {error.message}", error.file or services.file, spec.line
    )


async def _at_action(
    services: TurnServices, spec: TurnSpec, turn: Awaitable[TurnResult]
) -> TurnResult:
    """Await ``turn`` with its run errors located at the action (:func:`_in_action`)."""
    try:
        return await turn
    except RunError as error:
        raise _in_action(services, spec, error) from None


# ---------------------------------------------------------------------- AI turns


async def run_ai_turn(services: TurnServices, ctx: Context, spec: TurnSpec) -> TurnResult:
    """An `@ai` turn: prompt, context, model call, signals, validation loop (§9, §10, §13)."""
    return await _at_action(services, spec, _ai_turn(services, ctx, spec))


async def _ai_turn(
    services: TurnServices, ctx: Context, spec: TurnSpec, room: _Room | None = None
) -> TurnResult:
    """``room``: the turn's room when the caller has built it already (a mind turn)."""
    frame = ctx.frame
    room = room or _Room.of(services, frame, spec)
    texts = _render_texts(frame, spec)
    prompt = texts.prompt
    key = services.log.key(_path(ctx), ctx.node, spec.action, str(room.executor))
    tools = await _offered_tools(services, room)
    # a resumed run replays this turn (§16.4); its first record is its first tool round's
    # when it called tools, else its first reply's
    first = (services.log.peek(_round_key(key, 0)) if tools else None) or services.log.peek(key)
    choice = services.models.resolve(spec.model, room.executor_spec.source)
    calls = _Calls(services, ctx, spec, room, texts, key, tools, choice, first)
    if first is not None:
        calls.turn = int(first["turn"])
        for name, value in first["result"].get("outputs", ()):
            frame.assign(name, "=", frame.variables.adopt(value))
    else:
        calls.turn = _new_turn(services)
        calls.opening = await _model_messages(
            services, ctx, spec, room, texts, calls.turn, calls.outputs
        )
    calls.unsaved = _opening(spec, ctx, room, calls.turn, texts)
    offline_base = _offline_turn(frame, spec, room, calls.turn, texts.shown)
    result = TurnResult()
    attempt = 0
    while True:
        offline = offline_base if attempt == 0 else replace(offline_base, attempt=attempt)
        reply, interrupted = await calls.reply(offline, result)
        result.reply = reply
        if interrupted:
            result.interrupted = True
            return result
        outcome = await aapply_signals(reply, frame, spec.outs)
        verdict = await _validate(services, frame, spec, prompt, reply, outcome)
        problems = verdict.problems
        _set_variable(frame, outcome)
        result.rejected = outcome.SET_VARIABLE
        if not problems:
            result.assigned = {_label(a.target, a.key): a.value for a in outcome.applied}
            return result
        if not spec.strict:
            _report(services, ctx, spec, room, problems)
            result.assigned = {_label(a.target, a.key): a.value for a in outcome.applied}
            return result
        outcome.rollback()
        if attempt >= (spec.max_retries or 0):
            return await _give_up(services, ctx, spec, room, reply, problems, result)
        attempt += 1
        note = _feedback_text(verdict.shown)
        # stored with the next reply: the feedback is visible to the executor only (§13.1)
        calls.unsaved.append(
            _message(
                spec,
                ctx,
                "feedback",
                note,
                turn=calls.turn,
                room=room,
                souls=[str(room.voice_spec.soul)],
                speaker=False,
            )
        )
        calls.added = retry_messages(calls.added, reply, note)


@dataclass
class _Calls:
    """The model calls of one AI turn: each attempt's tool rounds and reply (§10.6, §15.5).

    ``opening`` is the first call's messages (built when the turn first goes live), ``added``
    what later calls carry after them: tool calls and results, rejected replies and feedback.
    ``unsaved`` are messages stored with the next record, ``outputs`` what memory/context
    methods wrote (kept in the turn's first record, for ``--resume``).
    """

    services: TurnServices
    ctx: Context
    spec: TurnSpec
    room: _Room
    texts: _Texts
    key: list[Any]
    tools: list[Tool]
    choice: ModelChoice
    first: Mapping[str, Any] | None
    turn: int = 0
    opening: list[dict[str, Any]] | None = None
    added: list[dict[str, Any]] = field(default_factory=list)
    unsaved: list[NewMessage] = field(default_factory=list)
    outputs: list[tuple[str, Any]] = field(default_factory=list)
    saved: bool = False

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
                self._replay(offline, record)
                result.calls += 1
                if "calls" not in record["result"]:
                    return str(record["result"]["reply"]), bool(record["result"].get("interrupted"))
                rounds += 1
                continue
            call, reply = await self._live_call(offline)
            result.calls += 1
            if call is None or not call.tool_calls:
                self._save_reply(reply, call, attempt)
                return reply, call is None
            if rounds >= limit:
                raise RunError(
                    f"action {spec.action}: the model still calls tools after {limit} rounds "
                    f"(max_tool_rounds {limit}); raise max_tool_rounds or ask for an answer"
                )
            await self._run_tools(call, rounds, attempt)
            rounds += 1

    def _replay(self, offline: OfflineTurn, record: Mapping[str, Any]) -> None:
        _replayed(self.services, self.ctx, self.spec, self.room, self.turn, offline.attempt)
        _consume_script_reply(self.services, self.choice, offline)
        self.unsaved = []  # stored by the interrupted run
        if "calls" in record["result"]:
            done = record["result"]
            calls = [ToolCall(c["id"], c["name"], c["arguments"]) for c in done["calls"]]
            outcomes = [
                ToolOutcome(call, c["tool"], c["result"])
                for call, c in zip(calls, done["calls"], strict=True)
            ]
            self.added += _tool_messages(str(done.get("text", "")), outcomes)

    async def _live_call(self, offline: OfflineTurn) -> tuple[CallResult | None, str]:
        """One model call and its reply text as traced and stored (None and
        ``[Interrupted]`` when `interrupt:` cut it)."""
        services, ctx, spec = self.services, self.ctx, self.spec
        if self.opening is None:  # earlier calls were replayed: rebuild what was sent
            before = self.first.get("before") if self.first is not None else None
            self.opening = await _model_messages(
                services, ctx, spec, self.room, self.texts, self.turn, self.outputs, last=before
            )
        messages = [*self.opening, *self.added]
        schemas = [tool.schema() for tool in self.tools]
        call = await _call(services, spec, self.choice, messages, offline, ctx.delay, schemas)
        reply = INTERRUPTED if call is None else valid_text(call.text)
        _trace_call(
            services, ctx, spec, self.room, self.choice, messages, reply, call, offline.attempt
        )
        return call, reply

    async def _run_tools(self, call: CallResult, rounds: int, attempt: int) -> None:
        """Run the calls of one reply in order, store them with their results, and add them
        to the conversation (§15.5)."""
        services, ctx, spec, room = self.services, self.ctx, self.spec, self.room
        outcomes = []
        for tool_call in call.tool_calls:
            outcome = await services.toolbox.call(self.tools, tool_call)
            services.trace.write(
                "tool_call",
                node=ctx.node,
                action=spec.action,
                actor=str(room.voice),
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
            self.unsaved.append(self._message("tool_call", said, call=usage))
            self.unsaved.append(self._message("tool_result", outcome.result, name=outcome.tool))
        done: dict[str, Any] = {
            "text": call.text,
            "calls": [
                {
                    "id": o.call.id,
                    "name": o.call.name,
                    "arguments": o.call.arguments,
                    "tool": o.tool,
                    "result": o.result,
                }
                for o in outcomes
            ],
        }
        self._save(done, _round_key(self.key, rounds), attempt)
        self.added += _tool_messages(call.text, outcomes)

    def _save_reply(self, reply: str, call: CallResult | None, attempt: int) -> None:
        self.unsaved.append(self._message("reply", reply, call=call))
        self._save({"reply": reply, "interrupted": call is None}, self.key, attempt)

    def _save(self, done: dict[str, Any], key: Sequence[Any], attempt: int) -> None:
        """Store the unsaved messages with the record of one call; the turn's first record
        keeps what its memory/context methods wrote."""
        if not self.saved and self.outputs:
            done["outputs"] = [list(pair) for pair in self.outputs]
        self.saved = True
        record = _record(self.ctx, "ai", key, self.turn, done, attempt)
        _save(self.services, self.room, self.unsaved, record)
        self.unsaved = []

    def _message(
        self, kind: str, content: str, *, call: CallResult | None = None, name: str | None = None
    ) -> NewMessage:
        room = self.room
        return _message(
            self.spec,
            self.ctx,
            kind,
            content,
            turn=self.turn,
            room=room,
            souls=room.souls,
            users=room.users,
            call=call,
            name=name,
        )


def _round_key(key: Sequence[Any], rounds: int) -> list[Any]:
    """The record key of a turn's tool round: the turn's key, then ``tools`` and the round."""
    return [*key, "tools", rounds]


def _tool_messages(text: str, outcomes: Sequence[ToolOutcome]) -> list[dict[str, Any]]:
    """A tool round as the next call carries it: the assistant's calls, then one ``tool``
    message per result (OpenAI protocol)."""
    asked = {
        "role": "assistant",
        "content": text or None,
        "tool_calls": [o.call.as_message() for o in outcomes],
    }
    return [asked, *(o.as_message() for o in outcomes)]


async def _offered_tools(services: TurnServices, room: _Room) -> list[Tool]:
    """The tools the executor's `tools:` offers on this turn (§15.5)."""
    names = offered_names(room.executor_spec.tools, services.all_tools)
    return await services.toolbox.tools(names) if names else []


async def _model_messages(
    services: TurnServices,
    ctx: Context,
    spec: TurnSpec,
    room: _Room,
    texts: _Texts,
    turn: int,
    outputs: list[tuple[str, Any]],
    *,
    last: int | None = None,
) -> list[dict[str, str]]:
    """The messages of the turn's first call (§13.3); ``last`` bounds the built-in context
    to the messages stored before this turn (a resumed turn whose first attempts replayed)."""
    prompt = texts.prompt
    context = await _context_block(services, ctx, spec, room, prompt, turn, outputs, last=last)
    memory_method = _method(ctx, "memory", spec.memory)
    memory = ""
    if memory_method is not None:
        memory = await _method_block(
            services,
            ctx,
            memory_method,
            prompt=prompt,
            turn=turn,
            voice=room.voice,
            outputs=outputs,
        )
    return build_messages(
        prompt=prompt,
        safety=services.safety,
        style=services.style,
        persona=services.store.persona(str(room.voice_spec.soul)),
        user_info=services.store.profiles(services.owners),
        context=context,
        memory=memory,
        narration=texts.lead,
    )


# ---------------------------------------------------------------------- checkpoints (§16.4)


def _path(ctx: Context) -> str:
    return str(getattr(ctx, "path", ""))


def _new_turn(services: TurnServices) -> int:
    """A live turn's id: the session's next one that no replayed record holds. Ids are handed
    out in the order turns ask for them, so concurrent branches get the same ids in every run
    (``fems/mock`` replies depend on them)."""
    while True:
        turn = services.store.new_turn(services.session)
        if turn not in services.log.turns:
            return turn


def _record(
    ctx: Context,
    kind: str,
    key: Sequence[Any],
    turn: int,
    result: Mapping[str, Any],
    attempt: int = 0,
) -> Checkpoint:
    """The turn record saved with the turn's messages."""
    steps = getattr(ctx, "steps", None)
    return Checkpoint(
        TurnLog.entry(kind, key, turn, result, attempt),
        step=steps.total if steps is not None else 0,
        node=ctx.node,
    )


def _replayed(
    services: TurnServices, ctx: Context, spec: TurnSpec, room: _Room, turn: int, attempt: int
) -> None:
    services.trace.write(
        "replay",
        node=ctx.node,
        action=spec.action,
        actor=str(room.voice),
        turn=turn,
        attempt=attempt,
    )


def _consume_script_reply(services: TurnServices, choice: ModelChoice, turn: OfflineTurn) -> None:
    """A replayed call takes its ``fems/script`` reply as the first run did, so live calls
    after it get the replies an uninterrupted run would have given them."""
    script = getattr(services.models, "script", None)
    if choice.model == "fems/script" and script is not None:
        with contextlib.suppress(RunError):  # the recorded reply stands
            script.reply(turn)


@dataclass
class _Verdict:
    """A reply's problems: those the model is told, and resolve texts with `show_to_ai` false."""

    shown: list[str] = field(default_factory=list)
    hidden: list[str] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        return self.shown + self.hidden


async def _validate(
    services: TurnServices,
    frame: Frame,
    spec: TurnSpec,
    prompt: str,
    reply: str,
    outcome: SignalOutcome,
) -> _Verdict:
    """Check a reply (§10.4–§10.6); a failed resolve rolls the reply's assignments back."""
    verdict = _Verdict([f"rejected signal {r.raw!r}: {r.reason}" for r in outcome.rejected])
    if spec.strict:
        verdict.shown += [f"out '{o.label}' was not set" for o in outcome.unset]
    if spec.resolve is not None:
        name = f"{spec.resolve.code}.{spec.resolve.function}"
        checked = await run_resolve(
            _resolve_function(services, spec.resolve),
            spec.resolve.args,
            frame,
            prompt=prompt,
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
    return verdict


def _resolve_function(services: TurnServices, resolve: ResolveSpec) -> Callable[..., Any]:
    if services.code is None:
        raise RunError(f"resolve {resolve.code}.{resolve.function} needs the script's code: files")
    function = getattr(services.code(resolve.code), resolve.function, None)
    if not callable(function):
        raise RunError(f"resolve: {resolve.code}.{resolve.function} is not a function")
    return function


def _set_variable(frame: Frame, outcome: SignalOutcome) -> None:
    """Scripts that declare `SET_VARIABLE` see this reply's rejected signals in it (§10.5)."""
    if frame.declared("SET_VARIABLE"):
        frame.assign("SET_VARIABLE", "=", outcome.SET_VARIABLE)


def _label(target: str, key: Any) -> str:
    if key is None:
        return target
    return f"{target}.{key}" if ACTOR_NAME.fullmatch(str(key)) else f"{target}[{key}]"


def _feedback_text(problems: Sequence[str]) -> str:
    lines = ["Your previous reply could not be accepted:"]
    lines += [f"- {p}" for p in problems]
    lines.append("Answer again; set each required variable with SET VARIABLE: <<name = value>>.")
    return "\n".join(lines)


def _report(
    services: TurnServices, ctx: Context, spec: TurnSpec, room: _Room, problems: Sequence[str]
) -> None:
    """Lenient default (§10.6): problems go to the trace and a warning, and the flow goes on."""
    services.trace.write(
        "rejected", node=ctx.node, action=spec.action, actor=str(room.voice), problems=problems
    )
    where = f"{services.file}:{spec.line}" if services.file else f"line {spec.line}"
    for problem in problems:
        services.warn(f"{where}: warning: action {spec.action}: {problem}")
        if services.transcript is not None:
            services.transcript.problem(spec.action, str(room.voice), problem)


async def _give_up(
    services: TurnServices,
    ctx: Context,
    spec: TurnSpec,
    room: _Room,
    reply: str,
    problems: Sequence[str],
    result: TurnResult,
) -> TurnResult:
    """Retries exhausted: run the fallback, or stop the run naming action, reply and problem."""
    services.trace.write(
        "rejected",
        node=ctx.node,
        action=spec.action,
        actor=str(room.voice),
        problems=problems,
        final=True,
    )
    if spec.fallback is None:
        shown = reply if len(reply) <= 500 else reply[:500] + "…"
        raise RunError(
            f"action {spec.action}: no valid reply from {room.voice} after {result.calls} "
            f"call(s); last reply: {shown!r}; problem: {'; '.join(problems)}",
            services.file,
            spec.line,
        )
    services.trace.write("fallback", node=ctx.node, action=spec.action, actor=str(room.voice))
    await spec.fallback()
    result.fell_back = True
    return result


def _offline_turn(frame: Frame, spec: TurnSpec, room: _Room, turn: int, text: str) -> OfflineTurn:
    """What `fems/mock` and `fems/script` may know: outs, current values, candidate actors.

    Candidates are the actors the rendered prompt names, else the others in scope (§15.3).
    """
    others = [str(a) for a in room.actors if a != room.voice]
    candidates = named_actors(text, frame) or others or [str(room.voice)]
    outs = tuple(offline_out(out, frame) for out in spec.outs or ())
    return OfflineTurn(spec.action, str(room.voice), turn, 0, outs, tuple(candidates))


async def _call(
    services: TurnServices,
    spec: TurnSpec,
    choice: ModelChoice,
    messages: list[dict[str, Any]],
    offline: OfflineTurn,
    delay: float,
    tools: Sequence[Mapping[str, Any]] = (),
) -> CallResult | None:
    """One model call; None when `interrupt:` fired first (the call is cancelled, §10.7).
    ``delay`` is the meta.delay of the module the turn runs in (§3); ``tools`` the offered
    tools (§15.5)."""
    request = services.models.complete(choice, messages, offline, delay, tools)
    if spec.interrupt is None:
        return await request
    call = asyncio.ensure_future(request)
    watch = asyncio.ensure_future(_interrupt_fired(services, spec.interrupt))
    try:
        await asyncio.wait({call, watch}, return_when=asyncio.FIRST_COMPLETED)
        if call.done():
            return call.result()
        return None
    finally:
        for task in (call, watch):
            task.cancel()
        await asyncio.gather(call, watch, return_exceptions=True)


async def _interrupt_fired(services: TurnServices, interrupt: InterruptSpec) -> None:
    if interrupt.kind in ("human", "human_except"):
        await services.inputs.wait(interrupt.actors)
        return
    if interrupt.check is None:
        raise RunError("interrupt: a check form needs a check function")
    while True:
        await asyncio.sleep(services.poll)
        fired = interrupt.check()
        if inspect.isawaitable(fired):
            fired = await fired
        if fired:
            return


def _trace_call(
    services: TurnServices,
    ctx: Context,
    spec: TurnSpec,
    room: _Room,
    choice: ModelChoice,
    messages: list[dict[str, Any]],
    reply: str,
    call: CallResult | None,
    attempt: int,
) -> None:
    services.model_calls += 1
    if not services.trace.active:
        return  # the event (the scope sorted, the tool calls as messages) is not built
    services.trace.write(
        "llm_call",
        node=ctx.node,
        action=spec.action,
        actor=str(room.voice),
        scope=room.names,
        model=choice.model,
        messages=messages,
        reply=reply,
        attempt=attempt,
        interrupted=call is None,
        tries=call.attempts if call else None,
        prompt_tokens=call.prompt_tokens if call else None,
        completion_tokens=call.completion_tokens if call else None,
        cost=call.cost if call else None,
        tool_calls=[c.as_message() for c in call.tool_calls] if call else [],
    )


# ---------------------------------------------------------------------- human turns


async def run_human_turn(services: TurnServices, ctx: Context, spec: TurnSpec) -> TurnResult:
    """A `@human` turn: show prompt and context, read text and out values (§10.8)."""
    return await _at_action(services, spec, _human_turn(services, ctx, spec))


async def _human_turn(
    services: TurnServices, ctx: Context, spec: TurnSpec, room: _Room | None = None
) -> TurnResult:
    """``room``: the turn's room when the caller has built it already (a mind turn)."""
    frame = ctx.frame
    room = room or _Room.of(services, frame, spec)
    if services.human is None:
        raise RunError("human turns need --human terminal or an answers file")
    texts = _render_texts(frame, spec)
    prompt = texts.prompt
    key = services.log.key(_path(ctx), ctx.node, spec.action, str(room.executor))
    record = services.log.recorded(key)
    if record is not None:  # a resumed run replays this answer (§16.4)
        turn = int(record["turn"])
        values = record["result"].get("vars") or {}
        answer = HumanAnswer(
            str(record["result"].get("text", "")),
            {name: frame.variables.adopt(value) for name, value in values.items()},
        )
        _replayed(services, ctx, spec, room, turn, 0)
        next_answer = getattr(services.human, "next_answer", None)
        if callable(next_answer):  # an answers file: take this answer as the first run did
            with contextlib.suppress(RunError):
                next_answer(spec.action, str(room.executor))
    else:
        turn = _new_turn(services)
        context = await _context_block(services, ctx, spec, room, prompt, turn)
        request = HumanRequest(
            action=spec.action,
            actor=str(room.executor),
            prompt=texts.shown,
            outs=tuple(spec.outs or ()),
            context=context,
            role=str(room.voice) if spec.role else None,
            frame=frame,
        )
        answer = await services.human.ask(request)
        said = _message(
            spec,
            ctx,
            "human",
            answer.text,
            turn=turn,
            room=room,
            souls=room.souls,
            users=room.users,
        )
        done = {"text": answer.text, "vars": answer.vars}
        _save(
            services,
            room,
            [*_opening(spec, ctx, room, turn, texts), said],
            _record(ctx, "human", key, turn, done),
        )
    services.trace.write(
        "human",
        node=ctx.node,
        action=spec.action,
        actor=str(room.executor),
        text=answer.text,
        vars=answer.vars,
    )
    services.inputs.notify(str(room.executor))
    outcome = apply_values(answer.vars, frame, spec.outs)
    if outcome.rejected and isinstance(services.human, AnswersFileHuman):
        raise _unfit_answer(services, spec, services.human, outcome.rejected[0])
    verdict = await _validate(services, frame, spec, prompt, answer.text, outcome)
    _set_variable(frame, outcome)
    if verdict.problems:
        _report(services, ctx, spec, room, verdict.problems)
    return TurnResult(
        reply=answer.text,
        assigned={_label(a.target, a.key): a.value for a in outcome.applied},
        rejected=outcome.SET_VARIABLE,
    )


def _unfit_answer(
    services: TurnServices, spec: TurnSpec, answers: AnswersFileHuman, rejected: Rejected
) -> RunError:
    """An answers file's value that does not fit its out (§10.8): a run error, not the lenient
    warning a model's signal gets, since a file cannot be asked again."""
    out, _, value = rejected.raw.partition(" = ")  # apply_values' "name = value"
    return RunError(
        f"action {spec.action}: {answers.origin} answers out {out} with {value}, which does "
        f"not fit: {rejected.reason}; correct the answer in {answers.origin}",
        services.file,
        spec.line,
    )
