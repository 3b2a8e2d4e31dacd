"""``--set NAME=VALUE``: a variable's initial value for every session of a batch, checked
against the script before any session starts.

A value is read like a ``vars:`` literal (§4.2) and must be of the kind the script declares
(the kind of its ``vars:`` value), so that a typo is one usage error, not a run error in every
session. This module imports only the runtime: workers read the values with it too.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Collection, Mapping
from typing import Any

from fems_runtime.app import Program
from fems_runtime.values import Actor, LiteralError, excerpt, format_value, parse_literal

from fems2py.batch import UsageError

ACTOR, FLOAT, INTEGER, STRING = "an actor", "a float", "an integer", "a string"
#: what a value of a declared kind may also be: an integer is a float's value, and an actor
#: reference (``"@name"`` at run time) a string's
ALSO_FITS = {FLOAT: {INTEGER}, STRING: {ACTOR}}
#: how each container kind is written, to tell a malformed literal from text
CONTAINERS = {"a list": "[a, b, …]", "a dict": "{key: value, …}"}


def initial_values(program: Program, sets: Mapping[str, str]) -> dict[str, Any]:
    """The script variables ``--set NAME=VALUE`` replaces: each value read like a ``vars:``
    literal (§4.2), ``@name`` being one of the script's actors; a :class:`UsageError` for a
    ``--set`` the script cannot take (the batch checks them before any worker starts)."""
    actors = [spec.name for spec in program.actors]
    values: dict[str, Any] = {}
    for name, text in sets.items():
        if name not in program.variables:
            from fems2py.diagnostics import suggest

            hint = suggest(name, program.variables) or "--set takes a variable of vars:"
            raise UsageError(f"--set {name}: the script has no variable {name!r}", hint)
        try:
            values[name] = parse_literal(text, actors)
        except LiteralError as error:
            raise UsageError(f"--set {name}={text}: {error}", _actors_hint(actors)) from None
        _check_kind(program, name, text, values[name], actors)
    return values


def _kind_of(value: Any) -> str | None:
    """The kind of a value as a message names it; None for ``null``, whose variable may hold
    any kind."""
    if value is None:
        return None
    if isinstance(value, Actor):
        return ACTOR
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return INTEGER
    if isinstance(value, float):
        return FLOAT
    if isinstance(value, str):
        return STRING
    if isinstance(value, Mapping):
        return "a dict"
    return "a list"


def _check_kind(
    program: Program, name: str, text: str, value: Any, actors: Collection[str]
) -> None:
    """A :class:`UsageError` unless ``value`` is of the kind ``vars:`` declares for ``name``
    (an actor-typed ``@name`` takes an actor, or ``""``: not bound yet, §4.3)."""
    declared = program.variables[name]
    wanted = ACTOR if name.startswith("@") else _kind_of(declared)
    given = _kind_of(value)
    if wanted is None or given == wanted or given in ALSO_FITS.get(wanted, ()):
        return
    if wanted == ACTOR and value == "":
        return
    form = CONTAINERS.get(wanted)
    if given == STRING and form is not None and text.startswith(form[0]):
        said = f"{excerpt(text, 40)} is not a complete {wanted.split()[1]}"
    else:
        said = f"{excerpt(text, 40)} is {given}"
    where = f"{program.script.file} (vars: {name} = {_literal(declared)})"
    raise UsageError(
        f"--set {name}={text}: {name} is {wanted} in {where}, and {said}",
        _kind_hint(name, text, wanted, declared, actors),
    )


def _literal(value: Any) -> str:
    """A declared value as ``vars:`` writes it, shortened: strings quoted."""
    if isinstance(value, str) and not isinstance(value, Actor):
        return excerpt(json.dumps(value, ensure_ascii=False), 40)
    return excerpt(format_value(value, inside=True), 40)


def _kind_hint(name: str, text: str, wanted: str, declared: Any, actors: Collection[str]) -> str:
    """How to write a value of the kind the variable wants."""
    if wanted == ACTOR:
        return _actors_hint(actors)
    if wanted == STRING:
        quoted = shlex.quote(f'{name}="{text}"')
        return f"quote a text that reads as another kind: --set {quoted}"
    form = CONTAINERS.get(wanted)
    if form is not None:
        return f"{wanted} is written {form}, quoted for the shell: --set '{name}={form}'"
    return f"for example --set {name}={_literal(declared)}"


def _actors_hint(actors: Collection[str]) -> str:
    """The actors a ``--set`` value may name."""
    shown = ", ".join(list(actors)[:8]) + (", …" if len(actors) > 8 else "")
    return f"actors are written @name; the script's actors: {shown}"
