"""The run's state: global variables, the actor registry, and frames (§4, §7, §11.3, §12.5a).

A :class:`Frame` is the view of the variables one piece of the flow has:

* the root frame holds the globals;
* a module frame (:meth:`Frame.module`) holds a call's parameters and locals, fresh per call;
* a loop frame (:meth:`Frame.loop`) holds a ``for``/``par`` variable for one iteration;
* a branch view (:meth:`Frame.branch`) is one concurrent branch of a fork or ``par``.

Reads walk from the innermost frame outwards (the caller's frames, then the globals). A write
goes to the frame where the name is declared, except that a branch view keeps ``=`` writes to
outer names as the branch's *own* values; increments, ``add``/``remove`` and single-entry
writes pass through to the shared value, atomically. :meth:`Frame.merge` writes the branches'
own values back in the order they finished (§12.5a).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from fems_runtime.records import RunError
from fems_runtime.values import (
    ACTOR_NAME,
    INT_LIMIT,
    Actor,
    FemDict,
    LiteralError,
    check_value,
    format_value,
    parse_literal,
    show_value,
    to_json,
)
from fems_runtime.words import (
    ACTOR_TYPES,
    FIXED_ACTOR_ATTRIBUTES,
    MAX_ALIAS_HOPS,
    MAX_MODULE_DEPTH,
)

OPS: tuple[str, ...] = ("=", "+=", "-=", "add", "remove")

Undo = Callable[[], None]
"""Reverts one write (used to roll back a rejected reply's signals, §10.5)."""


@dataclass(frozen=True)
class ActorSpec:
    """A defined actor (§6): ``ActorSpec("@god", type="ai", soul="0", source="deepseek")``.

    ``source`` is a model alias/string for AI actors and the user id for humans (``"0"``:
    anonymous). ``blueprint`` is set for actors made by ``system.spawn`` (§9.8).
    """

    name: str
    type: Literal["ai", "human"] = "ai"
    soul: str | None = None
    source: str | None = None
    tools: tuple[str, ...] | bool = False
    blueprint: str | None = None
    #: the person's user id, for a human with a source other than ``0`` (§6.3); worked out
    #: once, as every turn in the actor's scope reads it
    user: str | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not ACTOR_NAME.fullmatch(self.name):
            raise ValueError(f"actor names start with '@': {self.name!r}")
        if self.type not in ACTOR_TYPES:
            raise ValueError(f"actor type is 'ai' or 'human', not {self.type!r}")
        if self.soul is None:
            object.__setattr__(self, "soul", self.name[1:])
        person = self.is_human and self.source not in (None, "", "0")
        object.__setattr__(self, "user", self.source if person else None)

    @property
    def is_human(self) -> bool:
        """Whether a person plays the actor (a ``@mind`` turn then asks them, §9.1)."""
        return self.type == "human"


@dataclass(frozen=True)
class BlueprintSpec:
    """A ``blueprint NAME:`` (§6.5): the template ``system.spawn`` makes actors from."""

    name: str
    source: str | None = None
    tools: tuple[str, ...] | bool = False


_MISSING: Any = object()


class Variables:
    """Globals plus the actor registry of one run; :attr:`root` is the globals' frame."""

    def __init__(
        self,
        values: Mapping[str, Any] | None = None,
        actors: Iterable[ActorSpec] = (),
        blueprints: Iterable[BlueprintSpec] = (),
    ) -> None:
        self.lock = threading.RLock()
        self.actors: dict[str, ActorSpec] = {}
        #: one reference per defined actor, made when it is registered: every lookup of an
        #: actor hands out the same one
        self.refs: dict[str, Actor] = {}
        self.blueprints: dict[str, BlueprintSpec] = {b.name: b for b in blueprints}
        for spec in actors:
            self.add_actor(spec)
        self.root = Frame(self, None, "globals", {})
        for name, value in (values or {}).items():
            self.root.names[name] = self.adopt(value)

    # ------------------------------------------------------------------ actors

    def add_actor(self, spec: ActorSpec) -> Actor:
        """Register an actor (at start, or spawned at run time)."""
        with self.lock:
            if spec.name in self.actors:
                raise RunError(f"actor {spec.name} is already defined")
            self.actors[spec.name] = spec
            ref = self.refs[spec.name] = Actor(spec.name, self)
        return ref

    def is_actor(self, name: Any) -> bool:
        return isinstance(name, str) and str(name) in self.actors

    def actor(self, name: str) -> Actor:
        """The reference to the defined actor ``name`` (bound to this run's state)."""
        ref = self.refs.get(name)
        if ref is None:
            raise RunError(f"{name} is not a defined actor")
        return ref

    def actor_info(self, name: str) -> dict[str, Any]:
        """The actor's state (§8.1): ``type, name, soul, source, user, tools`` and, for every
        global dict that has the actor as a key, that entry (``hp`` for ``hp = {@a: 100}``)."""
        spec = self.actors.get(str(name))
        if spec is None:
            return {"name": str(name)}
        info: dict[str, Any] = {
            "type": spec.type,
            "name": spec.name,
            "soul": spec.soul,
            "source": spec.source,
            "user": spec.user,
            "tools": list(spec.tools) if isinstance(spec.tools, tuple) else spec.tools,
        }
        with self.lock:
            for var, value in self.root.names.items():
                if var not in info and isinstance(value, Mapping) and spec.name in value:
                    info[var] = value[spec.name]
        return info

    # ------------------------------------------------------------------ values

    def adopt(self, value: Any) -> Any:
        """A private copy of ``value`` in runtime form: ``"@x"`` strings naming defined actors
        become :class:`Actor`, dicts become :class:`FemDict`, tuples become lists."""
        if type(value) in _PLAIN:  # most values: the ABC checks below cost more than the rest
            return value
        if isinstance(value, str):
            ref = self.refs.get(str(value))
            if ref is not None:
                return ref
            return str(value) if isinstance(value, Actor) else value
        if isinstance(value, Mapping):
            return FemDict((self.adopt(k), self.adopt(v)) for k, v in value.items())
        if isinstance(value, list | tuple):
            return [self.adopt(v) for v in value]
        if isinstance(value, set | frozenset):
            return {self.adopt(v) for v in value}
        return value

    def literal(self, text: str, *, defined_actors_only: bool = True) -> Any:
        """Parse a literal (§4.2) with this run's actors; see :func:`values.parse_literal`."""
        actors = self.actors if defined_actors_only else None
        return self.adopt(parse_literal(text, actors, make_actor=lambda n: n))

    def snapshot(self) -> dict[str, Any]:
        """The globals as JSON-ready data (actors as ``"@name"``)."""
        with self.lock:
            return to_json(dict(self.root.names))

    def restore(self, data: Mapping[str, Any]) -> None:
        """Load globals from a :meth:`snapshot` (a checkpoint); names not in ``data`` are kept."""
        with self.lock:
            for name, value in data.items():
                self.root.names[name] = self.adopt(value)


_finish_order = itertools.count(1)


class Frame:
    """One level of variable lookup; see the module docstring for the rules."""

    def __init__(
        self,
        variables: Variables,
        parent: Frame | None,
        kind: Literal["globals", "module", "loop", "branch"],
        names: dict[str, Any],
        label: str = "",
    ) -> None:
        self.variables = variables
        self.parent = parent
        self.kind = kind
        self.names = names
        """Names declared in this frame (globals, params and locals, loop variables)."""
        self.own: dict[str, Any] = {}
        """A branch view's own values of outer names (``=`` inside the branch)."""
        self.label = label
        self.finished: int | None = None
        self.depth: int = 0 if parent is None else parent.depth + (kind == "module")

    # ------------------------------------------------------------------ frames

    def module(
        self,
        label: str,
        params: Mapping[str, Any] | None = None,
        local: Mapping[str, Any] | None = None,
    ) -> Frame:
        """A fresh frame for one module call: parameters and ``vars:`` locals (§11.2)."""
        if self.depth >= MAX_MODULE_DEPTH:
            raise RunError(self._too_deep(label))
        names = {k: self.variables.adopt(v) for k, v in (local or {}).items()}
        names.update({k: self.variables.adopt(v) for k, v in (params or {}).items()})
        return Frame(self.variables, self, "module", names, label)

    def _too_deep(self, label: str) -> str:
        """Why a module call is refused at the depth limit (§11.6): a module that calls itself
        without end, or a chain of different modules that long."""
        if any(frame.kind == "module" and frame.label == label for frame in self._callers()):
            return f"module recursion deeper than {MAX_MODULE_DEPTH} calls ({label})"
        return (
            f"module calls nested deeper than {MAX_MODULE_DEPTH} ({label} is called inside a "
            f"chain of {MAX_MODULE_DEPTH} module calls; none calls itself)"
        )

    def _callers(self) -> Iterator[Frame]:
        frame: Frame | None = self
        while frame is not None:
            yield frame
            frame = frame.parent

    def loop(self, bindings: Mapping[str, Any]) -> Frame:
        """A branch-local frame binding loop variables for one iteration (§12.7)."""
        return Frame(self.variables, self, "loop", dict(bindings), "loop")

    def branch(self, label: str = "branch") -> Frame:
        """A view for one concurrent branch (§12.5a); call :meth:`finish` when it completes."""
        return Frame(self.variables, self, "branch", {}, label)

    def finish(self) -> None:
        """Mark this branch finished now; :meth:`merge` writes branches back in finish order."""
        if self.finished is None:
            self.finished = next(_finish_order)

    def merge(self, branches: Iterable[Frame]) -> None:
        """Write each finished branch's own values back into this frame, in finish order.

        Unfinished (cancelled) branches write nothing back.
        """
        done = sorted(
            (b for b in branches if b.finished is not None), key=lambda b: b.finished or 0
        )
        for branch in done:
            if branch.parent is not self:
                raise ValueError("merge() takes branches created by this frame's branch()")
            for name, value in branch.own.items():
                self.assign(name, "=", value)

    # ------------------------------------------------------------------ reading

    def _find(self, name: str) -> tuple[Frame, dict[str, Any]] | None:
        """The frame and mapping holding ``name`` as this frame sees it."""
        frame: Frame | None = self
        while frame is not None:
            if name in frame.names:
                return frame, frame.names
            if name in frame.own:
                return frame, frame.own
            frame = frame.parent
        return None

    def declared(self, name: str) -> bool:
        """Whether ``name`` is a variable visible from here."""
        return self._find(name) is not None

    def __contains__(self, name: str) -> bool:
        return self.declared(name)

    def get(self, name: str) -> Any:
        """The value of a variable, or of ``@x`` (an actor variable, followed through aliases,
        or a defined actor). An undeclared name is a :class:`RunError`."""
        with self.variables.lock:
            found = self._find(name)
            if found is not None:
                value = found[1][name]
                if name.startswith("@") and isinstance(value, str) and value:
                    return self._follow(name, value)
                return value
        ref = self.variables.refs.get(name)
        if ref is None:
            raise RunError(f"undeclared variable '{name}'")
        return ref

    def __getitem__(self, name: str) -> Any:
        return self.get(name)

    def _follow(self, start: str, value: str) -> Any:
        """Follow an actor-variable alias chain (§7.2) to a defined actor."""
        hops = 0
        while not self.variables.is_actor(value):
            found = self._find(value) if ACTOR_NAME.fullmatch(value) else None
            if found is None:
                return value
            hops += 1
            if hops > MAX_ALIAS_HOPS:
                raise RunError(f"actor variable {start} aliases more than {MAX_ALIAS_HOPS} times")
            value = found[1][value]
            if not isinstance(value, str) or not value:
                return value
        return self.variables.actor(str(value))

    def resolve_actor(self, name: str, what: str = "an actor") -> Actor:
        """``@x`` as a defined actor; an unbound (``""``) actor variable is a :class:`RunError`
        naming it (§7.2). ``what`` says where the actor was needed ("the executor")."""
        value = self.get(name)
        if isinstance(value, Actor) and value in self.variables.refs:
            return value
        if value in ("", None):
            raise RunError(f"actor variable {name} is unbound but {what} is required here")
        raise RunError(f"{name} is {value!r}, not an actor, but {what} is required here")

    def attr(self, actor: str, attr: str) -> Any:
        """``@x.attr`` / ``attr.@x`` (§7.3): static attributes first, else ``vars[attr][@x]``."""
        who = self.resolve_actor(actor) if actor.startswith("@") else actor
        if attr in FIXED_ACTOR_ATTRIBUTES and self.variables.is_actor(who):
            return self.variables.actor_info(who)[attr]
        table = self.get(attr)
        if table is None:
            return None
        if not isinstance(table, Mapping):
            raise RunError(f"'{attr}' is not a dict, so {actor}.{attr} cannot be read")
        return table.get(who)

    def entry_key(self, key: Any) -> Any:
        """The dict key a target's key text stands for: ``@x`` resolves, other keys stay."""
        if isinstance(key, str) and ACTOR_NAME.fullmatch(key) and not self.variables.is_actor(key):
            return self.resolve_actor(key)
        if isinstance(key, str) and self.variables.is_actor(key):
            return self.variables.actor(key)
        return key

    # ------------------------------------------------------------------ writing

    def assign(self, name: str, op: str, value: Any, key: Any = _MISSING) -> Undo:
        """Apply ``name op value`` (``op`` in ``= += -= add remove``); with ``key``, act on the
        entry ``name[key]`` (``dict.@x``, ``@x.attr``, ``dict[key]``). Return an undo function.

        ``=`` on a whole variable declared outside a branch view becomes the branch's own value;
        everything else acts on the visible value in place, atomically (§12.5a).
        """
        if op not in OPS:
            raise ValueError(f"unknown assignment operator {op!r}")
        if key is not _MISSING and name in FIXED_ACTOR_ATTRIBUTES and not self.declared(name):
            raise RunError(f"'{name}' is a fixed attribute of actors and cannot be assigned")
        if type(value) not in _PLAIN:
            value = self.variables.adopt(value)
        with self.variables.lock:
            found = self._find(name)
            if found is None:
                raise RunError(f"undeclared variable '{name}'")
            holder_frame, holder = found
            if key is not _MISSING:
                return self._assign_entry(name, holder[name], op, value, key)
            if op == "=":
                target = self._assign_target(holder_frame, holder)
                old = target.get(name, _MISSING)
                target[name] = value
                return _restore(self.variables.lock, target, name, old)
            return self._update(holder, name, op, value)

    def _assign_target(self, holder_frame: Frame, holder: dict[str, Any]) -> dict[str, Any]:
        """Where ``=`` writes: the declaring frame, or the first branch view on the way."""
        frame: Frame | None = self
        while frame is not None and frame is not holder_frame:
            if frame.kind == "branch":
                return frame.own
            frame = frame.parent
        return holder

    def _update(self, holder: dict[str, Any], name: str, op: str, value: Any) -> Undo:
        current = holder[name]
        new, undo_op, undo_value = _combine(name, current, op, value)
        if op in ("add", "remove"):
            if undo_op is None:
                return _nothing
            if op == "add":
                current.append(value)
                return _locked(self.variables.lock, lambda: _discard(current, value))
            index = current.index(value)
            del current[index]
            return _locked(self.variables.lock, lambda: current.insert(index, value))
        holder[name] = new
        if undo_op == "=":
            return _restore(self.variables.lock, holder, name, undo_value)
        back = undo_op or "="  # += and -= always name their opposite

        def undo() -> None:
            with self.variables.lock:
                now = holder[name]
                if type(now) is type(new) and now == new:  # untouched since: exactly as before
                    holder[name] = current  # (3 - 1e308 + 1e308 is 0.0 in floats)
                else:  # another branch changed it meanwhile: take back only this change
                    holder[name] = _combine(name, now, back, undo_value)[0]

        return undo

    def _assign_entry(self, name: str, table: Any, op: str, value: Any, key: Any) -> Undo:
        if not isinstance(table, dict):
            raise RunError(f"'{name}' is not a dict, so an entry of it cannot be assigned")
        key = self.entry_key(key)
        if op == "=":
            old = table.get(key, _MISSING)
            table[key] = value
            return _restore(self.variables.lock, table, key, old)
        if table.get(key) is not None:
            return self._update(table, key, op, value)
        # a missing entry reads as None (§4.4): a tally (`count.@x += 1`) starts from 0 and a
        # list entry (`groups[k] = add(x)`) from []
        previous = table.get(key, _MISSING)
        if op in ("add", "remove"):
            table[key] = []
        elif isinstance(value, int | float) and not isinstance(value, bool):
            table[key] = 0
        else:
            raise RunError(f"{name}[{format_value(key)}] has no value to apply {op} to")
        self._update(table, key, op, value)
        return _restore(self.variables.lock, table, key, previous)

    # ------------------------------------------------------------------ snapshots

    def visible(self) -> dict[str, Any]:
        """Every variable visible from here with the value this frame sees."""
        chain: list[Frame] = []
        frame: Frame | None = self
        while frame is not None:
            chain.append(frame)
            frame = frame.parent
        result: dict[str, Any] = {}
        with self.variables.lock:
            for frame in reversed(chain):
                result.update(frame.names)
                result.update(frame.own)
        return result

    def snapshot(self) -> dict[str, Any]:
        """:meth:`visible` as JSON-ready data (actors as ``"@name"``)."""
        return to_json(self.visible())

    def __iter__(self) -> Iterator[str]:
        return iter(self.visible())


_PLAIN = frozenset({int, float, bool, type(None)})
_NUMBERS = frozenset({int, float})  # by exact type: a bool is not a number to += (§4.2)
_OPPOSITE = {"+=": "-=", "-=": "+="}


def _combine(name: Any, current: Any, op: str, value: Any) -> tuple[Any, str | None, Any]:
    """``current op value`` and the operation that undoes it (None: nothing changed)."""
    if op in ("+=", "-="):
        if type(current) in _NUMBERS and type(value) in _NUMBERS:  # the usual case, first
            return _number(name, current, op, value), _OPPOSITE[op], value
        if isinstance(current, bool) or isinstance(value, bool):
            raise RunError(f"cannot apply {op} to a boolean ('{name}')")
        if isinstance(current, int | float) and isinstance(value, int | float):
            return _number(name, current, op, value), _OPPOSITE[op], value  # their subclasses
        if op == "-=":
            raise RunError(
                f"cannot subtract {show_value(value)} from '{name}' ({show_value(current)})"
            )
        if isinstance(current, str) and isinstance(value, str):
            return current + value, "=", current
        if isinstance(current, list):
            extra = value if isinstance(value, list) else [value]
            return current + extra, "=", current
        raise RunError(f"cannot add {show_value(value)} to '{name}' ({show_value(current)})")
    if not isinstance(current, list):
        raise RunError(
            f"'{name}' is not a list, so {op}() cannot change it ({show_value(current)})"
        )
    if op == "add":
        return current, (None if value in current else "remove"), value
    return current, ("add" if value in current else None), value


def _number(name: Any, current: Any, op: str, value: Any) -> int | float:
    """``current + value`` (``op`` ``+=``) or ``current - value`` when it is within the limits
    of §10.3 (at most 4,000 digits, finite), else a :class:`RunError` (a signal that would
    produce it is rejected); a float and an int too large for one (``1.5 + 9…9``) overflow,
    which is the same."""
    try:
        result = current + value if op == "+=" else current - value
    except OverflowError:
        raise RunError(f"the result for '{name}' is not a finite number") from None
    if type(result) is int and -INT_LIMIT < result < INT_LIMIT:
        return result  # the usual case, without building the message of the checks below
    try:
        return check_value(result, f"result for '{name}'")
    except LiteralError as error:
        raise RunError(str(error)) from None


def _discard(items: list[Any], value: Any) -> None:
    if value in items:
        items.remove(value)


def _nothing() -> None:
    return None


def _locked(lock: threading.RLock, action: Callable[[], Any]) -> Undo:
    def undo() -> None:
        with lock:
            action()

    return undo


def _restore(lock: threading.RLock, mapping: dict[Any, Any], key: Any, old: Any) -> Undo:
    def undo() -> None:
        with lock:
            if old is _MISSING:
                mapping.pop(key, None)
            else:
                mapping[key] = old

    return undo
