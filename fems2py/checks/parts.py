"""A flow in parts (§12.7): its top graph and one graph per ``for``/``par`` body, nested
bodies included, each a :class:`Part` that the flow checks analyse on its own.

Node names are unique across the parts of a flow (body nodes belong to their body); a body's
head node is its entry and its iteration-end nodes lead to the virtual exit. How messages
name a node is here too (:func:`describe`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fems_runtime.words import TERMINAL_NODES

from fems2py.checks.scope import Effects
from fems2py.nodes import Edge, FlowNode, Graph, Join, Loop, ModuleCall
from fems2py.visitor import BindingVisitor


@dataclass
class Part:
    """One graph of a flow: the top graph or a loop body, with what encloses it."""

    graph: Graph
    parent: Part | None = None
    loop: Loop | None = None
    loop_node: FlowNode | None = None
    loops: tuple[Loop, ...] = ()
    names: list[str] = field(default_factory=list)
    nodes: dict[str, FlowNode] = field(default_factory=dict)
    successors: dict[str, list[str]] = field(default_factory=dict)
    out_edges: dict[str, list[Edge]] = field(default_factory=dict)
    bodies: dict[str, Part] = field(default_factory=dict)
    reach: set[str] | None = None
    #: The immediate post-dominator of each node (None: the virtual exit), once computed.
    post: dict[str, str | None] | None = None
    #: :meth:`~fems2py.checks.effects.EffectFinder.node` of each node, once asked for.
    effects: dict[str, Effects] = field(default_factory=dict)
    #: :meth:`~fems2py.checks.shared_state.SharedState.continuation_reads`, once asked for.
    continuation: frozenset[str] | None = None

    @property
    def loop_vars(self) -> frozenset[str]:
        return frozenset(loop.var for loop in self.loops)


def split_parts(
    graph: Graph, parent: Part | None = None, loop_node: FlowNode | None = None
) -> list[Part]:
    """The top graph (or a body) and, after it, every loop body inside, depth first."""
    loop = loop_node.binding if loop_node is not None else None
    assert loop is None or isinstance(loop, Loop)
    loops = (parent.loops if parent else ()) + ((loop,) if loop is not None else ())
    part = Part(graph, parent, loop, loop_node, loops)
    for node in graph.nodes:
        part.nodes.setdefault(node.name, node)
    order = [node.name for node in graph.nodes]
    for edge in graph.edges:
        order += [edge.source, edge.target]
        part.out_edges.setdefault(edge.source, []).append(edge)
        if edge.source in TERMINAL_NODES:
            continue  # never followed: a terminal ends its branch (§12.9), an error of its own
        part.successors.setdefault(edge.source, []).append(edge.target)
    if loop is not None:
        order.insert(0, loop.head)
    part.names = list(dict.fromkeys(order))
    parts = [part]
    for node in graph.nodes:
        if isinstance(node.binding, Loop) and node.name not in part.bodies:
            inner = split_parts(node.binding.body, part, node)
            part.bodies[node.name] = inner[0]
            parts += inner
    return parts


def describe(name: str, node: FlowNode | None) -> str:
    """How a node is named in a message: ``[A]`` or, for an anonymous node, what it runs."""
    if node is None or not node.anonymous:
        return f"[{name}]"
    return _Describe().visit(node.binding) or f"[{name}]"


class _Describe(BindingVisitor[str]):
    """What an anonymous node runs, as a message names it."""

    def visit_ActionName(self, action: str) -> str:
        return f"'{action}'"

    def visit_ModuleCall(self, call: ModuleCall) -> str:
        return f"'&{call.module}'"

    def visit_Loop(self, loop: Loop) -> str:
        return f"'{loop.kind} {loop.var}'"

    def visit_Join(self, join: Join) -> str:
        return "join(" + ("all" if join.count is None else str(join.count)) + ")"
