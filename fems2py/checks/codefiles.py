"""Signatures of the functions in a script's ``code:`` files, read with ``ast`` (§5).

The compiler must never import or run the author's Python at build time, so it reads the
file's syntax tree: top-level ``def``/``async def`` give full signatures, classes give their
``__init__`` parameters, and names bound another way (imports, assignments) are known to exist
but not how they are called.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path


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


def read_signatures(path: Path, shown_path: str) -> dict[str, FuncSignature]:
    """The top-level callables of the Python file at ``path``, by name.

    ``shown_path`` is the path as the script wrote it, used in error messages.
    """
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except FileNotFoundError:
        raise CodeFileError(f"code file '{shown_path}' does not exist") from None
    except IsADirectoryError:
        raise CodeFileError(f"code file '{shown_path}' is a directory") from None
    except UnicodeDecodeError as error:
        message = f"code file '{shown_path}' is not valid UTF-8 (byte {error.start})"
        raise CodeFileError(message) from None
    except OSError as error:
        reason = error.strerror or str(error)
        raise CodeFileError(f"code file '{shown_path}' cannot be read: {reason}") from None
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
    for statement in tree.body:
        for name, signature in _bindings(statement):
            found[name] = signature
    return found


def _bindings(statement: ast.stmt) -> list[tuple[str, FuncSignature]]:
    line = statement.lineno
    if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef):
        return [(statement.name, _from_arguments(statement.name, statement.args, line, 0))]
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
                nested.extend(_bindings(inner))
        return nested
    return [(name, FuncSignature(name, None, False, line)) for name in names]


def _target_names(target: ast.expr) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, ast.Tuple | ast.List):
        return [name for element in target.elts for name in _target_names(element)]
    return []


def _class_signature(statement: ast.ClassDef) -> FuncSignature:
    for item in statement.body:
        if isinstance(item, ast.FunctionDef) and item.name == "__init__":
            return _from_arguments(statement.name, item.args, statement.lineno, skip=1)
    return FuncSignature(statement.name, None, False, statement.lineno)


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
