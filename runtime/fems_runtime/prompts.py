"""The one prompt renderer (§9.4): what the model sees and what is stored are the same text.

``{path}`` placeholders hold a variable, ``@x``, ``@x.attr``, ``attr.@x``, ``dict.key`` or
``dict[key]``; values are written for people (:func:`values.format_value`). Braces that do not
hold a path stay literal, ``{{``/``}}`` write one brace, and a missing value renders as ``""``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from fems_runtime.records import RunError
from fems_runtime.values import ACTOR_NAME, format_value, parse_literal

# A name does not start with a digit (§1.6), so "{1} or {2}" stays literal text.
_NAME = r"@?(?!\d)\w+"
PLACEHOLDER = re.compile(
    rf"\{{\s*(?P<a>{_NAME})(?:\.(?P<b>{_NAME}))?(?:\[\s*(?P<k>[^\[\]{{}}]+?)\s*\])?\s*\}}"
)

# What the renderer stops at; the text between is copied as it is.
_BRACE = re.compile(r"\{\{|\}\}|\{")


class Lookup(Protocol):
    """What the renderer reads values from (``variables.Frame`` implements it)."""

    def get(self, name: str) -> Any: ...

    def attr(self, actor: str, attr: str) -> Any: ...


def render(
    template: str, lookup: Lookup | Mapping[str, Any], only: Mapping[str, Any] | None = None
) -> str:
    """Render ``template`` (§9.4).

    ``lookup`` gives variable values (a frame, or a plain mapping). With ``only`` (the action's
    evaluated ``in:`` values) only placeholders whose name is listed there are substituted and
    the other braces stay as written.
    """
    source = only if only is not None else lookup
    get = source.__getitem__ if isinstance(source, Mapping) else source.get
    out: list[str] = []
    done = 0  # the template up to here is rendered
    while brace := _BRACE.search(template, done):
        start = brace.start()
        out.append(template[done:start])
        done = brace.end()
        if brace.group() != "{":  # "{{" or "}}"
            out.append(brace.group()[0])
        elif match := PLACEHOLDER.match(template, start):
            if only is not None and match["a"] not in only:
                out.append(match.group(0))
            else:
                out.append(format_value(_value(match, source, get)))
            done = match.end()
        else:
            out.append("{")
    out.append(template[done:])
    return "".join(out)


def _value(
    match: re.Match[str], source: Lookup | Mapping[str, Any], get: Callable[[str], Any]
) -> Any:
    """The value of one placeholder (``get`` reads a name of ``source``); anything missing or
    unbound is ``None`` (renders ``""``)."""
    a, b, k = match["a"], match["b"], match["k"]
    try:
        if b is not None and (a.startswith("@") or b.startswith("@")):
            actor, attr = (a, b) if a.startswith("@") else (b, a)
            value = _attr(source, actor, attr)
        else:
            value = get(a)
            if b is not None:
                value = _entry(value, b)
        if k is not None:
            value = _entry(value, _key(k, get))
        return value
    except (RunError, LookupError, TypeError):
        return None


def _attr(source: Lookup | Mapping[str, Any], actor: str, attr: str) -> Any:
    if isinstance(source, Mapping):
        who = source.get(actor, actor)
        if isinstance(who, Mapping) and not isinstance(source.get(attr), Mapping):
            return who.get(attr)
        return _entry(source[attr], who)
    return source.attr(actor, attr)


def _entry(container: Any, key: Any) -> Any:
    if isinstance(container, Mapping):
        return container.get(key)
    if isinstance(container, list | tuple) and isinstance(key, int):
        return container[key]
    return None


def _key(text: str, get: Callable[[str], Any]) -> Any:
    """``dict[key]``: ``@x`` and declared names are looked up, other keys are literals."""
    if ACTOR_NAME.fullmatch(text) or re.fullmatch(r"\w+", text) and not text[0].isdigit():
        try:
            return get(text)
        except (RunError, LookupError):
            if ACTOR_NAME.fullmatch(text):
                raise
    return parse_literal(text, None, make_actor=str)
