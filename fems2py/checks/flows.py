"""Flow checks (§12): structure, reachability, merge nodes, joins, shared state in branches.

A flow is its top graph plus one graph per ``for``/``par`` body (:mod:`fems2py.checks.parts`),
each analysed on its own. :func:`collect_uses` first finds where each action and module runs
(the checker works out from it which names each sees, §11.3); :func:`check_flows` then checks
every flow with those names, given as :class:`FlowInputs`, and returns the merge node of
every fork (§12.5). The shared state of concurrent branches (§12.5a) is checked by
:mod:`fems2py.checks.shared_state` on what :mod:`fems2py.checks.effects` finds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass, field

from fems_runtime.words import (
    MAIN_ONLY_NODES,
    MODULE_ONLY_NODES,
    RESERVED_NODE_NAMES,
    TERMINAL_NODES,
)

from fems2py.checks.callers import module_key
from fems2py.checks.effects import EffectFinder
from fems2py.checks.graphs import EXIT, dominators, immediate_post_dominators, reachable
from fems2py.checks.iterables import check_iterable, whole_writes
from fems2py.checks.parts import Part, describe, split_parts
from fems2py.checks.recursion import ModuleFlow, warn_endless_calls
from fems2py.checks.references import References
from fems2py.checks.scope import Namespace, Use, all_modules
from fems2py.checks.shared_state import SharedState
from fems2py.diagnostics import closest_node, suggest
from fems2py.kinds import ACTION_KINDS
from fems2py.nodes import (
    Action,
    FlowNode,
    Graph,
    Join,
    Loop,
    ModuleCall,
    NullValue,
    Script,
    Span,
    StringValue,
)
from fems2py.visitor import BindingVisitor


@dataclass(frozen=True)
class Flow:
    """One flow of a script: its key (``"main"``, ``"module:Name"``, ``"module:Outer/Inner"``),
    its graph (None when the script or module has none) and its namespace."""

    key: str
    graph: Graph | None
    namespace: Namespace


#: Why nothing follows a terminal node, for the error on an edge out of it.
TERMINAL_ENDS = {
    "END": "[END] ends its branch of the main flow (§12.9)",
    "OUT": "[OUT] returns from the module; the caller follows the call's out-edges (§11.5)",
    "BREAK": "[BREAK] leaves the module and the caller's branch stops there (§11.5)",
}


def flows_of(
    script: Script, root: Namespace, namespaces: Mapping[int, Namespace]
) -> tuple[Flow, ...]:
    """The main flow, then each module's flow (nested modules after their module)."""
    flows = [Flow("main", script.flow, root)]
    for module in all_modules(script.modules):
        namespace = namespaces[id(module)]
        flows.append(Flow(namespace.key, module.flow, namespace))
    return tuple(flows)


@dataclass(frozen=True)
class Uses:
    """Where each action and each module is used (by ``id`` of the action or module)."""

    actions: dict[int, list[Use]] = field(default_factory=dict)
    modules: dict[int, list[Use]] = field(default_factory=dict)


def collect_uses(flows: Iterable[Flow], namespaces: Iterable[Namespace]) -> Uses:
    """Where each action and module is used, for the names they see there (§11.3): the
    nodes of the ``flows`` and the ``fallback:`` of the actions of the ``namespaces``."""
    uses = Uses()
    record = _RecordUse(uses)
    for flow in flows:
        if flow.graph is None:
            continue
        for part in split_parts(flow.graph):
            for node in part.graph.nodes:
                use = Use(flow.namespace, part.loop_vars, node.span)
                record.visit(node.binding, flow.namespace, use)
    for namespace in namespaces:
        for action in namespace.actions.values():
            span = dict(action.field_spans).get("fallback", action.span)
            use = Use(namespace, frozenset(), span, id(action))
            record.visit(action.fallback, namespace, use)
    return uses


@dataclass(frozen=True)
class FlowInputs:
    """What the flow checks are given: the script, its flows, each module's namespace (by
    ``id`` of the module), the names visible in each namespace and the loop variables bound
    around every call of it (by ``id`` of the namespace, §11.3), and the :class:`References` that
    checks the conditions, iterables and calls the nodes hold and reports every problem."""

    script: Script
    flows: tuple[Flow, ...]
    namespaces: Mapping[int, Namespace]
    names: Mapping[int, frozenset[str]]
    caller_loop_vars: Mapping[int, frozenset[str]]
    references: References


def check_flows(inputs: FlowInputs) -> dict[tuple[str, str], str | None]:
    """Check every flow of a script (§12); the merge node of each fork (§12.5), by (flow key,
    node), None where the branches never merge."""
    return FlowChecker(inputs).check_all()


class FlowChecker:
    """Checks the main flow and every module flow of one script."""

    def __init__(self, inputs: FlowInputs) -> None:
        self.inputs = inputs
        self.report = inputs.references.report
        self.merge_nodes: dict[tuple[str, str], str | None] = {}
        self.module_flows: list[ModuleFlow] = []  # whose shape is known, for warn_endless_calls
        self.shared_state = SharedState(
            EffectFinder(inputs.namespaces), self.merge_nodes, self.report
        )

    def check_all(self) -> dict[tuple[str, str], str | None]:
        """Check every flow; the merge node of each fork (§12.5), by (flow key, node)."""
        if self.inputs.script.flow is None:
            self.report.error(
                "the script has no mainflow:",
                _file_start(self.inputs.script.path),
                "add a mainflow: block with [START] -> … -> [END]",
            )
        for flow in self.inputs.flows:
            key, graph, namespace = flow.key, flow.graph, flow.namespace
            module = namespace.module
            if graph is None:
                if module is not None:
                    self.report.error(
                        f"module '{module.name}' has no flow:",
                        module.span,
                        "add flow: with [IN] -> … -> [OUT]",
                    )
                continue
            if module is not None and graph.complete and not graph.nodes:
                self.report.warning(
                    f"module '{module.name}' has an empty flow: calling it does nothing",
                    module.span,
                    "a stub is fine while the script grows; fill it with [IN] -> … -> [OUT]",
                )
                continue
            self.check_flow(key, graph, namespace)
        warn_endless_calls(self.report, self.module_flows)
        return self.merge_nodes

    def check_flow(self, key: str, graph: Graph, namespace: Namespace) -> None:
        parts = split_parts(graph)
        in_module = namespace.module is not None
        errors = len(self.report)
        self.check_ownership(parts)
        for part in parts:
            self.check_reserved(part, in_module)
            self.check_reserved_case(part, in_module)
        # A flow with a syntax error, or with nodes where they may not be, has no meaningful
        # shape: reachability and dead-end reports would only echo that first error.
        shape_known = graph.complete and len(self.report) == errors
        for part in parts:
            self.check_names(part, namespace)
        if not shape_known:
            for part in parts:
                self.compute_merges(key, part)
            return
        top = parts[0]
        entry = "IN" if in_module else "START"
        if entry not in top.names:
            where = f"module '{namespace.module.name}'" if namespace.module else "the main flow"
            self.report.error(
                f"{where} has no [{entry}]",
                graph.nodes[0].span if graph.nodes else graph.span,
                f"start the flow with [{entry}] -> …",
            )
        else:
            self.mark_reachable(top, entry)
            self.report_unreachable(parts, in_module)
            if namespace.module is not None:
                self.module_flows.append(ModuleFlow(namespace.module, top, namespace))
        for part in parts:
            self.report_terminal_out_edges(part, in_module)
            self.report_dead_ends(part, in_module)
            self.compute_merges(key, part)
        for part in parts:
            self.check_joins(key, part)
        for part in parts:
            self.shared_state.check(key, part, namespace)

    def check_names(self, part: Part, namespace: Namespace) -> None:
        """What the nodes and conditions of ``part`` name exists where they run (§11.3)."""
        names = self.inputs.names.get(id(namespace), frozenset()) | part.loop_vars
        reader = module_key(namespace) if namespace.module is not None else None
        with self.inputs.references.reading_in(reader):
            for node in part.graph.nodes:
                self.check_binding(node, part, namespace, names)
            for edge in part.graph.edges:
                self.inputs.references.check_expr(edge.condition, names, string_hint=True)

    def check_ownership(self, parts: list[Part]) -> None:
        """§12.7: no edge may connect a body's nodes to nodes outside that body."""
        owner: dict[str, Part] = {}
        for part in parts:
            for name in part.names:
                if name in RESERVED_NODE_NAMES or (
                    part.loop is not None and name == part.loop.head
                ):
                    continue
                first = owner.setdefault(name, part)
                if first is part:
                    continue
                body, outside = (part, first) if part.loop is not None else (first, part)
                assert body.loop is not None
                node = outside.nodes.get(name) or body.nodes.get(name)
                span = node.span if node is not None else outside.graph.span
                self.report.error(
                    f"node [{name}] belongs to the body of "
                    f"'{body.loop.kind} {body.loop.var}' and cannot be used outside it",
                    span,
                    "a loop body's nodes are connected only to each other (§12.7)",
                )

    def check_reserved(self, part: Part, in_module: bool) -> None:
        for name in part.names:
            if name not in RESERVED_NODE_NAMES:
                continue
            node = part.nodes.get(name)
            if node is not None and node.anonymous:
                continue
            span = node.span if node is not None else part.graph.span
            if part.loop is not None:
                self.report.error(
                    f"[{name}] may not be used inside a {part.loop.kind} body",
                    span,
                    "end an iteration with a line ending in '->'; leave through the exit line",
                )
            elif in_module and name in MAIN_ONLY_NODES:
                self.report.error(
                    f"[{name}] may not appear in a module",
                    span,
                    "a module starts at [IN] and leaves through [OUT] or [BREAK]",
                )
            elif not in_module and name in MODULE_ONLY_NODES:
                self.report.error(
                    f"[{name}] is only allowed in a module flow",
                    span,
                    "the main flow starts at [START] and ends at [END]",
                )

    def check_reserved_case(self, part: Part, in_module: bool) -> None:
        """``[start]``/``[End]`` look like misspelled reserved nodes of the main flow, ``[In]``,
        ``[Out]`` and ``[Break]`` of a module; elsewhere such a name, whose upper case form is
        not allowed there anyway, is an ordinary node (§12.1)."""
        reserved = MODULE_ONLY_NODES if in_module else MAIN_ONLY_NODES
        for name in part.names:
            if name.upper() in reserved and name not in reserved:
                node = part.nodes.get(name)
                self.report.error(
                    f"[{name}] is not the reserved node [{name.upper()}]",
                    node.span if node is not None else part.graph.span,
                    f"reserved nodes are written in capitals: [{name.upper()}]",
                )

    def check_binding(
        self, node: FlowNode, part: Part, namespace: Namespace, names: Set[str]
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
        if bare is not None and self.unbound_actor_variable(executor, namespace):
            self.report.error(
                f"{bare.kind} binds {bare.var} but action '{action.name}' runs as {executor}",
                node.span,
                f"actor variables carry '@' (§1.6): write '{bare.kind} {executor} in …'",
            )
            return
        actor_loops = [loop for loop in part.loops if loop.var.startswith("@")]
        if not actor_loops:
            return
        if executor in self.inputs.caller_loop_vars.get(id(namespace), ()):
            return  # bound by a loop around every call of this module (§11.3)
        if not self.unbound_actor_variable(executor, namespace):
            return
        loop = actor_loops[-1]
        hint = f"loop with '{loop.kind} {executor} in …' or make '{action.name}' run as {loop.var}"
        where = self.inputs.references.caller_loop_hint(executor)
        self.report.error(
            f"{loop.kind} binds {loop.var} but action '{action.name}' runs as {executor}",
            node.span,
            f"{where}; {hint}" if where else hint,
        )

    # ------------------------------------------------------------------ reachability (§12.11)

    def mark_reachable(self, part: Part, entry: str) -> None:
        part.reach = reachable([entry], part.successors)
        for name in part.reach:
            body = part.bodies.get(name)
            if body is not None and body.loop is not None:
                self.mark_reachable(body, body.loop.head)

    def report_unreachable(self, parts: list[Part], in_module: bool) -> None:
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
                    self.report.warning(
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
                    dead_ends = [n for n in part.reach if not part.successors.get(n)]
                    hint = self.typo_hint(part, name, dead_ends) or hint
                    self.report.warning(
                        f"{describe(name, node)} is never reached from {origin}", span, hint
                    )
        top = parts[0]
        if not in_module and "END" not in top.names:
            self.report.warning(
                "the main flow has no [END]",
                top.graph.span,
                "a branch that should finish the run goes to [END]",
            )

    def report_terminal_out_edges(self, part: Part, in_module: bool) -> None:
        """§12.9, §11.5: a terminal ends its branch, so an edge out of it would never run; the
        flow runs without it, and the nodes only it leads to are reported as never reached."""
        if part.loop is not None:
            return  # terminals may not appear in a body at all (check_reserved)
        for name in sorted(TERMINAL_NODES):
            if in_module == (name in MAIN_ONLY_NODES):
                continue  # misplaced terminal: check_reserved reported it
            for edge in part.out_edges.get(name, ()):
                target = describe(edge.target, part.nodes.get(edge.target))
                hint = f"nothing runs after [{name}]: "
                if edge.target not in TERMINAL_NODES:
                    hint += f"lead the branch through {target} before it reaches [{name}], or "
                self.report.error(
                    f"an edge out of [{name}] never runs: {TERMINAL_ENDS[name]}",
                    edge.span,
                    hint + "remove the edge",
                )

    @staticmethod
    def only_feeds_joins(part: Part, name: str) -> bool:
        targets = [part.nodes.get(target) for target in part.successors.get(name, ())]
        return bool(targets) and all(
            node is not None and isinstance(node.binding, Join) for node in targets
        )

    def report_dead_ends(self, part: Part, in_module: bool) -> None:
        """§12.3: a node with no out-edges ends its branch; warn unless it is an end marker."""
        ends = set(part.loop.ends) if part.loop is not None else set()
        for name in part.names:
            if part.successors.get(name) or name in TERMINAL_NODES or name in ends:
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
            hint = self.typo_hint(part, name, self.dead_end_meanings(part, in_module)) or hint
            self.report.warning(
                f"{describe(name, node)} has no out-edges: its branch ends there", span, hint
            )

    @staticmethod
    def dead_end_meanings(part: Part, in_module: bool) -> list[str]:
        """What a dead-end ``[name]`` may have misspelled: a node with out-edges, or a terminal
        of this flow (none in a loop body)."""
        names = [n for n in part.names if part.successors.get(n)]
        if part.loop is None:
            names += sorted(TERMINAL_NODES - MAIN_ONLY_NODES if in_module else {"END"})
        return names

    @staticmethod
    def typo_hint(part: Part, name: str, candidates: list[str]) -> str | None:
        """``did you mean [Next]?`` when a plain ``[name]`` looks like a typo of a candidate."""
        node = part.nodes.get(name)
        if node is not None and (node.anonymous or node.binding is not None):
            return None
        meant = closest_node(name, candidates)
        if meant is None:
            return None
        return f"did you mean [{meant}]? [{name}] is a different node"

    # ------------------------------------------------------------------ merge nodes (§12.5)

    def compute_merges(self, key: str, part: Part) -> None:
        successors = {name: list(part.successors.get(name, ())) for name in part.names}
        if part.loop is not None:
            for end in part.loop.ends:
                successors.setdefault(end, []).append(EXIT)
        terminals = TERMINAL_NODES & set(part.names) if part.loop is None else set()
        post = part.post = immediate_post_dominators(part.names, successors, terminals)
        for name in part.names:
            if len(part.out_edges.get(name, ())) >= 2:
                self.merge_nodes[(key, name)] = post.get(name)

    def check_joins(self, key: str, part: Part) -> None:
        """§12.6: a join merges its fork; every input must be reachable by some branch."""
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
                self.report.error("join has no inputs", node.span, "list the nodes it waits for")
                continue
            count = node.binding.count
            if count is not None and count > len(inputs):
                self.report.error(
                    f"join({count}) waits for {count} branches but only {len(inputs)} lead to it",
                    node.span,
                )
            if part.reach is not None:
                for source in inputs:
                    if source not in part.reach:
                        dead_ends = [n for n in part.reach if not part.successors.get(n)]
                        source_node = part.nodes.get(source)
                        self.report.error(
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
                self.merge_nodes[(key, fork)] = name

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

    def unbound_actor_variable(self, name: str, namespace: Namespace) -> bool:
        """§9.5: an actor variable declared as ``""`` (or null) is bound only by a loop."""
        if not name.startswith("@") or name in self.inputs.references.actors:
            return False
        decl = namespace.declaration(name)
        if decl is None:
            return False
        value = decl.value
        return isinstance(value, NullValue) or (
            isinstance(value, StringValue) and value.value == ""
        )


class _RecordUse(BindingVisitor[None]):
    """Records where an action or a module is used (:func:`collect_uses`)."""

    def __init__(self, uses: Uses) -> None:
        self.uses = uses

    def visit_ActionName(self, name: str, namespace: Namespace, use: Use) -> None:
        action = namespace.find_action(name)
        if action is not None:
            self.uses.actions.setdefault(id(action), []).append(use)

    def visit_ModuleCall(self, call: ModuleCall, namespace: Namespace, use: Use) -> None:
        module = namespace.find_module(call.module)
        if module is not None:
            self.uses.modules.setdefault(id(module), []).append(use)


class _CheckBinding(BindingVisitor[None]):
    """What a node runs exists and fits where it runs (:meth:`FlowChecker.check_binding`)."""

    def __init__(self, flows: FlowChecker) -> None:
        self.flows = flows
        self.references = flows.inputs.references
        self._written: frozenset[str] | None = None  # whole_writes, found at the first loop

    def visit_ActionName(
        self, name: str, node: FlowNode, part: Part, namespace: Namespace, names: Set[str]
    ) -> None:
        action = namespace.find_action(name)
        if action is None and name in self.references.broken:
            return
        if action is None:
            hint = None
            if namespace.find_module(name) is not None:  # before a merely close action
                hint = f"'{name}' is a module: call it as &{name}"
            hint = hint or suggest(name, namespace.visible("actions"))
            hint = hint or self.references.inner_definition_hint("action", name)
            self.references.report.undefined(f"undefined action '{name}'", node.span, hint)
        else:
            self.flows.check_loop_executor(node, action, part, namespace)

    def visit_ModuleCall(
        self, call: ModuleCall, node: FlowNode, part: Part, namespace: Namespace, names: Set[str]
    ) -> None:
        self.references.check_module_call(call, namespace, names)

    def visit_Loop(
        self, loop: Loop, node: FlowNode, part: Part, namespace: Namespace, names: Set[str]
    ) -> None:
        self.references.check_expr(loop.iterable, names, string_hint=True)
        if self._written is None:
            inputs = self.flows.inputs
            scopes = {id(f.namespace): f.namespace for f in inputs.flows} | {
                id(n): n for n in inputs.namespaces.values()
            }
            self._written = whole_writes(scopes.values())
        bound = part.loop_vars | self.flows.inputs.caller_loop_vars.get(id(namespace), frozenset())
        check_iterable(
            loop,
            namespace,
            bound,
            self._written,
            self.references.report,
            where=self.references.caller_loop_hint,
        )

    def visit_Join(
        self, join: Join, node: FlowNode, part: Part, namespace: Namespace, names: Set[str]
    ) -> None:
        if join.count is not None and join.count < 1:
            self.references.report.error("join(n) needs n ≥ 1", node.span)


def _file_start(path: str) -> Span:
    return Span(path, 1, 1, 1, 1)
