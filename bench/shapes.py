"""Scripts of a given size in four flow shapes, to see how compile time grows with a script.

Each generator returns a valid script with about ``nodes`` flow nodes. The shapes are the ones
whose cost once grew faster than the script (issue #11): a long chain, one wide fork, loops
nested in loops, and a graph of named nodes with forward jumps (many forks and merges).
:func:`per_node_times` times a stage on two sizes; a linear stage keeps its time per node.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

HEADER = """\
vars:
    day = 0
    rounds = [1, 2]

actors:
    ai @a = soul:a

action talk @ai(@a):
    prompt: Day {day}: say something.
    out: day

action count @assign:
    out: day += 1

"""


def chain(nodes: int) -> str:
    """``[START] -> talk -> [N1] -> count -> [N2] …``: one node after another."""
    lines = ["mainflow:", "    [START] -> [N0]"]
    for index in range(0, nodes, 2):
        action = "talk" if index % 4 == 0 else "count"
        lines.append(f"    [N{index}] -> {action} -> [N{index + 2}]")
    lines.append(f"    [N{nodes - nodes % 2 + (2 if nodes % 2 else 0)}] -> [END]")
    return HEADER + "\n".join(lines) + "\n"


def fork(nodes: int) -> str:
    """One fork with ``nodes`` conditional branches that all merge at ``[M]``."""
    lines = ["mainflow:", "    [START] -> fork:"]
    for index in range(nodes):
        lines.append(f"        -> if (day == {index}) -> count -> [M]")
    lines.append("    [M] -> [END]")
    return HEADER + "\n".join(lines) + "\n"


def nested_loops(nodes: int, depth: int = 5) -> str:
    """Groups of ``depth`` ``for`` loops, each inside the one before, in a chain."""
    lines = ["mainflow:", "    [START] -> [G0]"]
    groups = max(1, nodes // (2 * depth))
    for group in range(groups):
        lines.append(f"    [G{group}] -> for r{group}_0 in rounds:")
        for level in range(1, depth):
            indent = "    " * (level + 1)
            lines.append(f"{indent}-> count -> [L{group}_{level}]")
            lines.append(f"{indent}[L{group}_{level}] -> for r{group}_{level} in rounds:")
        lines.append(f"{'    ' * (depth + 1)}-> count ->")
        for level in range(depth - 1, 0, -1):
            lines.append(f"{'    ' * (level + 1)}->")
        lines.append(f"    -> [G{group + 1}]")
    lines.append(f"    [G{groups}] -> [END]")
    return HEADER + "\n".join(lines) + "\n"


def named_graph(nodes: int) -> str:
    """Named nodes ``[N0]…``, each running an action, each leading to the next and, when
    ``day`` is odd, jumping one ahead: a ladder of small forks and merges."""
    lines = ["mainflow:", "    [START] -> [N0]"]
    for index in range(nodes):
        action = "talk" if index % 2 == 0 else "count"
        lines.append(f"    [N{index}]: {action}")
    for index in range(nodes):
        last = index + 1 >= nodes
        following = "[END]" if last else f"[N{index + 1}]"
        jump = "[END]" if index + 2 >= nodes else f"[N{index + 2}]"
        lines.append(f"    [N{index}] -> if (day % 2 == 0) -> {following}")
        lines.append(f"    [N{index}] -> if (day % 2 == 1) -> {jump}")
    return HEADER + "\n".join(lines) + "\n"


SHAPES: dict[str, Callable[[int], str]] = {
    "chain": chain,
    "fork": fork,
    "nested loops": nested_loops,
    "named graph": named_graph,
}


def per_node_times(
    stage: Callable[[str], object], sizes: tuple[int, ...]
) -> dict[str, list[float]]:
    """For each shape, the seconds per node ``stage`` takes on a script of each size: the best
    of up to three runs while they take under a second in all (a short run on a shared
    machine is mostly noise), one run otherwise."""
    table: dict[str, list[float]] = {}
    for name, generate in SHAPES.items():
        row = []
        for size in sizes:
            source = generate(size)
            runs: list[float] = []
            while len(runs) < 3 and sum(runs) < 1.0:
                gc.collect()  # the garbage of the runs before is not this run's to walk
                started = time.perf_counter()
                stage(source)
                runs.append(time.perf_counter() - started)
            row.append(min(runs) / size)
        table[name] = row
    return table


def print_table(title: str, table: dict[str, list[float]], sizes: tuple[int, ...]) -> None:
    """The per-node times and the ratio of the largest size to the smallest (1.0 is linear)."""
    columns = "".join(f"{f'{size:,} nodes':>16}" for size in sizes)
    print(f"   {title}: time per node{columns}{'ratio':>8}")
    for name, row in table.items():
        cells = "".join(f"{seconds * 1e6:>13.0f} µs" for seconds in row)
        print(f"   {name:>{len(title) + 15}}{cells}{row[-1] / row[0]:>8.2f}")
