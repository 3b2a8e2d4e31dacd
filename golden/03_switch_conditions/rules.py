"""Helpers for the switch golden case."""


def is_over(score: int) -> bool:
    return score > 10
