"""What a flow's nodes may write and read (§12.5a), as :class:`~fems2py.checks.scope.Effects`.

A node's effects are those of what it runs (an action's outs, assignments and reads; a
module's whole flow, less its locals; a loop's body, less its variable) and the reads of its
out-edges' conditions. :class:`EffectFinder` works them out once per node and module.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from fems_runtime.words import MAX_MODULE_DEPTH

from fems2py.checks.parts import Part, split_parts
from fems2py.checks.scope import Effects, Namespace
from fems2py.nodes import Action, Binding, Loop, Module, ModuleCall, PathRef, Text
from fems2py.visitor import BindingVisitor


class EffectFinder:
    """The effects of nodes, actions and modules of one script; ``namespaces``: each
    module's namespace, by ``id`` of the module."""

    def __init__(self, namespaces: Mapping[int, Namespace]) -> None:
        self.namespaces = namespaces
        self.module_cache: dict[int, Effects] = {}
        self.module_in_progress: set[int] = set()
        #: :func:`split_parts` of each loop body whose effects were asked for, by ``id``.
        self.body_parts: dict[int, list[Part]] = {}

    def node(self, part: Part, name: str, namespace: Namespace) -> Effects:
        """What node ``name`` of ``part`` may write and read (its out-edges' conditions too)."""
        known = part.effects.get(name)
        if known is None:
            known = part.effects[name] = self._walk_node(part, name, namespace)
        return known

    def _walk_node(self, part: Part, name: str, namespace: Namespace) -> Effects:
        effects = Effects()
        for edge in part.out_edges.get(name, ()):
            if edge.condition is not None:
                effects |= Effects(reads=_read_names(edge.condition.reads))
        node = part.nodes.get(name)
        if node is None:
            return effects
        return effects | self.binding(node.binding, namespace)

    def binding(self, binding: Binding, namespace: Namespace) -> Effects:
        """What a node bound to ``binding`` in ``namespace`` runs may write and read."""
        return _BindingEffects(self).visit(binding, namespace) or Effects()

    def module(self, module: Module) -> Effects:
        """What a call of ``module`` may write and read outside it (its locals left out; a
        module that calls itself adds nothing while its effects are being found)."""
        if id(module) in self.module_cache:
            return self.module_cache[id(module)]
        if id(module) in self.module_in_progress or module.flow is None:
            return Effects()
        if len(self.module_in_progress) >= MAX_MODULE_DEPTH:
            return Effects()  # a call this deep never runs: the run stops at the limit (§11.6)
        self.module_in_progress.add(id(module))
        namespace = self.namespaces[id(module)]
        effects = Effects()
        for part in split_parts(module.flow):
            for name in part.names:
                effects |= self.node(part, name, namespace)
        local = set(namespace.variables)
        result = Effects(effects.writes - local, effects.reads - local)
        self.module_in_progress.discard(id(module))
        self.module_cache[id(module)] = result
        return result

    def action(self, action: Action) -> Effects:
        """What ``action`` may assign as a whole (outs and ``=`` assignments without a key)
        and what its fields read."""
        writes: set[str] = set()
        reads: set[str] = set()
        for out in action.outs or ():
            if out.target.key is None:
                writes.add(out.target.name)
        for assignment in action.assignments:
            if assignment.op == "=" and assignment.target.key is None:
                writes.add(assignment.target.name)
            reads |= _read_names(assignment.value.reads)
        for text in (action.prompt, action.showprompt):
            reads |= _text_reads(text)
        for item in action.inputs or ():
            reads |= _read_names(item.expr.reads) if item.expr is not None else {item.name}
        if action.scope is not None:
            reads |= {item.name for item in action.scope.items if item.kind != "all"}
        if action.executor is not None:
            reads.add(action.executor)
        if action.resolve is not None and action.resolve.args:
            reads |= set(action.resolve.args)
        if action.interrupt is not None and action.interrupt.condition is not None:
            reads |= _read_names(action.interrupt.condition.reads)
        return Effects(frozenset(writes), frozenset(reads))


class _BindingEffects(BindingVisitor[Effects]):
    """What a node's binding may write and read (:meth:`EffectFinder.node`)."""

    def __init__(self, effects: EffectFinder) -> None:
        self.effects = effects

    def visit_ActionName(self, name: str, namespace: Namespace) -> Effects:
        action = namespace.find_action(name)
        return self.effects.action(action) if action is not None else Effects()

    def visit_ModuleCall(self, call: ModuleCall, namespace: Namespace) -> Effects:
        reads = {name for arg in call.args for name in _read_names(arg.reads)}
        module = namespace.find_module(call.module)
        inner = self.effects.module(module) if module is not None else Effects()
        return inner | Effects(reads=frozenset(reads))

    def visit_Loop(self, loop: Loop, namespace: Namespace) -> Effects:
        finder = self.effects
        effects = Effects(reads=_read_names(loop.iterable.reads))
        parts = finder.body_parts.get(id(loop.body))
        if parts is None:
            parts = finder.body_parts[id(loop.body)] = split_parts(loop.body)
        for body in parts:
            for name in body.names:
                effects |= finder.node(body, name, namespace)
        return Effects(effects.writes - {loop.var}, effects.reads - {loop.var})


def _read_names(reads: Iterable[PathRef]) -> frozenset[str]:
    names: set[str] = set()
    for ref in reads:
        names.add(ref.name)
        if ref.attr is not None:
            names.add(ref.attr)
    return frozenset(names)


def _text_reads(text: Text | None) -> frozenset[str]:
    if text is None:
        return frozenset()
    return _read_names(placeholder.ref for placeholder in text.placeholders)
