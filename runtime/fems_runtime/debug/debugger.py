"""The run's side of a debug session: the hooks the run awaits (a node begins, a turn is about
to send its model call), where each branch is held, and why a branch stops there.

Every branch runs on one event loop, so "all threads stopped" is one gate: while one branch
is stopped, any other branch that reaches a hook waits there too, and continuing or stepping
opens the gate for all of them. A branch held before its model call has sent nothing yet, so
the wait counts neither against ``--timeout`` nor against the retry budget.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import TYPE_CHECKING, Any, Literal, Protocol

from fems_runtime.debug.branches import Branch, Branches, Place
from fems_runtime.debug.expressions import ExpressionError, evaluate
from fems_runtime.debug.points import Breakpoint, StopMap
from fems_runtime.debug.pycode import traced
from fems_runtime.prompts import render
from fems_runtime.records import RunError

if TYPE_CHECKING:
    from fems_runtime.debug.wire import Channel
    from fems_runtime.flow import ActionFunction, Context
    from fems_runtime.linetable import LineTable
    from fems_runtime.names import DeclaredNames
    from fems_runtime.specs import TurnResult, TurnSpec
    from fems_runtime.turns.shared import HeldCall, SharedServices

StepKind = Literal["next", "stepIn", "stepOut"]


class RunProgram(Protocol):
    """What the debugger reads of the running program: where its lines and names are."""

    @property
    def module_file(self) -> str: ...

    @property
    def lines(self) -> LineTable: ...

    @property
    def names(self) -> DeclaredNames: ...


class DebuggedRun(Protocol):
    """What the debugger reads of a run's services (app.py's ``_Services``): the program, and
    the turns' session and models."""

    @property
    def program(self) -> RunProgram: ...

    @property
    def turns(self) -> SharedServices: ...


@dataclass
class Stop:
    """A branch held at a hook: at a node (``turn`` None) or before a turn's model call."""

    branch: Branch
    ctx: Context
    places: tuple[Place, ...]
    turn: HeldCall | None = None
    code_frames: tuple[FrameType, ...] = ()  # at a line of a code: file (outermost first)

    @property
    def flow_depth(self) -> int:
        """How deep the node is (a turn's action frame not counted)."""
        return len(self.places) - (self.turn is not None)


@dataclass
class LastTurn:
    """What the branch's last turn did: shown after it, until the next."""

    action: str
    reply: str = ""
    reasoning: str = ""
    assigned: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Stepping:
    kind: StepKind
    branch: Branch
    depth: int


class Debugger:
    """The hooks of :class:`~fems_runtime.flow.FlowDebugger` and
    :class:`~fems_runtime.turns.shared.TurnDebugger`, and the state a client inspects."""

    def __init__(self, channel: Channel, *, stop_on_entry: bool = False) -> None:
        self.channel = channel
        self.stop_on_entry = stop_on_entry
        #: the reason a restarted or forked run stops at its first live turn; until then,
        #: while it replays what it took from the session before, nothing stops it
        self.until_live: str | None = None
        self.breakpoints: dict[int, Breakpoint] = {}
        #: code: file (real path) → line → breakpoint
        self.code_points: dict[str, dict[int, Breakpoint]] = {}
        self.code_files: frozenset[str] = frozenset()
        self.running = asyncio.Event()
        self.running.set()
        self.held: dict[int, Stop] = {}
        self.stepping: Stepping | None = None
        self.pause_requested: str | None = None  # the reason of the stop asked for: pause, restart
        self.last: dict[int, LastTurn] = {}
        self._run: DebuggedRun | None = None
        self.map: StopMap | None = None
        self.branches: Branches | None = None
        self.stopped_at: Callable[[Stop], None] = lambda stop: None
        self.over = False  # the run ends: nothing stops any more (:meth:`end`)

    @property
    def services(self) -> DebuggedRun:
        """The services of the run being debugged (open from :meth:`opened` on)."""
        if self._run is None:
            raise RuntimeError("the debugged run has not opened its services yet")
        return self._run

    def opened(self, services: DebuggedRun) -> None:
        """The run's services are open (:meth:`fems_runtime.app._Run.open`)."""
        program = services.program
        self._run = services
        if self.map is None:
            self.map = StopMap(program.module_file, program.lines, program.names)
        self.branches = Branches(program.lines, program.names, self._started, self._ended)
        self.held.clear()
        self.last.clear()
        self.output(f"debugging session {services.turns.session}\n")

    def _started(self, branch: Branch) -> None:
        self.channel.event("thread", {"reason": "started", "threadId": branch.id})

    def _ended(self, branch: Branch) -> None:
        self.held.pop(branch.id, None)
        if not self.over:  # a branch that ends with the run: after terminated, no event
            self.channel.event("thread", {"reason": "exited", "threadId": branch.id})

    # ------------------------------------------------------------------ hooks

    async def node(self, ctx: Context, node: str, action: ActionFunction | None) -> None:
        """A node begins: a breakpoint on its flow line, or on the lines of its action when
        that action is no model turn (those stop before their call), stops it here."""
        assert self.branches is not None and self.map is not None
        branch = self.branches.current(ctx)
        stop = Stop(branch, ctx, self.branches.stack(branch, ctx))
        span = self.map.action_lines(action.__name__) if action is not None else None
        line = ctx.line
        at_node = span is not None and (not span.turn or _played_by_a_person(ctx, span.executor))

        def here(point: Breakpoint) -> bool:
            return point.line == line or (at_node and span is not None and point.line in span)

        await self._hook(stop, here)

    async def before_call(self, call: HeldCall) -> None:
        """A turn is about to send its model call: a breakpoint on its action stops it here."""
        if self.until_live is not None:  # the first live turn of a restarted or forked run
            self.pause_requested, self.until_live = self.until_live, None
        await self._turn(call)

    async def before_replay(self, call: HeldCall) -> None:
        """A turn replays its recorded call (a resumed or forked session): it stops at the
        breakpoints a live one would."""
        await self._turn(call)

    async def _turn(self, call: HeldCall) -> None:
        assert self.branches is not None and self.map is not None
        branch = self.branches.current(call.ctx)
        stop = Stop(branch, call.ctx, self.branches.stack(branch, call.ctx), call)
        line = call.spec.line
        span = next((s for s in self.map.actions.values() if s.first == line), None)
        await self._hook(stop, lambda point: span is not None and point.line in span)

    def called(self, spec: TurnSpec, reply: str, reasoning: str) -> None:
        last = self._last(spec.action)
        last.reply, last.reasoning = reply, reasoning

    def turn_ended(self, spec: TurnSpec, result: TurnResult) -> None:
        last = self._last(spec.action)
        last.reply = result.reply or last.reply
        last.assigned = dict(result.assigned)

    def _last(self, action: str) -> LastTurn:
        assert self.branches is not None
        task = asyncio.current_task()
        branch = self.branches.by_task.get(task) if task is not None else None
        key = branch.id if branch is not None else 0
        last = self.last.get(key)
        if last is None or last.action != action:
            last = self.last[key] = LastTurn(action)
        return last

    async def _hook(self, stop: Stop, here: Callable[[Breakpoint], bool]) -> None:
        """Wait while another branch is stopped; then stop here if a breakpoint ``here``
        (asked once the run goes on: the breakpoints may have changed meanwhile), a step or
        a pause says so."""
        await self._wait_turn(stop)
        if self.until_live is not None:
            return
        hits = [point for point in self.breakpoints.values() if here(point)]
        reason, ids = self._reason(stop, hits)
        if reason is not None:
            await self._stop(stop, reason, ids)

    async def _wait_turn(self, stop: Stop) -> None:
        """While another branch is stopped, wait with it."""
        while not self.running.is_set():
            self.held[stop.branch.id] = stop
            await self.running.wait()
        self.held.pop(stop.branch.id, None)

    async def _stop(self, stop: Stop, reason: str, ids: list[int]) -> None:
        """Stop every branch here, tell the client, and wait for it to go on."""
        if self.over:
            return
        self.running.clear()
        self.stepping, self.pause_requested = None, None
        self.held[stop.branch.id] = stop
        self.stopped_at(stop)
        body: dict[str, Any] = {
            "reason": reason,
            "threadId": stop.branch.id,
            "allThreadsStopped": True,
        }
        if ids:
            body["hitBreakpointIds"] = ids
        self.channel.event("stopped", body)
        await self.running.wait()
        self.held.pop(stop.branch.id, None)

    def _reason(self, stop: Stop, hits: list[Breakpoint]) -> tuple[str | None, list[int]]:
        if self.stop_on_entry:
            self.stop_on_entry = False
            return "entry", []
        ids = [point.id for point in hits if self._breaks(point, stop)]
        if ids:
            return "breakpoint", ids
        if self.pause_requested is not None:
            return self.pause_requested, []
        if self.stepping is not None and self._step_ends(self.stepping, stop):
            return "step", []
        return None, []

    def _breaks(self, point: Breakpoint, stop: Stop) -> bool:
        """Whether ``point`` stops this branch: its condition holds and its hit count allows;
        a logpoint prints its message instead."""
        frame = stop.ctx.frame
        if point.condition:
            try:
                if not evaluate(point.condition, frame):
                    return False
            except ExpressionError as error:
                self.output(f"breakpoint condition {point.condition!r}: {error}\n", "stderr")
        if not point.hit_allows():
            return False
        if point.log_message is not None:
            self.output(render(point.log_message, frame) + "\n", "console")
            return False
        return True

    @staticmethod
    def _step_ends(stepping: Stepping, stop: Stop) -> bool:
        """Next: the branch's next node at this depth or above; step in: its next stop of any
        kind; step out: its next node above. A branch that ended hands on to any branch."""
        same, gone = stop.branch is stepping.branch, stepping.branch.done
        if stepping.kind == "stepIn":
            return same or gone
        if stop.turn is not None:
            return False
        depth = stop.flow_depth
        if stepping.kind == "next":
            return (same and depth <= stepping.depth) or (gone and depth < stepping.depth)
        return (same or gone) and depth < stepping.depth

    # ------------------------------------------------------------------ code: files

    def code_call(self, ctx: Context, function: Callable[..., Any]) -> Callable[..., Any]:
        """A ``code:`` function as its ``@func`` action calls it: traced when a breakpoint is
        set in a code file or a step goes into it (:mod:`.pycode`)."""
        assert self.branches is not None
        branch = self.branches.current(ctx)
        stepping = self.stepping
        step_in = stepping is not None and stepping.kind == "stepIn" and stepping.branch is branch
        if step_in:
            self.stepping = None
        if not step_in and not any(self.code_points.values()):
            return function
        places = self.branches.stack(branch, ctx)

        async def hold(frames: tuple[FrameType, ...], hit: list[int]) -> str:
            return await self._hold_code(Stop(branch, ctx, places, code_frames=frames), hit)

        points, files = self.code_points, self.code_files
        return traced(function, points, files, hold, self._code_output, step_in)

    def _code_output(self, text: str, category: str) -> None:
        """What a ``code:`` function's logpoint says: nothing once the run is over, since its
        worker thread may go on after the run ended, and after ``terminated``."""
        if not self.over:
            self.output(text, category)

    async def _hold_code(self, stop: Stop, hit: list[int]) -> str:
        """A line of a code file stops the branch (``hit``: at these breakpoints, else a
        step); how the client goes on, for bdb. A step that leaves the function goes on as
        "next" in the flow."""
        await self._wait_turn(stop)
        await self._stop(stop, "breakpoint" if hit else "step", hit)
        stepping = self.stepping
        if stepping is None or stepping.branch is not stop.branch:
            return "continue"
        self.stepping = Stepping("next", stop.branch, len(stop.places) - 1)
        return stepping.kind

    # ------------------------------------------------------------------ commands

    def resume(self, step: StepKind | None = None, thread: int | None = None) -> None:
        """Let every held branch go on; with ``step``, stop again as that step ends."""
        stop = self.held.get(thread) if thread is not None else None
        if step is not None and stop is not None:
            # out of a turn: to the node after its action; otherwise out of this flow level
            depth = len(stop.places) if step == "stepOut" else stop.flow_depth
            self.stepping = Stepping(step, stop.branch, depth)
        else:
            self.stepping = None
        self.running.set()

    def end(self) -> None:
        """The run is ending (it ended, or the client disconnected or asked to terminate): every
        held branch goes on, nothing stops again, and no branch's end is sent. A ``code:``
        function's worker thread, which the end of the run does not stop, runs to its end past
        its breakpoints instead of holding a run that is gone (and the process, which waits for
        the thread before it exits)."""
        self.over = True
        self.running.set()

    def pause(self) -> None:
        self.pause_requested = "pause"

    def output(self, text: str, category: str = "console") -> None:
        self.channel.event("output", {"category": category, "output": text})

    def stopped(self) -> bool:
        return not self.running.is_set()


def _played_by_a_person(ctx: Context, executor: str | None) -> bool:
    """Whether a ``@mind`` turn's executor is human now: it sends no model call (§9.1)."""
    if executor is None:
        return False
    try:
        actor = ctx.frame.resolve_actor(executor)
    except RunError:
        return False  # the turn itself reports it
    spec = ctx.frame.variables.actors.get(str(actor))
    return spec is not None and spec.is_human


__all__ = ["Debugger", "LastTurn", "Stop"]
