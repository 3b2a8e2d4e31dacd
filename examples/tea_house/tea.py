"""The tea house's bill: what was brewed, by whom, and what the guest paid."""

from __future__ import annotations

from collections.abc import Mapping


def 结账(账本: Mapping[str, int], 茶单: Mapping[str, str], 最佳: str) -> str:
    """One line per pot, the best marked with a star, then the total."""
    lines = [f"{伙计}：{茶}{' ★' if 伙计 == 最佳 else ''}" for 伙计, 茶 in sorted(茶单.items())]
    total = sum(账本.values())
    return "；".join(lines) + f"。共收 {total} 文。"
