"""Rules of the werewolf example: dealing, night resolution, votes and win checks.

The script's `@func` actions call these. Model output is untrusted, so every function that takes
a choice made by a model (a victim, a seer check, a poison target, a ballot) validates it and
repairs an invalid one (a dead player, the moderator, a teammate) instead of failing: a game
played by the random offline model must always progress.
"""

from __future__ import annotations

import os
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

ROLES = ("wolf", "wolf", "seer", "witch", "villager", "villager")
WOLF = "wolf"
SECRETS = {
    "wolf": "Your secret role: WEREWOLF. Your pack: {pack}. Kill at night, blend in by day.",
    "seer": "Your secret role: SEER. Each night you may learn whether one player is a werewolf.",
    "witch": "Your secret role: WITCH. You hold one healing potion and one poison.",
    "villager": "Your secret role: VILLAGER. Find the werewolves and vote them out.",
}


def _living(players: Sequence[str], alive: Sequence[str]) -> list[str]:
    return [p for p in players if p in alive]


def deal(seats: Sequence[str], stand_in: str, deal_seed: int) -> dict[str, Any]:
    """Deal the six roles; with WEREWOLF_HUMAN set, the human `stand_in` takes the last seat."""
    seats = list(seats)
    if os.environ.get("WEREWOLF_HUMAN"):
        seats[-1] = stand_in
    cards = list(ROLES)
    random.Random(int(deal_seed or 0)).shuffle(cards)
    role = dict(zip(seats, cards, strict=True))
    wolves = [p for p in seats if role[p] == WOLF]
    pack = ", ".join(wolves)
    secret = {p: SECRETS[role[p]].format(pack=pack) for p in seats}
    return {
        "players": seats,
        "alive": list(seats),
        "role": role,
        "secret": secret,
        "wolves": wolves,
        "wolves_alive": list(wolves),
        "@seer": next(p for p in seats if role[p] == "seer"),
        "@witch": next(p for p in seats if role[p] == "witch"),
    }


def _prey(alive: Sequence[str], role: Mapping[str, str]) -> list[str]:
    return [p for p in alive if role.get(p) != WOLF]


def wolf_consensus(
    wolf_pick: Mapping[str, Any],
    wolves_alive: Sequence[str],
    alive: Sequence[str],
    role: Mapping[str, str],
    wolf_rounds: int,
    max_wolf_rounds: int,
) -> dict[str, Any]:
    """The pack agrees when every living wolf picked the same living non-wolf.

    After `max_wolf_rounds` rounds the most picked valid victim is taken (ties and no valid pick
    at all fall back to the first living non-wolf in seat order), so the den never loops forever.
    """
    prey = _prey(alive, role)
    picks = [wolf_pick.get(w) for w in wolves_alive]
    valid = [p for p in picks if p in prey]
    rounds = int(wolf_rounds or 0) + 1
    if valid and len(valid) == len(picks) and len(set(valid)) == 1:
        return {"@kill_target": valid[0], "wolves_agree": True, "wolf_rounds": rounds}
    if rounds < max_wolf_rounds:
        return {"@kill_target": "", "wolves_agree": False, "wolf_rounds": rounds}
    if valid:
        counts = Counter(valid)
        top = max(counts.values())
        victim = next(p for p in prey if counts.get(p) == top)
    else:
        victim = prey[0]
    return {"@kill_target": victim, "wolves_agree": True, "wolf_rounds": rounds}


def check_seer_pick(
    seer_target: str, alive: Sequence[str], role: Mapping[str, str]
) -> list[tuple[bool, bool, str]]:
    """`resolve` hook of the seer's choice: a living player other than the seer."""
    if seer_target in alive and role.get(seer_target) != "seer":
        return [(True, False, "")]
    return [(False, True, f"{seer_target or 'nobody'} cannot be checked: pick a living player.")]


def auto_seer_pick(seer_target: str, alive: Sequence[str], role: Mapping[str, str]) -> str:
    """Fallback of the seer's choice: keep a valid pick, else the first other living player."""
    if seer_target in alive and role.get(seer_target) != "seer":
        return seer_target
    return next(p for p in alive if role.get(p) != "seer")


def seer_lookup(
    target: str, role: Mapping[str, str], night: int, seer_log: Sequence[str]
) -> dict[str, Any]:
    """The seer's answer for tonight, also appended to the seer's notebook."""
    nature = "a WEREWOLF" if role.get(target) == WOLF else "not a werewolf"
    answer = f"Seer check, night {night}: {target} is {nature}."
    return {"seer_answer": answer, "seer_log": [*seer_log, answer]}


def notes_for(actor_info: Mapping[str, Any], seer_log: Sequence[str]) -> str:
    """Memory method: the seer's notebook, for the seer only; nobody else gets anything."""
    if actor_info.get("role") != "seer" or not seer_log:
        return ""
    return "Your private notes from past nights:\n" + "\n".join(seer_log)


def witch_apply(
    choice: str,
    target: str,
    kill: str,
    witch: str,
    antidote: int,
    poison: int,
    alive: Sequence[str],
) -> dict[str, Any]:
    """Apply the witch's choice if she still has that potion and the target is valid."""
    saved = False
    poisoned = ""
    if choice == "save" and antidote > 0 and kill:
        saved = True
        antidote -= 1
    elif choice == "poison" and poison > 0 and target in alive and target != witch:
        poisoned = target
        poison -= 1
    return {"antidote": antidote, "poison": poison, "saved": saved, "@poisoned": poisoned}


def resolve_night(
    kill: str,
    saved: bool,
    poisoned: str,
    alive: Sequence[str],
    wolves: Sequence[str],
    day: int,
) -> dict[str, Any]:
    """Who dies at dawn; also resets the night's working state for the next night."""
    dead = []
    if kill and not saved:
        dead.append(kill)
    if poisoned and poisoned not in dead:
        dead.append(poisoned)
    survivors = [p for p in alive if p not in dead]
    if dead:
        news = "Found dead this morning: " + ", ".join(dead) + "."
    else:
        news = "Nobody died during the night."
    return {
        "alive": survivors,
        "wolves_alive": _living(wolves, survivors),
        "dead_tonight": dead,
        "night_news": news,
        "wolf_pick": {},
        "wolf_rounds": 0,
        "wolves_agree": False,
        "saved": False,
        "@poisoned": "",
    }


def tally(
    votes: Mapping[str, Any],
    alive: Sequence[str],
    players: Sequence[str],
    wolves: Sequence[str],
) -> dict[str, Any]:
    """Exile the most voted living player; ties go to the earliest seat. Invalid ballots
    (a dead player, oneself, no ballot) are spoiled and not counted."""
    counts: Counter[str] = Counter()
    spoiled = 0
    for voter in alive:
        ballot = votes.get(voter)
        if ballot in alive and ballot != voter:
            counts[ballot] += 1
        else:
            spoiled += 1
    if not counts:
        return {
            "alive": list(alive),
            "wolves_alive": _living(wolves, alive),
            "@exiled": "",
            "vote_summary": f"All {spoiled} ballots were spoiled; nobody is exiled.",
        }
    top = max(counts.values())
    exiled = next(p for p in players if counts.get(p) == top)
    survivors = [p for p in alive if p != exiled]
    tallies = ", ".join(f"{p}: {n}" for p, n in sorted(counts.items()))
    return {
        "alive": survivors,
        "wolves_alive": _living(wolves, survivors),
        "@exiled": exiled,
        "vote_summary": f"Votes — {tallies}; spoiled: {spoiled}. {exiled} is exiled.",
    }


def check_win(
    alive: Sequence[str], role: Mapping[str, str], day: int, max_days: int
) -> dict[str, str]:
    """Villagers win when no wolf lives; wolves win when they match the rest in number.

    On day `max_days` the game is called by head count, so every game ends within `max_days`
    days: the wolves have not matched the village by then (or they would have won), so the
    village wins.
    """
    wolves = sum(1 for p in alive if role.get(p) == WOLF)
    others = len(alive) - wolves
    if wolves == 0:
        return {"winner": "villagers", "win_reason": "the villagers found every werewolf."}
    if wolves >= others:
        return {"winner": "werewolves", "win_reason": "the werewolves outnumber the village."}
    if day >= max_days:
        reason = f"day {day} is the last day, and the village still outnumbers the pack."
        return {"winner": "villagers", "win_reason": reason}
    return {"winner": "", "win_reason": ""}


def epilogue(role: Mapping[str, str], revealed: Mapping[str, Any]) -> str:
    """The closing roll call: roles of those who chose to reveal them."""
    shown = [f"{p} was the {r}" for p, r in role.items() if revealed.get(p) is True]
    hidden = [p for p in role if revealed.get(p) is not True]
    lines = ["; ".join(shown) + "." if shown else "Nobody revealed their role."]
    if hidden:
        lines.append("Keeping their secret: " + ", ".join(hidden) + ".")
    return " ".join(lines)
