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


def _fill(piece: str, head: str = "", tail: str = "") -> str:
    """``head`` + ``piece`` repeated to about :data:`SIZE` characters + ``tail``."""
    return head + piece * ((SIZE - len(head) - len(tail)) // len(piece)) + tail


PLAIN: dict[str, Callable[[], str]] = {
    "prose": lambda: _fill("The village sleeps while the wolves decide. "),
    "signals": lambda: _fill('I vote for her. SET VARIABLE: <<note = "a plain value">>\n'),
}
HOSTILE: dict[str, Callable[[], str]] = {
    "unclosed “ quotes": lambda: _fill("SET VARIABLE: <<note = “x "),
    "unclosed brackets": lambda: _fill("SET VARIABLE: <<note = [x, "),
    "prefixes only": lambda: _fill("SET VARIABLE:"),
    "near-miss prefixes": lambda: _fill("SET   VARIABLE "),
    "one unclosed quote": lambda: _fill("x", 'SET VARIABLE: <<note = "', ">>"),
    "many small quotes": lambda: _fill('"x", ', "SET VARIABLE: <<note = [", '"x"]>>'),
    "backslashes": lambda: _fill("\\", 'SET VARIABLE: <<note = "', '">>'),
    "nested 500,000 deep": lambda: _fill("[]", "SET VARIABLE: <<note = " + "[" * 250_000, ">>"),
    "value starts and spaces": lambda: _fill("=    ", "SET VARIABLE: <<note = ", ">>"),
    "long key": lambda: _fill(" ", "SET VARIABLE: <<note[x", "y] = 1>>"),
    "brackets before =": lambda: _fill("[", "SET VARIABLE: <<", " = 1>>"),
    "long int": lambda: _fill("7", "SET VARIABLE: <<note = ", ">>"),
}


def _variables() -> Variables:
    return Variables({"note": ""}, [ActorSpec("@Eve")])


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
    plain = {name: seconds(make()) for name, make in PLAIN.items()}
    for name, value in plain.items():
        print(f"plain {name:<26} {value:8.3f} s")
    baseline = max(plain.values())
    worst = 0.0
    for name, make in HOSTILE.items():
        value = seconds(make())
        worst = max(worst, value / baseline)
        print(f"hostile {name:<24} {value:8.3f} s  {value / baseline:5.2f}× plain")
    print(f"worst hostile / plain: {worst:.2f}× (target ≤ 2)")
    return [
        Figure(f"signals: worst hostile / plain reply, {SIZE:,} chars", f"{worst:.2f}×", "≤ 2×")
    ]


if __name__ == "__main__":
    main()
