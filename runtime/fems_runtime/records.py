"""What a run leaves behind and how it fails: run errors, JSONL traces, result files, step limits,
and the turn log that makes ``--resume`` possible.

Every failure that is the script's fault is a :class:`RunError` carrying the ``.fems`` location,
so the generated module prints ``script.fems:LINE: error: …`` instead of a Python traceback
(§16.2, §16.3).

Checkpoints and ``--resume`` (§16.4)
-----------------------------------
A generated flow is plain Python with concurrent branches, so there is no "position" to save.
Instead every completed model call, human answer and ``@func`` result is recorded in the store
as a *turn record* (a ``fems_checkpoints`` row), in the same transaction as the messages the
turn stores. A record holds the turn's key, its turn id and its result (the reply text and what
memory/context methods wrote; the person's text and out values; the values the function wrote
to its outs, or the actors ``system.spawn`` made), as JSON with actors as ``"@name"`` (so a
value that JSON cannot hold comes back as text). A key names a turn without a position::

    [branch path, node, action, actor (or code.function), occurrence]  + the attempt number

The branch path names the concurrent branches the turn runs in (``/Vote#0>Wolves``: the first
fork at ``[Vote]`` in this path, its branch to ``Wolves``; ``/par@9:4 @voter#0[2]``: the third
iteration of the first ``par @voter`` there; modules and ``for`` loops keep their caller's); within one path turns run one after another, so the occurrence
(how often this key came before in this run) is the same in every run that takes the same way.
Each run starts with a ``run`` record holding the session's turn counter at its start.

``--resume`` re-runs the main flow from the start with the records of the session's last run
as a replay log. A turn whose key has a record takes the recorded result instead of calling the
model, the person or the function, and stores no messages (they are stored already); pure steps
(assignments, conditions, loops) simply run again, so they take the same way. The first turn
without a record goes live and from then on the run is an ordinary one. Replayed turns keep
their turn ids; live turns take the lowest ids above the run's start that no record holds, i.e.
the ids an uninterrupted run would have used (``fems/mock`` replies depend on them; ids are
handed out in the order turns ask for them, so concurrent branches get the same ids in every
run). Replayed ``fems/script`` replies and answers-file answers are consumed as the
interrupted run consumed them, so resuming with the same (extended) files continues where
they left off.

Which session: ``--session N`` (or a numbered ``meta.session``), else the newest session run
from this script's file name. A completed session is refused, and so is one whose recorded
script sha256 differs from the module's (its records would not match the flow).

Limits: a function that ran but whose result was not yet recorded when the process died runs
again (at-least-once); which branches win a ``join(n)`` race is decided again on resume.
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

from fems_runtime import events
from fems_runtime.replies import Piece
from fems_runtime.values import to_json


class RunError(Exception):
    """A run-time failure caused by the script or its inputs, located in the ``.fems`` file."""

    def __init__(self, message: str, file: str | None = None, line: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.file = file
        self.line = line

    @property
    def location(self) -> str:
        """``file:line``, ``file``, ``line N`` or ``""``: where the error points in the script."""
        if self.file and self.line:
            return f"{self.file}:{self.line}"
        if self.file:
            return self.file
        if self.line:
            return f"line {self.line}"
        return ""

    def located(self, file: str | None, line: int | None) -> RunError:
        """Fill in a location that is still unknown (the innermost location wins) and return self."""
        if self.file is None:
            self.file = file
        if self.line is None:
            self.line = line
        return self

    def __str__(self) -> str:
        where = self.location
        return f"{where}: error: {self.message}" if where else self.message


class TraceWriter:
    """The JSONL trace (§16.3), a subscriber of the run's events (:mod:`fems_runtime.events`):
    one JSON object per line for the events it has always written, safe from any thread.

    A run whose session opened starts its trace with a ``run`` line that gives the trace's
    ``format`` (:data:`TRACE_FORMAT`); the other lines keep the fields of format 1, so readers
    of format 1 keep working. A path is truncated when the run starts, so the file holds
    exactly this run's events.
    """

    def __init__(self, target: str | Path | IO[str] | None) -> None:
        self._lock = threading.Lock()
        self._owned = False
        self._stream: IO[str] | None
        if target is None:
            self._stream = None
        elif isinstance(target, str | Path):
            try:  # a missing folder is created, as build -o does
                Path(target).parent.mkdir(parents=True, exist_ok=True)
                self._stream = open(target, "w", encoding="utf-8")  # noqa: SIM115 - closed in close()
            except OSError as error:
                raise RunError(f"cannot write the trace file {target}: {error.strerror}") from error
            self._owned = True
        else:
            self._stream = target

    @property
    def enabled(self) -> bool:
        """Whether a trace file is written."""
        return self._stream is not None

    def __call__(self, event: events.RunEvent) -> None:
        """Write ``event``'s line, if it has one (see :func:`trace_line`)."""
        if self._stream is None:
            return
        line = trace_line(event)
        if line is not None:
            self.write(line.pop("event"), **line)

    def write(self, event: str, **fields: Any) -> None:
        """Write ``{"event": event, **fields}`` as one line; actors become ``"@name"``."""
        if self._stream is None:
            return
        text = json.dumps({"event": event, **to_json(fields)}, ensure_ascii=False)
        with self._lock:
            self._stream.write(text + "\n")
            self._stream.flush()

    def close(self) -> None:
        with self._lock:
            if self._owned and self._stream is not None:
                self._stream.close()
            self._stream = None

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


TRACE_FORMAT = events.RunEvents.TRACE_FORMAT
"""The trace's format: 1 had no ``run`` line; 2 adds it, every other line unchanged."""


def trace_line(event: events.RunEvent) -> dict[str, Any] | None:
    """The trace line of ``event`` (``{"event": name, …}``), None for the events the trace
    does not write (span ends other than a model call's, tool call's and join, chunks …)."""
    where = event.where
    match event:
        case events.RunBegan():
            return {
                "event": "run",
                "node": None,  # every line has a node: the run's is none
                "format": TRACE_FORMAT,
                "session": where.session,
                "script": where.file,
                "sha256": event.sha256,
            }
        case events.StepBegan():
            return {"event": "step", "node": where.node, "line": where.line}
        case events.Assigned():
            return {
                "event": "assign",
                "node": where.node,
                "line": where.line,
                "target": event.target,
                "op": event.op,
                "value": event.value,
            }
        case events.FuncCalled():
            return {
                "event": "func",
                "node": where.node,
                "action": where.action,
                "inputs": event.inputs,
            }
        case events.RunFailed():
            return {
                "event": "error",
                "node": where.node,
                "line": where.line,
                "message": event.message,
            }
    return _branch_line(event) or _turn_line(event)


def _branch_line(event: events.RunEvent) -> dict[str, Any] | None:
    """The trace lines of a fork or a ``par`` loop and their join (``for`` loops have none)."""
    where = event.where
    match event:
        case events.ForkBegan(kind="fork"):
            return {
                "event": "fork",
                "node": where.node,
                "line": where.line,
                "targets": list(event.targets),
                "merge": event.merge,
            }
        case events.ForkBegan(kind="par"):
            return {
                "event": "fork",
                "node": where.node,
                "line": where.line,
                "var": event.var,
                "items": list(event.items),
            }
        case events.ForkJoined(kind="fork" | "par"):
            return {
                "event": "join",
                "node": event.node,
                "line": where.line,
                "cancelled": list(event.cancelled),
            }
    return None


def _turn_line(event: events.RunEvent) -> dict[str, Any] | None:
    """The trace lines of what happens inside a turn."""
    where = event.where
    said = {"node": where.node, "action": where.action}
    match event:
        case events.ModelCallEnded(outcome="ok"):
            return _llm_call(event)
        case events.ToolCallEnded():
            return {
                "event": "tool_call",
                **said,
                "actor": where.actor,
                "name": event.tool,
                "arguments": event.arguments,
                "result": event.result,
                "round": event.round,
                "attempt": event.attempt,
            }
        case events.TurnReplayed(turn=None):
            return {"event": "replay", **said}
        case events.TurnReplayed():
            return {
                "event": "replay",
                **said,
                "actor": where.actor,
                "turn": event.turn,
                "attempt": event.attempt,
            }
        case events.ReplyRejected():
            final = {"final": True} if event.final else {}
            return {
                "event": "rejected",
                **said,
                "actor": where.actor,
                "problems": list(event.problems),
                **final,
            }
        case events.FallbackTaken():
            return {"event": "fallback", **said, "actor": where.actor}
        case events.HumanAnswered():
            return {
                "event": "human",
                **said,
                "turn": event.turn,
                "actor": where.actor,
                "text": event.text,
                "vars": event.values,
            }
    return None


def _llm_call(event: events.ModelCallEnded) -> dict[str, Any]:
    """A model call's ``llm_call`` line: what was sent and received, usage, cost."""
    where = event.where
    return {
        "event": "llm_call",
        "node": where.node,
        "action": where.action,
        "turn": event.turn,
        "actor": where.actor,
        "scope": list(event.scope),
        "model": event.request_model,
        "messages": list(event.messages),
        "reply": event.reply,
        "reasoning": event.reasoning,
        "attempt": event.attempt,
        "trimmed": event.trimmed,
        "interrupted": event.interrupted,
        "tries": event.tries,
        "prompt_tokens": event.input_tokens,
        "completion_tokens": event.output_tokens,
        "reasoning_tokens": event.reasoning_tokens,
        "finish_reason": event.finish_reason,
        "cost": event.cost,
        "tool_calls": list(event.tool_calls),
    }


def read_input(path: str | Path, what: str) -> str:
    """The text of a file the run is given (``what``: ``replies file``, ``answers file``,
    ``souls file``): one that cannot be read is a run error in words, never an exception's
    name, and one saved in another encoding says to save it as UTF-8. A byte order mark
    (Windows editors' "UTF-8 with BOM") is dropped, as a script's is (§1.1)."""
    try:
        return Path(path).read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as error:
        raise RunError(why_unreadable(error, f"{what} {path}")) from None


def why_unreadable(error: OSError | UnicodeDecodeError, name: str = "") -> str:
    """Why a file could not be read, in the same words for every file a user writes:
    ``name`` is the file as the sentence names it (``replies file r.json``), or ``""`` when the
    error is located in the file (``fems.toml: error: not UTF-8 text …``)."""
    if isinstance(error, UnicodeDecodeError):
        byte = error.object[error.start]
        where = f"byte 0x{byte:02x} at offset {error.start}"
        said = f"not UTF-8 text ({where}): save it with UTF-8 encoding"
        return f"{name} is {said}" if name else said
    return f"cannot read {name}: {error.strerror}" if name else f"cannot be read: {error.strerror}"


def write_result(
    path: str | Path,
    *,
    session: int | None,
    status: str,
    steps: int,
    variables: Mapping[str, Any],
    error: str | None = None,
) -> None:
    """Write the ``--result`` file: ``{"session", "status", "steps", "vars", "error"}`` (§16.3)."""
    if status not in ("completed", "failed"):
        raise ValueError(f"status must be 'completed' or 'failed', not {status!r}")
    data = {
        "session": session,
        "status": status,
        "steps": steps,
        "vars": to_json(dict(variables)),
        "error": error,
    }
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(data, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")


class GrowingTextDigests:
    """sha256 digests of texts made of entries joined by blank lines, whose list of entries
    only grows at its end, such as an actor's context kept between its turns (the same list
    for each longer version): each entry is hashed once, not again at every turn that sends
    it, and the text itself is never joined for it."""

    KEEP = 64  # growing texts followed at once (an actor's context each)

    def __init__(self) -> None:
        self._hashed: dict[int, tuple[object, Any, int]] = {}

    def digest(self, entries: Sequence[str], count: int) -> str:
        """The sha256 of the first ``count`` of ``entries`` joined by blank lines."""
        found = self._hashed.get(id(entries))
        if found is not None and found[0] is entries and found[2] <= count:
            hasher, done = found[1], found[2]
        else:
            hasher, done = hashlib.sha256(), 0
        if count > done:
            added = "\n\n".join(entries[done:count])
            text = f"\n\n{added}" if done else added  # the blank line after the hashed ones
            hasher.update(text.encode("utf-8", "surrogatepass"))
        self._hashed.pop(id(entries), None)
        if len(self._hashed) >= self.KEEP:
            self._hashed.pop(next(iter(self._hashed)))
        self._hashed[id(entries)] = (entries, hasher, count)
        return str(hasher.copy().hexdigest())


class InheritedRecords(Protocol):
    """The records a new session takes from the session it starts from (§16.4a,
    :class:`fems_runtime.lineage.Inheritance`): ``parent`` is that session's number."""

    @property
    def parent(self) -> int: ...

    @property
    def compares(self) -> bool: ...

    @property
    def reused(self) -> int: ...

    def turns(self) -> set[int]: ...

    def peek(self, key: Sequence[Any], attempt: int = 0) -> Mapping[str, Any] | None: ...

    def candidate(self, key: Sequence[Any], attempt: int = 0) -> Mapping[str, Any] | None: ...

    def take(
        self, key: Sequence[Any], attempt: int = 0, request: str | None = None
    ) -> Mapping[str, Any] | None: ...

    def went_live(self) -> None: ...


class TurnCounter(Protocol):
    """What hands out a session's turn ids (the store, :mod:`fems_runtime.store`, which
    imports this module)."""

    def new_turn(self, session: int) -> int: ...


class TurnLog:
    """The turn keys of one run and, on ``--resume``, the records to replay (see above).

    ``records`` are the states of the session's last run (``kind`` ``ai``/``human``/``func``,
    ``key``, ``attempt``, ``turn``, ``result``, ``request``: the digest of what the turn sent);
    keys are handed out on the event loop's thread. ``inherited``: the records of the session
    a fork or a reuse starts from (§16.4a), taken for the turns without a record of their own.
    """

    def __init__(
        self,
        records: Iterable[Mapping[str, Any]] = (),
        *,
        resumed: bool = False,
        inherited: InheritedRecords | None = None,
    ) -> None:
        self.resumed = resumed
        self.replayed = 0
        self.inherited = inherited
        self.contexts = GrowingTextDigests()  # of the contexts that requests send (§16.4a)
        self._counts: dict[tuple[str, ...], int] = {}
        self._records: dict[tuple[Any, ...], Mapping[str, Any]] = {}
        self.turns: set[int] = set() if inherited is None else inherited.turns()
        for record in records:
            self._records[(*record["key"], record.get("attempt", 0))] = record
            if record.get("turn") is not None:
                self.turns.add(int(record["turn"]))
        #: whether any turn may be replayed, decided once for the run: it resumes a session
        #: that has records, or starts from another session's (§16.4, §16.4a); else every
        #: turn goes live at once
        self.replays = bool(self._records) or inherited is not None

    @property
    def compares(self) -> bool:
        """Whether a turn without a record must give its request's digest to find one: a
        reuse replays the parent's turn only when it would send what was recorded."""
        return self.inherited is not None and self.inherited.compares

    def new_turn(self, counter: TurnCounter, session: int) -> int:
        """A live turn's id: the session's next one (``counter``: the run's store) that no
        replayed record holds (``turns``). Ids are handed out in the order turns ask for
        them, so concurrent branches get the same ids in every run (``fems/mock`` replies
        depend on them)."""
        while True:
            turn = counter.new_turn(session)
            if turn not in self.turns:
                return turn

    def key(self, path: str, node: str | None, action: str, who: str) -> list[Any]:
        """The key of a turn that starts now (counts its occurrence)."""
        base = (path, node or "", action, who)
        occurrence = self._counts.get(base, 0)
        self._counts[base] = occurrence + 1
        return [*base, occurrence]

    def peek(self, key: Sequence[Any], attempt: int = 0) -> Mapping[str, Any] | None:
        """The record of ``key`` (and ``attempt``) to replay, if any, without taking it: the
        session's own, else a fork's from its parent."""
        record = self._records.get((*key, attempt))
        if record is None and self.inherited is not None:
            record = self.inherited.peek(key, attempt)
        return record

    def candidate(self, key: Sequence[Any], attempt: int = 0) -> Mapping[str, Any] | None:
        """A reuse's parent record of ``key`` that the turn may replay if its request matches
        (its turn number is the turn's while it is compared)."""
        return self.inherited.candidate(key, attempt) if self.inherited is not None else None

    def recorded(
        self, key: Sequence[Any], attempt: int = 0, request: str | None = None
    ) -> Mapping[str, Any] | None:
        """The record of ``key`` (and ``attempt``) to replay, or None: the turn goes live.
        ``request`` is the digest of what the turn would send (a reuse compares it)."""
        record = self._records.get((*key, attempt))
        if record is None and self.inherited is not None:
            record = self.inherited.take(key, attempt, request)
            if record is not None and record.get("turn") is not None:
                self.turns.add(int(record["turn"]))
        if record is not None:
            self.replayed += 1
        return record

    def going_live(self) -> None:
        """A turn is called, asked or run live: a reuse replays nothing from now on."""
        if self.inherited is not None:
            self.inherited.went_live()

    @staticmethod
    def entry(
        kind: str,
        key: Sequence[Any],
        turn: int | None,
        result: Mapping[str, Any],
        attempt: int = 0,
        request: str | None = None,
    ) -> dict[str, Any]:
        """The JSON state of one turn record."""
        entry = {
            "kind": kind,
            "key": list(key),
            "attempt": attempt,
            "turn": turn,
            "result": to_json(dict(result)),
        }
        if request is not None:
            entry["request"] = request
        return entry


class StepCounter:
    """Counts node executions against ``max_steps`` (§3, §11.6, §12.10).

    The run has one root counter; each module call gets a :meth:`child` with the module's own
    limit. A step taken in a child also counts for the root, but not for the modules in between
    (a nested call counts as one step of its caller: the call node itself).
    """

    KEEP = 5

    def __init__(
        self,
        max_steps: int | None = 100_000,
        label: str = "the run",
        *,
        root: StepCounter | None = None,
    ) -> None:
        self.max_steps = max_steps
        self.label = label
        self.count = 0
        self._root = root
        self._limit = sys.maxsize if max_steps is None else max_steps
        self._last: deque[str] = deque(maxlen=self.KEEP)

    @property
    def total(self) -> int:
        """The steps of the whole run (a module's counter counts only its own)."""
        return (self._root or self).count

    def child(self, max_steps: int | None, label: str) -> StepCounter:
        """A counter for one module call (``max_steps`` None: only the run's limit applies)."""
        return StepCounter(max_steps, label, root=self._root or self)

    def step(self, node: str, file: str | None = None, line: int | None = None) -> None:
        """Count one execution of ``node``; raise :class:`RunError` past the limit. Steps are
        taken by flow code, which runs on the run's one event loop: no lock (this is the
        engine's hottest path, once per node)."""
        if self._root is not None:
            self._root.step(node, file, line)
        self.count += 1
        self._last.append(node)
        if self.count > self._limit:
            nodes = " -> ".join(f"[{n}]" for n in self._last)
            raise RunError(
                f"max_steps ({self.max_steps}) exceeded in {self.label}; last nodes: {nodes}",
                file,
                line,
            )


@dataclass(frozen=True)
class StreamedReply:
    """A model reply while it streams in (§15.4), for whoever shows it live (the stage,
    §17.1): its turn, action and node, who speaks, and the souls and users of the turn's room,
    who will see the stored reply (and so the only seats that may see it being written)."""

    turn: int
    action: str
    node: str | None
    speaker: str
    speaker_soul: str
    souls: frozenset[str]
    users: frozenset[str]


class LiveReplyListener(Protocol):
    """Shows one streamed reply as it arrives: ``feed(kind, chunk)`` each piece (a
    `~fems_runtime.replies.Piece`: text, reasoning, or a discard when the stream broke off
    and the call is made again), ``finish(final)`` the reply as it will be stored once the
    call is over, ``warn(problem)`` a warning about the reply while it is written (one that
    runs long without `max_tokens`, §15.4)."""

    def feed(self, kind: Piece, chunk: str) -> None: ...

    def finish(self, final: str) -> None: ...

    def warn(self, problem: str) -> None: ...


ReplyWatcher = Callable[[StreamedReply], LiveReplyListener]
"""Called when a model call starts streaming; returns the listener of its pieces."""


class WatchedReplies:
    """Shows the run's streamed replies to ``watch`` (the stage, §17.1): a subscriber of the
    run's events that tells ``watch`` of each streamed model call as it starts, with its
    turn, speaker and room (so only the room's seats see it being written), then feeds the
    listener it returns each piece and each warning about the call, and the reply as stored
    once the call is over (a failed or cancelled call's pieces are discarded). Offline models answer at once: their replies
    are only stored."""

    def __init__(self, watch: ReplyWatcher) -> None:
        self.watch = watch
        self._listeners: dict[int, LiveReplyListener] = {}  # by model call

    def __call__(self, event: events.RunEvent) -> None:
        match event:
            case events.ModelCallBegan(streamed=True):
                where = event.where
                reply = StreamedReply(
                    turn=event.turn,
                    action=where.action or "",
                    node=where.node,
                    speaker=where.actor or "",
                    speaker_soul=event.speaker_soul,
                    souls=event.souls,
                    users=event.users,
                )
                self._listeners[event.id] = self.watch(reply)
            case events.ReplyChunk():
                listener = self._listeners.get(event.parent or 0)
                if listener is not None:
                    listener.feed(Piece(event.kind), event.chunk)
            case events.ProblemReported():  # about a reply being written: shown with it
                listener = self._listeners.get(event.parent or 0)
                if listener is not None:
                    listener.warn(event.problem)
            case events.ModelCallEnded():
                listener = self._listeners.pop(event.id, None)
                if listener is None:
                    return
                if event.outcome == "ok":
                    listener.finish(event.reply)
                else:
                    listener.feed(Piece.DISCARD, "")
