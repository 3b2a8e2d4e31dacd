"""Flow checks (§12): structure, reachability, merge nodes, joins, shared state in branches.

A flow is its top graph plus one graph per ``for``/``par`` body (nested bodies included); node
names are unique across all of them (§12.7: body nodes belong to their body). Each graph is
analysed on its own; a body's head node is its entry and its iteration-end nodes lead to the
virtual exit.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from fems_runtime.words import MAIN_ONLY_NODES as MAIN_ONLY
from fems_runtime.words import MODULE_ONLY_NODES as MODULE_ONLY
from fems_runtime.words import RESERVED_NODE_NAMES as RESERVED_NODES
from fems_runtime.words import TERMINAL_NODES as TERMINALS

from fems2py.checks.graphs import EXIT, dominators, immediate_post_dominators, reachable
from fems2py.checks.regions import Regions, topological_order
from fems2py.checks.scope import Namespace, Use
from fems2py.diagnostics import Diagnostic, suggest
from fems2py.kinds import ACTION_KINDS
from fems2py.nodes import (
    Action,
    Binding,
    Edge,
    Expr,
    FlowNode,
    Graph,
    Join,
    Loop,
    Module,
    ModuleCall,
    PathRef,
    Script,
    Span,
    Text,
)
from fems2py.visitor import BindingVisitor


class Checker(Protocol):
    """What the flow checks use of the checker that runs them (:class:`fems2py.checker.Checker`)."""

    script: Script
    root: Namespace
    namespaces: dict[int, Namespace]
    items: list[Diagnostic]
    broken: frozenset[str]
    merge_nodes: dict[tuple[str, str], str | None]
    action_uses: dict[int, list[Use]]
    module_uses: dict[int, list[Use]]
    caller_loop_vars: dict[int, set[str]]

    def error(self, message: str, span: Span, hint: str | None = None) -> None: ...

    def warning(self, message: str, span: Span, hint: str | None = None) -> None: ...

    def undefined(self, message: str, span: Span, hint: str | None) -> None: ...

    def check_expr(
        self, expr: Expr | None, names: set[str], *, string_hint: bool = False
    ) -> None: ...

    def check_module_call(
        self, call: ModuleCall, namespace: Namespace, names: set[str]
    ) -> None: ...

    def names_of(self, namespace: Namespace) -> set[str]: ...

    def namespace_of(self, module: Module) -> Namespace: ...

    def is_unbound_actor_variable(self, name: str, namespace: Namespace) -> bool: ...


_COMPLEMENTS = {
    frozenset({ast.Eq, ast.NotEq}),
    frozenset({ast.In, ast.NotIn}),
    frozenset({ast.Is, ast.IsNot}),
    frozenset({ast.Lt, ast.GtE}),
    frozenset({ast.Gt, ast.LtE}),
}


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
    #: :meth:`FlowChecker.node_effects` of each node, once asked for.
    effects: dict[str, Effects] = field(default_factory=dict)
    #: :meth:`FlowChecker.continuation_reads`, once asked for.
    continuation: frozenset[str] | None = None

    @property
    def loop_vars(self) -> frozenset[str]:
        return frozenset(loop.var for loop in self.loops)


@dataclass(frozen=True)
class Effects:
    """Variables a node may assign with ``=`` as a whole, and variables it may read (§12.5a)."""

    writes: frozenset[str] = frozenset()
    reads: frozenset[str] = frozenset()

    def __or__(self, other: Effects) -> Effects:
        return Effects(self.writes | other.writes, self.reads | other.reads)


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
        part.successors.setdefault(edge.source, []).append(edge.target)
        part.out_edges.setdefault(edge.source, []).append(edge)
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


class FlowChecker:
    """Checks the main flow and every module flow of one script for a :class:`Checker`."""

    def __init__(self, checker: Checker) -> None:
        self.checker = checker
        self.flows: list[tuple[str, Graph | None, Namespace]] = [
            ("main", checker.script.flow, checker.root)
        ]
        self.module_flows(checker.script.modules)
        self.effects_cache: dict[int, Effects] = {}
        self.module_in_progress: set[int] = set()
        #: :func:`split_parts` of each loop body whose effects were asked for, by ``id``.
        self.body_parts: dict[int, list[Part]] = {}

    def module_flows(self, modules: Iterable[Module]) -> None:
        for module in modules:
            namespace = self.checker.namespace_of(module)
            self.flows.append((namespace.key, module.flow, namespace))
            self.module_flows(module.modules)

    # ------------------------------------------------------------------ uses (for §11.3)

    def collect_uses(self) -> None:
        """Record where each action and module is used, for the names they see there."""
        checker = self.checker
        for _key, graph, namespace in self.flows:
            if graph is None:
                continue
            for part in split_parts(graph):
                use = Use(namespace, part.loop_vars)
                for node in part.graph.nodes:
                    self.record_use(node.binding, namespace, use)
        for namespace in [checker.root, *checker.namespaces.values()]:
            for action in namespace.actions.values():
                via = Use(namespace, frozenset(), id(action))
                self.record_use(action.fallback, namespace, via)

    def record_use(self, binding: Binding, namespace: Namespace, use: Use) -> None:
        _RecordUse(self.checker).visit(binding, namespace, use)

    # ------------------------------------------------------------------ checks

    def check_all(self) -> None:
        checker = self.checker
        if checker.script.flow is None:
            checker.error(
                "the script has no mainflow:",
                _file_start(checker.script.path),
                "add a mainflow: block with [START] -> … -> [END]",
            )
        for key, graph, namespace in self.flows:
            module = namespace.module
            if graph is None:
                if module is not None:
                    checker.error(
                        f"module '{module.name}' has no flow:",
                        module.span,
                        "add flow: with [IN] -> … -> [OUT]",
                    )
                continue
            if module is not None and graph.complete and not graph.nodes:
                checker.warning(
                    f"module '{module.name}' has an empty flow: calling it does nothing",
                    module.span,
                    "a stub is fine while the script grows; fill it with [IN] -> … -> [OUT]",
                )
                continue
            self.check_flow(key, graph, namespace)

    def check_flow(self, key: str, graph: Graph, namespace: Namespace) -> None:
        checker = self.checker
        parts = split_parts(graph)
        in_module = namespace.module is not None
        errors = len(checker.items)
        self.check_ownership(parts)
        for part in parts:
            self.check_reserved(part, in_module)
            self.check_reserved_case(part)
        # A flow with a syntax error, or with nodes where they may not be, has no meaningful
        # shape: reachability and dead-end reports would only echo that first error.
        shape_known = graph.complete and len(checker.items) == errors
        for part in parts:
            names = checker.names_of(namespace) | part.loop_vars
            for node in part.graph.nodes:
                self.check_binding(node, part, namespace, names)
            for edge in part.graph.edges:
                checker.check_expr(edge.condition, names, string_hint=True)
        if not shape_known:
            for part in parts:
                self.compute_merges(key, part)
            return
        top = parts[0]
        entry = "IN" if in_module else "START"
        if entry not in top.names:
            where = f"module '{namespace.module.name}'" if namespace.module else "the main flow"
            checker.error(
                f"{where} has no [{entry}]",
                graph.nodes[0].span if graph.nodes else graph.span,
                f"start the flow with [{entry}] -> …",
            )
        else:
            self.mark_reachable(top, entry)
            self.report_unreachable(parts, in_module)
        for part in parts:
            self.report_dead_ends(part)
            self.compute_merges(key, part)
        for part in parts:
            self.check_joins(key, part)
        for part in parts:
            self.check_shared_state(key, part, namespace)

    def check_ownership(self, parts: list[Part]) -> None:
        """§12.7: no edge may connect a body's nodes to nodes outside that body."""
        owner: dict[str, Part] = {}
        for part in parts:
            for name in part.names:
                if name in RESERVED_NODES or (part.loop is not None and name == part.loop.head):
                    continue
                first = owner.setdefault(name, part)
                if first is part:
                    continue
                body, outside = (part, first) if part.loop is not None else (first, part)
                assert body.loop is not None
                node = outside.nodes.get(name) or body.nodes.get(name)
                span = node.span if node is not None else outside.graph.span
                self.checker.error(
                    f"node [{name}] belongs to the body of "
                    f"'{body.loop.kind} {body.loop.var}' and cannot be used outside it",
                    span,
                    "a loop body's nodes are connected only to each other (§12.7)",
                )

    def check_reserved(self, part: Part, in_module: bool) -> None:
        for name in part.names:
            if name not in RESERVED_NODES:
                continue
            node = part.nodes.get(name)
            if node is not None and node.anonymous:
                continue
            span = node.span if node is not None else part.graph.span
            if part.loop is not None:
                self.checker.error(
                    f"[{name}] may not be used inside a {part.loop.kind} body",
                    span,
                    "end an iteration with a line ending in '->'; leave through the exit line",
                )
            elif in_module and name in MAIN_ONLY:
                self.checker.error(
                    f"[{name}] may not appear in a module",
                    span,
                    "a module starts at [IN] and leaves through [OUT] or [BREAK]",
                )
            elif not in_module and name in MODULE_ONLY:
                self.checker.error(
                    f"[{name}] is only allowed in a module flow",
                    span,
                    "the main flow starts at [START] and ends at [END]",
                )

    def check_reserved_case(self, part: Part) -> None:
        """``[start]``/``[End]`` are ordinary nodes; the reserved ones are upper case (§12.1)."""
        for name in part.names:
            if name.upper() in RESERVED_NODES and name not in RESERVED_NODES:
                node = part.nodes.get(name)
                self.checker.error(
                    f"[{name}] is not the reserved node [{name.upper()}]",
                    node.span if node is not None else part.graph.span,
                    f"reserved nodes are written in capitals: [{name.upper()}]",
                )

    def check_binding(
        self, node: FlowNode, part: Part, namespace: Namespace, names: set[str]
    ) -> None:
        _CheckBinding(self).visit(node.binding, node, part, namespace, names)

    def check_loop_executor(
        self, node: FlowNode, action: Action, part: Part, namespace: Namespace
    ) -> None:
        """§9.5: inside a loop binding @v, an action may not run as another unbound variable."""
        executor = action.executor
        if not ACTION_KINDS[action.kind].has_executor or executor is None:
            return
        if executor in part.loop_vars:
            return
        bare = next((loop for loop in part.loops if "@" + loop.var == executor), None)
        if bare is not None and self.checker.is_unbound_actor_variable(executor, namespace):
            self.checker.error(
                f"{bare.kind} binds {bare.var} but action '{action.name}' runs as {executor}",
                node.span,
                f"actor variables carry '@' (§1.6): write '{bare.kind} {executor} in …'",
            )
            return
        actor_loops = [loop for loop in part.loops if loop.var.startswith("@")]
        if not actor_loops:
            return
        if executor in self.checker.caller_loop_vars.get(id(namespace), ()):
            return  # bound by a loop around the call of this module (§11.3)
        if not self.checker.is_unbound_actor_variable(executor, namespace):
            return
        loop = actor_loops[-1]
        self.checker.error(
            f"{loop.kind} binds {loop.var} but action '{action.name}' runs as {executor}",
            node.span,
            f"loop with '{loop.kind} {executor} in …' or make '{action.name}' run as {loop.var}",
        )

    # ------------------------------------------------------------------ reachability (§12.11)

    def mark_reachable(self, part: Part, entry: str) -> None:
        part.reach = reachable([entry], part.successors)
        for name in part.reach:
            body = part.bodies.get(name)
            if body is not None and body.loop is not None:
                self.mark_reachable(body, body.loop.head)

    def report_unreachable(self, parts: list[Part], in_module: bool) -> None:
        checker = self.checker
        for part in parts:
            if part.reach is None:
                continue
            covered = set(part.reach)
            for name in part.names:
                if name in covered or name in ("START", "IN"):
                    continue
                covered |= reachable([name], part.successors)
                if self.only_feeds_joins(part, name):
                    continue  # reported as a join input that no branch reaches
                node = part.nodes.get(name)
                span = node.span if node is not None else part.graph.span
                if name == "END" and not in_module:
                    checker.warning(
                        "[END] is never reached from [START]",
                        span,
                        "lead the branch that finishes the run to [END]",
                    )
                else:
                    origin = "[IN]" if in_module else "[START]"
                    hint = f"no chain from {origin} leads here: connect it (… -> "
                    hint += f"{describe(name, node)}) or remove it"
                    if part.loop is not None:
                        origin = f"the start of the '{part.loop.kind} {part.loop.var}' body"
                        hint = "lead a body line to it, or start its line with '->'"
                    checker.warning(
                        f"{describe(name, node)} is never reached from {origin}", span, hint
                    )
        top = parts[0]
        if not in_module and "END" not in top.names:
            checker.warning(
                "the main flow has no [END]",
                top.graph.span,
                "a branch that should finish the run goes to [END]",
            )

    @staticmethod
    def only_feeds_joins(part: Part, name: str) -> bool:
        targets = [part.nodes.get(target) for target in part.successors.get(name, ())]
        return bool(targets) and all(
            node is not None and isinstance(node.binding, Join) for node in targets
        )

    def report_dead_ends(self, part: Part) -> None:
        """§12.3: a node with no out-edges ends its branch; warn unless it is an end marker."""
        ends = set(part.loop.ends) if part.loop is not None else set()
        for name in part.names:
            if part.successors.get(name) or name in TERMINALS or name in ends:
                continue
            if part.reach is not None and name not in part.reach:
                continue
            if part.loop is not None and name == part.loop.head:
                continue
            node = part.nodes.get(name)
            span = node.span if node is not None else part.graph.span
            if node is not None and isinstance(node.binding, Loop):
                hint = (
                    f"after the body, write the exit line ('-> [Next]') at the indentation "
                    f"of the '{node.binding.kind}' line (§12.7)"
                )
            elif part.loop is not None:
                hint = "end the line with '->' to mark the end of an iteration"
            else:
                hint = "lead it to [END] (or [OUT]/[BREAK] in a module) to end the branch"
            self.checker.warning(
                f"{describe(name, node)} has no out-edges: its branch ends there", span, hint
            )

    # ------------------------------------------------------------------ merge nodes (§12.5)

    def compute_merges(self, key: str, part: Part) -> None:
        successors = {name: list(part.successors.get(name, ())) for name in part.names}
        if part.loop is not None:
            for end in part.loop.ends:
                successors.setdefault(end, []).append(EXIT)
        terminals = TERMINALS & set(part.names) if part.loop is None else set()
        post = part.post = immediate_post_dominators(part.names, successors, terminals)
        for name in part.names:
            if len(part.out_edges.get(name, ())) >= 2:
                self.checker.merge_nodes[(key, name)] = post.get(name)

    def check_joins(self, key: str, part: Part) -> None:
        """§12.6: a join merges its fork; every input must be reachable by some branch."""
        checker = self.checker
        predecessors: dict[str, list[str]] = {}
        for source, targets in part.successors.items():
            for target in targets:
                predecessors.setdefault(target, []).append(source)
        idom: dict[str, str] | None = None
        for name in part.names:
            node = part.nodes.get(name)
            if node is None or not isinstance(node.binding, Join):
                continue
            inputs = list(dict.fromkeys(predecessors.get(name, ())))
            if not inputs:
                checker.error("join has no inputs", node.span, "list the nodes it waits for")
                continue
            count = node.binding.count
            if count is not None and count > len(inputs):
                checker.error(
                    f"join({count}) waits for {count} branches but only {len(inputs)} lead to it",
                    node.span,
                )
            if part.reach is not None:
                for source in inputs:
                    if source not in part.reach:
                        dead_ends = [n for n in part.reach if not part.successors.get(n)]
                        source_node = part.nodes.get(source)
                        checker.error(
                            f"join input {describe(source, source_node)} "
                            "is not reached by any branch",
                            source_node.span if source_node is not None else node.span,
                            suggest(source, dead_ends),
                        )
            root = self.entry_of(part)
            if root is None:
                continue
            if idom is None:
                idom = dominators(root, part.successors)
            fork = self.enclosing_fork(name, idom, part)
            if fork is not None:
                checker.merge_nodes[(key, fork)] = name

    def entry_of(self, part: Part) -> str | None:
        if part.loop is not None:
            return part.loop.head
        for entry in ("START", "IN"):
            if entry in part.names:
                return entry
        return None

    @staticmethod
    def enclosing_fork(name: str, idom: dict[str, str], part: Part) -> str | None:
        current = idom.get(name)
        while current is not None:
            if len(part.out_edges.get(current, ())) >= 2:
                return current
            parent = idom.get(current)
            current = None if parent == current else parent
        return None

    # ------------------------------------------------------------------ shared state (§12.5a)

    def check_shared_state(self, key: str, part: Part, namespace: Namespace) -> None:
        regions = self.regions(part, namespace)
        for name in part.names:
            edges = part.out_edges.get(name, ())
            if len(edges) < 2:
                continue
            merge = self.checker.merge_nodes.get((key, name))
            branch_writes = [
                self.branch_writes(part, edge.target, name, merge, namespace, regions)
                for edge in edges
            ]
            clashing = _clashing([edge.condition for edge in edges], branch_writes)
            clashing -= part.loop_vars
            if not clashing:
                continue
            merge_node = part.nodes.get(merge) if merge is not None else None
            merge_binding = merge_node.binding if merge_node is not None else None
            if isinstance(merge_binding, Join) and merge_binding.count == 1:
                continue  # a race: the branches that lose are cancelled (§12.6)
            read_after = self.reads_after(part, merge, name, namespace, regions)
            shared = sorted(clashing & read_after)
            if not shared:
                continue
            node = part.nodes.get(name)
            where = describe(merge, part.nodes.get(merge)) if merge else "the end of the iteration"
            self.checker.warning(
                f"branches of {describe(name, node)} may each assign "
                f"{_quoted(shared)} with '=', and {_it(shared)} read after they merge at {where}",
                node.span if node is not None else part.graph.span,
                "each branch keeps its own value and the last to finish wins (§12.5a); "
                "use '+=', a dict entry, or assign in one branch only",
            )
        if part.loop is not None and part.loop.kind == "par" and part.loop_node is not None:
            writes: set[str] = set()
            for body_name in part.names:
                writes |= self.node_effects(part, body_name, namespace).writes
            writes -= part.loop_vars
            shared = sorted(writes & self.continuation_reads(part, namespace))
            if shared:
                self.checker.warning(
                    f"every branch of 'par {part.loop.var}' may assign {_quoted(shared)} "
                    f"with '=', and {_it(shared)} read after the par",
                    part.loop_node.span,
                    "each branch keeps its own value and the last to finish wins (§12.5a); "
                    f"use a dict entry such as 'name.{part.loop.var}' or '+='",
                )

    def regions(self, part: Part, namespace: Namespace) -> tuple[Regions, Regions] | None:
        """What the nodes of ``part`` write and read, summed over its regions, when ``part``
        is acyclic (:mod:`fems2py.checks.regions`); None when only a walk can tell."""
        if part.post is None or any(part.successors.get(name) for name in TERMINALS):
            return None
        order = topological_order(part.names, part.successors)
        if order is None:
            return None
        effects = [(name, self.node_effects(part, name, namespace)) for name in order]
        writes = {name: effect.writes for name, effect in effects}
        reads = {name: effect.reads for name, effect in effects}
        return (
            Regions(order, part.successors, part.post, writes.__getitem__),
            Regions(order, part.successors, part.post, reads.__getitem__),
        )

    def branch_writes(
        self,
        part: Part,
        start: str,
        fork: str,
        merge: str | None,
        namespace: Namespace,
        regions: tuple[Regions, Regions] | None,
    ) -> set[str]:
        """What the branch of ``fork`` that starts at ``start`` may assign before ``merge``."""
        if regions is not None:
            found = regions[0].chain(start, merge)
            if found is not None:
                return set(found)
        return self.branch_effects(part, start, stop={fork, merge}, namespace=namespace)

    def branch_effects(
        self, part: Part, start: str, stop: set[str | None], namespace: Namespace
    ) -> set[str]:
        writes: set[str] = set()
        seen: set[str] = set()
        stack = [start]
        while stack:
            name = stack.pop()
            if name in seen or name in stop:
                continue
            seen.add(name)
            writes |= self.node_effects(part, name, namespace).writes
            stack.extend(part.successors.get(name, ()))
        return writes

    def reads_after(
        self,
        part: Part,
        merge: str | None,
        fork: str,
        namespace: Namespace,
        regions: tuple[Regions, Regions] | None,
    ) -> set[str]:
        """What may be read once the branches of ``fork`` have merged, before ``fork`` runs
        again (a later run of the fork writes afresh)."""
        if merge is None and part.loop is None:
            return set()
        if merge is not None and regions is not None:
            reads = set(regions[1].after[merge])  # acyclic: the fork does not run again
        else:
            starts = list(part.names) if merge is None else [merge]
            reads = set()
            for name in reachable(starts, part.successors, avoid=[fork]):
                reads |= self.node_effects(part, name, namespace).reads
        if part.loop is not None:
            reads |= self.continuation_reads(part, namespace)
        return reads

    def continuation_reads(self, part: Part, namespace: Namespace) -> frozenset[str]:
        """What may be read after a loop body's loop has finished, up to the flow's end."""
        if part.continuation is None:
            part.continuation = frozenset(self.walk_continuation(part, namespace))
        return part.continuation

    def walk_continuation(self, part: Part, namespace: Namespace) -> set[str]:
        reads: set[str] = set()
        current = part
        while current.parent is not None and current.loop_node is not None:
            parent = current.parent
            loop_name = current.loop_node.name
            starts = parent.successors.get(loop_name, [])
            for name in reachable(starts, parent.successors, avoid=[loop_name]):
                reads |= self.node_effects(parent, name, namespace).reads
            current = parent
        return reads

    def node_effects(self, part: Part, name: str, namespace: Namespace) -> Effects:
        """What node ``name`` of ``part`` may write and read (its out-edges' conditions too)."""
        known = part.effects.get(name)
        if known is None:
            known = part.effects[name] = self.walk_node_effects(part, name, namespace)
        return known

    def walk_node_effects(self, part: Part, name: str, namespace: Namespace) -> Effects:
        effects = Effects()
        for edge in part.out_edges.get(name, ()):
            if edge.condition is not None:
                effects |= Effects(reads=_read_names(edge.condition.reads))
        node = part.nodes.get(name)
        if node is None:
            return effects
        return effects | self.binding_effects(node.binding, namespace)

    def binding_effects(self, binding: Binding, namespace: Namespace) -> Effects:
        return _BindingEffects(self).visit(binding, namespace) or Effects()

    def module_effects(self, module: Module) -> Effects:
        if id(module) in self.effects_cache:
            return self.effects_cache[id(module)]
        if id(module) in self.module_in_progress or module.flow is None:
            return Effects()
        self.module_in_progress.add(id(module))
        namespace = self.checker.namespace_of(module)
        effects = Effects()
        for part in split_parts(module.flow):
            for name in part.names:
                effects |= self.node_effects(part, name, namespace)
        local = set(namespace.variables)
        result = Effects(effects.writes - local, effects.reads - local)
        self.module_in_progress.discard(id(module))
        self.effects_cache[id(module)] = result
        return result

    def action_effects(self, action: Action) -> Effects:
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


class _RecordUse(BindingVisitor[None]):
    """Records where an action or a module is used (:meth:`FlowChecker.collect_uses`)."""

    def __init__(self, checker: Checker) -> None:
        self.checker = checker

    def visit_ActionName(self, name: str, namespace: Namespace, use: Use) -> None:
        action = namespace.find_action(name)
        if action is not None:
            self.checker.action_uses.setdefault(id(action), []).append(use)

    def visit_ModuleCall(self, call: ModuleCall, namespace: Namespace, use: Use) -> None:
        module = namespace.find_module(call.module)
        if module is not None:
            self.checker.module_uses.setdefault(id(module), []).append(use)


class _CheckBinding(BindingVisitor[None]):
    """What a node runs exists and fits where it runs (:meth:`FlowChecker.check_binding`)."""

    def __init__(self, flows: FlowChecker) -> None:
        self.flows = flows
        self.checker = flows.checker

    def visit_ActionName(
        self, name: str, node: FlowNode, part: Part, namespace: Namespace, names: set[str]
    ) -> None:
        checker = self.checker
        action = namespace.find_action(name)
        if action is None and name in checker.broken:
            return
        if action is None:
            hint = suggest(name, namespace.visible("actions"))
            if hint is None and namespace.find_module(name) is not None:
                hint = f"'{name}' is a module: call it as &{name}"
            checker.undefined(f"undefined action '{name}'", node.span, hint)
        else:
            self.flows.check_loop_executor(node, action, part, namespace)

    def visit_ModuleCall(
        self, call: ModuleCall, node: FlowNode, part: Part, namespace: Namespace, names: set[str]
    ) -> None:
        self.checker.check_module_call(call, namespace, names)

    def visit_Loop(
        self, loop: Loop, node: FlowNode, part: Part, namespace: Namespace, names: set[str]
    ) -> None:
        self.checker.check_expr(loop.iterable, names, string_hint=True)

    def visit_Join(
        self, join: Join, node: FlowNode, part: Part, namespace: Namespace, names: set[str]
    ) -> None:
        if join.count is not None and join.count < 1:
            self.checker.error("join(n) needs n ≥ 1", node.span)


class _BindingEffects(BindingVisitor[Effects]):
    """What a node's binding may write and read (:meth:`FlowChecker.node_effects`)."""

    def __init__(self, flows: FlowChecker) -> None:
        self.flows = flows

    def visit_ActionName(self, name: str, namespace: Namespace) -> Effects:
        action = namespace.find_action(name)
        return self.flows.action_effects(action) if action is not None else Effects()

    def visit_ModuleCall(self, call: ModuleCall, namespace: Namespace) -> Effects:
        reads = {name for arg in call.args for name in _read_names(arg.reads)}
        module = namespace.find_module(call.module)
        inner = self.flows.module_effects(module) if module is not None else Effects()
        return inner | Effects(reads=frozenset(reads))

    def visit_Loop(self, loop: Loop, namespace: Namespace) -> Effects:
        flows = self.flows
        effects = Effects(reads=_read_names(loop.iterable.reads))
        parts = flows.body_parts.get(id(loop.body))
        if parts is None:
            parts = flows.body_parts[id(loop.body)] = split_parts(loop.body)
        for body in parts:
            for name in body.names:
                effects |= flows.node_effects(body, name, namespace)
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


def _clashing(conditions: list[Expr | None], branch_writes: list[set[str]]) -> set[str]:
    """The variables that two branches which may both run (their conditions are not
    exclusive) may each assign. Grouped by variable rather than compared by pair, so that a
    fork of n branches costs n, not n², unless many branches write one variable."""
    writers: dict[str, list[int]] = {}
    for index, writes in enumerate(branch_writes):
        for name in writes:
            writers.setdefault(name, []).append(index)
    terms: dict[int, tuple[_Term, ...] | None] = {}

    def conjuncts(index: int) -> tuple[_Term, ...] | None:
        if index not in terms:
            terms[index] = _conjuncts(conditions[index])
        return terms[index]

    return {
        name
        for name, branches in writers.items()
        if len(branches) > 1 and not _all_exclusive([conjuncts(index) for index in branches])
    }


@dataclass(frozen=True)
class _Term:
    """One conjunct of an edge condition, reduced to what :func:`_exclusive_terms` compares
    (``ast.dump`` texts)."""

    whole: str
    #: ``X`` of ``not X``.
    negated: str | None
    #: A comparison with one operator: its left side, operator, right side and, when the
    #: right side is a constant, that constant (in a 1-tuple, since it may be None).
    left: str | None = None
    op: type[ast.cmpop] | None = None
    right: str | None = None
    constant: tuple[object] | None = None

    @staticmethod
    def of(node: ast.expr) -> _Term:
        negated = None
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            negated = ast.dump(node.operand)
        if not isinstance(node, ast.Compare) or len(node.ops) != 1:
            return _Term(ast.dump(node), negated)
        right = node.comparators[0]
        constant = (right.value,) if isinstance(right, ast.Constant) else None
        left, op = ast.dump(node.left), type(node.ops[0])
        return _Term(ast.dump(node), negated, left, op, ast.dump(right), constant)


def _conjuncts(expr: Expr | None) -> tuple[_Term, ...] | None:
    """The terms of ``A and B and …`` (one term for any other condition); None for no
    condition or one that does not parse."""
    if expr is None:
        return None
    try:
        node = ast.parse(expr.python, mode="eval").body
    except SyntaxError:
        return None
    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And):
        return tuple(_Term.of(value) for value in node.values)
    return (_Term.of(node),)


def _all_exclusive(conditions: list[tuple[_Term, ...] | None]) -> bool:
    """Whether no two of ``conditions`` can hold together. The common case, ``x == c1``,
    ``x == c2``, … (each possibly ``and`` more), is seen in one pass; anything else is
    compared pair by pair until a pair that may hold together."""
    if any(condition is None for condition in conditions):
        return False
    present = [condition for condition in conditions if condition is not None]
    if _distinct_constants(present):
        return True
    return all(
        _exclusive(first, second)
        for index, first in enumerate(present)
        for second in present[index + 1 :]
    )


def _distinct_constants(conditions: list[tuple[_Term, ...]]) -> bool:
    """Whether one expression is compared with ``==`` to a different constant in each."""
    equalities = [
        {term.left: term.constant[0] for term in terms if term.op is ast.Eq and term.constant}
        for terms in conditions
    ]
    shared = set(equalities[0]).intersection(*equalities[1:])
    return any(
        len({equality[left] for equality in equalities}) == len(equalities) for left in shared
    )


def _exclusive(first: tuple[_Term, ...], second: tuple[_Term, ...]) -> bool:
    """Whether two edge conditions can never both hold (a cheap, conservative test):
    ``A and x.type == "ai"`` / ``A and x.type == "human"``: one pair of conjuncts suffices."""
    return any(_exclusive_terms(a, b) for a in first for b in second)


def _exclusive_terms(a: _Term, b: _Term) -> bool:
    if a.negated == b.whole or b.negated == a.whole:
        return True
    if a.op is None or b.op is None or a.left != b.left:
        return False
    if a.right == b.right and frozenset({a.op, b.op}) in _COMPLEMENTS:
        return True
    return (
        a.op is ast.Eq
        and b.op is ast.Eq
        and a.constant is not None
        and b.constant is not None
        and a.constant[0] != b.constant[0]
    )


def _quoted(names: list[str]) -> str:
    return ", ".join(f"'{name}'" for name in names)


def _it(names: list[str]) -> str:
    return "it is" if len(names) == 1 else "they are"


def _file_start(path: str) -> Span:
    return Span(path, 1, 1, 1, 1)
