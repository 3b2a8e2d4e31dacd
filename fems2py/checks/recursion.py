"""§11: a module whose flow cannot reach [OUT] without calling modules that never return
(itself, or modules that call it back) can never return."""

from __future__ import annotations

from dataclasses import dataclass

from fems_runtime.words import TERMINAL_NODES

from fems2py.checks.parts import Part
from fems2py.checks.report import Report
from fems2py.checks.scope import Namespace
from fems2py.nodes import FlowNode, Module, ModuleCall


@dataclass(frozen=True)
class ModuleFlow:
    """A module's top graph and the namespace its ``&Name`` calls are resolved in."""

    module: Module
    top: Part
    namespace: Namespace

    def calls(self) -> dict[str, Module | None]:
        """Each call node of the top graph and the module it calls (None: undefined, which is
        reported elsewhere). Only the top graph counts: a loop body may run no times."""
        return {
            name: self.namespace.find_module(node.binding.module)
            for name, node in self.top.nodes.items()
            if isinstance(node.binding, ModuleCall)
        }

    def may_end(self, passable: set[int]) -> bool:
        """Whether a branch may end ([OUT], [BREAK], a dead end, a node whose edges are
        conditions) on a path from [IN] that calls only modules in ``passable`` (by ``id``)."""
        blocked = {
            name
            for name, callee in self.calls().items()
            if callee is None or id(callee) not in passable
        }
        seen, stack = {"IN"}, ["IN"]
        while stack:
            name = stack.pop()
            edges = self.top.out_edges.get(name, ())
            if name in TERMINAL_NODES or not edges or any(e.condition is not None for e in edges):
                return True
            for target in self.top.successors.get(name, ()):
                if target not in seen and target not in blocked:
                    seen.add(target)
                    stack.append(target)
        return False


def warn_endless_calls(report: Report, flows: list[ModuleFlow]) -> None:
    """Warn for each module that cannot return because every path from [IN] calls a module
    that never returns, on a cycle of such calls back to itself (a module that only calls
    one of them is left to that one's warning). The modules that return are found by growing
    the set from those that need no call: a call of a module that returns is a node like any
    other."""
    flows = [flow for flow in flows if "IN" in flow.top.names]
    returning: set[int] = set()
    grew = True
    while grew:
        grew = False
        for flow in flows:
            if id(flow.module) not in returning and flow.may_end(returning):
                returning.add(id(flow.module))
                grew = True
    endless = {id(flow.module): _endless_calls(flow, returning) for flow in flows}
    for flow in flows:
        calls = endless[id(flow.module)]
        if id(flow.module) in returning or not _calls_back(flow.module, endless):
            continue
        first = min((flow.top.nodes[name] for name in calls), key=_position)
        message, hint = _endless(flow.module, list(calls.values()))
        report.warning(message, first.span, hint)


def _endless_calls(flow: ModuleFlow, returning: set[int]) -> dict[str, Module]:
    """The call nodes of ``flow`` that keep it from returning, and the modules they call;
    none when it returns, or when it would not even if they did (reported elsewhere)."""
    calls = {
        name: callee
        for name, callee in flow.calls().items()
        if callee is not None and id(callee) not in returning
    }
    return calls if calls and flow.may_end(returning | {id(c) for c in calls.values()}) else {}


def _calls_back(module: Module, endless: dict[int, dict[str, Module]]) -> bool:
    """Whether the endless calls starting at ``module`` lead back to it."""
    seen: set[int] = set()
    stack = list(endless.get(id(module), {}).values())
    while stack:
        callee = stack.pop()
        if callee is module:
            return True
        if id(callee) not in seen:
            seen.add(id(callee))
            stack.extend(endless.get(id(callee), {}).values())
    return False


def _position(node: FlowNode) -> tuple[int, int]:
    return node.span.line, node.span.col


def _endless(module: Module, callees: list[Module]) -> tuple[str, str]:
    """The warning and its hint: a module that calls itself, or modules that call it back."""
    if all(callee is module for callee in callees):
        return (
            f"module '{module.name}' calls itself on every path from [IN]: it can never return",
            "give it a way to [OUT] that does not call it (e.g. a branch under 'if (…)'), "
            "or loop with 'for … in' instead (§12.7)",
        )
    names = sorted({callee.name for callee in callees if callee is not module})
    named = " or ".join(f"'{name}'" for name in names)
    return (
        f"module '{module.name}' cannot reach [OUT] without calling {named}, which "
        f"{'calls' if len(names) == 1 else 'call'} it back on every path: it can never return",
        f"give this module or {named} a way to [OUT] that does not call the other (e.g. a "
        "branch under 'if (…)'), or loop with 'for … in' instead (§12.7)",
    )
