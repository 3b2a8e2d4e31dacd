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
_LEADING_ZERO = re.compile(r"[+-]?0\d")  # 001, 01.5: written as ids are, so text (§4.2)
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

    def __getitem__(self, key: Any) -> Any:
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


class FemDict(dict[Any, Any]):
    """A FEM dictionary: reading a missing key gives ``None`` instead of raising (§4.4)."""

    def __missing__(self, key: Any) -> None:
        return None


class LiteralError(ValueError):
    """A literal that is not acceptable data: an undefined actor in a signal value, or a value
    beyond the limits of §10.3 (nesting, digits, non-finite numbers, invalid text)."""


MAX_DEPTH = 100  # §10.3: deeper lists and dicts are invalid values
MAX_INT_DIGITS = 4000  # §10.3: also for the results of += and -=
INT_LIMIT = 10**MAX_INT_DIGITS
_LONG_INT = f"(an integer of more than {MAX_INT_DIGITS:,} digits)"
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_INVALID_TEXT = re.compile(r"[\ud800-\udfff\ufffd]")
_CLOSERS = "]}】"
_SPACE = re.compile(r"\s*")
# where a bare item or a dict key may end, in one regex step (the rest is plain text)
_BARE_STOP = re.compile(r"[\"'“\[\]{}【】,，]")
_BRACKET_STOP = re.compile(r"[\"'“\[\]{}【】]")
_KEY_STOP = re.compile(r"[:：\"'“\[\]{}【】,，]")
_QUOTE_STOP = {close: re.compile(r"[\\" + close + "]") for close in set(QUOTES.values())}


def check_value(value: Any, what: str = "value") -> Any:
    """``value`` when it is within the limits of §10.3, else :class:`LiteralError`: an int of
    more than 4,000 digits or a non-finite float (the result of ``+=`` on two large ints, of
    ``1e308 + 1e308``)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and not -INT_LIMIT < value < INT_LIMIT:
        raise LiteralError(f"the {what} has more than {MAX_INT_DIGITS:,} digits")
    if isinstance(value, float) and not math.isfinite(value):
        raise LiteralError(f"the {what} is not a finite number ({value})")
    return value


def check_text(text: str) -> str:
    """``text`` when it is valid Unicode, else :class:`LiteralError`: a lone surrogate, or the
    U+FFFD that :func:`valid_text` put in a reply's place for one (so that a resumed run, which
    reads the stored reply, rejects the same signals)."""
    if _INVALID_TEXT.search(text):
        raise LiteralError("text that is not valid Unicode (a lone surrogate or U+FFFD)")
    return text


def valid_text(text: str) -> str:
    """``text`` with every lone surrogate (text that is not valid Unicode, as a JSON ``\\ud800``
    escape gives) replaced by U+FFFD, so that it can be stored, traced and printed. ASCII
    text, which holds none, is not scanned: the trace passes each call's whole context here."""
    return text if text.isascii() else _SURROGATE.sub("\ufffd", text)


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
    Values beyond the limits of §10.3 (nested deeper than 100 levels, ints of more than 4,000
    digits, numbers too large to be finite) raise :class:`LiteralError`. One pass over the text:
    the time is linear in its length whatever it holds.
    """
    text = text.strip()
    try:
        return _Reader(text, actors, make_actor).whole()
    except _NotLiteral:
        return text


def excerpt(text: str, limit: int = 60) -> str:
    """``text`` shortened for a message: a reply may hold megabytes."""
    return text if len(text) <= limit else f"{text[: limit - 1]}…"


def counted(number: int, noun: str) -> str:
    """``number`` and ``noun`` for a message, the noun plural (with an s) unless it is one."""
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


class _NotLiteral(Exception):
    """Internal: the text is not a structured literal, so it is bare text."""


class _Reader:
    """A recursive-descent reader over one literal, each character read once; it never
    evaluates anything. Items of a list or dict are quoted strings, nested lists and dicts, or
    bare tokens (which may hold balanced brackets and quoted parts: ``[a[1], 2]``).

    A value that breaks a rule of §10.3 is noted and reading goes on: only a well-formed
    literal raises :class:`LiteralError`; a malformed one is bare text, whatever it holds.
    """

    def __init__(
        self, text: str, actors: Container[str] | None, make_actor: Callable[[str], Any]
    ) -> None:
        self.text = text
        self.actors = actors
        self.make_actor = make_actor
        self.problem: str | None = None

    def whole(self) -> Any:
        text = self.text
        if not text:
            return ""
        if text[0] in QUOTES:
            value, end = self.quoted(0)
        elif text[0] in _OPEN:
            value, end = self.container(0, 1)
        else:
            value, end = self.scalar(text), len(text)
        if end != len(text):
            raise _NotLiteral
        if self.problem is not None:
            raise LiteralError(self.problem)
        return value

    def invalid(self, problem: str) -> None:
        """Note the first rule of §10.3 the literal breaks; its value is replaced by None."""
        if self.problem is None:
            self.problem = problem

    def scalar(self, token: str) -> Any:
        """A token without quotes or brackets: number, keyword, actor, or bare text."""
        if _INT.fullmatch(token):
            if len(token.lstrip("+-")) > MAX_INT_DIGITS:
                return self.invalid(f"an integer of more than {MAX_INT_DIGITS:,} digits")
            return int(token)
        if _FLOAT.fullmatch(token) and not _LEADING_ZERO.match(token):
            number = float(token)
            if not math.isfinite(number):
                return self.invalid(f"{excerpt(token)} is too large to be a finite number")
            return number
        if token.lower() in ("true", "false"):  # any case, as in vars: (§4.2)
            return token.lower() == "true"
        if token in ("null", "None"):
            return None
        if ACTOR_NAME.fullmatch(token):
            if self.actors is not None and token not in self.actors:
                return self.invalid(f"{excerpt(token)} is not a defined actor")
            return self.make_actor(token)
        return token

    def quoted(self, start: int) -> tuple[str, int]:
        """Read a quoted string starting at ``start``; return it and the index after it."""
        text = self.text
        close = QUOTES[text[start]]
        stop = _QUOTE_STOP[close]
        out: list[str] = []
        i = start + 1
        while True:
            found = stop.search(text, i)
            if found is None:
                raise _NotLiteral
            j = found.start()
            out.append(text[i:j])
            if text[j] == close:
                return "".join(out), j + 1
            escaped = text[j + 1 : j + 2]
            if escaped and escaped in _ESCAPES:
                out.append(_ESCAPES[escaped])
                i = j + 2
            else:  # a backslash before anything else is itself
                out.append("\\")
                i = j + 1

    def container(self, start: int, depth: int) -> tuple[Any, int]:
        """Read ``[…]`` or ``{…}`` (at nesting level ``depth``) starting at ``start``; return the
        value and the index after it. A trailing separator is allowed, an empty item is not."""
        if depth > MAX_DEPTH:
            self.invalid(f"a value nested deeper than {MAX_DEPTH} levels")
            return None, self.bare_end(start + 1, nested=True) + 1
        text = self.text
        close = _OPEN[text[start]]
        is_list = close != "}"
        items: list[Any] = []
        result = FemDict()
        i = self.skip(start + 1)
        while i < len(text) and text[i] not in _CLOSERS:
            if is_list:
                value, i = self.item(i, depth)
                items.append(value)
            else:
                key, i = self.key(i)
                value, i = self.item(self.skip(i + 1), depth)
                result[key] = value
            if i < len(text) and text[i] in _SEPARATORS:
                i = self.skip(i + 1)
        if i >= len(text) or text[i] != close:
            raise _NotLiteral
        return (items if is_list else result), i + 1

    def item(self, start: int, depth: int) -> tuple[Any, int]:
        """One list item or dict value at ``start``; return it and the index of the separator or
        closing bracket after it."""
        text = self.text
        if start >= len(text):
            raise _NotLiteral
        if text[start] in QUOTES:
            value, end = self.quoted(start)
        elif text[start] in _OPEN:
            value, end = self.container(start, depth + 1)
        else:
            end = self.bare_end(start)
            token = text[start:end].strip()
            if not token:
                raise _NotLiteral
            return self.scalar(token), end
        end = self.skip(end)
        if end < len(text) and (text[end] in _SEPARATORS or text[end] in _CLOSERS):
            return value, end
        raise _NotLiteral

    def bare_end(self, start: int, *, nested: bool = False) -> int:
        """Where a bare item starting at ``start`` ends: the first separator or closing bracket
        outside its own quoted parts and balanced brackets (``nested``: the closing bracket of
        the container it is inside, separators included)."""
        text = self.text
        depth = 0
        i = start
        while True:
            found = (_BRACKET_STOP if nested else _BARE_STOP).search(text, i)
            if found is None:
                raise _NotLiteral
            j = found.start()
            ch = text[j]
            if ch in QUOTES:
                i = self.quoted(j)[1]
                continue
            if ch in _OPEN:
                depth += 1
            elif ch in _CLOSERS:
                if depth == 0:
                    return j
                depth -= 1
            elif depth == 0:  # a separator
                return j
            i = j + 1

    def key(self, start: int) -> tuple[Any, int]:
        """A dict key at ``start`` (quoted, ``@name``, a number or a word); return it and the
        index of its colon."""
        text = self.text
        if text[start] in QUOTES:
            value, end = self.quoted(start)
            end = self.skip(end)
        else:
            found = _KEY_STOP.search(text, start)
            if found is None:
                raise _NotLiteral
            end = found.start()
            value = self.bare_key(text[start:end].strip())
        if end < len(text) and text[end] in ":：":
            return value, end
        raise _NotLiteral

    def bare_key(self, token: str) -> Any:
        if ACTOR_NAME.fullmatch(token) or _FLOAT.fullmatch(token) or _BARE_KEY.fullmatch(token):
            noted = self.problem
            value = self.scalar(token)
            if isinstance(value, str | int | float):
                return value
            if self.problem is not noted:  # an invalid key: the literal is rejected
                return token
        raise _NotLiteral

    def skip(self, i: int) -> int:
        """The index of the first non-space character at or after ``i``."""
        return _SPACE.match(self.text, i).end()  # type: ignore[union-attr]


def format_value(value: Any, *, inside: bool = False) -> str:
    """Render a value for people (§9.4): strings as-is, ``@name``, ``[@a, @b]``, ``{@a: 1}``,
    ``true``/``false``; ``None`` is ``""`` (``null`` ``inside`` a list or dict)."""
    if value is None:
        return "null" if inside else ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return str(value)
    if isinstance(value, Mapping):
        entries = (
            f"{format_value(k, inside=True)}: {format_value(v, inside=True)}"
            for k, v in value.items()
        )
        return "{" + ", ".join(entries) + "}"
    if isinstance(value, list | tuple | set | frozenset):
        items = sorted(value, key=str) if isinstance(value, set | frozenset) else value
        return "[" + ", ".join(format_value(v, inside=True) for v in items) + "]"
    return str(value)


def show_value(value: Any) -> str:
    """A value in a run message (a "flow stuck" error, a failed ``+=``): strings quoted (so
    ``'3'`` differs from ``3``), the rest as :func:`format_value` writes it for people."""
    if isinstance(value, str) and not value.startswith("@"):
        return repr(value)
    return "None" if value is None else format_value(value)


def to_json(value: Any) -> Any:
    """A JSON-ready copy of ``value``: actors as ``"@name"``, tuples and sets as lists. It can
    always be written: lone surrogates become U+FFFD, an int too long for ``str()`` (only the
    author's arithmetic makes one) a note."""
    if isinstance(value, str):
        return valid_text(str(value))
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if -INT_LIMIT < value < INT_LIMIT else _LONG_INT
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
    if key is None:
        return "null"
    return str(to_json(key))
