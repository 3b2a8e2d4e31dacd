"""A flow → its functions for the ``flow`` template: the nodes' code that flowgen structures.

:class:`FlowCode` gives each flow (the main flow, a module's, a loop's body) its function:
node ids from labels and what the nodes run (:func:`_node_ids`), the statements of each node
(its line marker, the author's comments, its step and binding: :class:`_BindingCode`) handed
to :func:`fems2py.flowgen.emit`, which structures them; then the function's return type and
rendered body, and its rows of the ``CONDITIONS`` table.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from fems_runtime.names import call_node, loop_node

from fems2py import flowgen
from fems2py.actioncode import Scope, module_call_args
from fems2py.expressions import mask_strings
from fems2py.flowgen import Statement
from fems2py.nodes import Edge, Expr, FlowNode, Graph, Join, Loop, ModuleCall, PathRef, Span
from fems2py.pycode import Namer, comment_text, docstring, line_marker, py, python_name, python_of
from fems2py.visitor import BindingVisitor


@dataclass(frozen=True)
class FlowView:
    """One flow function: the main flow, a module's flow or a loop body."""

    function: str
    marker: str
    docstring: str | None
    # a dispatch (with concurrent branches) is entered at a node: it takes ``node``/``stop``
    dispatch: bool
    returns: str  # "str | None", or "None" for a structured body that never ends the flow
    start: str
    body: tuple[str, ...]
    decorator_code: str | None = None


@dataclass
class FlowCode:
    """Builds the :class:`FlowView` of each flow of one script, and the table its "flow
    stuck" errors read (``CONDITIONS``, §12.3), as :mod:`fems2py.flowgen` structures them."""

    # the script's function names, shared with its actions and modules
    namer: Namer
    # the merge node of each fork (§12.5), by (flow key, node), from the checker
    merge_nodes: Mapping[tuple[str, str], str | None]
    actor_names: frozenset[str]
    # the author's `#` comment lines directly above a .fems line
    comments_above: Callable[[int], list[str]]
    # each function's rows of CONDITIONS, in the order the functions are made
    conditions: list[tuple[str, tuple[tuple[str, str], ...]]] = field(default_factory=list)

    def functions(
        self,
        scope: Scope,
        graph: Graph,
        function: str,
        start: str,
        line: int,
        loop: Loop | None = None,
        outer_ids: Mapping[str, str] | None = None,
    ) -> list[FlowView]:
        """The flow's function, then the functions of its loop bodies (named from
        ``function`` and their own loop)."""
        ids = _node_ids(graph, outer_ids or {})
        bodies: dict[str, str] = {}
        later: list[tuple[str, Loop, str]] = []
        for node in graph.nodes:
            inner = node.binding
            if isinstance(inner, Loop) and node.name not in bodies:
                bodies[node.name] = self.namer.take(_body_name(function, inner))
                later.append((node.name, inner, bodies[node.name]))
        flow = _FlowEmitter(self, scope, graph, function, ids, bodies, loop)
        dispatch, returns, body = flow.emit()
        doc_lines = self.comments_above(line) if loop is None else []
        views = [
            FlowView(
                function=function,
                marker=line_marker(line),
                docstring=docstring("\n".join(doc_lines)) or None,
                dispatch=dispatch,
                returns=returns,
                start=ids.get(start, start),
                body=tuple(body),
            )
        ]
        for node_name, inner, body_function in later:
            body_scope = scope.nested(scope.key)  # node names are unique per flow
            body_scope.variables = scope.variables | {inner.var}
            views += self.functions(
                body_scope,
                inner.body,
                body_function,
                inner.head,
                inner.span.line,
                loop=inner,
                outer_ids={inner.head: ids[node_name]},
            )
        return views

    def merge_node(self, flow_key: str, node: str) -> str | None:
        return self.merge_nodes.get((flow_key, node))


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
        args = module_call_args(self.flow.scope, call)
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
        flows: FlowCode,
        scope: Scope,
        graph: Graph,
        function: str,
        ids: Mapping[str, str],
        bodies: Mapping[str, str],
        loop: Loop | None,
    ) -> None:
        self.flows = flows
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
            name: self.flows.merge_node(self.scope.key, name)
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
                for text in self.flows.comments_above(line)
            ]
        return lines + (_BindingCode(self).visit(node.binding, self.node_id(name), name) or [])

    def fork_code(self, name: str) -> str:
        merge = self.flows.merge_node(self.scope.key, name)
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
                    " ".join(_reads(condition, self.flows.actor_names)),
                )
                for condition in conditional
            ]
            rows.append((self.node_id(name), py(row)))
        if rows:
            self.flows.conditions.append((self.function, tuple(rows)))


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
        loop = node.binding
        base = (
            loop_node(loop.kind, loop.var)
            if isinstance(loop, Loop)
            else node.name.rsplit("@", 1)[0]
        )
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
        join = graph.node(merge).binding
    except KeyError:
        return None
    return join.count if isinstance(join, Join) else None
