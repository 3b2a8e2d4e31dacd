"""FEM values: actor references, dictionaries with defaults, the literal grammar and prompt text.

One literal grammar (§4.2) serves ``vars:``, ``@assign`` literals and signal values (§10.3). It
only ever *reads* data: nothing is evaluated, looked up or called, so a model that writes
``__import__('os').system('x')`` just sets a string.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Container, Iterator, Mapping
from typing import Any, Protocol

ACTOR_NAME = re.compile(r"@\w+")
_INT = re.compile(r"[+-]?(?:0|[1-9]\d*)")
_FLOAT = re.compile(r"[+-]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?")
_BARE_KEY = re.compile(r"\w+")
QUOTES = {'"': '"', "'": "'", "“": "”"}  # opener -> closer (§4.2); signals scan with it too
_ESCAPES = {'"': '"', "'": "'", "\\": "\\", "n": "\n", "t": "\t", "”": "”"}
_OPEN = {"[": "]", "{": "}", "【": "】"}  # 【 】 are [ ] (§1.4), as models writing Chinese use them
_SEPARATORS = (",", "，")


class ActorStates(Protocol):
    """Where an :class:`Actor` reads its state from (implemented by ``variables.Variables``)."""

    def actor_info(self, name: str) -> dict[str, Any]: ...


class Actor(str):
    """An actor reference (§7.1): a ``str`` equal to ``"@name"`` that also reads the actor's state.

    ``a["soul"]``, ``a.get("hp", 100)``, ``a["name"]`` and ``dict(a.items())`` read the static
    attributes and every dict attribute declared in ``vars:``; integer indexes and slices still
    index the string. Copies and pickles are plain references to the same name.
    """

    __slots__ = ("_states",)
    _states: ActorStates | None

    def __new__(cls, name: str, states: ActorStates | None = None) -> Actor:
        if not ACTOR_NAME.fullmatch(name):
            raise ValueError(f"an actor reference is '@name', not {name!r}")
        self = super().__new__(cls, name)
        self._states = states
        return self

    @property
    def name(self) -> str:
        return str(self)

    def state(self) -> dict[str, Any]:
        """The actor's state as a fresh dict (``type, name, soul, source, user``, dict attributes)."""
        if self._states is None:
            return {"name": str(self)}
        return self._states.actor_info(str(self))

    def __getitem__(self, key: Any) -> Any:  # type: ignore[override]
        if isinstance(key, int | slice):
            return str.__getitem__(self, key)
        return self.state()[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.state().get(key, default)

    def items(self) -> Iterator[tuple[str, Any]]:
        return iter(self.state().items())

    def keys(self) -> Iterator[str]:
        return iter(self.state())

    def __repr__(self) -> str:
        return f"Actor({str(self)!r})"

    def __copy__(self) -> Actor:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Actor:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (Actor, (str(self),))


class FemDict(dict):  # type: ignore[type-arg]
    """A FEM dictionary: reading a missing key gives ``None`` instead of raising (§4.4)."""

    def __missing__(self, key: Any) -> None:
        return None


class LiteralError(ValueError):
    """A literal that names something it may not (an undefined actor in a signal value)."""


def parse_literal(
    text: str,
    actors: Container[str] | None = None,
    *,
    make_actor: Callable[[str], Any] = Actor,
) -> Any:
    """Read one value literal (§4.2): quoted strings, numbers, booleans, null, ``@name``, lists,
    dicts; anything else is the bare text as a string.

    ``actors``: when given, every ``@name`` must be in it (signals, §10.3), else
    :class:`LiteralError`. ``make_actor`` builds actor values (so they can read state).
    """
    text = text.strip()
    try:
        return _Reader(text, actors, make_actor).whole()
    except _NotLiteral:
        return text


class _NotLiteral(Exception):
    """Internal: the text is not a structured literal, so it is bare text."""


class _Reader:
    """A small recursive reader over one literal; never evaluates anything."""

    def __init__(
        self, text: str, actors: Container[str] | None, make_actor: Callable[[str], Any]
    ) -> None:
        self.text = text
        self.actors = actors
        self.make_actor = make_actor

    def whole(self) -> Any:
        text = self.text
        if not text:
            return ""
        if text[0] in QUOTES:
            value, end = self.quoted(0)
            if end == len(text):
                return value
            raise _NotLiteral
        if text[0] in _OPEN:
            value, end = self.container(0)
            if end == len(text):
                return value
            raise _NotLiteral
        return self.scalar(text)

    def scalar(self, token: str) -> Any:
        """A token without quotes or brackets: number, keyword, actor, or bare text."""
        if _INT.fullmatch(token):
            return int(token)
        if _FLOAT.fullmatch(token) and not re.fullmatch(r"[+-]?0\d+", token):
            value = float(token)
            if math.isfinite(value):
                return value
        if token.lower() in ("true", "false"):  # any case, as in vars: (§4.2)
            return token.lower() == "true"
        if token in ("null", "None"):
            return None
        if ACTOR_NAME.fullmatch(token):
            if self.actors is not None and token not in self.actors:
                raise LiteralError(f"{token} is not a defined actor")
            return self.make_actor(token)
        return token

    def quoted(self, start: int) -> tuple[str, int]:
        """Read a quoted string starting at ``start``; return it and the index after it."""
        close = QUOTES[self.text[start]]
        out: list[str] = []
        i = start + 1
        while i < len(self.text):
            ch = self.text[i]
            if ch == "\\" and i + 1 < len(self.text) and self.text[i + 1] in _ESCAPES:
                out.append(_ESCAPES[self.text[i + 1]])
                i += 2
                continue
            if ch == close:
                return "".join(out), i + 1
            out.append(ch)
            i += 1
        raise _NotLiteral

    def container(self, start: int) -> tuple[Any, int]:
        """Read ``[…]`` or ``{…}`` starting at ``start``; return the value and the index after it."""
        close = _OPEN[self.text[start]]
        items: list[str] = []
        i = start + 1
        begin = i
        depth = 0
        while i < len(self.text):
            ch = self.text[i]
            if ch in QUOTES:
                _, i = self.quoted(i)
                continue
            if ch in _OPEN:
                depth += 1
            elif ch in "]}】":
                if depth == 0:
                    if ch != close:
                        raise _NotLiteral
                    items.append(self.text[begin:i])
                    return self.build(close, items), i + 1
                depth -= 1
            elif ch in _SEPARATORS and depth == 0:
                items.append(self.text[begin:i])
                begin = i + 1
            i += 1
        raise _NotLiteral

    def build(self, close: str, items: list[str]) -> Any:
        parts = [item.strip() for item in items]
        if parts and not parts[-1]:
            parts.pop()  # a trailing comma
        if close in "]】":
            return [self.element(part) for part in parts]
        result = FemDict()
        for part in parts:
            key_text, value_text = self.split_pair(part)
            result[self.key(key_text)] = self.element(value_text)
        return result

    def element(self, part: str) -> Any:
        if not part:
            raise _NotLiteral
        return _Reader(part, self.actors, self.make_actor).whole()

    def split_pair(self, part: str) -> tuple[str, str]:
        """Split ``key: value`` at the first colon outside quotes."""
        i = 0
        while i < len(part):
            ch = part[i]
            if ch in QUOTES:
                _, i = _Reader(part, self.actors, self.make_actor).quoted(i)
                continue
            if ch in ":：":
                return part[:i].strip(), part[i + 1 :].strip()
            if ch in _OPEN:
                break
            i += 1
        raise _NotLiteral

    def key(self, text: str) -> Any:
        if not text:
            raise _NotLiteral
        if text[0] in QUOTES:
            value, end = _Reader(text, self.actors, self.make_actor).quoted(0)
            if end != len(text):
                raise _NotLiteral
            return value
        if ACTOR_NAME.fullmatch(text) or _FLOAT.fullmatch(text) or _BARE_KEY.fullmatch(text):
            value = self.scalar(text)
            if isinstance(value, str | int | float):
                return value
        raise _NotLiteral


def format_value(value: Any) -> str:
    """Render a value for people (§9.4): strings as-is, ``@name``, ``[@a, @b]``, ``{@a: 1}``,
    ``true``/``false``; ``None`` is ``""`` (``null`` inside a list or dict)."""
    if value is None:
        return ""
    return _format(value)


def _format(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return str(value)
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_format(k)}: {_format(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple | set | frozenset):
        items = sorted(value, key=str) if isinstance(value, set | frozenset) else value
        return "[" + ", ".join(_format(v) for v in items) + "]"
    return str(value)


def to_json(value: Any) -> Any:
    """A JSON-ready copy of ``value``: actors as ``"@name"``, tuples and sets as lists."""
    if isinstance(value, str):
        return str(value)
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, Mapping):
        return {_json_key(k): to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    if isinstance(value, set | frozenset):
        return sorted((to_json(v) for v in value), key=str)
    return str(value)


def _json_key(key: Any) -> str:
    if isinstance(key, bool):
        return "true" if key else "false"
    return str(key) if key is not None else "null"
