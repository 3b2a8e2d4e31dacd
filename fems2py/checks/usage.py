"""Which actions no flow uses (§12.11 Decision).

Real scripts carry half-finished actions that no flow runs yet. The problems inside such an
action are warnings ("action X is never used: …") and the action is left out of the generated
module; an action counts as used when a node of some flow runs it, or when it is the
``fallback:`` of a used action. Names resolve like everywhere else: a module's own actions
shadow the outer ones (§11.4).
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Iterable

from fems2py.checks.scope import Namespace, all_modules
from fems2py.diagnostics import Diagnostic
from fems2py.nodes import ActionBlock, FlowNode, Graph, Module, Script
from fems2py.visitor import NodeVisitor

_Key = tuple[str, str]  # (namespace key, action name)


def unused_actions(
    script: Script, root: Namespace, modules: dict[int, Namespace]
) -> tuple[ActionBlock, ...]:
    """The action definitions (broken ones included) that no flow uses. Nothing is reported
    while a flow is missing or has a syntax error: its uses are not all known."""
    flows = [(root, script.flow)] + [
        (modules[id(m)], m.flow) for m in all_modules(script.modules) if id(m) in modules
    ]
    if any(graph is None or not graph.complete for _, graph in flows):
        return ()
    defined = {(block.namespace, block.name) for block in script.action_blocks}

    def resolve(name: str, namespace: Namespace) -> _Key | None:
        for level in namespace.chain():
            if (level.key, name) in defined:
                return level.key, name
        return None

    fallbacks: dict[_Key, _Key | None] = {}
    for namespace in (root, *modules.values()):
        for action in namespace.actions.values():
            if isinstance(action.fallback, str):
                fallbacks[(namespace.key, action.name)] = resolve(action.fallback, namespace)
    used: set[_Key] = set()
    pending = [
        resolve(binding, namespace)
        for namespace, graph in flows
        for binding in _action_bindings(graph)  # type: ignore[arg-type]
    ]
    while pending:
        key = pending.pop()
        if key is not None and key not in used:
            used.add(key)
            pending.append(fallbacks.get(key))
    return tuple(b for b in script.action_blocks if (b.namespace, b.name) not in used)


def excuse_unused(
    diagnostics: Iterable[Diagnostic], unused: tuple[ActionBlock, ...]
) -> list[Diagnostic]:
    """Each problem inside an unused action, as a warning that says so."""
    excused = []
    for diagnostic in diagnostics:
        owner = holder(unused, diagnostic)
        if owner is not None:
            diagnostic = dataclasses.replace(
                diagnostic,
                severity="warning",
                message=f"action {owner.name} is never used: {diagnostic.message}",
            )
        excused.append(diagnostic)
    return excused


def holder(blocks: tuple[ActionBlock, ...], diagnostic: Diagnostic) -> ActionBlock | None:
    """The block the diagnostic points into, if any. Blocks come in source order and never
    overlap (the parser records them as it meets them), so a binary search finds it."""
    at = bisect.bisect_right(blocks, diagnostic.span.line, key=lambda block: block.span.line)
    return blocks[at - 1] if at and blocks[at - 1].holds(diagnostic.span) else None


def without_unused(script: Script, unused: tuple[ActionBlock, ...]) -> Script:
    """The script minus the unused actions: what code generation sees."""
    if not unused:
        return script
    keys = {(block.namespace, block.name) for block in unused}

    def keep(namespace: str, module: Module) -> Module:
        key = f"module:{module.name}" if namespace == "main" else f"{namespace}/{module.name}"
        return dataclasses.replace(
            module,
            actions=tuple(a for a in module.actions if (key, a.name) not in keys),
            modules=tuple(keep(key, inner) for inner in module.modules),
        )

    return dataclasses.replace(
        script,
        actions=tuple(a for a in script.actions if ("main", a.name) not in keys),
        modules=tuple(keep("main", module) for module in script.modules),
    )


def _action_bindings(graph: Graph) -> list[str]:
    """The action of every node of ``graph`` that runs one, loop bodies included."""
    names = _ActionNames()
    names.visit(graph)
    return names.found


class _ActionNames(NodeVisitor[None]):
    def __init__(self) -> None:
        self.found: list[str] = []

    def visit_FlowNode(self, node: FlowNode) -> None:
        self.visit(node.binding)  # a loop's body is reached through generic_visit

    def visit_ActionName(self, name: str) -> None:
        self.found.append(name)
