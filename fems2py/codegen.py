"""Checked syntax tree → view models → Python source, through one Jinja template per construct.

The templates never see the parse tree: :func:`generate_parts` first turns a
:class:`~fems2py.checker.CheckedScript` into plain view models (``*View`` dataclasses) whose
fields are either data, rendered by the ``py`` filter through :func:`repr`, or code fragments
(``*_code`` fields) that this module assembled from ``repr()`` literals and the ``Expr.python``
that ``expressions.py`` built from a parso tree. User text never lands between quotes any other
way. Every iteration follows source order or a sort, so two builds of one file are identical.
The result is valid but unformatted Python; ``build.py`` compiles and formats it.
"""

from __future__ import annotations

import ast
import keyword
import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from typing import Any, Protocol

import jinja2
from fems_runtime.names import call_node, declared_name, loop_node

from fems2py import __version__, flowgen
from fems2py.cache import cache_folder
from fems2py.expressions import ALLOWED_CALLS, mask_strings
from fems2py.flowgen import Statement
from fems2py.kinds import ACTION_KINDS
from fems2py.nodes import (
    Action,
    ActorDef,
    ActorValue,
    Assignment,
    BoolValue,
    DictValue,
    Edge,
    Expr,
    FlowNode,
    Graph,
    Input,
    Join,
    ListValue,
    Loop,
    MetaEntry,
    Method,
    Module,
    ModuleCall,
    NullValue,
    NumberValue,
    Out,
    PathRef,
    Script,
    Span,
    StringValue,
    Target,
    Value,
)
from fems2py.visitor import BindingVisitor, NodeVisitor

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


class CheckedLike(Protocol):
    """What codegen needs from :class:`fems2py.checker.CheckedScript`."""

    script: Script
    merge_nodes: Mapping[tuple[str, str], str | None]
    string_keys: frozenset[Span]


# ------------------------------------------------------------------------------ view models


@dataclass(frozen=True)
class SpecArg:
    """One argument of an action's spec: ``name=code`` (a positional one has no name), with
    a line marker before it when it is computed as the action runs from a field of its own."""

    name: str
    code: str
    marker: str = ""


@dataclass(frozen=True)
class ActionView:
    """One action: an async function taking the run's ``Context``."""

    function: str
    marker: str
    construct: str  # a comment naming the source construct when the code cannot
    docstring: str | None
    kind: str
    name: str  # the action's .fems name, which the function stands for when it can
    # ai/human/mind: arguments of ``fr.TurnSpec``; func: of ``fr.FuncSpec``
    spec_args: tuple[SpecArg, ...] = ()
    # assign: (marker, statement)
    statements: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class FlowView:
    """One flow function: the main flow, a module's flow or a loop body."""

    function: str
    marker: str
    construct: str
    docstring: str | None
    # a dispatch (with concurrent branches) is entered at a node: it takes ``node``/``stop``
    dispatch: bool
    returns: str  # "str | None", or "None" for a structured body that never ends the flow
    start: str
    body: tuple[str, ...]
    decorator_code: str | None = None


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


# ------------------------------------------------------------------------------ literals


def py(value: Any) -> str:
    """A Python literal for ``value`` via :func:`repr`. A multi-line string becomes
    ``fr.lines(...)`` with one literal per line (and a trailing comma, so black keeps them
    apart): a prompt reads, and diffs, line by line in the generated module."""
    if isinstance(value, str) and "\n" in value:
        pieces = value.split("\n")
        return "fr.lines(\n" + "".join(f"{piece!r},\n" for piece in pieces) + ")"
    if isinstance(value, tuple):
        inner = ", ".join(py(item) for item in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
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


# ------------------------------------------------------------------------------ scopes


@dataclass
class Scope:
    """The names visible in one flow: actions and modules (innermost wins, §11.4) and the
    variables declared on the way (for ``dict[key]`` targets)."""

    key: str
    actions: dict[str, str] = field(default_factory=dict)
    modules: dict[str, str] = field(default_factory=dict)
    variables: frozenset[str] = frozenset()

    def nested(self, key: str) -> Scope:
        return Scope(key, dict(self.actions), dict(self.modules), self.variables)


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
        self.checked = checked
        self.script = checked.script
        self.actor_names = frozenset(actor.name for actor in self.script.actors)
        self.source_lines = self.script.source.splitlines()
        self.file = file
        self.sha256 = sha256
        self.namer = Namer()
        self.items: list[ActionView | FlowView] = []
        self.conditions: list[tuple[str, tuple[tuple[str, str], ...]]] = []
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
        for action in script.actions:
            self.items.append(self.action_view(root, action))
        if script.flow is not None:
            self.emit_flow(
                root, script.flow, "main_flow", "START", "mainflow", script.flow.span.line
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
            _call(
                "fr.BlueprintSpec",
                [("", py(bp.name)), ("source", py(bp.source)), ("tools", py(bp.tools))],
            )
            for bp in script.blueprints
        )
        return ScriptView(
            file=self.file,
            script_info_code=_call("fr.ScriptInfo", info_args),
            actors_code=tuple(_actor_code(actor) for actor in script.actors),
            blueprints_code=blueprints,
            methods_code=tuple(_method_code(method) for method in script.methods),
            variables=tuple((decl.name, value_code(decl.value)) for decl in script.variables),
            items=self.named_items(),
            conditions=tuple(self.conditions),
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
                item = replace(item, decorator_code=_call("fr.module", args, exploded=True))
            elif (  # an assign action names nothing
                isinstance(item, ActionView)
                and item.kind != "assign"
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
            for action in module.actions:
                self.items.append(self.action_view(scope, action))
            if module.flow is not None:
                local_vars = _dict_code((v.name, value_code(v.value)) for v in module.variables)
                methods = _tuple_code(_method_code(m) for m in module.methods)
                args: list[tuple[str, str]] = []
                if module.params:
                    args.append(("params", py(module.params)))
                if module.variables:
                    args.append(("variables", local_vars))
                if module.meta:
                    args.append(("meta", py(_meta_dict(module.meta))))
                if module.methods:
                    args.append(("methods", methods))
                params = f"({', '.join(module.params)})" if module.params else ""
                self.emit_flow(
                    scope,
                    module.flow,
                    function,
                    "IN",
                    f"module {module.name}{params}",
                    module.span.line,
                )
                self.modules[function] = (module.name, args)
            self.emit_modules(scope, module.modules)

    # -------------------------------------------------------------------- actions

    def construct(self, text: str, function: str) -> str:
        """The comment naming an action's construct, needed only when its function could not
        be named after it (a name Python reserves, one taken twice): ``DevLoop_review``
        with ``action="review"`` names the rest."""
        return "" if function in self.named_after else text

    def action_view(self, scope: Scope, action: Action) -> ActionView:
        function = scope.actions[action.name]
        marker = line_marker(action.span.line)
        where = _in_module(scope)
        doc = docstring("\n".join(self.comments_above(action.span.line))) or None
        if action.kind == "assign":
            statements = tuple(
                (line_marker(a.span.line), self.assign_code(a)) for a in action.assignments
            )
            construct = self.construct(f"action {action.name} @assign{where}", function)
            return ActionView(
                function, marker, construct, doc, "assign", action.name, statements=statements
            )
        args: list[tuple[str, str]] = []
        if action.kind == "func":
            assert action.func is not None
            args += [("", py(action.func.alias)), ("", py(action.func.func))]
            head = f"@func({action.func.alias}.{action.func.func})"
        else:
            assert action.executor is not None
            args.append(("", py(action.executor)))
            head = f"@{action.kind}({action.executor})"
        if action.kind == "func":
            if action.inputs is not None:
                args.append(("inputs", self.inputs_code(action.inputs)))
            if action.outs is not None:
                args.append(("outs", self.outs_code(action.outs)))
        else:
            args += self.turn_args(scope, action)
        spec_args = self.spec_args(action, args)
        construct = self.construct(f"action {action.name} {head}{where}", function)
        return ActionView(
            function, marker, construct, doc, action.kind, action.name, spec_args=spec_args
        )

    def turn_args(self, scope: Scope, action: Action) -> list[tuple[str, str]]:
        args: list[tuple[str, str]] = []
        if action.role is not None:
            args.append(("role", py(action.role)))
        if action.prompt is not None:
            args.append(("prompt", text_code(action.prompt.value)))
        if action.showprompt is not None:
            args.append(("showprompt", text_code(action.showprompt.value)))
        if action.scope is not None:
            # as the script writes them: "@god", "wolves", "{alive}", "all"
            written = {"actor": "{}", "var": "{}", "expand": "{{{}}}", "all": "all"}
            items = tuple(written[item.kind].format(item.name) for item in action.scope.items)
            args.append(("scope", py(items)))
        if action.inputs is not None:
            args.append(("inputs", self.inputs_code(action.inputs)))
        if action.outs is not None:
            args.append(("outs", self.outs_code(action.outs)))
        if action.resolve is not None:
            resolve = action.resolve
            spec = [("", py(resolve.func.alias)), ("", py(resolve.func.func))]
            args.append(("resolve", _call("fr.ResolveSpec", [*spec, ("", py(resolve.args))])))
        if action.max_retries is not None:
            args.append(("max_retries", py(action.max_retries)))
        if action.max_tool_rounds is not None:
            args.append(("max_tool_rounds", py(action.max_tool_rounds)))
        if action.max_tokens is not None:
            args.append(("max_tokens", py(action.max_tokens)))
        if action.fallback is not None:
            args.append(("fallback", self.fallback_code(scope, action.fallback)))
        if action.memory is not None:
            args.append(("memory", py(action.memory)))
        if action.context is not None:
            args.append(("context", py(action.context)))
        if action.interrupt is not None:
            args.append(("interrupt", self.interrupt_code(action)))
        if action.model is not None:
            args.append(("model", py(action.model)))
        return args

    def spec_args(self, action: Action, args: Iterable[tuple[str, str]]) -> tuple[SpecArg, ...]:
        """The spec's arguments, each computed one (``in:``, ``out:`` with a variable key or
        choices, a condition interrupt) after a marker of its field's line."""
        lines = {name: span.line for name, span in action.field_spans}
        interrupt = action.interrupt
        computed = {
            "inputs": "in",
            "outs": "out"
            if any((o.type and o.type.choices_from) or o.target.key_word for o in action.outs or ())
            else "",
            "interrupt": "interrupt"
            if interrupt and interrupt.kind in ("condition", "func")
            else "",
        }
        result = []
        for name, code in args:
            line = lines.get(computed.get(name, ""), action.span.line)
            marker = line_marker(line) if line != action.span.line else ""
            result.append(SpecArg(name, code, marker))
        return tuple(result)

    def fallback_code(self, scope: Scope, fallback: str | ModuleCall) -> str:
        call = _Fallback().visit(fallback, self, scope)
        assert call is not None
        return f"lambda: {call}"

    def interrupt_code(self, action: Action) -> str:
        interrupt = action.interrupt
        assert interrupt is not None
        if interrupt.kind == "human":
            return "fr.InterruptSpec('human')"
        if interrupt.kind == "human_except":
            return _call(
                "fr.InterruptSpec", [("", py("human_except")), ("actors", py(interrupt.actors))]
            )
        if interrupt.kind == "condition":
            assert interrupt.condition is not None
            check = f"lambda: {python_of(interrupt.condition)}"
        else:
            assert interrupt.func is not None
            check = f"lambda: ctx.code({py(interrupt.func.alias)}).{interrupt.func.func}()"
        return _call("fr.InterruptSpec", [("", py("check")), ("check", check)])

    def assign_code(self, assignment: Assignment) -> str:
        target: Target = assignment.target
        args = [py(target.name), py(assignment.op), python_of(assignment.value)]
        if target.key is not None:
            args.append(f"key={self.key_code(target)}")
        return f"ctx.assign({', '.join(args)})"

    def key_code(self, target: Target) -> str:
        """The Python for the key of an entry target, by how it was written (see
        :class:`~fems2py.nodes.Target`): ``@x`` and variables are read in the current frame,
        ``dict.key`` and string-word keys are strings, literals are their value."""
        assert target.key is not None
        if target.key_kind == "actor":
            return _read_code(target.key)
        if target.key_kind == "name" or target.key_expr is None:
            return py(target.key)
        word = target.key_word
        if word is not None:
            return py(word) if target.span in self.checked.string_keys else _read_code(word)
        try:
            return py(ast.literal_eval(target.key_expr.python))
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return python_of(target.key_expr)

    def inputs_code(self, inputs: tuple[Input, ...]) -> str:
        """``in:`` values as a dict literal, evaluated when the action runs (without ``in:``
        the spec has no ``inputs`` and the runtime passes the variables named like the
        function's parameters, §9.7)."""
        return _dict_code(
            (item.name, python_of(item.expr) if item.expr is not None else _read_code(item.name))
            for item in inputs
        )

    def outs_code(self, outs: tuple[Out, ...]) -> str:
        """The ``fr.OutSpec`` tuple of an action, built when it runs (§10.4): an ``@x`` key is
        passed as written and resolved when the signal is applied; a variable key
        (``dict[i]``) is passed as its current value plus ``key_from``, the variable the
        signal whitelist reads again when a signal is applied (§10.4's current binding)."""
        items = []
        for out in outs:
            target = out.target
            args = [("", py(target.name))]
            if target.key is not None:
                variable = target.key_word is not None and target.span not in (
                    self.checked.string_keys
                )
                key = py(target.key) if target.key_kind == "actor" else self.key_code(target)
                args.append(("key", key))
                if variable:
                    args.append(("key_from", py(target.key_word)))
            if out.type is not None:
                args.append(("type", py(out.type.name)))
                if out.type.choices_from is not None:
                    # choices={alive}: the list as it is when the action runs (§10.4)
                    choices = f"tuple({_read_code(out.type.choices_from.name)})"
                    args.append(("choices", choices))
                elif out.type.choices:
                    args.append(("choices", py(tuple(plain_value(c) for c in out.type.choices))))
            if out.optional:
                args.append(("optional", "True"))
            if out.caption is not None:
                args.append(("caption", py(out.caption)))
            # a plain out is its name, as the script writes it
            items.append(args[0][1] if len(args) == 1 else _call("fr.OutSpec", args))
        if len(items) == 1 and items[0].startswith("fr.OutSpec("):
            return items[0]  # one spec needs no one-item tuple around it
        return _tuple_code(items)

    def call_args_code(self, scope: Scope, call: ModuleCall) -> str:
        function = scope.modules.get(call.module, python_name(call.module))
        return ", ".join([function, *(python_of(arg) for arg in call.args)])

    # -------------------------------------------------------------------- flows

    def emit_flow(
        self,
        scope: Scope,
        graph: Graph,
        function: str,
        start: str,
        construct: str,
        line: int,
        loop: Loop | None = None,
        outer_ids: Mapping[str, str] | None = None,
    ) -> None:
        """Add the flow function, then the functions of its loop bodies."""
        ids = _node_ids(graph, outer_ids or {})
        bodies: dict[str, str] = {}
        later: list[tuple[str, Loop, str]] = []
        for node in graph.nodes:
            inner = _LoopOf().visit(node.binding)
            if inner is not None and node.name not in bodies:
                bodies[node.name] = self.namer.take(_body_name(function, inner))
                later.append((node.name, inner, bodies[node.name]))
        flow = _FlowEmitter(self, scope, graph, function, ids, bodies, loop)
        dispatch, returns, body = flow.emit()
        doc_lines = self.comments_above(line) if loop is None else []
        self.items.append(
            FlowView(
                function=function,
                marker=line_marker(line),
                construct="",
                docstring=docstring("\n".join(doc_lines)) or None,
                dispatch=dispatch,
                returns=returns,
                start=ids.get(start, start),
                body=tuple(body),
            )
        )
        for node_name, inner, body_function in later:
            body_scope = scope.nested(scope.key)  # node names are unique per flow
            body_scope.variables = scope.variables | {inner.var}
            self.emit_flow(
                body_scope,
                inner.body,
                body_function,
                inner.head,
                f"one iteration of {inner.kind} {inner.var} in {inner.iterable.text.strip()}",
                inner.span.line,
                loop=inner,
                outer_ids={inner.head: ids[node_name]},
            )

    def merge_node(self, flow_key: str, node: str) -> str | None:
        return self.checked.merge_nodes.get((flow_key, node))


class _LoopOf(BindingVisitor[Loop]):
    """A node's loop, if it is bound to one."""

    def visit_Loop(self, loop: Loop) -> Loop:
        return loop


class _JoinOf(BindingVisitor[Join]):
    """A node's join, if it is bound to one."""

    def visit_Join(self, join: Join) -> Join:
        return join


class _Fallback(BindingVisitor[str]):
    """The call an action's ``fallback:`` makes: another action or a module (§10.6)."""

    def visit_ActionName(self, action: str, generator: CodeGenerator, scope: Scope) -> str:
        return f"{scope.actions.get(action, python_name(action))}(ctx)"

    def visit_ModuleCall(self, call: ModuleCall, generator: CodeGenerator, scope: Scope) -> str:
        return f"ctx.run_module({generator.call_args_code(scope, call)})"


class _BindingCode(BindingVisitor[list[Statement]]):
    """The statements that step through a node (``node_id``, as Python) and run its binding."""

    def __init__(self, flow: _FlowEmitter) -> None:
        self.flow = flow

    def visit_ActionName(self, action: str, node_id: str, name: str) -> list[Statement]:
        function = self.flow.scope.actions.get(action, python_name(action))
        return [flowgen.Step(node_id, function)]

    def visit_PassThrough(self, binding: None, node_id: str, name: str) -> list[Statement]:
        return [flowgen.Step(node_id)]

    visit_Join = visit_PassThrough  # the fork before it does the joining (§12.6)

    def visit_ModuleCall(self, call: ModuleCall, node_id: str, name: str) -> list[Statement]:
        """``ctx.call`` counts the node's step itself; it is named ``&Module`` unless told."""
        args = self.flow.generator.call_args_code(self.flow.scope, call)
        if node_id != call_node(call.module):
            args += f", node={py(node_id)}"
        return [flowgen.Call(f"ctx.call({args})")]

    def visit_Loop(self, loop: Loop, node_id: str, name: str) -> list[Statement]:
        """``ctx.loop`` counts the node's step itself; it is named ``for_x`` unless told."""
        args = [py(loop.kind), py(loop.var), python_of(loop.iterable), self.flow.bodies[name]]
        if node_id != loop_node(loop.kind, loop.var):
            args.append(f"node={py(node_id)}")
        return [flowgen.Line(f"await ctx.loop({', '.join(args)})")]


class _FlowEmitter:
    """The code of one flow function's nodes, for :func:`fems2py.flowgen.emit`."""

    def __init__(
        self,
        generator: CodeGenerator,
        scope: Scope,
        graph: Graph,
        function: str,
        ids: Mapping[str, str],
        bodies: Mapping[str, str],
        loop: Loop | None,
    ) -> None:
        self.generator = generator
        self.scope = scope
        self.graph = graph
        self.function = function
        self.ids = ids
        self.bodies = bodies
        self.loop = loop
        self.nodes = {node.name: node for node in graph.nodes}
        self.commented: set[int] = set()
        self.stuck_nodes: set[str] = set()

    def emit(self) -> tuple[bool, str, list[str]]:
        if not self.nodes and self.loop is None:
            stub = flowgen.Return(
                py("OUT"), note="a stub module (empty flow:): calling it does nothing"
            )
            return False, "str | None", flowgen.render_body([stub])
        edges: dict[str, list[Edge]] = {}
        for edge in self.graph.edges:
            edges.setdefault(edge.source, []).append(edge)
        entry = (
            self.loop.head if self.loop is not None else ("IN" if "IN" in self.nodes else "START")
        )
        merges = {
            name: self.generator.merge_node(self.scope.key, name)
            for name in edges
            if len(edges[name]) > 1
        }
        flow_graph = flowgen.FlowGraph(self.nodes, edges, entry, self.loop is not None, merges)
        code = flowgen.NodeCode(
            body=self.node_body,
            node_id=self.node_id,
            marker=lambda line: flowgen.Comment(line_marker(line)),
            condition=lambda edge: python_of(edge.condition) if edge.condition else "True",
            fork=self.fork_code,
            stuck=self.stuck_code,
            restart=self.restart,
        )
        structured, statements = flowgen.emit(flow_graph, code)
        self.record_conditions(edges)
        returns = "str | None"
        if structured and not flowgen.ends_flow(statements):
            # no path ends at [END]/[OUT]/[BREAK] (a loop body): the function returns nothing
            returns = "None"
            statements = flowgen.returning_nothing(statements)
        elif structured and flowgen.falls_off(statements):
            statements.append(flowgen.Return())
        return not structured, returns, flowgen.render_body(statements)

    def node_id(self, name: str) -> str:
        return self.ids.get(name, name)

    def node_line(self, node: FlowNode) -> int:
        # a module call, loop or join knows its own line, which may follow the node's first
        # mention (`[A]: &M(x)` on a line of its own); a named node's binding may too
        span: Span | None = getattr(node.binding, "span", None)
        return (span or node.bound_at or node.span).line

    def node_body(self, name: str) -> list[Statement]:
        """A node's marker, the author's comments above its line, and its step: the step line
        names the node and what it runs, so it needs no comment of its own."""
        node = self.nodes.get(name)
        if node is None or (self.loop is not None and name == self.loop.head):
            return []  # a loop body's head is the loop's own node, counted outside (§12.7)
        line = self.node_line(node)
        lines: list[Statement] = [flowgen.Comment(line_marker(line))]
        if line not in self.commented:
            self.commented.add(line)
            lines += [
                flowgen.Comment(f"# {comment_text(text)}")
                for text in self.generator.comments_above(line)
            ]
        return lines + (_BindingCode(self).visit(node.binding, self.node_id(name), name) or [])

    def fork_code(self, name: str) -> str:
        merge = self.generator.merge_node(self.scope.key, name)
        args = [self.function, py(self.node_id(name)), "targets"]
        args.append(f"merge={py(self.node_id(merge) if merge is not None else None)}")
        join = _join_count(self.graph, merge)
        if join is not None:
            args.append(f"join={py(join)}")
        args.append("stop=stop")
        return f"ctx.fork({', '.join(args)})"

    def restart(self) -> None:
        self.commented.clear()
        self.stuck_nodes.clear()

    def stuck_code(self, name: str) -> flowgen.Raise:
        self.stuck_nodes.add(name)
        return flowgen.Raise(f"ctx.stuck({py(self.node_id(name))})")

    def record_conditions(self, edges: Mapping[str, list[Edge]]) -> None:
        """The table a "flow stuck" error reads (§12.3): each condition and what it reads."""
        rows = []
        for name, out in edges.items():
            conditional = [edge.condition for edge in out if edge.condition is not None]
            if name not in self.stuck_nodes:
                continue
            # a list, not a tuple: black checks each one-element tuple's comma against the
            # whole statement, which made a table of thousands of nodes quadratic to format
            row = [
                (
                    _unwrapped(condition.text),
                    " ".join(_reads(condition, self.generator.actor_names)),
                )
                for condition in conditional
            ]
            rows.append((self.node_id(name), py(row)))
        if rows:
            self.generator.conditions.append((self.function, tuple(rows)))


# ------------------------------------------------------------------------------ helpers


MARK = "\ue000"  # private use: never in a comment made from user text (see comment_text)
_NUMBERED_MARKER = re.compile(rf"# {MARK}(\d+)")
_MARKER_LINE = re.compile(rf"^[ \t]*# {MARK}[ \t]*$")
LINES_PLACEHOLDER = 'LINES = ""\n'


def line_marker(line: int) -> str:
    """A temporary comment saying the code below comes from ``.fems`` line ``line``; see
    :class:`Parts` for what becomes of it."""
    return f"# {MARK}{line}"


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


def _node_ids(graph: Graph, outer: Mapping[str, str]) -> dict[str, str]:
    """Stable ids for a flow's nodes: a named node keeps its name; an anonymous one is named
    after what it runs (``deal``, then ``deal_2``, counted within this flow; a loop
    ``for_speaker``), never after its position."""
    ids = dict(outer)
    used = {node.name for node in graph.nodes if not node.anonymous} | set(ids.values())
    next_count: dict[str, int] = {}
    for node in graph.nodes:
        if node.name in ids or not node.anonymous:
            ids.setdefault(node.name, node.name)
            continue
        # the runtime's rules for loops and module calls (fems_runtime.names), so ctx.loop and
        # ctx.call need no node= for them; an action, or &Module as written
        loop = _LoopOf().visit(node.binding)
        base = loop_node(loop.kind, loop.var) if loop else node.name.rsplit("@", 1)[0]
        candidate, count = base, next_count.get(base, 2)
        while candidate in used:
            candidate, count = f"{base}_{count}", count + 1
        next_count[base] = count  # the next repeat of ``base`` starts counting here
        used.add(candidate)
        ids[node.name] = candidate
    return ids


def _body_name(function: str, loop: Loop) -> str:
    """``main_flow_for_speaker_in_alive``: named from its own loop only (the iterable when it
    is a plain name), so another loop elsewhere never renames it."""
    name = f"{function}_{loop.kind}_{python_name(loop.var)}"
    iterable = loop.iterable.text.strip()
    return f"{name}_in_{iterable}" if iterable.isidentifier() else name


def _in_module(scope: Scope) -> str:
    """`` in module Outer/Inner`` for a module's action."""
    return f" in module {scope.key.removeprefix('module:')}" if scope.key != "main" else ""


def _meta_dict(entries: Iterable[MetaEntry]) -> dict[str, Any]:
    return {entry.key: plain_value(entry.value) for entry in entries}


def _call(function: str, args: Iterable[tuple[str, str]], exploded: bool = False) -> str:
    """``function(args)``; ``exploded`` adds the trailing comma that has black put one
    argument on each line."""
    rendered = [f"{name}={code}" if name else code for name, code in args]
    return f"{function}({', '.join(rendered)}{',' if exploded and rendered else ''})"


def _tuple_code(items: Iterable[str]) -> str:
    """A tuple display without a trailing comma black would keep exploded (except ``(x,)``)."""
    codes = list(items)
    return f"({codes[0]},)" if len(codes) == 1 else f"({', '.join(codes)})"


def _dict_code(items: Iterable[tuple[str, str]]) -> str:
    return "{" + ", ".join(f"{py(name)}: {code}" for name, code in items) + "}"


def _read_code(name: str) -> str:
    return f"ctx[{py(name)}]"


def _actor_code(actor: ActorDef) -> str:
    args = [("", py(actor.name)), ("type", py(actor.kind))]
    for name in ("soul", "source", "tools"):
        value = getattr(actor, name)
        if value:
            args.append((name, py(value)))
    return _call("fr.ActorSpec", args)


def _method_code(method: Method) -> str:
    inputs = _dict_code(
        (item.name, f"lambda ctx: {python_of(item.expr)}" if item.expr is not None else "None")
        for item in method.inputs
    )
    return _call(
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


def _unwrapped(text: str) -> str:
    """A condition without the parentheses around all of it (``if (…)`` in the script); the
    stuck error puts them back."""
    if not (text.startswith("(") and text.endswith(")")):
        return text
    depth = 0
    for ch in mask_strings(text)[:-1]:  # the brackets inside string literals blanked
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0:
            return text  # `(a) or (b)`: the first pair closes early
    return text[1:-1].strip()


def _reads(expr: Expr, actors: frozenset[str]) -> tuple[str, ...]:
    """The FEM paths a condition reads, as written (``x``, ``hp.@x``, ``@x.type``), once each;
    before an attribute of an actor variable, the variable itself (``@x``: whose ``hp``)."""
    seen: dict[tuple[str, str | None], str] = {}
    for ref in expr.reads:
        if ref.attr is not None and ref.name not in actors:
            seen.setdefault((ref.name, None), ref.name)
        seen.setdefault((ref.name, ref.attr), "".join(_written(expr, ref).split()))
    return tuple(seen.values())


def _written(expr: Expr, ref: PathRef) -> str:
    """``ref`` as the author wrote it inside ``expr`` (``hp.@x`` stays ``hp.@x``)."""
    start, end = ref.span.col - expr.span.col, ref.span.end_col - expr.span.col
    same_line = ref.span.line == expr.span.line == ref.span.end_line
    if same_line and 0 <= start < end <= len(expr.text):
        return expr.text[start:end]
    return f"{ref.name}.{ref.attr}" if ref.attr else ref.name


def _join_count(graph: Graph, merge: str | None) -> int | None:
    if merge is None:
        return None
    try:
        join = _JoinOf().visit(graph.node(merge).binding)
    except KeyError:
        return None
    return join.count if join is not None else None


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
