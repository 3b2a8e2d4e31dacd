"""The team's books, offered to the auditor as tools (§15.5): pydantic describes each function
from its type hints and docstring, and checks the model's arguments before the call."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Literal

Category = Literal["travel", "meals", "equipment"]
LEDGER = Path(__file__).with_name("ledger") / "expenses.csv"


def _rows(category: str) -> list[dict[str, str]]:
    with LEDGER.open(encoding="utf-8", newline="") as fh:
        return [row for row in csv.DictReader(fh) if row["category"] == category]


def total(category: Category) -> float:
    """The sum of this month's expenses in one category."""
    return round(sum(float(row["amount"]) for row in _rows(category)), 2)


def largest(category: Category, count: int = 2) -> list[dict[str, str]]:
    """The `count` largest expenses of a category, largest first, with their notes."""
    rows = sorted(_rows(category), key=lambda row: float(row["amount"]), reverse=True)
    return rows[:count]
