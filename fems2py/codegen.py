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
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Protocol

import jinja2

from fems2py import __version__
from fems2py.expressions import ALLOWED_CALLS
from fems2py.nodes import (
    Action,
    ActorDef,
    ActorValue,
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

TERMINALS = frozenset({"END", "OUT", "BREAK"})

# Names the generated module defines, imports or calls itself (conditions call the builtins of
# §12.2, dropdown specs call `tuple`); a .fems name equal to one of them gets a suffix so it
# cannot shadow them.
_TAKEN = ALLOWED_CALLS | frozenset(
    {
        "tuple",
        "__file__",
        "__name__",
        "annotations",
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
class Marker:
    """A ``# file:LINE`` comment: where the code below comes from in the ``.fems`` file."""

    file: str
    line: int

    def __str__(self) -> str:
        return f"# {comment_text(self.file)}:{self.line}"


@dataclass(frozen=True)
class StatementView:
    """One generated statement with the ``.fems`` line it stands for."""

    marker: Marker
    code: str


@dataclass(frozen=True)
class ActionView:
    """One action: an async function taking the run's ``Context``."""

    function: str
    marker: Marker
    docstring: str
    kind: str
    # ai/human/mind: keyword arguments of ``fr.TurnSpec``; func: of ``fr.FuncSpec``
    # (keyword, code, noqa comment, marker): a marker precedes an argument computed when the
    # action runs, so an error in it points at its own field's line (`in:`, `out:` …)
    spec_args: tuple[tuple[str, str, str, str], ...] = ()
    statements: tuple[StatementView, ...] = ()


@dataclass(frozen=True)
class EdgeView:
    marker: Marker
    target: str
    condition_code: str | None
    noqa: str


@dataclass(frozen=True)
class NodeView:
    """One ``case`` of a flow function's ``match node:``."""

    name: str
    marker: Marker
    counts_step: bool
    binding_code: tuple[str, ...]
    # how the node ends: "return", "goto", "fork"
    ending: str
    result_code: str = "None"
    edges: tuple[EdgeView, ...] = ()
    stuck: str = "raise"  # "raise" (flow stuck error) or "skip" (a loop head, §12.7)
    conditions_code: str = "()"
    conditions_line: int = 0  # where a "flow stuck" error points: the first condition
    fork_code: str = ""


@dataclass(frozen=True)
class FlowView:
    """One flow function: the main flow, a module's flow or a loop body."""

    function: str
    marker: Marker
    docstring: str
    start: str
    nodes: tuple[NodeView, ...]
    decorator_code: str | None = None


@dataclass(frozen=True)
class ScriptView:
    """The whole module."""

    file: str
    sha256: str
    compiler: str
    docstring: str
    script_info_code: str
    actors_code: tuple[str, ...]
    blueprints_code: tuple[str, ...]
    methods_code: tuple[str, ...]
    variables: tuple[tuple[str, str], ...]
    items: tuple[ActionView | FlowView, ...]


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


def value_code(value: Value) -> str:
    """Python code building a FEM value literal (§4.2); actor references are ``fr.Actor``."""
    if isinstance(value, StringValue):
        return py(value.value)
    if isinstance(value, NumberValue | BoolValue):
        return repr(value.value)
    if isinstance(value, NullValue):
        return "None"
    if isinstance(value, ActorValue):
        return f"fr.Actor({value.name!r})"
    if isinstance(value, ListValue):
        return "[" + ", ".join(value_code(item) for item in value.items) + "]"
    if isinstance(value, DictValue):
        pairs = ", ".join(f"{value_code(k)}: {value_code(v)}" for k, v in value.items)
        return "{" + pairs + "}"
    raise TypeError(f"unknown value node {type(value).__name__}")


def plain_value(value: Value) -> Any:
    """A FEM value as plain data (actors as ``"@name"`` strings), for specs and metadata."""
    if isinstance(value, StringValue | NumberValue | BoolValue):
        return value.value
    if isinstance(value, NullValue):
        return None
    if isinstance(value, ActorValue):
        return value.name
    if isinstance(value, ListValue):
        return [plain_value(item) for item in value.items]
    if isinstance(value, DictValue):
        return {_hashable(plain_value(k)): plain_value(v) for k, v in value.items}
    raise TypeError(f"unknown value node {type(value).__name__}")


def _hashable(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


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
        self.file = file
        self.sha256 = sha256
        self.namer = Namer()
        self.items: list[ActionView | FlowView] = []

    def marker(self, line: int) -> Marker:
        return Marker(self.file, line)

    # -------------------------------------------------------------------- whole script

    def script_view(self) -> ScriptView:
        script = self.script
        root = Scope("main", variables=frozenset(v.name for v in script.variables))
        self.declare(root, script.actions, script.modules, prefix="")
        for action in script.actions:
            self.items.append(self.action_view(root, action))
        if script.flow is not None:
            self.items.extend(
                self.flow_views(root, script.flow, "main_flow", "START", "The main flow.")
            )
        self.emit_modules(root, script.modules)
        meta = _meta_dict(script.meta)
        title = meta.get("name")
        docstring = (
            f"{title}, compiled from {self.file}." if title else f"Compiled from {self.file}."
        )
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
            sha256=self.sha256,
            compiler=__version__,
            docstring=docstring,
            script_info_code=_call("fr.ScriptInfo", info_args),
            actors_code=tuple(_actor_code(actor) for actor in script.actors),
            blueprints_code=blueprints,
            methods_code=tuple(_method_code(method) for method in script.methods),
            variables=tuple((decl.name, value_code(decl.value)) for decl in script.variables),
            items=tuple(self.items),
        )

    def declare(
        self, scope: Scope, actions: Iterable[Action], modules: Iterable[Module], prefix: str
    ) -> None:
        for action in actions:
            scope.actions[action.name] = self.namer.take(prefix + action.name)
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
                methods = "(" + "".join(_method_code(m) + ", " for m in module.methods) + ")"
                decorator = _call(
                    "fr.module",
                    [
                        ("", py(module.name)),
                        ("line", py(module.span.line)),
                        ("params", py(module.params)),
                        ("variables", local_vars),
                        ("meta", py(_meta_dict(module.meta))),
                        ("methods", methods),
                    ],
                )
                params = f"({', '.join(module.params)})" if module.params else ""
                self.items.extend(
                    self.flow_views(
                        scope,
                        module.flow,
                        function,
                        "IN",
                        f"Module {module.name}{params}.",
                        decorator=decorator,
                        line=module.span.line,
                    )
                )
            self.emit_modules(scope, module.modules)

    # -------------------------------------------------------------------- actions

    def action_view(self, scope: Scope, action: Action) -> ActionView:
        function = scope.actions[action.name]
        marker = self.marker(action.span.line)
        if action.kind == "assign":
            statements = tuple(
                StatementView(self.marker(a.span.line), _with_noqa(self.assign_code(a)))
                for a in action.assignments
            )
            return ActionView(
                function,
                marker,
                f"@assign {action.name}{_in_module(scope)}.",
                "assign",
                statements=statements,
            )
        if action.kind == "func":
            assert action.func is not None
            args = [
                ("action", py(action.name)),
                ("line", py(action.span.line)),
                ("code", py(action.func.alias)),
                ("function", py(action.func.func)),
            ]
            if action.inputs is not None:
                args.append(("inputs", _inputs_code(action.inputs)))
            if action.outs is not None:
                args.append(("outs", self.outs_code(action.outs)))
            doc = f"@func({action.func.alias}.{action.func.func}) {action.name}{_in_module(scope)}."
            spec_args = self.spec_args(action, args)
            return ActionView(function, marker, doc, "func", spec_args=spec_args)
        assert action.executor is not None
        args = [
            ("action", py(action.name)),
            ("line", py(action.span.line)),
            ("kind", py(action.kind)),
            ("executor", py(action.executor)),
        ]
        if action.role is not None:
            args.append(("role", py(action.role)))
        if action.prompt is not None:
            args.append(("prompt", py(action.prompt.value.value)))
        if action.showprompt is not None:
            args.append(("showprompt", py(action.showprompt.value.value)))
        if action.scope is not None:
            items = tuple(
                _call("fr.ScopeItem", [("", py(item.kind)), ("", py(item.name))])
                for item in action.scope.items
            )
            args.append(("scope", "(" + "".join(f"{item}, " for item in items) + ")"))
        if action.inputs is not None:
            args.append(("inputs", _inputs_code(action.inputs)))
        if action.outs is not None:
            args.append(("outs", self.outs_code(action.outs)))
        if action.resolve is not None:
            resolve = action.resolve
            args.append(
                (
                    "resolve",
                    _call(
                        "fr.ResolveSpec",
                        [
                            ("", py(resolve.func.alias)),
                            ("", py(resolve.func.func)),
                            ("", py(resolve.args)),
                        ],
                    ),
                )
            )
        if action.max_retries is not None:
            args.append(("max_retries", py(action.max_retries)))
        if action.fallback is not None:
            args.append(("fallback", self.fallback_code(scope, action.fallback)))
        if action.memory is not None:
            args.append(("memory", py(action.memory)))
        if action.context is not None:
            args.append(("context", py(action.context)))
        if action.interrupt is not None:
            args.append(("interrupt", _interrupt_code(action)))
        if action.model is not None:
            args.append(("model", py(action.model)))
        doc = f"@{action.kind}({action.executor}) {action.name}{_in_module(scope)}."
        spec_args = self.spec_args(action, args)
        return ActionView(function, marker, doc, action.kind, spec_args=spec_args)

    def spec_args(
        self, action: Action, args: Iterable[tuple[str, str]]
    ) -> tuple[tuple[str, str, str, str], ...]:
        """Keyword arguments of the action's spec, each with its ``noqa`` and, when it is
        computed as the action runs from a field on a line of its own, that line's marker."""
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
            marker = str(self.marker(line)) if line != action.span.line else ""
            result.append((name, code, _noqa(code), marker))
        return tuple(result)

    def fallback_code(self, scope: Scope, fallback: str | ModuleCall) -> str:
        if isinstance(fallback, ModuleCall):
            return f"lambda: ctx.call({self.call_args_code(scope, fallback)})"
        return f"lambda: {scope.actions.get(fallback, python_name(fallback))}(ctx)"

    def assign_code(self, assignment: Any) -> str:
        target: Target = assignment.target
        args = [py(target.name), py(assignment.op), assignment.value.python]
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
            return target.key_expr.python

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
            items.append(_call("fr.OutSpec", args))
        return "(" + "".join(f"{item}, " for item in items) + ")"

    def call_args_code(self, scope: Scope, call: ModuleCall) -> str:
        function = scope.modules.get(call.module, python_name(call.module))
        args = "[" + ", ".join(arg.python for arg in call.args) + "]"
        return f"{function}, {args}"

    # -------------------------------------------------------------------- flows

    def flow_views(
        self,
        scope: Scope,
        graph: Graph,
        function: str,
        start: str,
        docstring: str,
        decorator: str | None = None,
        loop: Loop | None = None,
        line: int | None = None,
    ) -> list[FlowView]:
        """The flow function, followed by the functions of its loop bodies."""
        nodes = []
        bodies: list[FlowView] = []
        for node in graph.nodes:
            body_function = None
            if isinstance(node.binding, Loop):
                inner = node.binding
                body_function = self.namer.take(_body_name(self.namer, function, inner))
                body_scope = scope.nested(scope.key)  # node names are unique per flow
                body_scope.variables = scope.variables | {inner.var}
                bodies.extend(
                    self.flow_views(
                        body_scope,
                        inner.body,
                        body_function,
                        inner.head,
                        f"One iteration of `{inner.kind} {inner.var} in {inner.iterable.text}`.",
                        loop=inner,
                    )
                )
            nodes.append(self.node_view(scope, graph, function, node, loop, body_function))
        view = FlowView(
            function=function,
            marker=self.marker(line or graph.span.line),
            docstring=docstring,
            start=start,
            nodes=tuple(nodes),
            decorator_code=decorator,
        )
        return [view, *bodies]

    def node_view(
        self,
        scope: Scope,
        graph: Graph,
        function: str,
        node: FlowNode,
        loop: Loop | None,
        body_function: str | None,
    ) -> NodeView:
        is_head = loop is not None and node.name == loop.head
        # a module call, loop or join knows its own line, which may follow the node's first
        # mention (`[A]: &M(x)` on a line of its own): errors in it point there
        target = node.binding
        bound = target.span if isinstance(target, ModuleCall | Loop | Join) else node.span
        marker = self.marker(bound.line)
        binding = tuple(_with_noqa(line) for line in self.binding_code(scope, node, body_function))
        if node.name in TERMINALS and loop is None:
            return NodeView(node.name, marker, True, binding, "return", result_code=py(node.name))
        edges = graph.out_edges(node.name)
        if not edges:  # a dead end, or the end of a loop iteration (§12.7)
            return NodeView(node.name, marker, not is_head, binding, "return")
        if len(edges) == 1 and edges[0].condition is None:
            return NodeView(
                node.name, marker, not is_head, binding, "goto", result_code=py(edges[0].target)
            )
        edge_views = tuple(self.edge_view(edge) for edge in edges)
        conditional = [(edge.condition, edge.span.line) for edge in edges if edge.condition]
        conditions = tuple(
            (condition.text, _reads(condition, self.actor_names)) for condition, _ in conditional
        )
        merge = self.merge_node(scope.key, node.name)
        fork_args = [
            function,
            py(node.name),
            "targets",
            f"merge={py(merge)}",
        ]
        join = _join_count(graph, merge)
        if join is not None:
            fork_args.append(f"join={py(join)}")
        fork_args.append("stop=stop")
        return NodeView(
            node.name,
            marker,
            not is_head,
            binding,
            "fork",
            edges=edge_views,
            stuck="skip" if is_head else "raise",
            conditions_code=py(conditions),
            conditions_line=conditional[0][1] if conditional else node.span.line,
            fork_code=f"ctx.fork({', '.join(fork_args)})",
        )

    def edge_view(self, edge: Edge) -> EdgeView:
        condition = edge.condition
        return EdgeView(
            self.marker(edge.span.line),
            py(edge.target),
            condition.python if condition is not None else None,
            _noqa(condition.python) if condition is not None else "",
        )

    def merge_node(self, flow_key: str, node: str) -> str | None:
        return self.checked.merge_nodes.get((flow_key, node))

    def binding_code(
        self, scope: Scope, node: FlowNode, body_function: str | None
    ) -> tuple[str, ...]:
        binding = node.binding
        if binding is None or isinstance(binding, Join):
            return ()
        if isinstance(binding, str):
            return (f"await {scope.actions.get(binding, python_name(binding))}(ctx)",)
        if isinstance(binding, ModuleCall):
            return (
                f'if await ctx.call({self.call_args_code(scope, binding)}) == "BREAK":',
                "    return None",
            )
        assert isinstance(binding, Loop) and body_function is not None
        args = [
            py(binding.kind),
            py(binding.var),
            binding.iterable.python,
            body_function,
            f"line={py(binding.span.line)}",
        ]
        return (f"await ctx.loop({', '.join(args)})",)


# ------------------------------------------------------------------------------ helpers


def _body_name(namer: Namer, function: str, loop: Loop) -> str:
    """``main_flow_for_speaker``; a second loop over the same variable says what it iterates
    (``main_flow_for_speaker_in_players``) when that is a plain name."""
    name = f"{function}_{loop.kind}_{python_name(loop.var)}"
    iterable = loop.iterable.text.strip()
    if namer.taken(name) and iterable.isidentifier():
        return f"{name}_in_{iterable}"
    return name


def _in_module(scope: Scope) -> str:
    """`` in module Outer/Inner`` for a module's action (its function's docstring says so)."""
    return f" in module {scope.key.removeprefix('module:')}" if scope.key != "main" else ""


def _meta_dict(entries: Iterable[MetaEntry]) -> dict[str, Any]:
    return {entry.key: plain_value(entry.value) for entry in entries}


def _call(function: str, args: Iterable[tuple[str, str]]) -> str:
    rendered = [f"{name}={code}" if name else code for name, code in args]
    return f"{function}({', '.join(rendered)})"


def _dict_code(items: Iterable[tuple[str, str]]) -> str:
    return "{" + ", ".join(f"{py(name)}: {code}" for name, code in items) + "}"


def _read_code(name: str) -> str:
    return f"ctx[{py(name)}]"


def _input_code(item: Input) -> str:
    return item.expr.python if item.expr is not None else _read_code(item.name)


def _actor_code(actor: ActorDef) -> str:
    return _call(
        "fr.ActorSpec",
        [
            ("", py(actor.name)),
            ("type", py(actor.kind)),
            ("soul", py(actor.soul)),
            ("source", py(actor.source)),
            ("tools", py(actor.tools)),
        ],
    )


def _method_code(method: Method) -> str:
    inputs = _dict_code(
        (item.name, f"lambda ctx: {item.expr.python}" if item.expr is not None else "None")
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


def _inputs_code(inputs: tuple[Input, ...]) -> str:
    """``in:`` values as a dict literal, evaluated when the action runs (without ``in:`` the
    spec has no ``inputs`` and the runtime passes the variables named like the function's
    parameters, §9.7)."""
    return _dict_code((item.name, _input_code(item)) for item in inputs)


def _interrupt_code(action: Action) -> str:
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
        check = f"lambda: {interrupt.condition.python}"
    else:
        assert interrupt.func is not None
        check = f"lambda: ctx.code({py(interrupt.func.alias)}).{interrupt.func.func}()"
    return _call("fr.InterruptSpec", [("", py("check")), ("check", check)])


def _reads(expr: Expr, actors: frozenset[str]) -> tuple[str, ...]:
    """The FEM paths a condition reads, as written (``x``, ``hp.@x``, ``@x.type``), once each;
    before an attribute of an actor variable, the variable itself (``@x``: whose ``hp``)."""
    seen: dict[tuple[str, str | None], str] = {}
    for ref in expr.reads:
        if ref.attr is not None and ref.name not in actors:
            seen.setdefault((ref.name, None), ref.name)
        seen.setdefault((ref.name, ref.attr), _written(expr, ref))
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
        binding = graph.node(merge).binding
    except KeyError:
        return None
    return binding.count if isinstance(binding, Join) else None


def _with_noqa(line: str) -> str:
    return line + _noqa(line)


def _noqa(python: str) -> str:
    """A targeted ``noqa`` for comparisons with ``True``/``False``/``None``: FEM scripts write
    ``finish == true`` and mean exactly ``==`` (``1 == True`` holds, ``1 is True`` does not)."""
    if "==" not in python and "!=" not in python:
        return ""
    codes = set()
    try:
        tree = ast.parse(python.strip().removeprefix("if ").rstrip(":"))
    except SyntaxError:
        return ""
    for sub in ast.walk(tree):
        if isinstance(sub, ast.Compare):
            operands = [sub.left, *sub.comparators]
            for op, left, right in zip(sub.ops, operands, operands[1:], strict=False):
                if not isinstance(op, ast.Eq | ast.NotEq):
                    continue
                for side in (left, right):
                    if isinstance(side, ast.Constant) and side.value is None:
                        codes.add("E711")
                    elif isinstance(side, ast.Constant) and isinstance(side.value, bool):
                        codes.add("E712")
    return f"  # noqa: {', '.join(sorted(codes))}" if codes else ""


# ------------------------------------------------------------------------------ rendering


@cache
def environment() -> jinja2.Environment:
    """The template environment: strict about undefined names, no autoescape (it is Python)."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("fems2py", "templates"),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["py"] = py
    env.filters["doc"] = repr  # a docstring must stay a plain string literal
    env.filters["comment"] = comment_text
    return env


def generate_parts(
    checked: CheckedLike, file: str, sha256: str, code_paths: Mapping[str, str] | None = None
) -> list[str]:
    """The (unformatted) top-level parts of the Python module for a checked script: the head
    (header, imports, ``SCRIPT``: what every edit changes, through the source hash), the data
    (actors, methods, variables), one part per action and flow function, then ``PROGRAM`` and
    each entry point. Each ends with a newline and holds no two blank lines in a row, before
    or after black; :data:`PART_SEPARATOR` joins them into the module. ``code_paths`` gives
    each ``code:`` alias's file relative to the generated module (default: as written)."""
    view = CodeGenerator(checked, file, sha256, code_paths).script_view()
    env = environment()
    parts = split_parts(env.get_template("module_head.py.jinja").render(script=view))
    for item in view.items:
        kind = "flow" if isinstance(item, FlowView) else f"action_{_ACTION_TEMPLATES[item.kind]}"
        parts.append(env.get_template(f"{kind}.py.jinja").render(item=item))
    tail = env.get_template("module_tail.py.jinja").render(script=view)
    parts.extend(split_parts(tail))  # PROGRAM, run, run_async, the __main__ guard
    return parts


# Top-level parts are separated by two blank lines, as black puts them around functions.
PART_SEPARATOR = "\n\n"


def split_parts(text: str) -> list[str]:
    """``text`` cut at the two blank lines between its top-level parts (each keeps its final
    newline): the inverse of joining parts with :data:`PART_SEPARATOR`."""
    return [piece + "\n" for piece in text[:-1].split("\n" + PART_SEPARATOR)]


_ACTION_TEMPLATES = {
    "assign": "assign",
    "func": "func",
    "ai": "turn",
    "human": "turn",
    "mind": "turn",
}
