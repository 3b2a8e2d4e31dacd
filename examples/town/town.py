"""Who is where in the town example: the scope of a line is everyone in the speaker's place."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def company(who: str, at: Mapping[str, str]) -> list[str]:
    """Everyone in the same place as `who` (`who` first), in the order of the `at` dict."""
    place = at.get(who)
    return [who, *(p for p, there in at.items() if there == place and p != who)]


def census(at: Mapping[str, str], places: Sequence[str]) -> dict[str, list[str]]:
    """Place → the people there, for every place (empty places included)."""
    return {place: [p for p, there in at.items() if there == place] for place in places}
