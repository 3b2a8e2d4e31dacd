"""狼人杀规则：发牌、查验、夜晚结算、计票、判定胜负（femwa_werewolf.fems 的 code: 文件）。

Written the way FemWA users write their rules: plain functions, actors arrive as their names
(``"@阿强"``), results go back as dicts keyed by the out names (``"@预言家"`` with its ``@``).
The rules never trust a model's choice: a victim or a ballot that names nobody valid falls back
to a fixed choice, so every night kills someone and a game always ends.
"""

from __future__ import annotations

import random

WOLF = "狼人"
SEER = "预言家"
VILLAGER = "村民"
ROLE_TEXT = {
    WOLF: "你的身份是狼人。夜里和同伴商量杀人，白天隐藏身份。",
    SEER: "你的身份是预言家。每晚可以查验一名玩家是不是狼人。",
    VILLAGER: "你的身份是村民。白天通过发言和投票找出狼人。",
}


def deal_roles(players: list[str], seed: int) -> dict[str, object]:
    """Two wolves, one seer, the rest villagers, shuffled by the moderator's number."""
    seats = [str(p) for p in players]
    order = list(seats)
    random.Random(seed).shuffle(order)
    role = {name: VILLAGER for name in seats}
    role[order[0]] = WOLF
    role[order[1]] = WOLF
    role[order[2]] = SEER
    return {
        "alive": list(seats),
        "wolves": [p for p in seats if role[p] == WOLF],
        "role": role,
        "身份说明": {p: ROLE_TEXT[role[p]] for p in seats},
        "@预言家": order[2],
    }


def seer_check(target: str, role: dict[str, str]) -> str:
    """What the moderator whispers to the seer."""
    target = str(target)
    if target not in role:
        return "你没有选中任何人，今晚什么也没看到。"
    verdict = "是狼人" if role[target] == WOLF else "是好人"
    return f"{target} {verdict}。"


def resolve_night(kill: str, alive: list[str], wolves: list[str]) -> dict[str, object]:
    """The wolves' victim dies; a missing or invalid choice falls on the first living villager."""
    living = [str(p) for p in alive]
    pack = {str(w) for w in wolves}
    victims = [p for p in living if p not in pack]
    victim = str(kill) if str(kill) in victims else (victims[0] if victims else "")
    if not victim:
        return {"alive": living, "dead_tonight": "", "昨夜消息": "昨夜是平安夜。"}
    return {
        "alive": [p for p in living if p != victim],
        "dead_tonight": victim,
        "昨夜消息": f"昨夜 {victim} 死了。",
    }


def count_votes(votes: dict[str, str], alive: list[str]) -> dict[str, object]:
    """The most-voted living player is exiled (ties: the first in seat order); then the ballot
    box is emptied for the next day."""
    living = [str(p) for p in alive]
    tally = {p: 0 for p in living}
    for voter, ballot in votes.items():
        if str(voter) in tally and str(ballot) in tally and str(ballot) != str(voter):
            tally[str(ballot)] += 1
    if not any(tally.values()):
        return {"alive": living, "计票结果": "没有有效的票，今天无人出局。", "votes": {}}
    exiled = max(living, key=lambda p: tally[p])
    summary = "，".join(f"{p} {n}票" for p, n in tally.items() if n)
    return {
        "alive": [p for p in living if p != exiled],
        "计票结果": f"{summary}。{exiled} 被放逐。",
        "votes": {},
    }


def check_winner(alive: list[str], wolves: list[str], day: int, max_day: int) -> str:
    """Wolves win when they are as many as the others; the village wins when no wolf is left;
    when the day cap comes first the village has held out and wins."""
    living = [str(p) for p in alive]
    pack = [p for p in living if p in {str(w) for w in wolves}]
    others = len(living) - len(pack)
    if not pack:
        return "好人胜利"
    if len(pack) >= others:
        return "狼人胜利"
    return "好人胜利" if day >= max_day else ""
