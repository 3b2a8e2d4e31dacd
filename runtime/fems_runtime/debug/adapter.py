"""The Debug Adapter Protocol requests of one client, answered over :mod:`.wire`: launch or
attach, breakpoints, threads, stack, scopes and variables, evaluate and setVariable, the run
commands, and "restart from here" (``restartFrame`` on a turn: the session forked at that turn,
§16.4a, as a new debug session the editor starts, or in this one when it cannot)."""

from __future__ import annotations

import argparse
import asyncio
import os
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

from fems_runtime.debug.debugger import Debugger, Stop
from fems_runtime.debug.expressions import ExpressionError, evaluate, parse
from fems_runtime.debug.points import (
    HIT_COUNT_HELP,
    Breakpoint,
    StopMap,
    place_code_points,
    valid_hit_condition,
)
from fems_runtime.debug.pycode import canonic, python_value, set_local
from fems_runtime.debug.views import Views
from fems_runtime.debug.wire import Channel, ProtocolClosed, read_message
from fems_runtime.funcs import CodeFiles
from fems_runtime.linetable import LineTable
from fems_runtime.names import DeclaredNames
from fems_runtime.options import fork_point
from fems_runtime.records import RunError

FRAMES_PER_THREAD = 1000
CAPABILITIES = {
    "supportsConfigurationDoneRequest": True,
    "supportsConditionalBreakpoints": True,
    "supportsHitConditionalBreakpoints": True,
    "supportsLogPoints": True,
    "supportsEvaluateForHovers": True,
    "supportsSetVariable": True,
    "supportsRestartFrame": True,
    "supportsTerminateRequest": True,
}


class DebuggedScript(Protocol):
    """What the adapter reads of a script (:class:`~fems_runtime.app.ScriptInfo`)."""

    @property
    def file(self) -> str: ...

    @property
    def code(self) -> Mapping[str, str]: ...


class DebuggedResult(Protocol):
    """What the adapter tells of a finished run (:class:`~fems_runtime.app.RunResult`)."""

    session: int | None
    steps: int
    model_calls: int
    variables: dict[str, Any]


class DebuggedProgram(Protocol):
    """What the adapter needs of a generated module's :class:`~fems_runtime.app.Program`
    (a protocol, so the debugger does not import the module that starts it)."""

    source: Path | None
    module_file: str
    lines: LineTable
    names: DeclaredNames

    @property
    def script(self) -> DebuggedScript: ...

    @property
    def run_async(self) -> Callable[..., Awaitable[DebuggedResult]]:
        """Runs it with the launch's options and ``debugger=``."""

    def locate(self, error: BaseException, db: str | None = None) -> BaseException: ...


#: What a launch or attach runs: the program and its run options, from the request's
#: arguments (``program``, ``args``, ``cwd``).
Target = Callable[[dict[str, Any]], tuple[DebuggedProgram, dict[str, Any]]]


class RequestError(Exception):
    """A request the adapter refuses; the message goes to the client."""


class Adapter:
    """One client's session: its requests, and the run it drives."""

    def __init__(self, channel: Channel, target: Target, shown: list[str]) -> None:
        self.channel = channel
        self.target = target
        self.shown = shown
        self.debugger = Debugger(channel)
        self.views = Views(self.debugger)
        self.debugger.stopped_at = lambda stop: self.views.clear()
        self.program: DebuggedProgram | None = None
        self.options: dict[str, Any] = {}
        self.run_task: asyncio.Task[None] | None = None
        self.configured = self.launched = False
        self.exit_code = 0
        self.next_breakpoint = 1
        self.done = asyncio.Event()
        self.restarting: asyncio.Task[None] | None = None  # restart from here, under way
        self.starts_sessions = False  # the client answers startDebugging (a child session)
        self.launch_arguments: dict[str, Any] | None = None  # a child's configuration, forked
        self.answered: dict[int, Callable[[dict[str, Any]], None]] = {}  # reverse requests
        self.heard = False  # the client sent a message (not an empty stdin)

    async def serve(self, reader: asyncio.StreamReader) -> int:
        """Answer requests until the client disconnects; the run's exit status."""
        try:
            while not self.done.is_set():
                message = await read_message(reader)
                self.heard = True
                if message.get("type") == "request":
                    self.answer(message)
                elif message.get("type") == "response":
                    then = self.answered.pop(int(message.get("request_seq", 0)), None)
                    if then is not None:
                        then(message)
        except ProtocolClosed:
            pass
        await self.stop_run()
        self.channel.close()
        return self.exit_code

    def answer(self, request: dict[str, Any]) -> None:
        command = str(request.get("command", ""))
        handler = getattr(self, f"on_{command}", None)
        response: dict[str, Any] = {
            "type": "response",
            "request_seq": request.get("seq", 0),
            "command": command,
            "success": True,
        }
        try:
            if handler is None:
                raise RequestError(f"unsupported request {command!r}")
            response["body"] = handler(request.get("arguments") or {}) or {}
        except (RequestError, ExpressionError, RunError) as error:
            response.update(success=False, message=str(error))
        except (ValueError, TypeError, KeyError) as error:  # arguments the protocol forbids
            response.update(success=False, message=f"{command}: bad arguments ({error})")
        self.channel.send(response)
        if command == "initialize" and response["success"]:
            self.channel.event("initialized")
        if command in ("launch", "attach", "configurationDone"):
            self.maybe_start()

    # ------------------------------------------------------------------ session

    def on_initialize(self, args: dict[str, Any]) -> dict[str, Any]:
        self.starts_sessions = bool(args.get("supportsStartDebuggingRequest"))
        return CAPABILITIES

    def on_launch(self, args: dict[str, Any]) -> None:
        """Launch the run; with ``fork`` (``SESSION:TURN``), a new session forked there
        (§16.4a), which ``stopOnEntry`` stops at its first live turn."""
        if args.get("cwd"):
            try:
                os.chdir(str(args["cwd"]))
            except OSError as error:
                raise RequestError(f"cwd {args['cwd']}: {error.strerror}") from None
        fork = None
        if args.get("fork"):
            try:
                fork = fork_point(str(args["fork"]))
            except argparse.ArgumentTypeError as error:
                raise RequestError(f"fork: {error}") from None
        self.load(args, fork)
        entry = bool(args.get("stopOnEntry"))
        if fork is not None:
            self.debugger.until_live = "entry" if entry else None
        else:
            self.debugger.stop_on_entry = entry
        self.launch_arguments = {k: v for k, v in args.items() if not k.startswith("__")}

    def on_attach(self, args: dict[str, Any]) -> None:
        self.load(args)

    def load(self, args: dict[str, Any], fork: str | None = None) -> None:
        program, options = self.target(args)
        if fork is not None:
            options = forked(options, fork)
        self.program, self.options = program, options
        self.debugger.map = StopMap(program.module_file, program.lines, program.names)
        base = Path(program.module_file).resolve().parent
        files = CodeFiles(program.script.code, base).files.values()
        self.debugger.code_files = frozenset(canonic(str(path)) for path in files)
        self.launched = True

    def on_configurationDone(self, args: dict[str, Any]) -> None:
        self.configured = True

    def maybe_start(self) -> None:
        if self.configured and self.launched and self.run_task is None:
            self.start_run(self.options)

    def start_run(self, options: dict[str, Any]) -> None:
        """Start a run. Cancelled before it began (a disconnect or terminate that came with
        configurationDone, as at the end of a recorded session), it never reaches its own
        ``except``: it ends as interrupted all the same."""
        self.run_task = asyncio.create_task(self.run(options))

        def unstarted(task: asyncio.Task[None]) -> None:
            if task.cancelled() and not self.replaced() and self.program is not None:
                self.ended(1, f"{self.program.script.file}: error: interrupted\n", "stderr")

        self.run_task.add_done_callback(unstarted)

    def replaced(self) -> bool:
        """Whether a restart from here cancels the run, for a new one in its place."""
        return self.restarting is not None and not self.restarting.done()

    async def run(self, options: dict[str, Any]) -> None:
        """One run under the debugger; its end ends the session (a restart starts another)."""
        program = self.program
        assert program is not None
        try:
            result = await program.run_async(**options, debugger=self.debugger)
        except asyncio.CancelledError:
            if self.replaced():
                raise  # the restarted run goes on in its place
            self.ended(1, f"{program.script.file}: error: interrupted\n", "stderr")
        except RunError as error:
            self.ended(1, f"{error}\n", "stderr")
        except Exception as error:  # reported as the command line reports it: one line
            self.ended(1, f"{program.locate(error, options.get('db'))}\n", "stderr")
        else:
            self.ended(0, completed(program, result, self.shown))

    def ended(self, status: int, text: str, category: str = "console") -> None:
        """The run ended with ``status``, and says so: ``text``, then exited and terminated."""
        self.exit_code = status
        self.debugger.end()  # its branches end with it: terminated says so for them all
        self.debugger.output(text, category)
        self.channel.event("exited", {"exitCode": status})
        self.channel.event("terminated")

    async def stop_run(self) -> None:
        """End the run, and a restart from here under way: it would start a new run after the
        client has gone. The run then ends as interrupted (status 1), not as replaced. A run
        that ended already is awaited too: cancelled before it began, it says so in a done
        callback, which must run before the session's channel closes."""
        self.debugger.end()
        restarting, self.restarting = self.restarting, None
        for task in (restarting, self.run_task):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    def on_disconnect(self, args: dict[str, Any]) -> None:
        self.done.set()

    def on_terminate(self, args: dict[str, Any]) -> None:
        task = self.run_task
        if task is not None and not task.done():
            task.cancel()  # the run ends as interrupted, and says so
            self.debugger.end()
        else:
            self.channel.event("terminated")

    # ------------------------------------------------------------------ breakpoints

    def on_setBreakpoints(self, args: dict[str, Any]) -> dict[str, Any]:
        source = args.get("source") or {}
        asked = args.get("breakpoints") or [{"line": n} for n in args.get("lines") or ()]
        path = str(source.get("path") or source.get("name") or "")
        if canonic(path) in self.debugger.code_files:
            return {"breakpoints": self.code_breakpoints(canonic(path), asked)}
        if not self.is_script(path):
            message = "not this run's script"
            return {"breakpoints": [{"verified": False, "message": message} for _ in asked]}
        points: dict[int, Breakpoint] = {}
        answers = []
        for item in asked:
            answers.append(self.breakpoint(item, points))
        self.debugger.breakpoints = points
        return {"breakpoints": answers}

    def breakpoint(self, item: dict[str, Any], points: dict[int, Breakpoint]) -> dict[str, Any]:
        stop_map = self.debugger.map
        asked = int(item.get("line", 0))
        line = stop_map.place(asked) if stop_map is not None else None
        ident = self.new_id()
        if line is None:
            return {"id": ident, "verified": False, "line": asked, "message": "nothing runs here"}
        message = _point_problem(item)
        if message is not None:
            return {"id": ident, "verified": False, "line": line, "message": message}
        points[ident] = Breakpoint(
            ident, line, item.get("condition"), item.get("hitCondition"), item.get("logMessage")
        )
        return {"id": ident, "verified": True, "line": line, "source": self.source()}

    def code_breakpoints(self, path: str, asked: list[dict[str, Any]]) -> list[dict[str, Any]]:
        answers, self.debugger.code_points[path] = place_code_points(path, asked, self.new_id)
        return answers

    def new_id(self) -> int:
        """The next breakpoint's id (unique in the session, over all files)."""
        self.next_breakpoint += 1
        return self.next_breakpoint - 1

    def is_script(self, path: str) -> bool:
        script = self.script_path()
        return bool(path) and (
            (script is not None and os.path.realpath(path) == str(script))
            or self.program is not None
            and Path(path).name == Path(self.program.script.file).name
        )

    def script_path(self) -> Path | None:
        program = self.program
        if program is None:
            return None
        if program.source is not None:
            return Path(program.source).resolve()
        beside = Path(program.module_file).resolve().parent / program.script.file
        return beside if beside.exists() else None

    def source(self) -> dict[str, Any]:
        assert self.program is not None
        path = self.script_path()
        name = Path(self.program.script.file).name
        return {"name": name, "path": str(path)} if path is not None else {"name": name}

    # ------------------------------------------------------------------ state

    def on_threads(self, args: dict[str, Any]) -> dict[str, Any]:
        branches = self.debugger.branches
        live = branches.live() if branches is not None else []
        threads = [{"id": b.id, "name": b.name} for b in live] or [{"id": 1, "name": "main"}]
        return {"threads": threads}

    def held(self, thread: int) -> Stop:
        stop = self.debugger.held.get(thread)
        if stop is None or not self.debugger.stopped():
            raise RequestError("the run is not stopped in this thread")
        return stop

    def on_stackTrace(self, args: dict[str, Any]) -> dict[str, Any]:
        thread = int(args.get("threadId", 0))
        frames = stack_frames(thread, self.held(thread), self.source())
        return {"stackFrames": frames, "totalFrames": len(frames)}

    def frame_stop(self, frame_id: Any) -> Stop:
        if frame_id is None:
            stops = list(self.debugger.held.values())
            if not stops or not self.debugger.stopped():
                raise RequestError("the run is not stopped")
            return stops[0]
        return self.held(int(frame_id) // FRAMES_PER_THREAD)

    def code_frame(self, frame_id: Any, stop: Stop) -> FrameType | None:
        """The ``code:`` file frame ``frame_id`` stands for (None: a frame of the flow)."""
        if not stop.code_frames:
            return None
        if frame_id is None:
            return stop.code_frames[-1]
        index = int(frame_id) % FRAMES_PER_THREAD - len(stop.places)
        return stop.code_frames[index] if index >= 0 else None

    def on_scopes(self, args: dict[str, Any]) -> dict[str, Any]:
        stop = self.frame_stop(args.get("frameId"))
        code = self.code_frame(args.get("frameId"), stop)
        if code is not None:
            return {"scopes": self.views.python_scopes(code)}
        return {"scopes": self.views.scopes(stop)}

    def on_variables(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"variables": self.views.variables(int(args.get("variablesReference", 0)))}

    def on_evaluate(self, args: dict[str, Any]) -> dict[str, Any]:
        stop = self.frame_stop(args.get("frameId"))
        expression = str(args.get("expression", ""))
        code = self.code_frame(args.get("frameId"), stop)
        if code is not None:
            value = python_value(expression, code)
        else:
            value = evaluate(expression, stop.ctx.frame)
        shown = self.views.set_answer("", value)
        return {"result": shown.pop("value"), **shown}

    def on_setVariable(self, args: dict[str, Any]) -> dict[str, Any]:
        """An assignment like any other (traced as one, under the branch rule, §12.5a); in a
        frame of a ``code:`` file, a Python local set to a Python value."""
        ref = int(args.get("variablesReference", 0))
        code = self.views.python_frames.get(ref)
        if code is not None and self.debugger.stopped():
            return self.set_python_local(code, str(args.get("name", "")), str(args.get("value")))
        frame = self.views.scope_frames.get(ref)
        stop = next((s for s in self.debugger.held.values() if s.ctx.frame is frame), None)
        if frame is None or stop is None:
            raise RequestError("only the script's variables (Locals, Globals) can be set")
        name = str(args.get("name", ""))
        value = evaluate(str(args.get("value", "")), frame)
        stop.ctx.assign(name, "=", value)
        return self.views.set_answer(name, stop.ctx[name])

    def set_python_local(self, frame: FrameType, name: str, expression: str) -> dict[str, Any]:
        set_local(frame, name, python_value(expression, frame))
        return self.views.set_answer(name, frame.f_locals[name])

    # ------------------------------------------------------------------ run commands

    def on_continue(self, args: dict[str, Any]) -> dict[str, Any]:
        self.debugger.resume()
        return {"allThreadsContinued": True}

    def on_next(self, args: dict[str, Any]) -> None:
        self.debugger.resume("next", int(args.get("threadId", 0)))

    def on_stepIn(self, args: dict[str, Any]) -> None:
        self.debugger.resume("stepIn", int(args.get("threadId", 0)))

    def on_stepOut(self, args: dict[str, Any]) -> None:
        self.debugger.resume("stepOut", int(args.get("threadId", 0)))

    def on_pause(self, args: dict[str, Any]) -> None:
        self.debugger.pause()

    def on_restartFrame(self, args: dict[str, Any]) -> None:
        """Restart from here: fork the session before this turn (§16.4a) and run the fork,
        stopped at its first live turn (this one, or the first of its concurrent region). The
        fork is a new debug session when the client can start one (``startDebugging``): it
        builds the script again, so an edited prompt counts; this run stays where it is."""
        stop = self.frame_stop(args.get("frameId"))
        if stop.turn is None:
            raise RequestError("restart from here works on a turn: stop at an action first")
        session = self.debugger.services.turns.session
        fork = f"{session}:{max(stop.turn.turn - 1, 0)}"
        options = forked(self.options, fork)
        if self.starts_sessions and self.launch_arguments is not None:
            self.start_session(fork, options)
        else:
            self.restarting = asyncio.create_task(self.restart(options, fork))

    def start_session(self, fork: str, options: dict[str, Any]) -> None:
        """Ask the client for a child session launched as this one was, forked at ``fork``;
        if it refuses, fork in this session."""
        configuration = child_configuration(self.launch_arguments or {}, fork)
        request = {"request": "launch", "configuration": configuration}
        seq = self.channel.send(
            {"type": "request", "command": "startDebugging", "arguments": request}
        )

        def then(response: dict[str, Any]) -> None:
            if response.get("success"):
                self.debugger.output(f"restart from here: a new debug session forks {fork}\n")
                return
            why = response.get("message") or "refused"
            self.debugger.output(f"restart from here: no new debug session ({why})\n", "stderr")
            self.restarting = asyncio.create_task(self.restart(options, fork))

        self.answered[seq] = then

    async def restart(self, options: dict[str, Any], fork: str) -> None:
        old = self.run_task
        self.debugger.until_live = "restart"
        if old is not None and not old.done():
            old.cancel()
            self.debugger.running.set()
            await asyncio.gather(old, return_exceptions=True)
        self.debugger.output(f"restart from here: a new session forked from {fork}\n")
        self.options = options
        self.start_run(options)


def _point_problem(item: dict[str, Any]) -> str | None:
    """Why a breakpoint on a ``.fems`` line cannot be set as asked (None: it can): a hit count
    or a condition that cannot be read is said when it is set, not at each stop."""
    if not valid_hit_condition(item.get("hitCondition")):
        return HIT_COUNT_HELP
    condition = item.get("condition")
    try:
        if condition:
            parse(str(condition))
    except ExpressionError as error:
        return f"condition: {error}"
    return None


def stack_frames(thread: int, stop: Stop, source: dict[str, Any]) -> list[dict[str, Any]]:
    """The stack of a stopped branch, innermost first: the frames of a ``code:`` file it is
    stopped in, then its flow path at lines of the script (``source``)."""
    frames = []
    places = stop.places
    for index in range(len(stop.code_frames) - 1, -1, -1):
        code = stop.code_frames[index]
        path = canonic(code.f_code.co_filename)
        frames.append(
            {
                "id": thread * FRAMES_PER_THREAD + len(places) + index,
                "name": code.f_code.co_name,
                "source": {"name": Path(path).name, "path": path},
                "line": code.f_lineno,
                "column": 1,
            }
        )
    for index in range(len(places) - 1, -1, -1):
        place = places[index]
        name = place.name
        top = index == len(places) - 1
        if top and stop.turn is not None:
            turn = stop.turn
            replayed = ", replayed" if turn.recorded is not None else ""
            name = f"{turn.spec.action} (turn {turn.turn}, {turn.actor}{replayed})"
        elif top and not stop.code_frames:
            name = f"{place.name}: {stop.ctx.node}"
        frames.append(
            {
                "id": thread * FRAMES_PER_THREAD + index,
                "name": name,
                "source": source,
                "line": place.line or 0,
                "column": 1,
                "canRestart": top and stop.turn is not None,
            }
        )
    return frames


def completed(program: DebuggedProgram, result: DebuggedResult, shown: list[str]) -> str:
    """What a run that completed says: as the command line's summary, and ``--show``."""
    lines = [
        f"{program.script.file}: completed in {result.steps} steps, "
        f"{result.model_calls} model calls (session {result.session})"
    ]
    lines += [f"{name} = {result.variables.get(name)}" for name in shown]
    return "\n".join(lines) + "\n"


def child_configuration(launched: dict[str, Any], fork: str) -> dict[str, Any]:
    """The launch configuration of a session forked at ``fork``: this session's (its
    program, module options, folder and command), stopped at its first live turn."""
    name = launched.get("name") or Path(str(launched.get("program", "fems"))).name
    forked_at = {"name": f"{name} (fork {fork})", "fork": fork, "stopOnEntry": True}
    return {"type": "fems", **launched, "request": "launch", **forked_at}


def forked(options: dict[str, Any], fork: str) -> dict[str, Any]:
    """The run options of a new session forked at ``fork`` (its records are read from the
    same database, so not from one in memory)."""
    if str(options.get("db") or "").strip() == ":memory:":
        raise RequestError("a fork reads the session's records: give --db a file")
    return {**options, "fork": fork, "session": None, "resume": False, "reuse": None}


__all__ = ["Adapter", "RequestError", "Target", "child_configuration", "forked"]
