"""fems2py.checks.regions gives what a walk of the graph gives, on any acyclic graph."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fems2py.checks.graphs import immediate_post_dominators, reachable
from fems2py.checks.regions import Regions, topological_order


@st.composite
def acyclic_graphs(draw: st.DrawFn) -> tuple[list[str], dict[str, list[str]], dict[str, set[str]]]:
    """Nodes n0…nk, edges only from a node to later ones, a few variables on each node."""
    size = draw(st.integers(2, 14))
    names = [f"n{index}" for index in range(size)]
    successors: dict[str, list[str]] = {}
    for index, name in enumerate(names[:-1]):
        later = names[index + 1 :]
        successors[name] = draw(st.lists(st.sampled_from(later), max_size=3, unique=True))
    own = {name: draw(st.sets(st.sampled_from("abcde"), max_size=2)) for name in names}
    return names, successors, own


def walk(starts: list[str], successors: dict[str, list[str]], own: dict[str, set[str]], avoid):
    return {var for name in reachable(starts, successors, avoid=avoid) for var in own[name]}


@settings(max_examples=300, deadline=None)
@given(acyclic_graphs())
def test_regions_match_a_walk_of_the_graph(graph) -> None:
    names, successors, own = graph
    order = topological_order(names, successors)
    assert order is not None
    post = immediate_post_dominators(names, successors, ())
    regions = Regions(order, successors, post, lambda name: frozenset(own[name]))
    for fork in names:
        merge = post[fork]
        for start in successors.get(fork, ()):
            assert regions.chain(start, merge) == walk([start], successors, own, [fork, merge])
        assert regions.after[fork] == walk([fork], successors, own, [])


def test_a_cycle_has_no_topological_order() -> None:
    assert topological_order(["a", "b", "c"], {"a": ["b"], "b": ["c"], "c": ["b"]}) is None
    assert topological_order(["a", "b"], {"a": ["b"]}) == ["a", "b"]
