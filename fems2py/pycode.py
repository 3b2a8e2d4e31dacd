"""Python code from small pieces: literals, names, comments and docstrings, calls, conditions.

What every part of code generation writes the same way (:mod:`fems2py.codegen`, the actions
of :mod:`fems2py.actioncode`, the flows of :mod:`fems2py.flowcode`). Code is made of
``repr()`` literals and the ``Expr.python`` that :mod:`fems2py.expressions` built from a parse
tree: user text never lands between quotes any other way.
"""

from __future__ import annotations

import ast
import keyword
import unicodedata
from collections.abc import Iterable
from typing import Any

from fems2py.expressions import ALLOWED_CALLS
from fems2py.nodes import (
    ActorValue,
    BoolValue,
    DictValue,
    Expr,
    ListValue,
    NullValue,
    NumberValue,
    StringValue,
    Value,
)
from fems2py.visitor import NodeVisitor

# Names the generated module defines, imports or calls itself (conditions call the builtins of
# §12.2, dropdown specs call `tuple`); a .fems name equal to one of them gets a suffix so it
# cannot shadow them.
_TAKEN = ALLOWED_CALLS | frozenset(
    {
        "tuple",
        "__file__",
        "__name__",
        "fr",
        "ctx",
        "node",
        "stop",
        "targets",
        "main_flow",
        "run",
        "run_async",
        "main",
        "PROGRAM",
        "SCRIPT",
        "LINES",
        "CONDITIONS",
        "ACTORS",
        "BLUEPRINTS",
        "METHODS",
        "VARIABLES",
    }
)
_SOFT_KEYWORDS = frozenset({"match", "case", "type", "_"})


# ------------------------------------------------------------------------------ literals


def py(value: Any) -> str:
    """A Python literal for ``value`` via :func:`repr`. A multi-line string becomes
    ``fr.lines(...)`` with one literal per line (and a trailing comma, so black keeps them
    apart): a prompt reads, and diffs, line by line in the generated module."""
    if isinstance(value, str) and "\n" in value:
        pieces = value.split("\n")
        return "fr.lines(\n" + "".join(f"{piece!r},\n" for piece in pieces) + ")"
    if isinstance(value, tuple):
        return tuple_code(py(item) for item in value)
    if isinstance(value, list):
        return "[" + ", ".join(py(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{py(k)}: {py(v)}" for k, v in value.items()) + "}"
    if value is None or isinstance(value, bool | int | float | str):
        return repr(value)
    raise TypeError(f"no Python literal for {type(value).__name__}")


def text_code(value: StringValue) -> str:
    """A text value: a ``|`` block is ``fr.lines(...)`` however many lines it has, so cutting
    a prompt to one line (or growing it from one) changes only that line of the module."""
    if value.style == "block" and "\n" not in value.value:
        return f"fr.lines(\n{value.value!r},\n)"
    return py(value.value)


def value_code(value: Value) -> str:
    """Python code building a FEM value literal (§4.2); actor references are ``fr.Actor``."""
    code = _ValueCode().visit(value)
    assert code is not None
    return code


def plain_value(value: Value) -> Any:
    """A FEM value as plain data (actors as ``"@name"`` strings), for specs and metadata."""
    return _PlainValue().visit(value)


class _ValueCode(NodeVisitor[str]):
    """The Python building each kind of value literal (see :func:`value_code`)."""

    def visit_StringValue(self, value: StringValue) -> str:
        return text_code(value)

    def visit_NumberValue(self, value: NumberValue) -> str:
        return repr(value.value)

    visit_BoolValue = visit_NumberValue

    def visit_NullValue(self, value: NullValue) -> str:
        return "None"

    def visit_ActorValue(self, value: ActorValue) -> str:
        return f"fr.Actor({value.name!r})"

    def visit_ListValue(self, value: ListValue) -> str:
        return "[" + ", ".join(value_code(item) for item in value.items) + "]"

    def visit_DictValue(self, value: DictValue) -> str:
        pairs = ", ".join(f"{value_code(k)}: {value_code(v)}" for k, v in value.items)
        return "{" + pairs + "}"

    def generic_visit(self, node: Any, *args: Any, **kwargs: Any) -> str:
        raise TypeError(f"unknown value node {type(node).__name__}")


class _PlainValue(NodeVisitor[Any]):
    """Each kind of value literal as plain data (see :func:`plain_value`)."""

    def visit_StringValue(self, value: StringValue | NumberValue | BoolValue) -> Any:
        return value.value

    visit_NumberValue = visit_BoolValue = visit_StringValue

    def visit_NullValue(self, value: NullValue) -> None:
        return None

    def visit_ActorValue(self, value: ActorValue) -> str:
        return value.name

    def visit_ListValue(self, value: ListValue) -> list[Any]:
        return [plain_value(item) for item in value.items]

    def visit_DictValue(self, value: DictValue) -> dict[Any, Any]:
        return {_hashable(plain_value(k)): plain_value(v) for k, v in value.items}

    def generic_visit(self, node: Any, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"unknown value node {type(node).__name__}")


def _hashable(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def docstring_text(text: str) -> str:
    """Text safe inside a one-line triple-quoted docstring, whose value it stays: backslashes
    and quotes escaped (no closing quotes can form), line breaks and other unsafe characters
    written as escapes (see :func:`comment_text`)."""
    return comment_text(text.replace("\\", "\\\\").replace('"', '\\"'))


def comment_text(text: str) -> str:
    """Text safe inside a ``#`` comment: control, format and line/paragraph separator characters
    (U+2028 and U+2029 end a line for editors and ``str.splitlines``) are written as escapes."""
    return "".join(
        repr(ch)[1:-1] if unicodedata.category(ch) in _UNSAFE_IN_COMMENTS else ch for ch in text
    )


# control, format, surrogate, private-use, unassigned; line and paragraph separators
_UNSAFE_IN_COMMENTS = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


# ------------------------------------------------------------------------------ names


def python_name(name: str) -> str:
    """A valid Python identifier for a ``.fems`` name: kept as written when possible."""
    cleaned = "".join(ch if ("_" + ch).isidentifier() else "_" for ch in name.lstrip("@&"))
    if not cleaned or not cleaned.isidentifier():
        cleaned = "_" + cleaned
    if keyword.iskeyword(cleaned) or cleaned in _SOFT_KEYWORDS or cleaned in _TAKEN:
        cleaned += "_"
    return cleaned


class Namer:
    """Hands out unique function names in a fixed order (first come keeps the plain name)."""

    def __init__(self) -> None:
        self._used: set[str] = set()

    def take(self, wanted: str) -> str:
        name = python_name(wanted)
        candidate, suffix = name, 2
        # Python folds identifiers with NFKC: two spellings may be one name.
        while unicodedata.normalize("NFKC", candidate) in self._used:
            candidate, suffix = f"{name}_{suffix}", suffix + 1
        self._used.add(unicodedata.normalize("NFKC", candidate))
        return candidate

    def taken(self, wanted: str) -> bool:
        return unicodedata.normalize("NFKC", python_name(wanted)) in self._used


# ------------------------------------------------------------------------------ code


MARK = "\ue000"  # private use: never in a comment made from user text (see comment_text)


def line_marker(line: int) -> str:
    """A temporary comment saying the code below comes from ``.fems`` line ``line``; see
    :class:`fems2py.codegen.Parts` for what becomes of it."""
    return f"# {MARK}{line}"


def docstring(text: str, indent: str = "    ") -> str:
    """A docstring literal for ``text`` ("" for no text) at ``indent``: triple-quoted when that
    is safe, else a plain literal."""
    text = text.strip()
    if not text:
        return ""
    safe = '"""' not in text and not text.endswith(('"', "\\"))
    printable = all(
        unicodedata.category(ch) not in _UNSAFE_IN_COMMENTS for ch in text if ch != "\n"
    )
    if safe and printable:
        text = text.replace("\\", "\\\\")
        if "\n" not in text:
            return f'"""{text}"""'
        body = "\n".join(indent + line if line.strip() else "" for line in text.split("\n"))
        return '"""' + body.removeprefix(indent) + "\n" + indent + '"""'
    return repr(text)


def python_of(expr: Expr) -> str:
    """The Python of an expression, with ``== True``/``== None`` comparisons written so that
    linters accept them unchanged: ``is None``/``is not None`` (no FEM value equals None
    without being it) and ``fr.eq``/``fr.ne`` for booleans, which keep ``==``'s meaning (FEM
    scripts write ``done == true`` and mean ``==``: ``1 == True`` holds)."""
    python = expr.python
    if "True" not in python and "False" not in python and "None" not in python:
        return python
    try:
        tree = ast.parse(python, mode="eval")
    except SyntaxError:
        return python
    changed = _Comparisons()
    tree = changed.visit(tree)
    return ast.unparse(tree) if changed.count else python


class _Comparisons(ast.NodeTransformer):
    def __init__(self) -> None:
        self.count = 0

    def visit_Compare(self, node: ast.Compare) -> ast.expr:
        self.generic_visit(node)
        if len(node.ops) != 1 or not isinstance(node.ops[0], ast.Eq | ast.NotEq):
            return node
        left, right = node.left, node.comparators[0]
        for constant, other in ((right, left), (left, right)):
            if isinstance(constant, ast.Constant) and constant.value is None:
                self.count += 1
                op: ast.cmpop = ast.Is() if isinstance(node.ops[0], ast.Eq) else ast.IsNot()
                return ast.Compare(other, [op], [constant])
            if isinstance(constant, ast.Constant) and isinstance(constant.value, bool):
                self.count += 1
                helper = "eq" if isinstance(node.ops[0], ast.Eq) else "ne"
                function = ast.Attribute(ast.Name("fr", ast.Load()), helper, ast.Load())
                return ast.Call(function, [left, right], [])
        return node


def call_code(function: str, args: Iterable[tuple[str, str]], exploded: bool = False) -> str:
    """``function(args)``; ``exploded`` adds the trailing comma that has black put one
    argument on each line."""
    rendered = [f"{name}={code}" if name else code for name, code in args]
    return f"{function}({', '.join(rendered)}{',' if exploded and rendered else ''})"


def tuple_code(items: Iterable[str]) -> str:
    """A tuple display without a trailing comma black would keep exploded (except ``(x,)``)."""
    codes = list(items)
    return f"({codes[0]},)" if len(codes) == 1 else f"({', '.join(codes)})"


def dict_code(items: Iterable[tuple[str, str]]) -> str:
    """A dict display of ``name: code`` items."""
    return "{" + ", ".join(f"{py(name)}: {code}" for name, code in items) + "}"


def read_code(name: str) -> str:
    """Reading variable ``name`` in the current frame."""
    return f"ctx[{py(name)}]"
