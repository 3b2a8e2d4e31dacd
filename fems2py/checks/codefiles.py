"""Signatures of the functions in a script's ``code:`` files, read with ``ast`` (§5).

The compiler must never import or run the author's Python at build time, so it reads the
file's syntax tree: top-level ``def``/``async def`` give full signatures, classes give their
``__init__`` parameters, and names bound another way (imports, assignments) are known to exist
but not how they are called.
"""

from __future__ import annotations

import ast
import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True)
class Param:
    """One parameter of a ``code:`` function: its name and whether it has a default."""

    name: str
    has_default: bool


@dataclass(frozen=True)
class FuncSignature:
    """How a ``code:`` function can be called.

    ``params`` is None when the name is bound by an import or an assignment, so nothing is
    known about its parameters. ``var_keyword`` is true for ``**kwargs`` (any keyword is
    accepted). Parameters that can only be passed by position are left out: FEM passes
    arguments by keyword.
    """

    name: str
    params: tuple[Param, ...] | None
    var_keyword: bool
    line: int
    tool_problem: str | None = None
    """Why the function cannot be offered as a tool (§15.5), or None when it can."""
    is_async: bool = False
    """An ``async def``: its call makes a coroutine, which only an awaiting caller runs (§5)."""
    value: str | None = None
    """The literal a top-level assignment binds the name to (``LIMIT = 3`` gives ``"3"``): such
    a name is not a function, and calling it could only fail at run time."""

    def accepts(self, keyword: str) -> bool:
        """Whether calling with ``keyword=…`` cannot fail for want of that parameter."""
        if self.params is None or self.var_keyword:
            return True
        return any(param.name == keyword for param in self.params)

    @property
    def required(self) -> tuple[str, ...]:
        """Parameters that have no default (and so must be passed)."""
        if self.params is None:
            return ()
        return tuple(param.name for param in self.params if not param.has_default)


class CodeFileError(Exception):
    """A ``code:`` file cannot be read or parsed; the message names the path."""


def read_signatures(data: bytes, shown_path: str) -> dict[str, FuncSignature]:
    """The top-level callables of a Python file's ``data`` (read by
    :func:`fems2py.sources.read_source_file`), by name.

    ``shown_path`` is the path as the script wrote it, used in error messages.
    """
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        message = f"code file '{shown_path}' is not valid UTF-8 (byte {error.start})"
        raise CodeFileError(message) from None
    try:
        tree = ast.parse(text, filename=shown_path)
    except SyntaxError as error:
        where = f" at line {error.lineno}" if error.lineno else ""
        message = f"code file '{shown_path}' has a Python syntax error{where}: {error.msg}"
        raise CodeFileError(message) from None
    except ValueError as error:  # source holding NUL bytes
        raise CodeFileError(f"code file '{shown_path}' cannot be parsed: {error}") from None
    return signatures_of(tree)


def signatures_of(tree: ast.Module) -> dict[str, FuncSignature]:
    """The callables a module defines at top level (a later definition wins, as in Python)."""
    found: dict[str, FuncSignature] = {}
    described = _described_classes(tree)
    for statement in tree.body:
        for name, signature in _bindings(statement, described):
            found[name] = signature
        literal = _literal_assigned(statement)
        if literal is not None:
            for name in literal[0]:
                found[name] = dataclasses.replace(found[name], value=literal[1])
    return found


_LITERALS = (
    *(ast.Constant, ast.JoinedStr, ast.List, ast.Tuple, ast.Set, ast.Dict),
    *(ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp),
)


def _literal_assigned(statement: ast.stmt) -> tuple[list[str], str] | None:
    """The names a top-level ``NAME = <literal>`` binds and the literal as written (shortened),
    else None. A binding under ``if``/``try`` is left out: the branch that runs may differ."""
    if isinstance(statement, ast.Assign):
        targets, value = statement.targets, statement.value
    elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
        targets, value = [statement.target], statement.value
    else:
        return None
    if not isinstance(value, _LITERALS):
        return None
    names = [name for target in targets if isinstance(target, ast.Name) for name in [target.id]]
    text = ast.unparse(value)
    return (names, text if len(text) <= 30 else text[:27] + "...") if names else None


def _bindings(statement: ast.stmt, described: frozenset[str]) -> list[tuple[str, FuncSignature]]:
    line = statement.lineno
    if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef):
        signature = _from_arguments(statement.name, statement.args, line, 0)
        problem = _tool_problem(statement.args, described)
        is_async = isinstance(statement, ast.AsyncFunctionDef)
        signature = dataclasses.replace(signature, tool_problem=problem, is_async=is_async)
        return [(statement.name, signature)]
    if isinstance(statement, ast.ClassDef):
        return [(statement.name, _class_signature(statement))]
    names: list[str] = []
    if isinstance(statement, ast.Import | ast.ImportFrom):
        for alias in statement.names:
            if alias.name != "*":
                names.append(alias.asname or alias.name.split(".")[0])
    elif isinstance(statement, ast.Assign):
        for target in statement.targets:
            names.extend(_target_names(target))
    elif isinstance(statement, ast.AnnAssign | ast.AugAssign):
        names.extend(_target_names(statement.target))
    elif isinstance(statement, ast.If | ast.Try):
        nested: list[tuple[str, FuncSignature]] = []
        bodies = [statement.body, statement.orelse]
        if isinstance(statement, ast.Try):
            bodies += [statement.finalbody, *(handler.body for handler in statement.handlers)]
        for body in bodies:
            for inner in body:
                nested.extend(_bindings(inner, described))
        return nested
    return [(name, FuncSignature(name, None, False, line)) for name in names]


def _target_names(target: ast.expr) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, ast.Tuple | ast.List):
        return [name for element in target.elts for name in _target_names(element)]
    return []


def _class_signature(statement: ast.ClassDef) -> FuncSignature:
    signature = FuncSignature(statement.name, None, False, statement.lineno)
    for item in statement.body:
        if isinstance(item, ast.FunctionDef) and item.name == "__init__":
            signature = _from_arguments(statement.name, item.args, statement.lineno, skip=1)
    return dataclasses.replace(signature, tool_problem="it is a class, not a function")


def _from_arguments(name: str, args: ast.arguments, line: int, skip: int) -> FuncSignature:
    positional = [*args.posonlyargs, *args.args]
    first_default = len(positional) - len(args.defaults)
    params = [
        Param(arg.arg, index >= first_default)
        for index, arg in enumerate(positional)
        if index >= max(skip, len(args.posonlyargs))
    ]
    params += [
        Param(arg.arg, default is not None)
        for arg, default in zip(args.kwonlyargs, args.kw_defaults, strict=True)
    ]
    return FuncSignature(name, tuple(params), args.kwarg is not None, line)


# ---------------------------------------------------------------------- tools (§15.5)

#: Annotation names pydantic describes as JSON schema: builtins, typing forms, and the
#: standard types with a string form. Anything else needs a class the file defines.
_DESCRIBED_NAMES = frozenset(
    {
        *("str", "int", "float", "bool", "list", "dict", "tuple", "set", "frozenset", "None"),
        *("Any", "Optional", "Union", "Literal", "List", "Dict", "Tuple", "Set", "FrozenSet"),
        *("Sequence", "Mapping", "Annotated", "Required", "NotRequired"),
        *("date", "datetime", "time", "timedelta", "Decimal", "UUID", "Path"),
    }
)
#: Bases (and decorators) that make a class of the file describable: pydantic models,
#: typed dicts, named tuples, enums, dataclasses.
_DESCRIBED_BASES = frozenset(
    {"BaseModel", "TypedDict", "NamedTuple", "Enum", "IntEnum", "StrEnum", "dataclass"}
)


def _described_classes(tree: ast.Module) -> frozenset[str]:
    """The file's top-level names pydantic can describe: classes by their bases or decorators,
    and type aliases (``Category = Literal["a", "b"]``) of describable types."""
    found: set[str] = set()
    for statement in tree.body:
        if isinstance(statement, ast.ClassDef):
            marks = [*statement.bases, *statement.decorator_list]
            names = {_last_name(m.func if isinstance(m, ast.Call) else m) for m in marks}
            if names & _DESCRIBED_BASES:
                found.add(statement.name)
            continue
        alias = _type_alias(statement)
        if alias is not None and _undescribed(alias[1], frozenset(found)) is None:
            found.add(alias[0])
    return frozenset(found)


def _type_alias(statement: ast.stmt) -> tuple[str, ast.expr] | None:
    """``Name = <type>``, ``Name: TypeAlias = <type>`` or ``type Name = <type>``, else None.
    Only a subscripted form or a union counts as a type: ``LIMIT = 3`` is not an alias."""
    name: str | None = None
    value: ast.expr | None = None
    if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
        target, value = statement.targets[0], statement.value
        name = target.id if isinstance(target, ast.Name) else None
        if not isinstance(value, ast.Subscript | ast.BinOp):
            return None
    elif isinstance(statement, ast.AnnAssign) and _last_name(statement.annotation) == "TypeAlias":
        target, value = statement.target, statement.value
        name = target.id if isinstance(target, ast.Name) else None
    elif type(statement).__name__ == "TypeAlias":  # ``type X = …`` (Python 3.12)
        alias_name = getattr(statement, "name", None)
        name = alias_name.id if isinstance(alias_name, ast.Name) else None
        value = getattr(statement, "value", None)
    if name is None or value is None:
        return None
    return name, value


def _last_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _tool_problem(args: ast.arguments, described: frozenset[str]) -> str | None:
    """Why a function's parameters cannot be described as a JSON schema object, or None.

    The check reads annotations only (the compiler never imports the file): a parameter
    without one takes any JSON value; pydantic has the last word when the run describes it.
    """
    if args.posonlyargs:
        return "it has positional-only parameters (a model passes arguments by name)"
    if args.vararg is not None:
        return f"it takes *{args.vararg.arg} (a model passes arguments by name)"
    for arg in [*args.args, *args.kwonlyargs]:
        unknown = _undescribed(arg.annotation, described)
        if unknown is not None:
            return f"parameter '{arg.arg}' has the type {unknown}, which has no JSON schema"
    return None


def _undescribed(node: ast.expr | None, described: frozenset[str]) -> str | None:
    """The part of an annotation that has no JSON schema (as source text), or None."""
    if node is None:
        return None
    if isinstance(node, ast.Constant):
        if node.value is None or node.value is Ellipsis:  # None, tuple[int, ...]
            return None
        if isinstance(node.value, str):  # a quoted annotation
            try:
                inner = ast.parse(node.value, mode="eval").body
            except SyntaxError:
                return repr(node.value)
            return _undescribed(inner, described)
        return ast.unparse(node)
    if isinstance(node, ast.Name | ast.Attribute):
        name = _last_name(node)
        return None if name in _DESCRIBED_NAMES or name in described else ast.unparse(node)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _undescribed(node.left, described) or _undescribed(node.right, described)
    if isinstance(node, ast.Subscript):
        base = _last_name(node.value)
        if base == "Literal":
            return None
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if base == "Annotated":  # the metadata after the type (Field(...)) is not a type
            items = items[:1]
        for part in [node.value, *items]:
            unknown = _undescribed(part, described)
            if unknown is not None:
                return unknown
        return None
    if isinstance(node, ast.Tuple | ast.List):
        return next((u for e in node.elts if (u := _undescribed(e, described))), None)
    return ast.unparse(node)
