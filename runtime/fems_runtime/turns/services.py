"""How a run opens what its turns share (:class:`TurnServices`): the model client, the store and
its session (new, or resumed from its turn records, §16.4), the provider of human answers; and
the entry of each turn, where its errors are located at the action."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from fems_runtime.events import RunEvents, TurnBegan, TurnEnded, TurnEventKind
from fems_runtime.human import AnswersFileHuman, HumanProvider, MockHuman, TerminalHuman
from fems_runtime.lineage import Branch, Inheritance, open_branch
from fems_runtime.llm import DEFAULT_RETRY_BUDGET, DEFAULT_TIMEOUT, ModelClient, RetryPolicy
from fems_runtime.options import replies_conflict
from fems_runtime.project import ProjectConfig
from fems_runtime.records import RunError, TraceWriter, TurnLog
from fems_runtime.store import Store, parse_session_spec
from fems_runtime.store.opening import FIRST_SESSION, OpeningStore, fresh_file
from fems_runtime.tools import DEFAULT_MAX_TOOL_ROUNDS, Toolbox
from fems_runtime.turns.ai import run_ai_turn
from fems_runtime.turns.human import run_human_turn, run_mind_turn
from fems_runtime.turns.shared import RunWarnings, SharedServices

if TYPE_CHECKING:
    from fems_runtime.flow import Context
    from fems_runtime.specs import TurnResult, TurnSpec
    from fems_runtime.variables import ActorSpec, BlueprintSpec, Variables


class ScriptFacts(Protocol):
    """What opening a run needs of its script (:class:`~fems_runtime.app.ScriptInfo`)."""

    @property
    def file(self) -> str: ...

    @property
    def sha256(self) -> str: ...

    @property
    def meta(self) -> Mapping[str, Any]: ...


class RunProgram(Protocol):
    """What opening a run needs of its :class:`~fems_runtime.app.Program`: the script, the
    generated module's file, and the script's folder when ``fems2py run`` gave it."""

    @property
    def script(self) -> ScriptFacts: ...

    @property
    def module_file(self) -> str: ...

    @property
    def project_dir(self) -> str | None: ...


class TurnServices(SharedServices):
    """The run's :class:`SharedServices`, opened from a generated module's `Program`;
    ``ai_turn``, ``human_turn`` and ``mind_turn`` run one turn of that kind
    (:class:`~fems_runtime.flow.Context` calls them with the action's
    :class:`~fems_runtime.specs.TurnSpec`)."""

    @classmethod
    def open(
        cls,
        program: RunProgram,
        variables: Variables,
        trace: TraceWriter | None = None,
        *,
        events: RunEvents | None = None,
        model: str | None = None,
        replies: str | Path | Mapping[str, Any] | None = None,
        db: str | None = None,
        session: str | int | None = None,
        human: str | Mapping[str, Any] | HumanProvider | None = None,
        seed: int | None = None,
        code: Callable[[str], Any] | None = None,
        base_dir: str | Path = ".",
        resume: bool = False,
        branch: Branch | None = None,
        timeout: float | None = None,
        retry_budget: float | None = None,
        root: str | Path | None = None,
    ) -> TurnServices:
        """Build the run's services from a generated module's `Program` and the run options.

        The model map and `.env` are read next to the generated module and in `base_dir` (the
        working directory), which wins on a conflict (§15.2). A failure here (a session that
        does not exist, a database that cannot be opened) is a run error located in the script.
        ``resume`` continues the session's last run from its turn records (§16.4): ``session``
        (or ``meta.session``) names it, else the newest session of this script. ``branch``
        starts a new session from another one's turns (§16.4a). ``timeout`` and
        ``retry_budget`` (seconds) win over ``meta:`` (§15.4); ``root``: the folder the
        built-in tools may reach (default: the script's folder, §15.5). The turns emit their
        events on ``events`` (a trace file given as ``trace`` subscribes to them)."""
        script = program.script
        meta = dict(script.meta)
        project_dirs = _project_dirs(program, base_dir)
        try:
            project = ProjectConfig.of_folders(project_dirs)
            client = _client_options(meta, timeout, retry_budget)
            models = _model_client(project, meta, model, seed or 0, replies, client)
            store, number, log = open_store(
                program, variables, db, Opening(session, resume, branch)
            )
        except RunError as error:
            raise error.located(script.file, None) from None
        folder = root if root is not None else project_dirs[0]
        return cls(
            models=models,
            store=store,
            session=number,
            trace=trace,
            events=events or RunEvents(script.file),
            file=script.file,
            human=_human_provider(human, seed or 0),
            code=code,
            log=log,
            toolbox=Toolbox(folder, code, project.servers),
            all_tools=_script_tools(variables),
            **_meta_settings(meta),
        )

    async def ai_turn(self, ctx: Context, spec: TurnSpec) -> TurnResult:
        """An `@ai` turn: prompt, context, model call, signals, validation loop (§9, §10, §13)."""
        return await self._at_action(ctx, spec, "ai", run_ai_turn(self, ctx, spec))

    async def human_turn(self, ctx: Context, spec: TurnSpec) -> TurnResult:
        """A `@human` turn: show prompt and context, read text and out values (§10.8)."""
        return await self._at_action(ctx, spec, "human", run_human_turn(self, ctx, spec))

    async def mind_turn(self, ctx: Context, spec: TurnSpec) -> TurnResult:
        """A `@mind` turn: an AI turn or a human turn by the executor's `type` (§9.1)."""
        return await self._at_action(ctx, spec, "mind", run_mind_turn(self, ctx, spec))

    async def _at_action(
        self, ctx: Context, spec: TurnSpec, kind: TurnEventKind, turn: Awaitable[TurnResult]
    ) -> TurnResult:
        """Await ``turn`` with its run errors located at the action: the one place a turn's
        errors get their ``.fems`` line, and the action's name when they do not say it; and
        the one place a turn begins and ends as events (whose subscribers, such as the cost
        limit, may stop the run at its end)."""
        events, outer = self.events, ctx.span
        began, ran_as = None, kind
        if events.active:
            actor, ran_as = _acting(ctx, spec, kind)
            where = events.where(ctx.path, ctx.node, spec.line, spec.action, actor)
            began = events.emit(TurnBegan(id=events.new_id(), parent=outer, where=where, kind=kind))
            ctx.span = began.id
        try:
            result = await turn
        except RunError as error:
            located = _located(error, self.file, spec)
            if began is not None:
                events.emit(TurnEnded.after(began, located, kind=ran_as))
            raise located from error.__cause__
        except BaseException as error:
            if began is not None:
                events.emit(TurnEnded.after(began, error, kind=ran_as))
            raise
        finally:
            ctx.span = outer
        if self.debugger is not None:
            self.debugger.turn_ended(spec, result)
        if began is not None:
            ended = TurnEnded.after(
                began, kind=ran_as, turn=result.turn, calls=result.calls, fell_back=result.fell_back
            )
            events.emit(ended)
        return result

    def finish(self, status: str) -> None:
        """Print the run's warnings, record how the session ended, release the database."""
        inherited = self.log.inherited
        if isinstance(inherited, Inheritance):
            inherited.finish()
            if status == "completed" and inherited.left():
                self.warn(
                    f"{self.file}: --fork {inherited.parent}: {inherited.left()} of the "
                    f"records to replay from session {inherited.parent} did not come up (the "
                    "script changed before the fork point?): those turns ran live; --reuse "
                    "replays only what is unchanged"
                )
        if isinstance(self.warn, RunWarnings):
            self.warn.flush()
        if self.log.turns:  # a resumed run: never hand out a replayed turn id again
            self.store.set_last_turn(self.session, max(self.log.turns), at_least=True)
        self.store.set_status(self.session, status)
        self.store.close()


def _located(error: RunError, file: str, spec: TurnSpec) -> RunError:
    """A turn's run error at its action's line, naming the action when it does not."""
    if error.line is None and not error.message.startswith(f"action {spec.action}"):
        error.message = f"action {spec.action}: {error.message}"
    return error.located(file, spec.line)


def _acting(ctx: Context, spec: TurnSpec, kind: TurnEventKind) -> tuple[str, TurnEventKind]:
    """Who a turn speaks as and the kind it runs as (a mind turn's, by its executor's type),
    as far as they are known before it starts: an executor that does not resolve is named
    as the action writes it, and the turn fails with the reason."""
    frame = ctx.frame
    with contextlib.suppress(RunError):
        executor = frame.resolve_actor(spec.executor, "the executor")
        voice = frame.resolve_actor(spec.role, "the role") if spec.role else executor
        if kind == "mind":
            kind = "human" if frame.variables.actors[executor].is_human else "ai"
        return str(voice), kind
    return spec.role or spec.executor, kind


def _model_client(
    project: ProjectConfig,
    meta: Mapping[str, Any],
    model: str | None,
    seed: int,
    replies: str | Path | Mapping[str, Any] | None,
    options: Mapping[str, Any],
) -> ModelClient:
    """The run's model client (§15.2): ``--replies`` implies ``fems/script`` (and contradicts
    ``fems/mock``)."""
    conflict = replies_conflict(model, replies)
    if conflict is not None:
        raise RunError(conflict)
    return ModelClient.for_project(
        project,
        meta_model=_text(meta.get("model")) or None,
        run_model="fems/script" if replies is not None and model is None else model,
        seed=seed,
        replies=replies,
        **options,
    )


def _meta_settings(meta: Mapping[str, Any]) -> dict[str, Any]:
    """What every turn takes from ``meta:`` (§3): the system blocks, the owners, the caps."""
    return {
        "safety": _text(meta.get("system_safety")),
        "style": _text(meta.get("output_style")),
        "owners": _owners(meta.get("owner", ())),
        "max_tool_rounds": int(meta.get("max_tool_rounds", DEFAULT_MAX_TOOL_ROUNDS)),
        "max_tokens": meta["max_tokens"] if isinstance(meta.get("max_tokens"), int) else None,
    }


def _client_options(
    meta: Mapping[str, Any], timeout: float | None, retry_budget: float | None
) -> dict[str, Any]:
    """The model client's limits from ``meta:`` (§3), the run options winning (§15.4)."""
    budget = float(retry_budget or meta.get("retry_budget") or DEFAULT_RETRY_BUDGET)
    return {
        "max_concurrency": int(meta.get("max_concurrency", 8)),
        "delay": float(meta.get("delay", 0) or 0),
        "timeout": float(timeout or meta.get("timeout") or DEFAULT_TIMEOUT),
        "retry": RetryPolicy(budget=budget),
    }


def _owners(owner: Any) -> tuple[str, ...]:
    """`meta: owner`, one user id or a list of them (§3)."""
    owners = owner if isinstance(owner, list | tuple) else (owner,)
    return tuple(str(o) for o in owners if o not in (None, ""))


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


def _project_dirs(program: RunProgram, base_dir: str | Path) -> list[Path]:
    """Where `fems.toml` and `.env` are looked for: the script's folder (the program's
    ``project_dir`` when ``fems2py run`` set it, else the generated module's), then
    `base_dir`."""
    dirs = [Path(base_dir).resolve()]
    module_file, project_dir = program.module_file, program.project_dir
    if project_dir or module_file:
        module_dir = Path(str(project_dir or module_file)).resolve()
        if not project_dir:
            module_dir = module_dir.parent
        if module_dir != dirs[0]:
            dirs.insert(0, module_dir)
    return dirs


@dataclass(frozen=True)
class Opening:
    """Which session a run opens: ``session`` (§3 `session`, None: ``meta.session``), resumed
    (§16.4), or a new one that ``branch`` starts (§16.4a); ``warn`` takes the notices."""

    session: str | int | None = None
    resume: bool = False
    branch: Branch | None = None
    warn: Callable[[str], None] = field(default=lambda text: print(text, file=sys.stderr))


def open_store(
    program: RunProgram, variables: Variables, db: str | None, opening: Opening
) -> tuple[Store, int, TurnLog]:
    """Open the database and the session (§3 `database`, `session`), recording the actors;
    a new run marks its start, a resumed one loads the records to replay (§16.4), a branch
    begins as a resumed run of its new session (§16.4a). A new session in a database file not
    made yet opens behind its first request (:class:`OpeningStore`): nothing stored there can
    be needed before; the others need their stored context first."""
    script = program.script
    meta = script.meta
    database = db or _text(meta.get("database")) or None
    spec = meta.get("session") if opening.session is None else opening.session
    if opening.branch is None and not opening.resume:
        if parse_session_spec(spec)[0] is None and fresh_file(database):
            behind = OpeningStore(lambda: _new_session(Store(database), script, spec, variables))
            return behind, FIRST_SESSION, TurnLog()
        return (*_new_session(Store(database), script, spec, variables), TurnLog())
    store = Store(database)
    try:
        if opening.branch is not None:
            branched = open_branch(
                store,
                opening.branch,
                title=_text(meta.get("name")) or None,
                script=script.file,
                script_hash=script.sha256,
                warn=lambda text: opening.warn(f"{script.file}: notice: {text}"),
            )
            number, log = _resume_session(store, script, branched)
        else:
            number, log = _resume_session(store, script, spec)
        _record_actors(store, number, variables)
    except BaseException:
        store.close()
        raise
    return store, number, log


def _new_session(
    store: Store, script: ScriptFacts, spec: str | int | None, variables: Variables
) -> tuple[Store, int]:
    """Open session ``spec`` as a new run of ``script`` with its actors (the store is closed
    when that fails)."""
    try:
        number = store.open_session(
            spec,
            title=_text(script.meta.get("name")) or None,
            script=script.file,
            script_hash=script.sha256,
        )
        store.start_run(number)
        _record_actors(store, number, variables)
    except BaseException:
        store.close()
        raise
    return store, number


def _record_actors(store: Store, number: int, variables: Variables) -> None:
    """The session's actors and their personas (§14)."""
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


def _resume_session(
    store: Store, script: ScriptFacts, spec: str | int | None
) -> tuple[int, TurnLog]:
    """Check that session ``spec`` (or the newest of this script) can be resumed, then make
    it ready: status running, turn counter back at its last run's start; a session that a
    fork or a reuse started inherits its parent's records (§16.4a)."""
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
            f"(run without --resume to start a new run, or with --fork {number} to branch "
            "from it)"
        )
    if row["script_hash"] != script.sha256:
        raise RunError(
            f"--resume: session {number} was run from a different script "
            f"({row['script'] or 'unknown'}, sha256 {str(row['script_hash'])[:12]}…); "
            f"this is {script.file}, sha256 {script.sha256[:12]}…: resume with the module "
            f"built from the same source, or run with --reuse {number} to replay what is "
            "unchanged"
        )
    found = store.run_records(number)
    if found is None:
        raise RunError(f"--resume: session {number} has no checkpoints to resume from")
    start, records = found
    store.set_last_turn(number, int(start.get("turn") or 0))
    store.set_status(number, "running")
    inherited = Inheritance.load(store, number, start, records)
    return number, TurnLog(records, resumed=True, inherited=inherited)


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
