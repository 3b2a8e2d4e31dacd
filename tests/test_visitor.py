"""fems2py.visitor: dispatch by class name, generic traversal of every child, bindings."""

from __future__ import annotations

from typing import get_args

import pytest

from fems2py.flowcode import _BindingCode
from fems2py.graph import _Shape
from fems2py.nodes import (
    ActorValue,
    Binding,
    DictValue,
    FlowNode,
    Join,
    ListValue,
    Loop,
    ModuleCall,
)
from fems2py.parser import parse
from fems2py.visitor import BindingVisitor, NodeVisitor, walk

SCRIPT = """\
vars:
    table = {@Ann: [1, @Bob], "k": {"deep": @Cid}}
    rounds = [1, 2]

actors:
    ai @Ann
    ai @Bob
    ai @Cid

action speak @ai(@Ann):
    prompt: hello

module Inner:
    flow:
        [IN] -> [OUT]

mainflow:
    [START] -> for r in rounds:
        -> speak -> [S]
        [S] -> for s in rounds:
            -> &Inner -> speak ->
        -> [J] ->
    -> [END]
"""


def script():
    tree, diagnostics = parse(SCRIPT, "visit.fems")
    assert [d for d in diagnostics if d.severity == "error"] == []
    return tree


class ActorNames(NodeVisitor[None]):
    def __init__(self) -> None:
        self.names: list[str] = []

    def visit_ActorValue(self, value: ActorValue) -> None:
        self.names.append(value.name)


def test_generic_visit_reaches_every_node_in_source_order() -> None:
    visitor = ActorNames()
    visitor.visit(script())
    assert visitor.names == ["@Ann", "@Bob", "@Cid"]


def test_a_visit_method_decides_whether_children_are_visited() -> None:
    class Shallow(ActorNames):
        def visit_DictValue(self, value: DictValue) -> None:
            for key, _item in value.items:
                self.visit(key)

    visitor = Shallow()
    visitor.visit(script())
    assert visitor.names == ["@Ann"]


def test_extra_arguments_reach_the_visit_method() -> None:
    class Depth(NodeVisitor[int]):
        def generic_visit(self, node: object, depth: int) -> int:
            return depth

        def visit_ListValue(self, value: ListValue, depth: int) -> int:
            return max((self.visit(item, depth + 1) or 0 for item in value.items), default=depth)

        def visit_DictValue(self, value: DictValue, depth: int) -> int:
            return max((self.visit(v, depth + 1) or 0 for _k, v in value.items), default=depth)

    table = script().variables[0].value
    assert Depth().visit(table, 0) == 2


class Kinds(BindingVisitor[str]):
    def visit_ActionName(self, name: str, node: FlowNode) -> str:
        return f"action {name}"

    def visit_ModuleCall(self, call: ModuleCall, node: FlowNode) -> str:
        return f"module {call.module}"

    def visit_Loop(self, loop: Loop, node: FlowNode) -> str:
        return f"loop {loop.var}"

    def visit_PassThrough(self, binding: None, node: FlowNode) -> str:
        return f"node {node.name}"


def test_bindings_dispatch_on_what_a_node_runs() -> None:
    nodes = [node for node in walk(script().flow) if isinstance(node, FlowNode)]
    kinds = [Kinds().visit(node.binding, node) for node in nodes]
    # A loop body's head is a pass-through node named like its loop node (nodes.Loop).
    assert kinds == [
        *("node START", "loop r", "node for@18:16", "action speak", "node S", "loop s"),
        *("node for@20:16", "module Inner", "action speak", "node J", "node END"),
    ]


def test_a_binding_visitor_ignores_what_it_has_no_method_for() -> None:
    class OnlyJoins(BindingVisitor[str]):
        def visit_Join(self, join: Join) -> str:
            return "join"

    loop = next(node for node in walk(script().flow) if isinstance(node, Loop))
    assert OnlyJoins().visit(loop) is None  # the joins-free body is not searched
    assert OnlyJoins().visit(Join(None, loop.span)) == "join"


@pytest.mark.parametrize("visitor", [_Shape, _BindingCode], ids=lambda v: v.__name__)
@pytest.mark.parametrize("binding", get_args(Binding), ids=lambda b: b.__name__)
def test_the_chart_and_the_code_handle_every_binding(visitor: type, binding: type) -> None:
    """A new flow construct (a new class in nodes.Binding) needs its shape in the chart and
    its code in the generated module (CONTRIBUTING.md, "Adding a flow construct")."""
    assert visitor.handles(binding)
