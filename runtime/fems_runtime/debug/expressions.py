"""FEM expressions typed in the debug console, in breakpoint conditions and in ``setVariable``
(``alive``, ``votes.@Bob``, ``@voter == @Bob and day > 2``), read against a branch's frame.

The compiler turns a script's expressions into Python once (``fems2py/expressions.py``, which
the runtime never imports); a debug session reads a handful of them typed by hand, so the same
naming convention (ARCHITECTURE.md, "Embedded expressions") is applied here to the tokens, and
the result is checked to call nothing but reads of the frame and a few builtins.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from fems_runtime.records import RunError
from fems_runtime.values import FemDict
from fems_runtime.variables import Frame

_TOKEN = re.compile(
    r"""(?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')"""
    r"""|(?P<path>@?(?!\d)\w+(?:\s*\.\s*@?(?!\d)\w+)*)"""
    r"""|(?P<other>\s+|\d+(?:\.\d+)?|==|!=|<=|>=|[-+*/%<>()\[\],{}:])"""
)
_WORDS = {"true": "True", "false": "False", "null": "None", "ai": "'ai'", "human": "'human'"}
_KEYWORDS = frozenset({"and", "or", "not", "in", "is", "if", "else"})
_BUILTINS: dict[str, Any] = {
    f.__name__: f for f in (len, min, max, sum, abs, sorted, str, int, float, bool, list, round)
}
_READERS = frozenset({"_get", "_attr", "_entry"})


class ExpressionError(Exception):
    """An expression that cannot be read or evaluated; the message says why."""


def python_of(text: str) -> str:
    """The Python of FEM expression ``text`` (names read through ``_get``/``_attr``)."""
    out: list[str] = []
    position = 0
    for match in _TOKEN.finditer(text):
        if match.start() != position:
            break
        position = match.end()
        kind, token = match.lastgroup, match.group()
        out.append(_path(token) if kind == "path" else token)
    if position != len(text):
        raise ExpressionError(f"cannot read {text[position:][:20]!r} in {text!r}")
    return "".join(out)


def _path(token: str) -> str:
    parts = [part.strip() for part in token.split(".")]
    first = parts[0]
    if len(parts) == 1:
        if first in _KEYWORDS or first in _BUILTINS:
            return first
        return _WORDS.get(first) or f"_get({first!r})"
    code = f"_get({first!r})"
    for index, part in enumerate(parts[1:]):
        if index == 0 and (first.startswith("@") or part.startswith("@")):
            actor, attr = (first, part) if first.startswith("@") else (part, first)
            code = f"_attr({actor!r}, {attr!r})"  # @x.attr, attr.@x, dict.@x (§7.3)
        elif part.startswith("@"):
            code = f"_entry({code}, _get({part!r}))"
        else:
            code = f"_entry({code}, {part!r})"
    return code


def _check(tree: ast.AST, text: str) -> None:
    """Only reads of the frame, the listed builtins and operators: no attribute access."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute | ast.Lambda | ast.NamedExpr) or (
            isinstance(node, ast.Name)
            and node.id not in _READERS
            and node.id not in _BUILTINS
            and node.id not in {"True", "False", "None"}
        ):
            raise ExpressionError(f"not a FEM expression: {text!r}")


def parse(text: str) -> ast.Expression:
    """The tree of FEM expression ``text``, checked: a mistake is found before it is read
    (a breakpoint's condition, when the editor sets it)."""
    try:
        tree = ast.parse(python_of(text.strip()), mode="eval")
    except SyntaxError:
        raise ExpressionError(f"not a FEM expression: {text!r}") from None
    _check(tree, text)
    return tree


def evaluate(text: str, frame: Frame) -> Any:
    """The value of FEM expression ``text`` as ``frame`` sees it."""
    tree = parse(text)

    def attr(actor: str, name: str) -> Any:
        return frame.attr(actor, name)

    def entry(container: Any, key: Any) -> Any:
        if isinstance(container, dict | FemDict):
            return container.get(key)
        return container[key]

    names = {"_get": frame.get, "_attr": attr, "_entry": entry, **_BUILTINS}
    try:
        return eval(compile(tree, "<debug>", "eval"), {"__builtins__": {}}, names)  # noqa: S307
    except RunError as error:
        raise ExpressionError(error.message) from None
    except Exception as error:  # the author's expression failed: say how, no traceback
        raise ExpressionError(f"{type(error).__name__}: {error}") from None


__all__ = ["ExpressionError", "evaluate", "parse", "python_of"]
