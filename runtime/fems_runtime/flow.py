"""The `Context` that generated flow and action functions receive, and the flow machinery.

Generated code keeps the control flow visible (structured ``if``/``while`` where the flow
allows, else one ``if node == …`` block per node, edges as ``if``\\ s); what
it cannot say in a few lines lives here: reading and writing variables through the current
:class:`~fems_runtime.variables.Frame`, counting steps, running concurrent branches with
:class:`asyncio.TaskGroup` until the compiler-computed merge node (§12.5), ``join(n)`` races
that cancel the losers (§12.6), ``for``/``par`` loops with branch-local loop variables (§12.7,
§12.8), module calls with fresh frames (§11), and the "flow stuck" error (§12.3).
"""

from __future__ import annotations

import asyncio
import functools
import sys
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import CodeType, FrameType
from typing import Any, Literal, Protocol, TypeVar

from fems_runtime import flow_events
from fems_runtime.events import (
    Began,
    Ended,
    RunEvents,
    StepBegan,
    StepEnded,
    Where,
)
from fems_runtime.linetable import LineTable
from fems_runtime.names import DeclaredNames, call_node, loop_node
from fems_runtime.records import RunError, StepCounter
from fems_runtime.signals import OutSpec
from fems_runtime.specs import ScopeItem, TurnResult, TurnSpec
from fems_runtime.values import Actor, format_value, show_value
from fems_runtime.variables import Frame
from fems_runtime.words import TERMINAL_NODES

YIELD_EVERY = 64  # steps between two yields to the event loop of a flow that runs alone
_MISSING: Any = object()


class FlowFunction(Protocol):
    """A generated flow function. A structured one takes just the context; one with concurrent
    branches (a dispatch over its nodes) also runs from ``node`` until it ends or reaches a
    ``stop`` node, which is how :meth:`Context.fork` starts its branches. Its
    ``__globals__`` are the generated module's."""

    __name__: str

    @property
    def __globals__(self) -> dict[str, Any]: ...  # read-only, as a function's is

    def __call__(self, ctx: Context, /) -> Awaitable[str | None]: ...


class DispatchFunction(Protocol):
    """A flow function that can be entered at any of its nodes (see :class:`FlowFunction`)."""

    __name__: str

    def __call__(
        self, ctx: Context, node: str = ..., stop: tuple[str, ...] = ...
    ) -> Awaitable[str | None]: ...


ActionFunction = Callable[["Context"], Awaitable[None]]
_Flow = TypeVar("_Flow", bound=Callable[..., Awaitable[str | None]])
_Result = TypeVar("_Result")

#: What a "flow stuck" error lists for one node: each condition as written and what it reads
#: (the paths one string apart, as generated modules write them, or a sequence).
Conditions = Sequence[tuple[str, str | Sequence[str]]]
#: A generated module's ``CONDITIONS``: (flow function, node) → its conditions, each as written
#: with what it reads: what a "flow stuck" error lists (§12.3).
ConditionTable = Mapping[tuple[str, str], Conditions]


def eq(left: object, right: object) -> bool:
    """``left == right``: how generated code writes a comparison with ``true``/``false``, which
    FEM means as ``==`` (``1 == True`` holds), in a form linters do not rewrite to ``is``."""
    return left == right


def ne(left: object, right: object) -> bool:
    """``left != right`` (see :func:`eq`)."""
    return left != right


def _outs(outs: Any) -> tuple[OutSpec, ...] | None:
    """An action's outs as generated: a tuple of ``OutSpec``s and plain names, or one
    ``OutSpec`` (``outs=fr.OutSpec(…)``, without the one-item tuple around it)."""
    if outs is None:
        return None
    if isinstance(outs, OutSpec):
        return (outs,)
    try:
        return _out_specs(outs)
    except TypeError:  # unhashable: an out whose key or choices hold a list
        return tuple(OutSpec.of(out) for out in outs)


@functools.lru_cache(maxsize=1024)
def _out_specs(outs: tuple[OutSpec | str, ...]) -> tuple[OutSpec, ...]:
    """The specs of an action's outs, built once per distinct tuple: generated outs are
    constants, read again at every run of the action (and ``OutSpec`` is frozen)."""
    return tuple(OutSpec.of(out) for out in outs)


def lines(*parts: str) -> str:
    """A multi-line text written one line per argument in generated code (prompts, §1.5)."""
    return "\n".join(parts)


@dataclass(frozen=True)
class FuncSpec:
    """An ``@func(alias.fn)`` action (§9.7), already compiled; ``code="system"`` with
    ``function="spawn"`` is the built-in ``system.spawn`` (§9.8)."""

    code: str
    function: str
    inputs: dict[str, Any] | None = None
    outs: tuple[OutSpec, ...] | None = None
    # the action's name and its .fems line, filled in by Context.func
    action: str = ""
    line: int = 0


@dataclass(frozen=True)
class MethodSpec:
    """A ``memory``/``context`` method (§8): ``inputs`` maps each ``in:`` name to None (pass
    the named value) or to a function of the context computing it."""

    kind: Literal["memory", "context"]
    name: str
    code: str
    function: str
    inputs: Mapping[str, Callable[[Context], Any] | None] = field(default_factory=dict)
    outputs: tuple[str, ...] = ()


@dataclass(frozen=True)
class ModuleSpec:
    """What a module call needs besides its flow function: parameters, fresh locals (§11).
    ``name`` None: the module is named after its function (:mod:`fems_runtime.names`)."""

    name: str | None
    params: tuple[str, ...] = ()
    variables: Mapping[str, Any] = field(default_factory=dict)
    meta: Mapping[str, Any] = field(default_factory=dict)
    methods: tuple[MethodSpec, ...] = ()


def module(
    name: str | None = None,
    *,
    params: tuple[str, ...] = (),
    variables: Mapping[str, Any] | None = None,
    meta: Mapping[str, Any] | None = None,
    methods: tuple[MethodSpec, ...] = (),
) -> Callable[[_Flow], _Flow]:
    """Decorator marking a generated flow function as module ``name`` (by default, the name
    its function stands for, see :mod:`fems_runtime.names`); it stays callable as is
    (concurrent branches re-enter it at a node) and carries its :class:`ModuleSpec`."""
    spec = ModuleSpec(name, params, dict(variables or {}), dict(meta or {}), methods)

    def mark(function: _Flow) -> _Flow:
        function.fems_module = spec  # type: ignore[attr-defined]
        return function

    return mark


class TurnRunner(Protocol):
    """Runs one turn of each kind (:class:`fems_runtime.turns.TurnServices`)."""

    async def ai_turn(self, ctx: Context, spec: TurnSpec) -> TurnResult: ...

    async def human_turn(self, ctx: Context, spec: TurnSpec) -> TurnResult: ...

    async def mind_turn(self, ctx: Context, spec: TurnSpec) -> TurnResult: ...


class FlowDebugger(Protocol):
    """A debugger of the run (``--debug``, :mod:`fems_runtime.debug`): awaited as each node
    begins, before its action runs, so it can hold the branch there."""

    async def node(self, ctx: Context, node: str, action: ActionFunction | None) -> None: ...


class RunServices(Protocol):
    """What a run provides to every context (built by :mod:`fems_runtime.app`)."""

    file: str
    events: RunEvents
    lines: LineTable
    conditions: ConditionTable
    names: DeclaredNames
    #: each action call site's name and line (:meth:`Context._action`), kept by the program
    actions: dict[tuple[CodeType, str], tuple[str, int]]

    @property
    def debugger(self) -> FlowDebugger | None: ...

    @property
    def turns(self) -> TurnRunner: ...

    def code(self, alias: str) -> Any: ...

    async def func(self, ctx: Context, spec: FuncSpec) -> Any: ...


@dataclass
class _CallState:
    """Shared by every branch of one module call (or of the main flow): how paths ended."""

    exits: set[str] = field(default_factory=set)


@dataclass
class _Race:
    """One ``join(n)`` (§12.6): arrivals at ``merge`` counted across the fork that owns it and
    the forks nested in its branches that merge at the same node. The ``n``-th arrival cancels
    every branch task that has no arrival in it and has not ended (``[END]``, ``[OUT]``,
    ``[BREAK]``)."""

    merge: str
    needed: int
    arrived: int = 0
    groups: list[list[asyncio.Task[None]]] = field(default_factory=list)
    # tasks with an arrival in them: an arriving branch and the branches it runs inside
    holding: set[asyncio.Task[None]] = field(default_factory=set)
    # branch tasks that stepped on a terminal node: finished, never cancelled (values kept)
    ended: set[asyncio.Task[None]] = field(default_factory=set)

    def arrive(self, lineage: tuple[asyncio.Task[None], ...]) -> None:
        if lineage[-1] in self.holding:
            return  # counted already, arrival by arrival, by the nested fork this branch ran
        self.arrived += 1
        self.holding.update(lineage)
        if self.arrived == self.needed:
            for group in self.groups:
                for task in group:
                    if task not in self.holding and task not in self.ended:
                        task.cancel()


class Context:
    """The view one branch of the flow has of the run: ``ctx["name"]``, ``ctx.attr``,
    ``ctx.code``, ``ctx.assign``, the turns, and the flow helpers generated code calls."""

    def __init__(
        self,
        services: RunServices,
        frame: Frame,
        steps: StepCounter,
        *,
        methods: Mapping[str, MethodSpec] | None = None,
        call: _CallState | None = None,
        node: str | None = None,
        line: int | None = None,
        path: str = "",
        forks: dict[tuple[str, str], int] | None = None,
        delay: float = 0.0,
        span: int | None = None,
    ) -> None:
        self.services = services
        self.frame = frame
        self.steps = steps
        self.methods: Mapping[str, MethodSpec] = methods or {}
        self._call = call or _CallState()
        self.node = node
        self.line = line
        self._race: _Race | None = None
        self._lineage: tuple[asyncio.Task[None], ...] = ()  # the branch tasks this one runs in
        # the concurrent branches this context runs in, for turn keys (records.TurnLog, §16.4)
        self.path = path
        self._forks = {} if forks is None else forks  # per (path, fork): how many so far
        # a module's meta.delay (§3): spacing of model calls made inside it (0: the run's own)
        self.delay = delay
        #: the id of the span (run, step, branch, turn) this context's events happen in
        self.span = span

    def _branch_path(self, label: str) -> str:
        """The path of the branches of a fork or ``par`` starting now at ``label``: forks
        in one path run one after another, so their count is the same in every run."""
        count = self._forks.get((self.path, label), 0)
        self._forks[(self.path, label)] = count + 1
        return f"{self.path}/{label}#{count}"

    def _derive(self, frame: Frame) -> Context:
        derived = Context(
            self.services,
            frame,
            self.steps,
            methods=self.methods,
            call=self._call,
            node=self.node,
            line=self.line,
            path=self.path,
            forks=self._forks,
            delay=self.delay,
            span=self.span,
        )
        derived._race, derived._lineage = self._race, self._lineage
        return derived

    def where(self, action: str | None = None, actor: str | None = None) -> Where:
        """Where this branch is, for its events."""
        return self.services.events.where(self.path, self.node, self.line, action, actor)

    async def spanned(
        self, began: Began, ended: Callable[..., Ended], work: Awaitable[_Result]
    ) -> _Result:
        """Await ``work`` as the span ``began`` opened (its events nest in it), then emit its
        end, ``ended(began)`` or ``ended(began, error)`` with the error that escaped it
        (``StepEnded.after``)."""
        events, outer = self.services.events, self.span
        self.span = began.id
        try:
            result = await work
        except BaseException as error:
            events.emit(ended(began, error))
            raise
        finally:
            self.span = outer
        events.emit(ended(began))
        return result

    def error(self, message: str) -> RunError:
        """A :class:`RunError` located at the node this branch is running."""
        return RunError(message, self.services.file, self.line)

    # ------------------------------------------------------------------ variables

    def __getitem__(self, name: str) -> Any:
        return self.frame.get(name)

    def attr(self, actor: str, attr: str) -> Any:
        """``@x.attr`` / ``attr.@x`` (§7.3)."""
        return self.frame.attr(actor, attr)

    def actor(self, name: str) -> Actor:
        """``@x`` as the key of an entry an assignment writes (``hp.@x``, ``@x.hp``): an
        unbound actor variable there is a run error naming it (§7.2), not the key ``""``."""
        return self.frame.resolve_actor(name, "an actor as an entry's key")

    def code(self, alias: str) -> Any:
        """The author's Python module loaded for ``code:`` alias ``alias`` (§5)."""
        return self.services.code(alias)

    def assign(self, name: str, op: str, value: Any, key: Any = _MISSING) -> None:
        """One ``@assign`` statement (§9.6), under the branch rule (§12.5a)."""
        events = self.services.events
        if not events.active:  # the usual case: events nobody reads are not built
            self._assign(name, op, value, key)
            return
        where = self.where(self.services.names.of(sys._getframe(1).f_code.co_name))
        target = name if key is _MISSING else f"{name}[{key}]"
        assign = functools.partial(self._assign, name, op, value, key)
        flow_events.assigned(self, where, assign, target, op, value)

    def _assign(self, name: str, op: str, value: Any, key: Any) -> None:
        if key is _MISSING:
            self.frame.assign(name, op, value)
        else:
            self.frame.assign(name, op, value, key)

    # ------------------------------------------------------------------ actions

    async def ai(self, executor: str, **fields: Any) -> TurnResult:
        """An ``@ai`` turn (§9.1); ``fields`` as :class:`~fems_runtime.specs.TurnSpec`'s."""
        spec = self._turn_spec(executor, fields, sys._getframe(1))
        return await self.services.turns.ai_turn(self, spec)

    async def human(self, executor: str, **fields: Any) -> TurnResult:
        """A ``@human`` turn (§9.1, §10.8)."""
        spec = self._turn_spec(executor, fields, sys._getframe(1))
        return await self.services.turns.human_turn(self, spec)

    async def mind(self, executor: str, **fields: Any) -> TurnResult:
        """A ``@mind`` turn: ``@ai`` or ``@human`` by the executor's type (§9.1)."""
        spec = self._turn_spec(executor, fields, sys._getframe(1))
        return await self.services.turns.mind_turn(self, spec)

    async def func(self, code: str, function: str, **fields: Any) -> Any:
        """An ``@func(code.function)`` action: the author's Python in a worker thread (§9.7,
        §9.8); ``fields`` as :class:`FuncSpec`'s."""
        action, line = self._action(fields.pop("action", ""), sys._getframe(1))
        outs = _outs(fields.pop("outs", None))
        spec = FuncSpec(code, function, action=action, line=line, outs=outs, **fields)
        return await self.services.func(self, spec)

    def _turn_spec(self, executor: str, fields: dict[str, Any], caller: FrameType) -> TurnSpec:
        action, line = self._action(fields.pop("action", ""), caller)
        scope = _scope_items(tuple(fields.pop("scope", ())))
        if fields.get("outs") is not None:
            fields["outs"] = _outs(fields["outs"])
        return TurnSpec(executor, action=action, line=line, scope=scope, **fields)

    def _action(self, action: str, caller: FrameType) -> tuple[str, int]:
        """An action's name and line: the generated function that runs it stands for the
        action's name (see :mod:`fems_runtime.names`; else the name is given) and its first
        line is in the module's line table. Both are worked out once per call site and
        program: every later run of the action finds them in ``services.actions``."""
        services, code = self.services, caller.f_code
        site = services.actions.get((code, action))
        if site is None:
            name = action or services.names.of(code.co_name)
            site = services.actions[(code, action)] = (name, services.lines.of_function(code) or 0)
        return site

    # ------------------------------------------------------------------ flow

    async def step(self, node: str, action: ActionFunction | None = None) -> str:
        """Count one execution of ``node`` (§12.10), remember where this branch is, and run
        the node's ``action`` if it has one. Returns ``node``: a flow ends with
        ``return await ctx.step("END")``."""
        began = await self._count_step(node, sys._getframe(1), action)
        if action is not None:
            if began is None:
                await action(self)
            else:
                await self.spanned(began, StepEnded.after, action(self))
        elif began is not None:
            self.services.events.emit(StepEnded.after(began))
        return node

    async def _count_step(
        self, node: str, caller: FrameType, action: ActionFunction | None = None
    ) -> StepBegan | None:
        """One execution of ``node``, at the ``.fems`` line of the generated line ``caller``
        runs: counted, remembered as where this branch is, and begun as a span when someone
        listens (its caller ends it), naming the node's ``action``."""
        services, steps = self.services, self.steps
        line = services.lines.at(caller)
        self.node, self.line = node, line
        steps.step(node, services.file, line)
        if node in TERMINAL_NODES and self._race is not None:
            self._race.ended.add(self._lineage[-1])  # finished: a join(n) must not cancel it
        began = None
        events = services.events
        if events.active:
            named = services.names.of(action.__name__) if action is not None else None
            where = events.where(self.path, node, line, named)
            began = events.emit(
                StepBegan(id=events.new_id(), parent=self.span, where=where, step=steps.total)
            )
        if self.path or steps.total % YIELD_EVERY == 0:
            # a point where a cancelled branch (join(n)) stops and the other branches run; a
            # flow with nothing beside it only lets other tasks (the stage) in now and then
            await asyncio.sleep(0)
        if services.debugger is not None:
            await services.debugger.node(self, node, action)
        return began

    def stuck(self, node: str) -> RunError:
        """The "flow stuck" error (§12.3) at the line of the node's first condition: every
        condition and the values it read (from the module's ``CONDITIONS`` table)."""
        caller = sys._getframe(1)
        conditions = self.services.conditions.get((caller.f_code.co_name, node), ())
        parts = []
        for text, reads in conditions:
            paths = reads.split() if isinstance(reads, str) else reads
            values = ", ".join(f"{path} = {_read_and_show(self, path)}" for path in paths)
            shown = text if text.startswith("(") and text.endswith(")") else f"({text})"
            parts.append(f"  if {shown}" + (f"  where {values}" if values else ""))
        message = f"flow stuck after [{node}]: no out-edge condition holds\n" + "\n".join(parts)
        return RunError(message, self.services.file, self.services.lines.at(caller))

    def unknown_node(self, node: object) -> RunError:
        """Only reachable if generated code was edited by hand: a node the flow lacks."""
        return self.error(f"no node [{node}] in this flow (was the generated module edited?)")

    async def fork(
        self,
        flow: DispatchFunction,
        node: str,
        targets: Sequence[str],
        *,
        merge: str | None,
        join: int | None = None,
        stop: tuple[str, ...] = (),
    ) -> str | None:
        """Continue after ``node`` along ``targets`` (§12.3-§12.6).

        One target: just go there. Several: run each as a concurrent branch of ``flow`` until it
        reaches ``merge`` (without running it) or ends; then continue at ``merge`` once if any
        branch reached it, else this path ends (None). With ``join=n`` the first ``n`` arrivals
        win (arrivals through a nested fork that merges at the same join count one by one) and
        the other branches are cancelled (their own values never written back), but not one
        that stepped on a terminal node already: it has finished, and its values are kept.
        When the other branches end without arriving, fewer than ``n`` arrivals are enough, as
        for ``join(all)`` ("every live branch").
        """
        if len(targets) == 1:
            return targets[0]
        fork = flow_events.fork_began(self, "fork", targets=tuple(targets), merge=merge)
        inner_stop = (*stop, merge) if merge is not None else stop
        frames = [self.frame.branch(f"{node}->{target}") for target in targets]
        path = self._branch_path(node)
        results: list[str | None] = [None] * len(targets)
        tasks: list[asyncio.Task[None]] = []
        race = self._race if self._race is not None and self._race.merge == merge else None
        if race is None and join is not None and merge is not None:
            race = _Race(merge, join)
        if race is not None:
            race.groups.append(tasks)  # filled before any branch runs

        async def branch(index: int) -> None:
            ctx = self._derive(frames[index])
            task = asyncio.current_task()
            assert task is not None
            ctx._race, ctx._lineage = race, (*self._lineage, task)
            target = targets[index]
            ctx.path = f"{path}>{target}"
            work = _enter(flow, ctx, target, inner_stop)
            result = await flow_events.in_branch(ctx, fork, index, work, target=target)
            frames[index].finish()
            results[index] = result
            if result in TERMINAL_NODES:
                self._call.exits.add(result)
            if race is not None and result == merge:
                race.arrive(ctx._lineage)

        branches = _run_all([branch(i) for i in range(len(targets))], tasks)
        await flow_events.joined(self, fork, branches)
        self.frame.merge(frames)
        reached = merge is not None and merge in results
        flow_events.fork_joined(self, fork, merge if reached else node, targets, frames, reached)
        if reached:
            return merge
        # A branch may have stopped at an enclosing fork's merge node: pass that arrival on.
        return next((r for r in results if r is not None and r in stop), None)

    async def loop(
        self,
        kind: Literal["for", "par"],
        var: str,
        items: Iterable[Any],
        body: FlowFunction,
        *,
        node: str | None = None,
    ) -> None:
        """The loop node ``node`` (default: named after the loop, ``par_coder``, see
        :mod:`fems_runtime.names`), one step, then ``for``/``par VAR in items`` (§12.7,
        §12.8): ``items`` is snapshotted on entry; each iteration binds ``var`` in its own
        frame; ``par`` runs all iterations concurrently as branches and writes their own values
        back when all have finished."""
        began = await self._count_step(node or loop_node(kind, var), sys._getframe(1))
        if began is None:
            await self._iterate(kind, var, items, body)
        else:
            await self.spanned(began, StepEnded.after, self._iterate(kind, var, items, body))

    async def _iterate(
        self, kind: Literal["for", "par"], var: str, items: Iterable[Any], body: FlowFunction
    ) -> None:
        """The iterations of a loop whose node has just been stepped on."""
        line = self.line
        snapshot = _snapshot(items)
        if snapshot is None:
            raise RunError(
                f"{kind} {var}: cannot iterate over {format_value(items)} (a list is needed)",
                self.services.file,
                line,
            )
        fork = flow_events.fork_began(self, kind, var=var, items=tuple(snapshot))
        if kind == "for" and fork is None:
            for item in snapshot:
                await _enter(body, self._derive(self.frame.loop({var: item})), None)
            return
        if fork is not None and kind == "for":
            for index, item in enumerate(snapshot):
                ctx = self._derive(self.frame.loop({var: item}))
                work = flow_events.in_branch(ctx, fork, index, _enter(body, ctx, None), item=item)
                await flow_events.joined(self, fork, work)
            flow_events.fork_joined(self, fork, self.node)
            return
        frames = [self.frame.branch(f"par {var}={format_value(item)}") for item in snapshot]
        path = self._branch_path(f"{self.node or 'par'} {var}")

        async def iteration(index: int) -> None:
            ctx = self._derive(frames[index].loop({var: snapshot[index]}))
            ctx.path = f"{path}[{index}]"
            work = _enter(body, ctx, None)
            await flow_events.in_branch(ctx, fork, index, work, item=snapshot[index])
            frames[index].finish()

        iterations = _run_all([iteration(i) for i in range(len(snapshot))], [])
        await flow_events.joined(self, fork, iterations)
        self.frame.merge(frames)
        flow_events.fork_joined(self, fork, self.node)

    async def call(self, flow: FlowFunction, *args: Any, node: str | None = None) -> bool:
        """The module call node ``node`` (default: ``&Name``, see :mod:`fems_runtime.names`),
        one step, then the call (:meth:`run_module`). Returns whether the caller continues."""
        spec, name = self._module(flow)
        began = await self._count_step(node or call_node(name), sys._getframe(1))
        if began is None:
            return await self._run_module(flow, spec, name, args)
        return await self.spanned(began, StepEnded.after, self._run_module(flow, spec, name, args))

    async def run_module(self, flow: FlowFunction, *args: Any) -> bool:
        """Call a module (§11) that is no node of the flow (an action's ``fallback:``, §10.6,
        which counts no step): a fresh frame with parameters and locals, its own step limit.
        Returns whether the caller continues: True when a path of the module reached
        ``[OUT]``, False when it ended at ``[BREAK]`` or nowhere (the caller's branch stops)."""
        return await self._run_module(flow, *self._module(flow), args)

    def _module(self, flow: FlowFunction) -> tuple[ModuleSpec, str]:
        """The module a flow function is, and its name."""
        spec: ModuleSpec = flow.fems_module  # type: ignore[attr-defined]
        return spec, spec.name or self.services.names.of(flow.__name__)

    async def _run_module(
        self, flow: FlowFunction, spec: ModuleSpec, name: str, args: tuple[Any, ...]
    ) -> bool:
        if len(args) != len(spec.params):
            raise self.error(f"module {name} takes {len(spec.params)} arguments, got {len(args)}")
        frame = self.frame.module(name, dict(zip(spec.params, args, strict=True)), spec.variables)
        max_steps = spec.meta.get("max_steps")
        steps = self.steps.child(
            int(max_steps) if max_steps is not None else None, f"module {name}"
        )
        methods = {**self.methods, **{m.name: m for m in spec.methods}}
        inner = Context(
            self.services,
            frame,
            steps,
            methods=methods,
            path=self.path,
            forks=self._forks,
            delay=max(self.delay, float(spec.meta.get("delay") or 0)),
            span=self.span,
        )
        result = await _enter(flow, inner, None)
        exits = inner._call.exits | ({result} if result in TERMINAL_NODES else set())
        return "OUT" in exits


async def _enter(
    flow: FlowFunction | DispatchFunction,
    ctx: Context,
    node: str | None,
    stop: tuple[str, ...] = (),
) -> str | None:
    """Run ``flow`` from ``node`` (None: its start) in ``ctx``; an error escaping it remembers
    the innermost node it came from, for the run's ``error`` trace event (§16.3)."""
    try:
        if node is None:
            return await flow(ctx)
        return await flow(ctx, node, stop)  # type: ignore[call-arg]
    except Exception as error:
        if failed_node(error) is None:
            error.fems_node = ctx.node  # type: ignore[attr-defined]
        raise


def failed_node(error: BaseException) -> str | None:
    """The node a run error escaped from, when it escaped a branch, loop body or module."""
    return getattr(error, "fems_node", None)


async def _run_all(
    coroutines: list[Coroutine[Any, Any, None]], tasks: list[asyncio.Task[None]]
) -> None:
    """Run coroutines as one :class:`asyncio.TaskGroup`, filling ``tasks`` so a branch can
    cancel its siblings; the first real error is raised as itself, not as an exception group."""
    try:
        async with asyncio.TaskGroup() as group:
            tasks.extend(group.create_task(c) for c in coroutines)
    except BaseExceptionGroup as group:
        raise _first_error(group) from None


@functools.lru_cache(maxsize=1024)
def _scope_items(items: tuple[ScopeItem | str, ...]) -> tuple[ScopeItem, ...]:
    """A ``scope:`` as generated code writes it (a constant tuple per action), parsed once."""
    return tuple(ScopeItem.of(item) for item in items)


def _snapshot(items: Any) -> list[Any] | None:
    """The items a loop iterates over, copied on entry; None for what is not a collection
    (an actor or a text is a ``str``, but its characters are never what a loop means)."""
    if isinstance(items, str):
        return None
    try:
        return list(items)
    except TypeError:
        return None


def _read_and_show(ctx: Context, path: str) -> str:
    """What a condition read (``x``, ``@x.attr`` or ``attr.@x``) as a flow-stuck error shows
    it; a read that fails shows its error in angle brackets."""
    try:
        if "." in path:
            first, second = path.split(".", 1)
            actor, attr = (first, second) if first.startswith("@") else (second, first)
            value = ctx.attr(actor, attr)
        else:
            value = ctx[path]
    except RunError as error:
        return f"<{error.message}>"
    return show_value(value)


def _first_error(group: BaseExceptionGroup[Any]) -> BaseException:
    for error in group.exceptions:
        if isinstance(error, BaseExceptionGroup):
            return _first_error(error)
        return error
    return group


__all__ = [
    "ActionFunction",
    "ConditionTable",
    "Conditions",
    "Context",
    "DispatchFunction",
    "FlowDebugger",
    "FlowFunction",
    "FuncSpec",
    "MethodSpec",
    "ModuleSpec",
    "eq",
    "failed_node",
    "lines",
    "ne",
    "module",
]
