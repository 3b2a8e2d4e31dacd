"""Finding signals is linear in the reply's length whatever it holds (§10.3), checked by
counting, not by the clock: every regular expression the extractor runs is wrapped, and the
characters each call covers (up to its match's end, or its whole range when nothing matched)
are summed. A body that reached past the next prefix, or a scan restarted from a signal's
start for every quote, would cover the reply many times over; the extractor covers each
stretch a bounded number of times, for the hostile shapes of ``python -m bench signals``
(Markdown marks and bare actor names included) as for plain replies."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from fems_runtime import signals
from fems_runtime.signals import apply_signals
from fems_runtime.variables import ActorSpec, Variables

from bench.bench_signals import HOSTILE, PLAIN

SIZE = 20_000
# each stretch between two prefixes is covered by the prefix search, the opener, the leading
# quote, the closing search and at most one retry after an unclosed quote
PASSES = 5


class Covered:
    """The number of characters the wrapped patterns were given to read."""

    def __init__(self) -> None:
        self.characters = 0


class CountingPattern:
    """A compiled pattern that adds what each call covers to a :class:`Covered`."""

    def __init__(self, pattern: re.Pattern[str], covered: Covered) -> None:
        self.pattern = pattern
        self.covered = covered

    def _cover(self, found: re.Match[str] | None, text: str, pos: int, endpos: int) -> None:
        end = found.end() if found is not None else min(endpos, len(text))
        self.covered.characters += max(end - pos, 1)

    def match(self, text: str, pos: int = 0, endpos: int = sys.maxsize) -> re.Match[str] | None:
        found = self.pattern.match(text, pos, endpos)
        self._cover(found, text, pos, endpos)
        return found

    def search(self, text: str, pos: int = 0, endpos: int = sys.maxsize) -> re.Match[str] | None:
        found = self.pattern.search(text, pos, endpos)
        self._cover(found, text, pos, endpos)
        return found

    def finditer(self, text: str, pos: int = 0, endpos: int = sys.maxsize) -> Iterator[Any]:
        self.covered.characters += min(endpos, len(text)) - pos
        return self.pattern.finditer(text, pos, endpos)


@pytest.fixture
def covered(monkeypatch: pytest.MonkeyPatch) -> Covered:
    count = Covered()
    for name in ("_PREFIX", "_OPENER", "_CLOSER", "_LEADING_QUOTE", "_CLOSE_OR_QUOTE"):
        monkeypatch.setattr(signals, name, CountingPattern(getattr(signals, name), count))
    rests = {quote: CountingPattern(rest, count) for quote, rest in signals._QUOTE_REST.items()}
    monkeypatch.setattr(signals, "_QUOTE_REST", rests)
    return count


SHAPES = {**PLAIN, **HOSTILE}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_each_stretch_of_a_reply_is_read_a_bounded_number_of_times(
    shape: str, covered: Covered
) -> None:
    reply = SHAPES[shape](SIZE)
    variables = Variables({"note": "", "@vote": ""}, [ActorSpec("@Eve")])
    apply_signals(reply, variables.root, None)
    assert 0 < covered.characters <= PASSES * len(reply)


def test_the_count_sees_a_scan_that_restarts_at_every_prefix(covered: Covered) -> None:
    """The measure is not blind: searching from each prefix to the end of the reply (the old
    scanner's shape) covers it quadratically, far past the bound."""
    reply = HOSTILE["prefixes only"](SIZE)
    for found in signals._PREFIX.finditer(reply):
        signals._CLOSER.search(reply, found.end())
    assert covered.characters > 100 * PASSES * len(reply)
