"""Graph algorithms the checker needs for flows: reachability and (post-)dominators.

They work on plain adjacency maps of node names, so they know nothing about FEM syntax and can
be tested on their own. Dominators use the iterative algorithm of Cooper, Harvey and Kennedy
("A Simple, Fast Dominance Algorithm"), which is linear in practice on flow-shaped graphs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

#: The virtual exit every terminal node and dead end leads to (§12.5). Node names never contain
#: a NUL character, so it cannot collide with a real node.
EXIT = "\0exit"


def reachable(
    roots: Iterable[str],
    successors: Mapping[str, Sequence[str]],
    avoid: Iterable[str | None] = (),
) -> set[str]:
    """Every node reachable from ``roots`` (the roots included) without entering ``avoid``."""
    seen: set[str] = set()
    blocked = set(avoid)
    stack = list(roots)
    while stack:
        node = stack.pop()
        if node in seen or node in blocked:
            continue
        seen.add(node)
        stack.extend(successors.get(node, ()))
    return seen


def dominators(root: str, successors: Mapping[str, Sequence[str]]) -> dict[str, str]:
    """The immediate dominator of every node reachable from ``root`` (``root`` maps to itself).

    Nodes that ``root`` cannot reach are absent from the result.
    """
    order = _postorder(root, successors)
    number = {node: index for index, node in enumerate(order)}
    predecessors: dict[str, list[str]] = {node: [] for node in order}
    for node in order:
        for target in successors.get(node, ()):
            if target in number:
                predecessors[target].append(node)
    idom: dict[str, str] = {root: root}
    changed = True
    while changed:
        changed = False
        for node in reversed(order):
            if node == root:
                continue
            new_idom: str | None = None
            for pred in predecessors[node]:
                if pred not in idom:
                    continue
                new_idom = pred if new_idom is None else _intersect(pred, new_idom, idom, number)
            if new_idom is not None and idom.get(node) != new_idom:
                idom[node] = new_idom
                changed = True
    return idom


def immediate_post_dominators(
    nodes: Iterable[str],
    successors: Mapping[str, Sequence[str]],
    terminals: Iterable[str],
) -> dict[str, str | None]:
    """The immediate post-dominator of every node, with a virtual exit (§12.5).

    Terminal nodes lead only to the exit; dead ends (no successors) lead to it too. A node
    whose immediate post-dominator is the exit, or that can never reach the exit (an endless
    loop), maps to None.
    """
    node_list = list(nodes)
    terminal_set = set(terminals)
    forward: dict[str, list[str]] = {}
    for node in node_list:
        targets = [] if node in terminal_set else list(successors.get(node, ()))
        forward[node] = targets or [EXIT]
    for node in terminal_set:
        forward.setdefault(node, [EXIT])
    backward: dict[str, list[str]] = {EXIT: []}
    for node, targets in forward.items():
        for target in targets:
            backward.setdefault(target, []).append(node)
    idom = dominators(EXIT, backward)
    result: dict[str, str | None] = {}
    for node in node_list:
        parent = idom.get(node)
        result[node] = None if parent is None or parent == EXIT else parent
    return result


def _postorder(root: str, successors: Mapping[str, Sequence[str]]) -> list[str]:
    order: list[str] = []
    seen = {root}
    stack: list[tuple[str, Iterable[str]]] = [(root, iter(successors.get(root, ())))]
    while stack:
        node, children = stack[-1]
        for child in children:
            if child not in seen:
                seen.add(child)
                stack.append((child, iter(successors.get(child, ()))))
                break
        else:
            stack.pop()
            order.append(node)
    return order


def _intersect(a: str, b: str, idom: Mapping[str, str], number: Mapping[str, int]) -> str:
    while a != b:
        while number[a] < number[b]:
            a = idom[a]
        while number[b] < number[a]:
            b = idom[b]
    return a
