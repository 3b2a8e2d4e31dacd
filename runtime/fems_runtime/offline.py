"""The built-in offline models `fems/mock` and `fems/script`: runs without network or keys (§15.3)."""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fems_runtime.records import RunError

OFFLINE_MODELS = frozenset({"fems/mock", "fems/script"})

_LINES = (
    "{me} looks around the room and weighs every word.",
    "{me} speaks calmly: I have made up my mind.",
    "{me} hesitates, then answers.",
    "{me} nods. Let us go on.",
    "{me} says: I have thought about this carefully.",
)
_WORDS = ("yes", "maybe", "later", "agreed", "onward")


@dataclass(frozen=True)
class OfflineOut:
    """One `out` as the mock sees it: the signal target text, its type, choices, current value."""

    target: str
    type: str | None = None
    choices: tuple[Any, ...] = ()
    current: Any = None


@dataclass(frozen=True)
class OfflineTurn:
    """What an offline model may know about the call it answers (no hidden state)."""

    action: str
    actor: str
    turn: int = 0
    attempt: int = 0
    outs: tuple[OfflineOut, ...] = ()
    candidates: tuple[str, ...] = field(default_factory=tuple)


def _literal(value: Any) -> str:
    """A value in the literal grammar of §4.2, so the signal parser reads back the same value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int | float):
        return repr(value)
    text = str(value)
    if text.startswith("@"):
        return text
    return json.dumps(text, ensure_ascii=False)


class MockModel:
    """`fems/mock`: a short in-character line plus one valid signal per `out`, same seed → same."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def reply(self, turn: OfflineTurn, messages: Sequence[Mapping[str, str]] = ()) -> str:
        """The reply for this turn; depends only on the seed and the turn's identity."""
        rng = random.Random(f"{self.seed}|{turn.action}|{turn.actor}|{turn.turn}|{turn.attempt}")
        lines = [rng.choice(_LINES).format(me=turn.actor)]
        for out in turn.outs:
            op, value = self._value(out, turn, rng)
            lines.append(f"SET VARIABLE: <<{out.target} {op} {value}>>")
        return "\n".join(lines)

    def _value(self, out: OfflineOut, turn: OfflineTurn, rng: random.Random) -> tuple[str, str]:
        kind = (out.type or "").lower()
        actors = turn.candidates or (turn.actor,)
        if out.choices:
            return "=", _literal(rng.choice(out.choices))
        if kind == "actor":
            return "=", rng.choice(actors)
        if kind == "bool":
            return "=", _literal(rng.random() < 0.5)
        if kind == "int":
            return "=", str(rng.randint(0, 3))
        if kind == "float":
            return "=", repr(rng.randint(0, 10) / 2)
        if kind == "string":
            return "=", _literal(rng.choice(_WORDS))
        return self._untyped(out.current, actors, rng)

    def _untyped(self, current: Any, actors: Sequence[str], rng: random.Random) -> tuple[str, str]:
        """An untyped out takes a value shaped like the variable's current value."""
        if isinstance(current, bool):
            return "=", _literal(rng.random() < 0.5)
        if isinstance(current, int):
            return "=", str(rng.randint(0, 3))
        if isinstance(current, float):
            return "=", repr(rng.randint(0, 10) / 2)
        if isinstance(current, list):
            return "=", f"add({rng.choice(actors)})"
        if isinstance(current, dict):
            return "=", "{" + f"{rng.choice(actors)}: {rng.randint(0, 3)}" + "}"
        if isinstance(current, str) and (current == "" or current.startswith("@")):
            return "=", rng.choice(actors)
        return "=", _literal(rng.choice(_WORDS))


class ScriptModel:
    """`fems/script`: replies from a JSON file or dict, per `ACTION@ACTOR`, `ACTION`, then `*`."""

    def __init__(self, replies: str | Path | Mapping[str, Any]) -> None:
        self.replies = self._load(replies)
        self._used: dict[str, int] = {}

    @staticmethod
    def _load(replies: str | Path | Mapping[str, Any]) -> dict[str, list[str]]:
        if isinstance(replies, Mapping):
            data: Any = replies
            where = "replies"
        else:
            where = str(replies)
            try:
                data = json.loads(Path(replies).read_text(encoding="utf-8"))
            except FileNotFoundError:
                raise RunError(f"replies file {where} not found") from None
            except json.JSONDecodeError as exc:
                raise RunError(f"replies file {where}: invalid JSON: {exc}") from None
        if not isinstance(data, Mapping):
            raise RunError(f"{where}: expected an object of reply lists")
        loaded: dict[str, list[str]] = {}
        for key, value in data.items():
            items = [value] if isinstance(value, str) else value
            if not isinstance(items, list) or not all(isinstance(v, str) for v in items):
                raise RunError(f"{where}: {key!r} must be a list of reply strings")
            loaded[str(key)] = list(items)
        return loaded

    def reply(self, turn: OfflineTurn) -> str:
        """The next reply for this turn; a turn with no reply left is a run error."""
        keys = (f"{turn.action}{turn.actor}", turn.action, "*")
        for key in keys:
            items = self.replies.get(key)
            if not items:
                continue
            used = self._used.get(key, 0)
            if used < len(items):
                self._used[key] = used + 1
                return items[used]
            if key == "*":
                return items[-1]
        raise RunError(
            f"fems/script has no reply left for action {turn.action} by {turn.actor} "
            f"(looked for {', '.join(repr(k) for k in keys)})"
        )
