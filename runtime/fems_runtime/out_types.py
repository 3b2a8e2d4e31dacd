"""What each type of a typed out does (§10.4, §10.8, §15.3), one row per type.

A row says how a value is converted to the type (a signal's value, a person's answer), what
the offline answerers give for it, and how a person is asked for it: a menu of choices or a
typed answer. Signals (:mod:`.signals`), the terminal and the answers of the stage
(:mod:`.human`, :mod:`.stage.live`) and the offline models (:mod:`.offline`) read the rows,
never the type's name, so adding an out type is its word in :data:`.words.OUT_TYPES` and its
row here; ``tests/test_kinds.py`` holds the two together.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from fems_runtime.values import (
    Actor,
    LiteralError,
    check_value,
    excerpt,
    format_value,
    parse_literal,
)

if TYPE_CHECKING:
    from fems_runtime.variables import Frame

#: The words `fems/mock` and the mock human say for a text out (§15.3).
MOCK_WORDS = ("yes", "maybe", "later", "agreed", "onward")


class TypedOut(Protocol):
    """What a row needs of an out (a :class:`fems_runtime.signals.OutSpec`): its type's name
    and its choices."""

    @property
    def type(self) -> str | None: ...

    @property
    def choices(self) -> tuple[Any, ...]: ...


class SignalError(ValueError):
    """A signal that cannot be parsed or is not allowed, or a value that does not fit its out;
    the message says why."""


def choice_list(spec: TypedOut) -> list[Any]:
    """The choices of an ``enum``/``dropdown`` out; ``choices={alive}`` (one list-valued
    expression) offers that list's items."""
    choices = list(spec.choices)
    if len(choices) == 1 and isinstance(choices[0], list | tuple | dict):
        return list(choices[0])
    return choices


def _to_int(value: Any, spec: TypedOut, frame: Frame) -> int:
    if isinstance(value, bool):
        raise SignalError(f"{excerpt(format_value(value))} is not an integer")
    try:
        if isinstance(value, int):
            return check_value(value, "integer")
        if isinstance(value, float) and value.is_integer():
            return check_value(int(value), "integer")
        if isinstance(value, str):
            parsed = parse_literal(value)
            if isinstance(parsed, int | float) and not isinstance(parsed, bool):
                return _to_int(parsed, spec, frame)
    except LiteralError as error:  # more than 4,000 digits (§10.3)
        raise SignalError(str(error)) from None
    raise SignalError(f"'{excerpt(format_value(value))}' is not an integer")


def _to_float(value: Any, spec: TypedOut, frame: Frame) -> float:
    if isinstance(value, bool):
        raise SignalError(f"{excerpt(format_value(value))} is not a number")
    try:
        number = float(value) if isinstance(value, int | float) else float(str(value).strip())
        return check_value(number, "number")
    except (ValueError, OverflowError):  # LiteralError too: nan, inf, 1e999
        raise SignalError(f"'{excerpt(format_value(value))}' is not a finite number") from None


def _to_bool(value: Any, spec: TypedOut, frame: Frame) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        word = value.strip().lower()
        if word in ("true", "yes", "1", "是"):
            return True
        if word in ("false", "no", "0", "否"):
            return False
    raise SignalError(f"'{excerpt(format_value(value))}' is not true or false")


def _to_string(value: Any, spec: TypedOut, frame: Frame) -> str:
    if isinstance(value, list | dict):
        raise SignalError(f"{excerpt(format_value(value))} is not a single text value")
    return format_value(value) if not isinstance(value, str) else str(value)


def _to_actor(value: Any, spec: TypedOut, frame: Frame) -> Actor:
    variables = frame.variables
    if isinstance(value, Actor) and variables.is_actor(value):
        return variables.actor(str(value))
    raise SignalError(
        f"'{excerpt(format_value(value))}' is not a defined actor (write it as @name)"
    )


def _to_choice(value: Any, spec: TypedOut, frame: Frame) -> Any:
    choices = choice_list(spec)
    for choice in choices:
        if choice == value or format_value(choice) == format_value(value):
            return frame.variables.adopt(choice)
    shown = ", ".join(format_value(c) for c in choices)
    raise SignalError(f"'{excerpt(format_value(value))}' is not one of the choices [{shown}]")


@dataclass(frozen=True)
class OutType:
    """One type of a typed out (§10.4).

    ``convert``: a value (a signal's, a person's) as this type, or :class:`SignalError`.
    ``example``: the value the offline answerers give when the out offers no choices (§15.3);
    None: it is shaped like the variable's current value, as for an untyped out.
    ``menu``: a person picks one of the out's choices instead of typing a value (§10.8).
    ``text``: a person's typed answer is taken as text, not read as a literal.
    ``actor``: only an actor fits (a person may leave out the ``@``).
    ``actor_entry``: an entry keyed by an actor (``votes.@x``) holds an actor (§10.3, §15.3).
    """

    name: str
    convert: Callable[[Any, TypedOut, Frame], Any]
    example: Callable[[Sequence[str], random.Random], Any] | None
    menu: bool = False
    text: bool = False
    actor: bool = False
    actor_entry: bool = False


OUT_TYPE_ROWS: dict[str, OutType] = {
    row.name: row
    for row in (
        OutType("int", _to_int, lambda actors, rng: rng.randint(0, 3)),
        OutType("float", _to_float, lambda actors, rng: rng.randint(0, 10) / 2),
        OutType("bool", _to_bool, lambda actors, rng: rng.random() < 0.5),
        OutType(
            "string",
            _to_string,
            lambda actors, rng: rng.choice(MOCK_WORDS),
            text=True,
            actor_entry=True,
        ),
        OutType(
            "actor", _to_actor, lambda actors, rng: rng.choice(actors), actor=True, actor_entry=True
        ),
        OutType("enum", _to_choice, None, menu=True),
        OutType("dropdown", _to_choice, None, menu=True),
    )
}


def out_type(name: str | None) -> OutType | None:
    """The row of an out's type; None for an untyped out."""
    return None if name is None else OUT_TYPE_ROWS[name]


def convert_value(spec: TypedOut | None, value: Any, frame: Frame) -> Any:
    """Validate and convert ``value`` for a typed out (§10.4); raise :class:`SignalError`."""
    variables = frame.variables
    if isinstance(value, str) and variables.is_actor(value):
        value = variables.actor(str(value))
    row = out_type(spec.type) if spec is not None else None
    if spec is None or row is None:
        return value
    return row.convert(value, spec, frame)
