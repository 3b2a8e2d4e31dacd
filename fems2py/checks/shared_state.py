"""The check of shared state in concurrent branches (§12.5a).

Branches of a fork that may run together each see their own copy of the variables and the
last to finish wins: a variable that two such branches may each assign with ``=``, and that
is read after they merge, is a warning. Whether two branches may run together is decided on
their conditions (:func:`_clashing`: a cheap, conservative test of exclusion); what a branch
writes and what is read after the merge, from the nodes' :class:`~fems2py.checks.effects.Effects`,
summed over the regions of an acyclic graph (:mod:`fems2py.checks.regions`) or walked.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass

from fems_runtime.words import TERMINAL_NODES

from fems2py.checks.effects import EffectFinder
from fems2py.checks.graphs import reachable
from fems2py.checks.parts import Part, describe
from fems2py.checks.regions import Regions, topological_order
from fems2py.checks.report import Report
from fems2py.checks.scope import Namespace
from fems2py.nodes import Expr, Join

_COMPLEMENTS = {
    frozenset({ast.Eq, ast.NotEq}),
    frozenset({ast.In, ast.NotIn}),
    frozenset({ast.Is, ast.IsNot}),
    frozenset({ast.Lt, ast.GtE}),
    frozenset({ast.Gt, ast.LtE}),
}


class SharedState:
    """Checks the forks of one flow; ``merge_nodes``: where each fork's branches merge
    (§12.5), by (flow key, node)."""

    def __init__(
        self,
        effects: EffectFinder,
        merge_nodes: Mapping[tuple[str, str], str | None],
        report: Report,
    ) -> None:
        self.effects = effects
        self.merge_nodes = merge_nodes
        self.report = report

    def check(self, key: str, part: Part, namespace: Namespace) -> None:
        """The forks of one part of flow ``key``, and the iterations of a ``par`` body."""
        regions = self.regions(part, namespace)
        for name in part.names:
            edges = part.out_edges.get(name, ())
            if len(edges) < 2:
                continue
            merge = self.merge_nodes.get((key, name))
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
            self.report.warning(
                f"branches of {describe(name, node)} may each assign "
                f"{_quoted(shared)} with '=', and {_it(shared)} read after they merge at {where}",
                node.span if node is not None else part.graph.span,
                "each branch keeps its own value and the last to finish wins (§12.5a); "
                "use '+=', a dict entry, or assign in one branch only",
            )
        if part.loop is not None and part.loop.kind == "par" and part.loop_node is not None:
            writes: set[str] = set()
            for body_name in part.names:
                writes |= self.effects.node(part, body_name, namespace).writes
            writes -= part.loop_vars
            shared = sorted(writes & self.continuation_reads(part, namespace))
            if shared:
                self.report.warning(
                    f"every branch of 'par {part.loop.var}' may assign {_quoted(shared)} "
                    f"with '=', and {_it(shared)} read after the par",
                    part.loop_node.span,
                    "each branch keeps its own value and the last to finish wins (§12.5a); "
                    f"use a dict entry such as 'name.{part.loop.var}' or '+='",
                )

    def regions(self, part: Part, namespace: Namespace) -> tuple[Regions, Regions] | None:
        """What the nodes of ``part`` write and read, summed over its regions, when ``part``
        is acyclic (:mod:`fems2py.checks.regions`); None when only a walk can tell."""
        if part.post is None or any(part.successors.get(name) for name in TERMINAL_NODES):
            return None
        order = topological_order(part.names, part.successors)
        if order is None:
            return None
        effects = [(name, self.effects.node(part, name, namespace)) for name in order]
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
            writes |= self.effects.node(part, name, namespace).writes
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
                reads |= self.effects.node(part, name, namespace).reads
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
                reads |= self.effects.node(parent, name, namespace).reads
            current = parent
        return reads


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
