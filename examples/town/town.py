"""Who is where in the town example: the scope of a line is everyone in the speaker's place."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def company(who: str, at: Mapping[str, str]) -> list[str]:
    """Everyone in the same place as `who` (`who` first), in the order of the `at` dict."""
    place = at.get(who)
    return [who, *(p for p, there in at.items() if there == place and p != who)]


def census(at: Mapping[str, str], places: Sequence[str]) -> dict[str, dict[str, list[str]]]:
    """`crowd`: place → the people there, for every place (empty places included).

    A dict return maps its keys to outs (§9.7), so the dict value is wrapped in its out name.
    """
    crowd = {place: [p for p, there in at.items() if there == place] for place in places}
    return {"crowd": crowd}
