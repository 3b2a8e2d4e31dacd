"""Signal extraction on 1 MB replies: hostile shapes against plain ones (seconds, ratios).

§10.3: finding and reading the signals of a reply takes time linear in its length whatever it
holds. Each hostile reply below broke an earlier scanner (unclosed quotes, nesting, near-miss
prefixes, long keys); its time is compared with the slower of two plain 1 MB replies, prose
and well-formed signals. The target is a ratio of at most 2.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from fems_runtime.signals import apply_signals
from fems_runtime.variables import ActorSpec, Variables

from bench import Figure, quick

SIZE = 10_000 if quick() else 1_000_000


def _fill(size: int, piece: str, head: str = "", tail: str = "") -> str:
    """``head`` + ``piece`` repeated to about ``size`` characters + ``tail``."""
    return head + piece * ((size - len(head) - len(tail)) // len(piece)) + tail


PLAIN: dict[str, Callable[[int], str]] = {
    "prose": lambda size: _fill(size, "The village sleeps while the wolves decide. "),
    "signals": lambda size: _fill(
        size, 'I vote for her. SET VARIABLE: <<note = "a plain value">>\n'
    ),
}
HOSTILE: dict[str, Callable[[int], str]] = {
    "unclosed “ quotes": lambda size: _fill(size, "SET VARIABLE: <<note = “x "),
    "unclosed brackets": lambda size: _fill(size, "SET VARIABLE: <<note = [x, "),
    "prefixes only": lambda size: _fill(size, "SET VARIABLE:"),
    "near-miss prefixes": lambda size: _fill(size, "SET   VARIABLE "),
    "one unclosed quote": lambda size: _fill(size, "x", 'SET VARIABLE: <<note = "', ">>"),
    "many small quotes": lambda size: _fill(size, '"x", ', "SET VARIABLE: <<note = [", '"x"]>>'),
    "backslashes": lambda size: _fill(size, "\\", 'SET VARIABLE: <<note = "', '">>'),
    # a quarter of the reply opens brackets (250,000 deep in 1 MB), then pairs of them
    "nested a quarter as deep as long": lambda size: _fill(
        size, "[]", "SET VARIABLE: <<note = " + "[" * (size // 4), ">>"
    ),
    "value starts and spaces": lambda size: _fill(size, "=    ", "SET VARIABLE: <<note = ", ">>"),
    "long key": lambda size: _fill(size, " ", "SET VARIABLE: <<note[x", "y] = 1>>"),
    "brackets before =": lambda size: _fill(size, "[", "SET VARIABLE: <<", " = 1>>"),
    "long int": lambda size: _fill(size, "7", "SET VARIABLE: <<note = ", ">>"),
    "emphasis in a prefix": lambda size: _fill(size, "*", "SET VARIABLE", ": <<note = 1>>"),
    "emphasised prefixes only": lambda size: _fill(size, "**SET VARIABLE:** "),
    "marks before a bracket": lambda size: _fill(size, "`_*", "SET VARIABLE:", "<<note = 1>>"),
    # as dense as the plain signals: the same lines, each naming an actor without its @
    "bare actor names": lambda size: _fill(
        size, "I vote for her, I am sure. SET VARIABLE: <<@vote = eve>>\n"
    ),
}


def _variables() -> Variables:
    return Variables({"note": "", "@vote": ""}, [ActorSpec("@Eve")])


def seconds(reply: str, repeat: int = 3) -> float:
    """The best of ``repeat`` timings of finding, reading and applying every signal."""
    best = float("inf")
    for _ in range(repeat):
        variables = _variables()
        start = time.perf_counter()
        apply_signals(reply, variables.root, None)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> list[Figure]:
    plain = {name: seconds(make(SIZE)) for name, make in PLAIN.items()}
    for name, value in plain.items():
        print(f"plain {name:<26} {value:8.3f} s")
    baseline = max(plain.values())
    worst = 0.0
    for name, make in HOSTILE.items():
        value = seconds(make(SIZE))
        worst = max(worst, value / baseline)
        print(f"hostile {name:<24} {value:8.3f} s  {value / baseline:5.2f}× plain")
    print(f"worst hostile / plain: {worst:.2f}× (target ≤ 2)")
    return [
        Figure(f"signals: worst hostile / plain reply, {SIZE:,} chars", f"{worst:.2f}×", "≤ 2×")
    ]


if __name__ == "__main__":
    main()
