"""§11: a module whose flow calls itself on every path from [IN] can never return."""

from __future__ import annotations

from fems_runtime.words import TERMINAL_NODES

from fems2py.checks.parts import Part
from fems2py.checks.report import Report
from fems2py.nodes import Module, ModuleCall


def warn_endless_self_call(report: Report, top: Part, module: Module) -> None:
    """Warn when no node that may end a branch ([OUT], [BREAK], a dead end, a node whose edges
    are conditions) is reached from [IN] without passing a call of the module itself.

    Only the top graph counts (a body may run no times), and a module that defines a module of
    its own name is left alone (``&Name`` inside it means the inner one)."""
    if any(inner.name == module.name for inner in module.modules):
        return
    calls = [
        node
        for name, node in top.nodes.items()
        if isinstance(node.binding, ModuleCall) and node.binding.module == module.name
    ]
    if not calls or "IN" not in top.names:
        return
    blocked = {node.name for node in calls}
    seen = {"IN"}
    stack = ["IN"]
    while stack:
        name = stack.pop()
        edges = top.out_edges.get(name, ())
        if name in TERMINAL_NODES or not edges or any(e.condition is not None for e in edges):
            return  # a branch may end here without the module calling itself
        for target in top.successors.get(name, ()):
            if target not in seen and target not in blocked:
                seen.add(target)
                stack.append(target)
    first = min(calls, key=lambda node: (node.span.line, node.span.col))
    report.warning(
        f"module '{module.name}' calls itself on every path from [IN]: it can never return",
        first.span,
        "give it a way to [OUT] that does not call it (e.g. a branch under 'if (…)'), "
        "or loop with 'for … in' instead (§12.7)",
    )
