"""``fems2py graph``: a script's flows as a Mermaid flowchart (§16.5).

One subgraph per flow (the main flow and every module, nested modules included) and one per
``for``/``par`` body, so the chart shows the same ownership the indentation shows. Node ids are
derived from flow and node names and escaped, so any FEM name (``[玩家1]``, ``"name@3:5"``)
produces a valid chart; labels are quoted with Mermaid's ``#quot;`` entity. :func:`stage_chart`
also says which node of the script each chart node draws, so the stage can mark the nodes a run
is in (§17); it is the stage's chart drawer, registered as an entry point so that the runtime
never imports the compiler.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

from fems2py.diagnostics import CompileError
from fems2py.frontend import analyze
from fems2py.nodes import Edge, FlowNode, Graph, Join, Loop, Module, ModuleCall, Script
from fems2py.visitor import BindingVisitor


class ChartNode(NamedTuple):
    """A node of the chart: its Mermaid id, the flow node's name, the action it runs (None for
    labels, loops, joins and module calls) and its ``.fems`` line."""

    id: str
    name: str
    action: str | None
    line: int


def to_mermaid(script: Script) -> str:
    return _chart(script, [])


def stage_chart(path: Path) -> tuple[str, list[ChartNode]]:
    """The stage's chart drawer (entry point ``fems_runtime.charts``, see
    ``fems_runtime.stage.chart``): the Mermaid chart of the script at ``path`` and its nodes;
    ``ValueError`` when the script has errors."""
    try:
        checked, _ = analyze(path)
    except CompileError as error:
        raise ValueError(f"{path} has errors: run fems2py check {path}") from error
    nodes: list[ChartNode] = []  # every node the chart draws, in the order it draws them
    return _chart(checked.script, nodes), nodes


def _chart(script: Script, found: list[ChartNode]) -> str:
    lines = ["flowchart TD"]
    if script.flow is not None:
        _emit_graph(lines, found, "main", "mainflow", script.flow, depth=1)
    for module in script.modules:
        _emit_module(lines, found, module, "module", depth=1)
    return "\n".join(lines) + "\n"


def _emit_module(
    lines: list[str], found: list[ChartNode], module: Module, prefix: str, depth: int
) -> None:
    key = f"{prefix}_{module.name}"
    if module.flow is not None:
        params = f"({', '.join(module.params)})" if module.params else ""
        _emit_graph(lines, found, key, f"module {module.name}{params}", module.flow, depth)
    for nested in module.modules:
        _emit_module(lines, found, nested, key, depth)


def _emit_node(
    lines: list[str], found: list[ChartNode], indent: str, key: str, node: FlowNode
) -> None:
    node_id = _node_id(key, node.name)
    lines.append(f"{indent}{node_id}{_shape(node)}")
    action = node.binding if isinstance(node.binding, str) else None
    found.append(ChartNode(node_id, node.name, action, node.span.line))


def _emit_graph(
    lines: list[str], found: list[ChartNode], key: str, title: str, graph: Graph, depth: int
) -> None:
    indent = "    " * depth
    lines.append(f"{indent}subgraph {_node_id(key, '')}[{_label(title)}]")
    for node in graph.nodes:
        _emit_node(lines, found, indent + "    ", key, node)
        if isinstance(node.binding, Loop):
            _emit_loop(lines, found, key, node, node.binding, depth + 1)
    for edge in graph.edges:
        lines.append(f"{indent}    {_edge(key, edge.source, edge)}")
    lines.append(f"{indent}end")


def _emit_loop(
    lines: list[str], found: list[ChartNode], key: str, node: FlowNode, loop: Loop, depth: int
) -> None:
    """A loop body is drawn inside the loop's own subgraph; its head is the loop node."""
    indent = "    " * depth
    body_key = f"{key}_{node.name}"
    lines.append(f"{indent}subgraph {_node_id(body_key, '')}[{_label(f'{loop.kind} body')}]")
    for body_node in loop.body.nodes:
        if body_node.name != loop.head:
            _emit_node(lines, found, indent + "    ", key, body_node)
    for edge in loop.body.edges:
        source = node.name if edge.source == loop.head else edge.source
        lines.append(f"{indent}    {_edge(key, source, edge)}")
    for body_node in loop.body.nodes:
        if isinstance(body_node.binding, Loop):
            _emit_loop(lines, found, key, body_node, body_node.binding, depth + 1)
    for end in loop.ends:
        lines.append(f"{indent}    {_node_id(key, end)} -.->|next| {_node_id(key, node.name)}")
    lines.append(f"{indent}end")


def _edge(flow_key: str, source: str, edge: Edge) -> str:
    """``source --> target``, labelled with the condition when the edge has one."""
    arrow = f"-->|{_label(edge.condition.text)}|" if edge.condition is not None else "-->"
    return f"{_node_id(flow_key, source)} {arrow} {_node_id(flow_key, edge.target)}"


def _shape(node: FlowNode) -> str:
    shape = _Shape().visit(node.binding, node)
    assert shape is not None, f"unexpected node binding {node.binding!r}"
    return shape


class _Shape(BindingVisitor[str]):
    """A node's Mermaid shape and label, by what it runs."""

    def visit_PassThrough(self, binding: None, node: FlowNode) -> str:
        return f"(({_label(node.name)}))" if node.name.isupper() else f"([{_label(node.name)}])"

    def visit_ActionName(self, action: str, node: FlowNode) -> str:
        text = action if node.anonymous else f"{node.name}: {action}"
        return f"[{_label(text)}]"

    def visit_ModuleCall(self, call: ModuleCall, node: FlowNode) -> str:
        return f"[[{_label('&' + call.module)}]]"

    def visit_Loop(self, loop: Loop, node: FlowNode) -> str:
        return f"{{{{{_label(f'{loop.kind} {loop.var} in {loop.iterable.text}')}}}}}"

    def visit_Join(self, join: Join, node: FlowNode) -> str:
        count = "all" if join.count is None else str(join.count)
        return f"[/{_label(f'join({count})')}\\]"


def _node_id(flow_key: str, name: str) -> str:
    raw = f"{flow_key}__{name}" if name else flow_key
    return "n_" + re.sub(r"[^0-9A-Za-z_]", lambda m: f"_{ord(m.group()):x}_", raw)


def _label(text: str) -> str:
    return '"' + text.replace('"', "#quot;").replace("\n", " ") + '"'
