"""What a fork's branches may write and what may be read after they merge, in linear time.

The shared-state check (§12.5a) asks, for every fork, which variables each branch may assign
before the branches merge, and which are read after the merge. Walking the graph from each
branch costs the size of the rest of the flow per fork, so a flow of n forks took n² steps.
On an acyclic graph both questions have answers that can be built once, bottom up:

* ``region(X)``: every node reachable from X without passing X's immediate post-dominator P.
  A path from X to P passes X's successors and then, in order, the post-dominators of each
  successor up to P, so ``region(X)`` is X plus the regions along those chains. The nodes a
  branch starting at S reaches before the merge node M (a post-dominator of S) are the
  regions of the chain from S up to M.
* ``after(X)``: every node reachable from X; the union over X's successors.

Like :mod:`fems2py.checks.graphs`, this works on plain maps of node names. Graphs with a cycle
(a back edge to an earlier node) are left to the caller's walk (:func:`topological_order`
returns None for them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence


def topological_order(
    names: Iterable[str], successors: Mapping[str, Sequence[str]]
) -> list[str] | None:
    """``names`` with every node before its successors, or None when the graph has a cycle."""
    nodes = list(names)
    incoming = dict.fromkeys(nodes, 0)
    for node in nodes:
        for target in successors.get(node, ()):
            incoming[target] = incoming.get(target, 0) + 1
    ready = [node for node in nodes if incoming[node] == 0]
    order: list[str] = []
    while ready:
        node = ready.pop()
        order.append(node)
        for target in successors.get(node, ()):
            incoming[target] -= 1
            if incoming[target] == 0:
                ready.append(target)
    return order if len(order) == len(incoming) else None


class Regions:
    """Unions of per-node sets (written or read variables) over regions of an acyclic graph.

    ``order`` is a topological order of the graph, ``post`` the immediate post-dominator of
    each node (None for the virtual exit), ``own`` the set of one node.
    """

    def __init__(
        self,
        order: Sequence[str],
        successors: Mapping[str, Sequence[str]],
        post: Mapping[str, str | None],
        own: Callable[[str], frozenset[str]],
    ) -> None:
        self.post = post
        self.region: dict[str, frozenset[str]] = {}
        self.after: dict[str, frozenset[str]] = {}
        for node in reversed(order):  # successors first
            targets = successors.get(node, ())
            found = set(own(node))
            reached = set(found)
            for target in targets:
                found |= self.chain(target, post.get(node)) or frozenset()
                reached |= self.after[target]
            self.region[node] = frozenset(found)
            self.after[node] = frozenset(reached)

    def chain(self, start: str, stop: str | None) -> frozenset[str] | None:
        """The union over every node reachable from ``start`` without passing ``stop``; None
        when ``stop`` is not a post-dominator of ``start`` (then the regions do not tell)."""
        found: set[str] = set()
        current: str | None = start
        while current != stop:
            if current is None:
                return None
            found |= self.region[current]
            current = self.post.get(current)
        return frozenset(found)
