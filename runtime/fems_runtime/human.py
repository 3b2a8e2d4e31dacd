"""Where a person's turn comes from (§10.8): the terminal, or an answers file for tests (§15.3).

A provider returns free text plus one value per ``out``; the text is stored as a ``human``
message and is never parsed for signals.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol

from fems_runtime.offline import (
    entry_list,
    json_kind,
    mock_value,
    named_actors,
    offline_out,
    quoted,
    unknown_fields,
    used_up,
)
from fems_runtime.out_types import SignalError, choice_list, convert_value, out_type
from fems_runtime.records import RunError, read_input
from fems_runtime.values import format_value, parse_literal

if TYPE_CHECKING:
    from fems_runtime.signals import OutSpec
    from fems_runtime.variables import Frame


@dataclass(frozen=True)
class HumanRequest:
    """One human turn: the action, the person's actor (and role), what they are shown, the outs."""

    action: str
    actor: str
    prompt: str
    outs: tuple[OutSpec, ...] = ()
    context: str = ""
    role: str | None = None
    frame: Frame | None = field(default=None, compare=False)


@dataclass(frozen=True)
class HumanAnswer:
    """The person's free text and out values keyed by out label (``vote``, ``votes.@voter``)."""

    text: str
    vars: dict[str, Any] = field(default_factory=dict)


class HumanProvider(Protocol):
    """Something that answers human turns."""

    async def ask(self, request: HumanRequest) -> HumanAnswer: ...


class TerminalHuman:
    """Asks on a terminal: shows the context and prompt, reads a line of free text, then each out
    (a numbered menu for ``dropdown``/``enum``, typed and validated input otherwise)."""

    def __init__(
        self,
        input_fn: Callable[[str], str] = input,
        output: IO[str] | None = None,
    ) -> None:
        self._input = input_fn
        self._output = output
        self._lock = threading.Lock()

    async def ask(self, request: HumanRequest) -> HumanAnswer:
        """Ask in a worker thread, one person at a time."""
        return await asyncio.to_thread(self._ask_locked, request)

    def _ask_locked(self, request: HumanRequest) -> HumanAnswer:
        with self._lock:
            return self.ask_sync(request)

    def ask_sync(self, request: HumanRequest) -> HumanAnswer:
        who = request.actor + (f" as {request.role}" if request.role else "")
        self._print(f"\n=== {request.action}: your turn ({who}) ===")
        if request.context:
            self._print(request.context)
            self._print("---")
        self._print(request.prompt)
        text = self._read("> ", request)
        values: dict[str, Any] = {}
        for out in request.outs:
            value = self._ask_out(out, request)
            if value is not _SKIP:
                values[out.label] = value
        return HumanAnswer(text, values)

    def _ask_out(self, out: OutSpec, request: HumanRequest) -> Any:
        name = out_name(out, request.frame)
        choices = menu(out)
        if choices is not None:
            if not choices:
                raise RunError(f"{request.action}: out {out.label} has no choices to offer")
            self._print(f"{name}:")
            for number, choice in enumerate(choices, 1):
                self._print(f"  {number}. {format_value(choice)}")
            while True:
                answer = self._read(f"{name} [1-{len(choices)}]: ", request).strip()
                if not answer and out.optional:
                    return _SKIP
                if answer.isdigit() and 1 <= int(answer) <= len(choices):
                    return choices[int(answer) - 1]
                matches = [c for c in choices if format_value(c) == answer]
                if matches:
                    return matches[0]
                self._print(f"please enter a number from 1 to {len(choices)}")
        typed = out_name(out, request.frame, out.type)
        while True:
            answer = self._read(f"{typed}: ", request).strip()
            if not answer and out.optional:
                return _SKIP
            try:
                return typed_value(out, answer, request.frame)
            except SignalError as error:
                self._print(f"{error}; please try again")

    def _read(self, prompt: str, request: HumanRequest) -> str:
        try:
            return self._input(prompt)
        except EOFError:
            raise RunError(
                f"input ended (EOF) while {request.actor} was answering {request.action}; "
                "the run cannot continue without it"
            ) from None

    def _print(self, text: str) -> None:
        print(text, file=self._output or sys.stdout, flush=True)


_SKIP: Any = object()


def typed_value(out: OutSpec, answer: str, frame: Frame | None) -> Any:
    """A person's typed answer to an out that has no menu, read like a signal value (§10.3):
    ``3`` is an int, ``[@a]`` a list, text stays text; raises :class:`SignalError` when it
    does not fit the out's type."""
    row = out_type(out.type)
    value = answer if row is not None and row.text else parse_literal(answer, make_actor=str)
    if frame is None:
        return value
    if row is not None and row.actor and frame.variables.is_actor(f"@{answer}"):
        value = f"@{answer}"  # a person may leave out the @
    return convert_value(out, value, frame)


def menu(out: OutSpec) -> list[Any] | None:
    """The choices a person picks from (an out whose type offers a menu), None for an out
    answered by typing a value."""
    row = out_type(out.type)
    return choice_list(out) if row is not None and row.menu else None


def out_name(out: OutSpec, frame: Frame | None, kind: str | None = None) -> str:
    """How an out is named to a person (§10.8): the author's caption, then the target with its
    key in the current binding (and the type, if given): ``tonight's victim (wolf_pick.@you)``,
    ``your vote (@VOTE, actor)``, ``d[2] (int)``, ``note``."""
    shown = out.shown(frame)
    if out.caption:
        return f"{out.caption} ({shown}, {kind})" if kind else f"{out.caption} ({shown})"
    return f"{shown} ({kind})" if kind else shown


class AnswersFileHuman:
    """Answers human turns from a JSON file or mapping (§15.3).

    Keys ``ACTION@ACTOR``, ``ACTION`` and ``*`` map to lists of answers; for a turn, the first
    non-exhausted list among them gives the next answer (the last answer of ``*`` repeats).
    An answer is ``{"text": "…", "vars": {"name": value}}`` or a plain string.
    """

    def __init__(self, source: str | Path | Mapping[str, Any]) -> None:
        if isinstance(source, Mapping):
            data, self.origin = dict(source), "the answers"
        else:
            self.origin = str(source)
            text = read_input(source, "answers file")
            try:
                data = json.loads(text)
            except json.JSONDecodeError as error:
                raise RunError(f"answers file {source} is not valid JSON: {error}") from None
            if not isinstance(data, dict):
                raise RunError(f"answers file {source} must hold a JSON object")
        self._lists = {
            str(key): [
                _answer(item, f"{self.origin}: {quoted(key)}, answer {number}")
                for number, item in enumerate(
                    entry_list(value, f"{self.origin}: {quoted(key)}", "answers", ANSWER_SHAPE), 1
                )
            ]
            for key, value in data.items()
        }
        self._used = {k: 0 for k in self._lists}
        self._lock = threading.Lock()

    async def ask(self, request: HumanRequest) -> HumanAnswer:
        return self.next_answer(request.action, request.actor)

    def next_answer(self, action: str, actor: str) -> HumanAnswer:
        """The next answer for ``action`` by ``actor``."""
        with self._lock:
            for key in (f"{action}{actor}", action, "*"):
                answers = self._lists.get(key)
                if not answers:
                    continue
                used = self._used[key]
                if used < len(answers):
                    self._used[key] = used + 1
                    return _copy(answers[used])
                if key == "*":
                    return _copy(answers[-1])
        keys = (f"{action}{actor}", action, "*")
        raise RunError(
            f"{self.origin} has no answer left for {action} by {actor}"
            f"{used_up(keys, self._lists, ('answer', 'answers'))}"
        )


_MOCK_LINES = (
    "{me}: I have listened to everyone, and I made my choice.",
    "{me}: I am not sure yet, but I will go along.",
    "{me}: fine by me.",
)


class MockHuman:
    """``--human fems/mock`` (§15.3): deterministic answers so any script runs unattended — a
    short line, and for each out a valid value (its choices first, an actor where only an actor
    fits, else a small value of its type), like `fems/mock` for AI turns."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self._asked: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    async def ask(self, request: HumanRequest) -> HumanAnswer:
        with self._lock:
            key = (request.action, request.actor)
            count = self._asked[key] = self._asked.get(key, -1) + 1
        rng = random.Random(f"{self.seed}|human|{request.action}|{request.actor}|{count}")
        text = rng.choice(_MOCK_LINES).format(me=request.actor)
        frame = request.frame
        if frame is None or not request.outs:
            return HumanAnswer(text)
        others = [name for name in frame.variables.actors if name != request.actor]
        candidates = named_actors(request.prompt, frame) or others or [request.actor]
        values: dict[str, Any] = {}
        for out in request.outs:
            seen = offline_out(out, frame)
            value = mock_value(seen, candidates, rng)
            if isinstance(value, list) and isinstance(seen.current, list):
                value = [*seen.current, *(v for v in value if v not in seen.current)]  # add()
            values[out.label] = value
        return HumanAnswer(text, values)


ANSWER_SHAPE = 'a string or {"text": "…", "vars": {"name": value}}'
"""What one answer of an answers file is (§15.3), as the messages about a wrong one say it."""


def _answer(item: Any, where: str) -> HumanAnswer:
    """One answer of an answers file, checked when the file is loaded: a misspelt field or a
    value of the wrong kind is named before the run starts."""
    if isinstance(item, str):
        return HumanAnswer(item)
    if not isinstance(item, Mapping):
        raise RunError(f"{where}: an answer is {ANSWER_SHAPE}, not {json_kind(item)}")
    if unknown := [str(name) for name in item if name not in ("text", "vars")]:
        raise RunError(f"{where}: {unknown_fields(unknown)}; an answer is {ANSWER_SHAPE}")
    text, values = item.get("text", ""), item.get("vars") or {}
    if not isinstance(text, str):
        raise RunError(f'{where}: "text" must be a string, not {json_kind(text)}')
    if not isinstance(values, Mapping):
        raise RunError(
            f'{where}: "vars" must be an object of out values by name, not {json_kind(values)}'
        )
    return HumanAnswer(text, dict(values))


def _copy(answer: HumanAnswer) -> HumanAnswer:
    """An answer of its own for each turn: the repeated last answer of ``*`` shares no dict."""
    return HumanAnswer(answer.text, dict(answer.vars))
