"""The FEM syntax tree: frozen dataclasses, each with the source span it came from.

The parser builds these, the checker reads them (and records what it computes, such as merge
nodes, in a separate :class:`~fems2py.checker.CheckedScript`), and the code generator turns
them into view models. Nothing here knows how a tree is parsed or compiled.

Conventions:

* Actor names always carry their ``@`` (``"@Eve"``, ``"@上帝"``), in every field.
* Variable names are stored as written, ``@`` included for actor-typed variables.
* Tuples, never lists, so that every node is hashable and immutable.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Literal

from fems2py.kinds import ActionKindName


@dataclass(frozen=True, order=True)
class Span:
    """Where a node stands in a ``.fems`` file: 1-based lines, 1-based columns in characters.

    ``end_line``/``end_col`` point one past the last character (like Python slices), so a
    one-character token at column 5 has ``col=5, end_col=6``.
    """

    file: str
    line: int
    col: int
    end_line: int
    end_col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


#: How deeply lines may nest (flows in loops and forks, modules in modules) and how deeply
#: lists and dicts may nest in a value. The parser reports anything deeper before building
#: it, so every stage may recurse over a tree without running out of stack.
MAX_DEPTH = 100


# --------------------------------------------------------------------------- values (§4.2)


@dataclass(frozen=True)
class StringValue:
    """A text value. ``style`` records how it was written (§1.5): a quoted string is always a
    string (§4.2 Decision), bare text is a string too, ``block`` is a ``|`` block and ``file``
    is ``file:"path"`` whose content was read at build time (``path`` is as written)."""

    value: str
    style: Literal["quoted", "bare", "block", "file"]
    span: Span
    path: str | None = None


@dataclass(frozen=True)
class NumberValue:
    value: int | float
    span: Span


@dataclass(frozen=True)
class BoolValue:
    value: bool
    span: Span


@dataclass(frozen=True)
class NullValue:
    span: Span


@dataclass(frozen=True)
class ActorValue:
    """``@name``: a defined actor or an actor-typed variable (resolved by the checker)."""

    name: str
    span: Span


@dataclass(frozen=True)
class ListValue:
    items: tuple[Value, ...]
    span: Span


@dataclass(frozen=True)
class DictValue:
    """``{k: v, …}``; keys are actor refs, strings (quoted or bare) or numbers."""

    items: tuple[tuple[Value, Value], ...]
    span: Span


Value = StringValue | NumberValue | BoolValue | NullValue | ActorValue | ListValue | DictValue


# ---------------------------------------------------------------- embedded Python (§12.2)


@dataclass(frozen=True)
class PathRef:
    """One FEM path read inside an expression or placeholder.

    ``name`` is the variable (or actor) read first; ``attr`` is set for ``@x.attr`` and
    ``attr.@x`` (then ``name`` is the actor side, ``"@x"``, and ``attr`` the attribute).
    """

    name: str
    span: Span
    attr: str | None = None


@dataclass(frozen=True)
class Expr:
    """A Python expression embedded in FEM (conditions, loop iterables, ``in:`` values).

    ``text`` is as written. ``python`` is the validated, rewritten expression the generated
    code evaluates, following the naming convention of docs/ARCHITECTURE.md: every variable or
    actor read is ``ctx["name"]`` (``ctx["@x"]`` for actors), attributes ``ctx.attr("@x",
    "type")``, ``true/false/null`` become ``True/False/None``, bare ``ai``/``human`` become
    strings, and ``alias.fn(...)`` becomes ``ctx.code("alias").fn(...)``.
    ``reads`` lists every path read, with spans mapped into the ``.fems`` file.
    """

    text: str
    python: str
    reads: tuple[PathRef, ...]
    span: Span


# --------------------------------------------------------------------------- prompt text


@dataclass(frozen=True)
class Placeholder:
    """A ``{path}`` in prompt text (§9.4); ``path`` is the text between the braces."""

    path: str
    ref: PathRef
    span: Span


@dataclass(frozen=True)
class Text:
    """A rendered text field (``prompt``, ``showprompt``, ``system_safety`` …).

    ``value.value`` is the text with ``{{``/``}}`` kept as written; ``placeholders`` are the
    braces that hold a path (other braces stay literal, §9.4).
    """

    value: StringValue
    placeholders: tuple[Placeholder, ...]

    @property
    def span(self) -> Span:
        return self.value.span


# --------------------------------------------------------------------------- top-level blocks


@dataclass(frozen=True)
class MetaEntry:
    key: str
    value: Value
    span: Span


@dataclass(frozen=True)
class VarDecl:
    """``name = value`` in ``vars:`` (§4); ``@name = …`` declares an actor-typed variable."""

    name: str
    value: Value
    span: Span


@dataclass(frozen=True)
class CodeAlias:
    """``alias = file:"path.py"`` (§5). ``path`` is as written, relative to the script."""

    alias: str
    path: str
    span: Span


@dataclass(frozen=True)
class ActorDef:
    """``ai|human @name = soul:…, source:…, tools:[…]`` (§6)."""

    kind: Literal["ai", "human"]
    name: str
    soul: str
    source: str | None
    tools: tuple[str, ...] | bool
    span: Span
    tool_spans: tuple[Span, ...] = ()  # one per tool name; true/false: the value's


@dataclass(frozen=True)
class Blueprint:
    """``blueprint NAME:`` with ``source:``/``tools:`` lines (§6.5), used by ``system.spawn``."""

    name: str
    source: str | None
    tools: tuple[str, ...] | bool
    span: Span
    tool_spans: tuple[Span, ...] = ()


@dataclass(frozen=True)
class FuncRef:
    """``alias.fn`` (``system.spawn`` for the built-in)."""

    alias: str
    func: str
    span: Span


@dataclass(frozen=True)
class Input:
    """One ``in:`` item: ``name`` or ``name = expr`` (then ``expr`` is set)."""

    name: str
    expr: Expr | None
    span: Span


@dataclass(frozen=True)
class Method:
    """``memory NAME(alias.fn):`` / ``context NAME(alias.fn):`` (§8)."""

    kind: Literal["memory", "context"]
    name: str
    func: FuncRef
    inputs: tuple[Input, ...]
    targets: tuple[Target, ...]  # ``out:`` as written, so a mistake is shown where it is
    span: Span

    @property
    def outputs(self) -> tuple[str, ...]:
        """The names of the variables ``out:`` writes."""
        return tuple(target.name for target in self.targets)


# --------------------------------------------------------------------------- actions (§9)


@dataclass(frozen=True)
class Target:
    """An assignment or out target (§9.6, §10.2): ``name`` is the variable (or dict) written.

    ``key_kind`` records how an entry's key was written, because the forms mean different keys:

    * ``None``: no key, the whole variable ``name`` (``@var`` included).
    * ``"actor"``: ``dict.@x``, ``@x.attr``, ``attr.@x`` and ``dict[@x]``. ``key`` is ``"@x"``,
      a defined actor or an actor-typed variable; the entry is its *current* binding (inside
      ``for @x in …`` the actor bound in this iteration, §7.3, §10.4).
    * ``"name"``: ``dict.key`` with a plain name after the dot. ``key`` is that name and the
      entry is the literal string (``scores.alice`` is ``scores["alice"]``), like a field name.
    * ``"index"``: ``dict[…]``. ``key`` is the text inside the brackets and ``key_expr`` its
      compiled expression (None after a reported syntax error). A quoted string or a number is
      a literal; a lone bare word (:attr:`key_word`) is a variable when one of that name is
      declared where the action runs or a loop variable binds it, and otherwise the string
      itself (§4.2's bare words: ``table[y]`` is ``table["y"]``). The checker decides and
      records the string ones in ``CheckedScript.string_keys``. Any other expression
      (``d[i + 1]``) is evaluated when the ``@assign`` runs; an out key must be an actor, a
      variable or a literal.
    """

    name: str
    span: Span
    key: str | None = None
    key_kind: Literal["actor", "name", "index"] | None = None
    key_expr: Expr | None = None

    @property
    def key_word(self) -> str | None:
        """The bare word of ``dict[word]`` (a variable or, if none is declared, a string)."""
        expr = self.key_expr
        if self.key_kind != "index" or expr is None or len(expr.reads) != 1:
            return None
        ref = expr.reads[0]
        if ref.attr is not None or ref.name.startswith("@") or expr.text.strip() != ref.name:
            return None
        return ref.name

    @property
    def written(self) -> str:
        """The target as an author would write it: ``votes.@voter``, ``d[i]``, ``x``."""
        if self.key is None:
            return self.name
        if self.key_kind == "index":
            return f"{self.name}[{self.key}]"
        return f"{self.name}.{self.key}"


@dataclass(frozen=True)
class OutType:
    """A typed out (§10.4): ``int float bool string actor enum dropdown``.

    ``choices`` holds the values of ``enum([a, b])`` or ``dropdown, choices={a, b}``;
    ``choices_from`` names the list variable of ``choices={alive}`` (the guide's form), whose
    value at the time of the turn gives the choices.
    """

    name: Literal["int", "float", "bool", "string", "actor", "enum", "dropdown"]
    choices: tuple[Value, ...] = ()
    choices_from: Target | None = None


@dataclass(frozen=True)
class Out:
    """One ``out:`` item of an ``@ai``/``@human``/``@mind``/``@func`` action or a method.

    ``caption`` is the label the guide writes as ``name(type, "标签")`` or
    ``name(dropdown, choices={…}, label="投票")``: text shown to a person asked for this out
    (§10.8), None when not given.
    """

    target: Target
    type: OutType | None
    optional: bool
    span: Span
    caption: str | None = None


@dataclass(frozen=True)
class Assignment:
    """One ``@assign`` statement (§9.6); ``value`` is a literal or a path expression."""

    target: Target
    op: Literal["=", "+=", "-=", "add", "remove"]
    value: Expr
    span: Span


@dataclass(frozen=True)
class ScopeItem:
    """One item of a scope (§9.3). ``kind``: ``actor`` (``@a``), ``var`` (a list or actor
    variable), ``expand`` (``{alive}`` inside brackets), ``all`` (every defined actor)."""

    kind: Literal["actor", "var", "expand", "all"]
    name: str
    span: Span


@dataclass(frozen=True)
class Scope:
    items: tuple[ScopeItem, ...]
    span: Span


@dataclass(frozen=True)
class Resolve:
    """``resolve: alias.fn(arg, …)``; ``args`` is None when no argument list was written."""

    func: FuncRef
    args: tuple[str, ...] | None
    span: Span


@dataclass(frozen=True)
class Interrupt:
    """``interrupt:`` (§10.7): ``HUMAN``, ``HUMAN_EXCEPT(@a, …)``, a condition or ``alias.fn``."""

    kind: Literal["human", "human_except", "condition", "func"]
    actors: tuple[str, ...] = ()
    condition: Expr | None = None
    func: FuncRef | None = None
    span: Span | None = None


@dataclass(frozen=True)
class ModuleCall:
    """``&Name`` or ``&Name(arg, …)``; each argument is an expression."""

    module: str
    args: tuple[Expr, ...]
    span: Span


@dataclass(frozen=True)
class ActionBlock:
    """Where an action definition sits: its header line through its last field line, and the
    namespace it is defined in (``"main"``, ``"module:Name"``, ``"module:Outer/Inner"``).
    Recorded even when the definition is broken, so that the problems inside an action no flow
    uses can be told apart (§12.11)."""

    name: str
    namespace: str
    span: Span

    def holds(self, span: Span) -> bool:
        return span.file == self.span.file and self.span.line <= span.line <= self.span.end_line


@dataclass(frozen=True)
class Action:
    """``action NAME @KIND(EXECUTOR) [as (@role)]:`` and its fields (§9).

    ``executor`` is ``"@x"`` for ai/human/mind, None for assign; ``func`` is set for ``@func``.
    ``outs`` is used by ai/human/mind/func, ``assignments`` by assign.
    ``field_spans`` says where each field was written, and where the header's ``executor``
    and ``role`` were (for diagnostics).
    """

    name: str
    kind: ActionKindName
    span: Span
    executor: str | None = None
    role: str | None = None
    func: FuncRef | None = None
    prompt: Text | None = None
    showprompt: Text | None = None
    scope: Scope | None = None
    inputs: tuple[Input, ...] | None = None
    outs: tuple[Out, ...] | None = None
    assignments: tuple[Assignment, ...] = ()
    resolve: Resolve | None = None
    max_retries: int | None = None
    max_tool_rounds: int | None = None
    max_tokens: int | None = None
    fallback: str | ModuleCall | None = None
    memory: str | None = None
    context: str | None = None
    interrupt: Interrupt | None = None
    model: str | None = None
    field_spans: tuple[tuple[str, Span], ...] = ()


# --------------------------------------------------------------------------- flows (§12)


@dataclass(frozen=True)
class Edge:
    """``source -> target``, optionally ``if (condition)``."""

    source: str
    target: str
    condition: Expr | None
    span: Span


@dataclass(frozen=True)
class Loop:
    """``for``/``par VAR in EXPR:`` (§12.7, §12.8), placed in its flow as the binding of a node.

    ``body`` is a nested graph. Its start lines are out-edges of the body's head node (named
    by ``head``); ``ends`` are the nodes marked as iteration ends (a line ending in ``->``).
    The loop node's own out-edges in the enclosing graph form the exit chain.
    """

    kind: Literal["for", "par"]
    var: str
    iterable: Expr
    body: Graph
    head: str
    ends: tuple[str, ...]
    span: Span


@dataclass(frozen=True)
class Join:
    """``join(all|N|any):`` … ``to [X]`` (§12.6); ``count`` None means all."""

    count: int | None
    span: Span


Binding = str | ModuleCall | Loop | Join | None
"""What a flow node runs: an action (by name), a module call, a loop, a join, or nothing."""


@dataclass(frozen=True)
class FlowNode:
    """A node of a flow graph.

    ``name`` is ``"START"``/``"A"`` for ``[START]``/``[A]`` (brackets stripped) and a
    generated ``"<action>@LINE:COL"`` for anonymous nodes, so it is unique and stable.
    ``binding`` is an action name, a module call, a loop, a join or None (empty pass-through);
    ``bound_at`` says where it was written.
    """

    name: str
    binding: Binding
    anonymous: bool
    span: Span
    # where the binding was written (``[A]: act`` may follow the first mention of ``[A]``)
    bound_at: Span | None = None


@dataclass(frozen=True)
class Graph:
    """Nodes in order of first appearance, edges in source order.

    ``complete`` is False when the parser reported a syntax error inside this flow: the graph
    lacks what the broken lines held, so checks of its shape (entry, reachability, dead ends)
    would only echo that error.
    """

    nodes: tuple[FlowNode, ...]
    edges: tuple[Edge, ...]
    span: Span
    complete: bool = True

    def node(self, name: str) -> FlowNode:
        """The first node named ``name`` (KeyError when there is none)."""
        return self._nodes_by_name[name]

    def out_edges(self, name: str) -> tuple[Edge, ...]:
        """The edges leaving ``name``, in source order."""
        return self._edges_by_source.get(name, ())

    @functools.cached_property
    def _nodes_by_name(self) -> dict[str, FlowNode]:
        found: dict[str, FlowNode] = {}
        for node in self.nodes:
            found.setdefault(node.name, node)
        return found

    @functools.cached_property
    def _edges_by_source(self) -> dict[str, tuple[Edge, ...]]:
        """Built once, so that asking for every node's edges is linear, not quadratic."""
        found: dict[str, list[Edge]] = {}
        for edge in self.edges:
            found.setdefault(edge.source, []).append(edge)
        return {source: tuple(edges) for source, edges in found.items()}


@dataclass(frozen=True)
class Module:
    """``module NAME[(p1, p2)]:`` (§11): a sub-flow with its own definitions."""

    name: str
    params: tuple[str, ...]
    meta: tuple[MetaEntry, ...]
    variables: tuple[VarDecl, ...]
    actions: tuple[Action, ...]
    modules: tuple[Module, ...]
    methods: tuple[Method, ...]
    flow: Graph | None
    span: Span


@dataclass(frozen=True)
class Script:
    """A whole ``.fems`` file.

    ``broken_names`` are names whose definition (variable, actor, action, module, method,
    code alias, ``in:`` item) had a syntax error: they count as defined, so that their uses
    are not reported again.
    """

    path: str
    source: str
    meta: tuple[MetaEntry, ...] = ()
    variables: tuple[VarDecl, ...] = ()
    code: tuple[CodeAlias, ...] = ()
    actors: tuple[ActorDef, ...] = ()
    blueprints: tuple[Blueprint, ...] = ()
    methods: tuple[Method, ...] = ()
    actions: tuple[Action, ...] = ()
    modules: tuple[Module, ...] = ()
    flow: Graph | None = None
    sketch: tuple[tuple[str, str], ...] = field(default=())
    broken_names: frozenset[str] = frozenset()
    action_blocks: tuple[ActionBlock, ...] = ()
