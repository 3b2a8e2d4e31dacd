"""Functions the tool fixture offers as tools (read with ast, never imported)."""

import sqlite3
from typing import Annotated, Literal

from pydantic import BaseModel, Field

Mode = Literal["exact", "prefix"]
LIMIT = 3  # not a type: a parameter annotated with it cannot be described


class Query(BaseModel):
    word: str


def pick(mode: Mode, words: list[str]) -> str:
    return words[0]


def capped(count: LIMIT) -> int:
    return count


def lookup(word: Annotated[str, Field(description="a word")], mode: Literal["a", "b"] = "a") -> str:
    return word


def search(query: Query, tags: "list[str] | None" = None, sizes: tuple[int, ...] = ()) -> str:
    return query.word


def connect(conn: sqlite3.Connection) -> str:
    return ""


def join_all(*words: str) -> str:
    return " ".join(words)


def first(items, /, count=1):
    return items[:count]
