"""Helpers for the fields golden case."""


def notes(prompt: str, actor_info: dict) -> str:
    return ""


def room(session_id: int, actor_info: dict) -> str:
    return ""


def check_pick(pick: str, alive: list) -> list:
    return [(pick in alive, True, "pick someone alive")]
