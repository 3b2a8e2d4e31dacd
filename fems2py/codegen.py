"""Checked syntax tree → view models → Python source, through one Jinja template per construct.

The templates never see the parse tree: :func:`generate_parts` first turns a
:class:`~fems2py.checker.CheckedScript` into plain view models (``*View`` dataclasses) whose
fields are either data, rendered by the ``py`` filter through :func:`repr`, or code fragments
(``*_code`` fields) assembled from ``repr()`` literals and the ``Expr.python`` that
``expressions.py`` built from a parso tree (:mod:`fems2py.pycode`). User text never lands
between quotes any other way. This module makes the module's head and tail and walks the
script in order; :mod:`fems2py.actioncode` makes each action's view, :mod:`fems2py.flowcode`
each flow's. Every iteration follows source order or a sort, so two builds of one file are
identical. The result is valid but unformatted Python; ``build.py`` compiles and formats it.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from functools import cache
from typing import Any, Protocol

import jinja2
from fems_runtime.names import declared_name

from fems2py import __version__
from fems2py.actioncode import ActionCode, ActionView, Scope, SpecArg
from fems2py.cache import cache_folder
from fems2py.flowcode import FlowCode, FlowView
from fems2py.kinds import ACTION_KINDS
from fems2py.nodes import Action, ActorDef, MetaEntry, Method, Module, Script, Span
from fems2py.pycode import (
    MARK,
    Namer,
    call_code,
    comment_text,
    dict_code,
    docstring_text,
    plain_value,
    py,
    python_of,
    tuple_code,
    value_code,
)


class CheckedLike(Protocol):
    """What codegen needs from :class:`fems2py.checker.CheckedScript`."""

    script: Script
    merge_nodes: Mapping[tuple[str, str], str | None]
    string_keys: frozenset[Span]


@dataclass(frozen=True)
class ScriptView:
    """The whole module."""

    file: str
    script_info_code: str
    actors_code: tuple[str, ...]
    blueprints_code: tuple[str, ...]
    methods_code: tuple[str, ...]
    variables: tuple[tuple[str, str], ...]
    items: tuple[ActionView | FlowView, ...]
    conditions: tuple[tuple[str, tuple[tuple[str, str], ...]], ...]


# ------------------------------------------------------------------------------ generator


class CodeGenerator:
    """Builds the :class:`ScriptView` of one checked script."""

    def __init__(
        self,
        checked: CheckedLike,
        file: str,
        sha256: str,
        code_paths: Mapping[str, str] | None = None,
    ) -> None:
        self.code_paths = dict(code_paths or {})
        self.script = checked.script
        self.source_lines = self.script.source.splitlines()
        self.file = file
        self.sha256 = sha256
        self.namer = Namer()
        self.actions = ActionCode(checked.string_keys, self.comments_above)
        actor_names = frozenset(actor.name for actor in self.script.actors)
        self.flows = FlowCode(self.namer, checked.merge_nodes, actor_names, self.comments_above)
        self.items: list[ActionView | FlowView] = []
        # action functions named after their action (a module's behind its module's name)
        self.named_after: set[str] = set()
        # each module flow's function: its module's name and its decorator's other arguments
        self.modules: dict[str, tuple[str, list[tuple[str, str]]]] = {}

    def comments_above(self, line: int) -> list[str]:
        """The author's ``#`` comment lines directly above ``line`` (1-based), in order."""
        found: list[str] = []
        index = line - 2
        while index >= 0 and self.source_lines[index].lstrip().startswith("#"):
            found.append(self.source_lines[index].lstrip()[1:].removeprefix(" ").rstrip())
            index -= 1
        return found[::-1]

    # -------------------------------------------------------------------- whole script

    def script_view(self) -> ScriptView:
        script = self.script
        root = Scope("main", variables=frozenset(v.name for v in script.variables))
        self.declare(root, script.actions, script.modules, prefix="")
        self.add_actions(root, script.actions)
        if script.flow is not None:
            self.items += self.flows.functions(
                root, script.flow, "main_flow", "START", script.flow.span.line
            )
        self.emit_modules(root, script.modules)
        meta = _meta_dict(script.meta)
        info_args = [
            ("file", py(self.file)),
            ("sha256", py(self.sha256)),
            ("compiler", py(__version__)),
            ("meta", py(meta)),
            (
                "code",
                py({a.alias: self.code_paths.get(a.alias, a.path) for a in script.code}),
            ),
        ]
        blueprints = tuple(
            call_code(
                "fr.BlueprintSpec",
                [("", py(bp.name)), ("source", py(bp.source)), ("tools", py(bp.tools))],
            )
            for bp in script.blueprints
        )
        return ScriptView(
            file=self.file,
            script_info_code=call_code("fr.ScriptInfo", info_args),
            actors_code=tuple(_actor_code(actor) for actor in script.actors),
            blueprints_code=blueprints,
            methods_code=tuple(_method_code(method) for method in script.methods),
            variables=tuple((decl.name, value_code(decl.value)) for decl in script.variables),
            items=self.named_items(),
            conditions=tuple(self.flows.conditions),
        )

    def named_items(self) -> tuple[ActionView | FlowView, ...]:
        """The items, each saying its ``.fems`` name where its function cannot stand for it
        (:func:`fems_runtime.names.declared_name`, asked about the function's names as Python
        reads them, NFKC-folded): ``action="x"`` in a turn or ``@func`` call, the name first in
        ``@fr.module("x", …)``. Known once every module flow has its function's name."""
        modules = frozenset(unicodedata.normalize("NFKC", name) for name in self.modules)

        def stands_for(function: str, name: str) -> bool:
            return declared_name(unicodedata.normalize("NFKC", function), modules) == name

        items: list[ActionView | FlowView] = []
        for item in self.items:
            if isinstance(item, FlowView) and item.function in self.modules:
                name, args = self.modules[item.function]
                if not stands_for(item.function, name):
                    args = [("", py(name)), *args]
                # one argument a line, as black lays out all but the smallest: adding a
                # variable or meta entry to a module then changes one line
                item = replace(item, decorator_code=call_code("fr.module", args, exploded=True))
            elif (  # an assign action names nothing
                isinstance(item, ActionView)
                and not ACTION_KINDS[item.kind].assigns
                and not stands_for(item.function, item.name)
            ):
                given = [arg for arg in item.spec_args if not arg.name]  # executor, or code.fn
                named = SpecArg("action", py(item.name))
                item = replace(item, spec_args=(*given, named, *item.spec_args[len(given) :]))
            items.append(item)
        return tuple(items)

    def declare(
        self, scope: Scope, actions: Iterable[Action], modules: Iterable[Module], prefix: str
    ) -> None:
        """Name the functions of a scope's actions and modules (``prefix``: its module's)."""
        for action in actions:
            scope.actions[action.name] = self.namer.take(prefix + action.name)
            if scope.actions[action.name] == prefix + action.name:
                self.named_after.add(scope.actions[action.name])
        for module in modules:
            scope.modules[module.name] = self.namer.take(prefix + module.name)

    def emit_modules(self, outer: Scope, modules: Iterable[Module]) -> None:
        """Each module's actions, then its flow, then its nested modules (§11)."""
        for module in modules:
            function = outer.modules[module.name]
            key = f"{outer.key}/{module.name}" if outer.key != "main" else f"module:{module.name}"
            scope = outer.nested(key)
            scope.variables = (
                outer.variables | set(module.params) | {v.name for v in module.variables}
            )
            self.declare(scope, module.actions, module.modules, f"{function}_")
            self.add_actions(scope, module.actions)
            if module.flow is not None:
                local_vars = dict_code((v.name, value_code(v.value)) for v in module.variables)
                methods = tuple_code(_method_code(m) for m in module.methods)
                args: list[tuple[str, str]] = []
                if module.params:
                    args.append(("params", py(module.params)))
                if module.variables:
                    args.append(("variables", local_vars))
                if module.meta:
                    args.append(("meta", py(_meta_dict(module.meta))))
                if module.methods:
                    args.append(("methods", methods))
                self.items += self.flows.functions(
                    scope, module.flow, function, "IN", module.span.line
                )
                self.modules[function] = (module.name, args)
            self.emit_modules(scope, module.modules)

    def add_actions(self, scope: Scope, actions: Iterable[Action]) -> None:
        for action in actions:
            named = scope.actions[action.name] in self.named_after
            self.items.append(self.actions.view(scope, action, named))


# ------------------------------------------------------------------------------ helpers


_NUMBERED_MARKER = re.compile(rf"# {MARK}(\d+)")
_MARKER_LINE = re.compile(rf"^[ \t]*# {MARK}[ \t]*$")
LINES_PLACEHOLDER = 'LINES = ""\n'


@dataclass(frozen=True)
class Parts:
    """The unformatted module as top-level parts, with its line markers stripped of their
    numbers (so a part's text, and its formatting, stays the same when lines before it
    move): ``lines`` holds the ``.fems`` line of each marker, in order. After formatting,
    :meth:`attach_line_table` turns the markers into the module's line table."""

    texts: list[str]
    lines: list[int]

    @classmethod
    def of(cls, texts: Iterable[str]) -> Parts:
        lines: list[int] = []

        def take(match: re.Match[str]) -> str:
            lines.append(int(match.group(1)))
            return f"# {MARK}"

        return cls([_NUMBERED_MARKER.sub(take, text) for text in texts], lines)

    def attach_line_table(self, module: str) -> str:
        """The formatted ``module`` without its markers and with the table they make
        (``LINES``, read by :class:`fems_runtime.linetable.LineTable`): ``12=5`` says module line
        12 and the lines after it come from ``.fems`` line 5, until the next entry."""
        kept: list[str] = []
        entries: dict[int, int] = {}
        numbers = iter(self.lines)
        for text in module.splitlines(keepends=True):
            if _MARKER_LINE.match(text):
                entries[len(kept) + 1] = next(numbers)
            else:
                kept.append(text)
        assert next(numbers, None) is None, "formatting lost a line marker"
        table, previous = [], None
        for module_line, script_line in sorted(entries.items()):
            if script_line != previous:
                table.append(f"{module_line}={script_line}")
                previous = script_line
        body = "".join(kept)
        assert LINES_PLACEHOLDER in body, "the module tail lost its line table"
        return body.replace(LINES_PLACEHOLDER, f'LINES = "{" ".join(table)}"\n', 1)


def _meta_dict(entries: Iterable[MetaEntry]) -> dict[str, Any]:
    return {entry.key: plain_value(entry.value) for entry in entries}


def _actor_code(actor: ActorDef) -> str:
    args = [("", py(actor.name)), ("type", py(actor.kind))]
    for name in ("soul", "source", "tools"):
        value = getattr(actor, name)
        if value:
            args.append((name, py(value)))
    return call_code("fr.ActorSpec", args)


def _method_code(method: Method) -> str:
    inputs = dict_code(
        (item.name, f"lambda ctx: {python_of(item.expr)}" if item.expr is not None else "None")
        for item in method.inputs
    )
    return call_code(
        "fr.MethodSpec",
        [
            ("kind", py(method.kind)),
            ("name", py(method.name)),
            ("code", py(method.func.alias)),
            ("function", py(method.func.func)),
            ("inputs", inputs),
            ("outputs", py(method.outputs)),
        ],
    )


# ------------------------------------------------------------------------------ rendering


@cache
def environment() -> jinja2.Environment:
    """The template environment: strict about undefined names, no autoescape (it is Python).
    Compiled templates are kept in the user's cache: compiling them was a good part of the
    first build in every process."""
    folder = cache_folder("templates")
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("fems2py", "templates"),
        bytecode_cache=jinja2.FileSystemBytecodeCache(str(folder)) if folder else None,
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["py"] = py
    env.filters["comment"] = comment_text
    env.filters["docstring_text"] = docstring_text
    return env


def generate_parts(
    checked: CheckedLike, file: str, sha256: str, code_paths: Mapping[str, str] | None = None
) -> Parts:
    """The (unformatted) top-level parts of the Python module for a checked script: the head
    (header, imports, ``SCRIPT``), the data (actors, methods, variables), one part per action
    and flow function, then the tables (``CONDITIONS``, ``LINES``), ``PROGRAM`` and each entry
    point. Each ends with a newline and holds no two blank lines in a row, before or after
    black; :data:`PART_SEPARATOR` joins them into the module, and after formatting
    :meth:`Parts.attach_line_table` turns their line markers into ``LINES``. ``code_paths``
    gives each ``code:`` alias's file relative to the generated module (default: as
    written)."""
    view = CodeGenerator(checked, file, sha256, code_paths).script_view()
    env = environment()
    parts = split_parts(env.get_template("module_head.py.jinja").render(script=view))
    for item in view.items:
        kind = (
            "flow" if isinstance(item, FlowView) else f"action_{ACTION_KINDS[item.kind].template}"
        )
        parts.append(env.get_template(f"{kind}.py.jinja").render(item=item))
    tail = env.get_template("module_tail.py.jinja").render(script=view)
    parts.extend(split_parts(tail))
    return Parts.of(parts)


# Top-level parts are separated by two blank lines, as black puts them around functions.
PART_SEPARATOR = "\n\n"


def split_parts(text: str) -> list[str]:
    """``text`` cut at the two blank lines between its top-level parts (each keeps its final
    newline): the inverse of joining parts with :data:`PART_SEPARATOR`."""
    return [piece + "\n" for piece in text[:-1].split("\n" + PART_SEPARATOR)]
