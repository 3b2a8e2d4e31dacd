"""The built-in offline models `fems/mock` and `fems/script`: runs without network or keys (§15.3)."""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fems_runtime.out_types import MOCK_WORDS, choice_list, out_type
from fems_runtime.records import RunError, read_input
from fems_runtime.signals import OutSpec
from fems_runtime.tools import Tool, ToolCall
from fems_runtime.values import ACTOR_NAME, Actor

if TYPE_CHECKING:
    from fems_runtime.variables import Frame

OFFLINE_MODELS = frozenset({"fems/mock", "fems/script"})

_LINES = (
    "{me} looks around the room and weighs every word.",
    "{me} speaks calmly: I have made up my mind.",
    "{me} hesitates, then answers.",
    "{me} nods. Let us go on.",
    "{me} says: I have thought about this carefully.",
)


@dataclass(frozen=True)
class OfflineOut:
    """One `out` as the mock sees it: the signal target text, its type, choices, current value.

    ``holds_actor`` marks an out that should get an actor: an actor variable (``@KILL``),
    whatever type it declares, or a string entry keyed by an actor (``votes.@x``), also an
    untyped one unless it already holds a number or a container (``hp.@x``) (§15.3).
    """

    target: str
    type: str | None = None
    choices: tuple[Any, ...] = ()
    current: Any = None
    holds_actor: bool = False


@dataclass(frozen=True)
class OfflineTurn:
    """What an offline model may know about the call it answers (no hidden state)."""

    action: str
    actor: str
    turn: int = 0
    attempt: int = 0
    outs: tuple[OfflineOut, ...] = ()
    candidates: tuple[str, ...] = field(default_factory=tuple)
    tools: tuple[Mapping[str, Any], ...] = ()
    """The offered tools as the model sees them (the ``function`` part of each ``tools`` entry)."""
    safe_tools: tuple[str, ...] = ()
    """The names (as the model sees them) of the offered tools `fems/mock` may call of itself:
    none that may change something (:func:`safe_tool_names`)."""


@dataclass(frozen=True)
class ScriptedCalls:
    """A replies-file entry that calls tools: ``{"tool_calls": [{"name", "arguments"}], "text"}``."""

    calls: tuple[ToolCall, ...]
    text: str = ""


def offline_out(out: OutSpec, frame: Frame) -> OfflineOut:
    """What an offline answerer knows of one out: its label as a model names the entry, type,
    choices, current value, and whether only an actor fits it."""
    label, current = out.label, None
    holds_actor = out.target.startswith("@")  # an actor variable takes only an actor
    try:
        current = frame.get(out.target)
        if out.key is not None:
            key = frame.entry_key(out.key)
            current = current.get(key) if isinstance(current, dict) else None
            if isinstance(key, Actor):
                label = f"{out.target}.{key}"  # the entry as a model would name it
                # votes.@x (§15.3); an untyped entry that holds a number (hp.@x) stays one
                untyped_text = current is None or isinstance(current, str)
                row = out_type(out.type)
                holds_actor = row.actor_entry if row is not None else untyped_text
    except RunError:
        pass  # an unreadable target: the out as declared
    return OfflineOut(label, out.type, tuple(choice_list(out)), current, holds_actor)


def named_actors(text: str, frame: Frame) -> list[str]:
    """The defined actors ``text`` names, in order, once each: what a mock chooses among."""
    variables = frame.variables
    return list(dict.fromkeys(m for m in ACTOR_NAME.findall(text) if variables.is_actor(m)))


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
            value = mock_value(out, turn.candidates or (turn.actor,), rng)
            if isinstance(value, list) and isinstance(out.current, list) and len(value) == 1:
                op, text = "=", f"add({_literal(value[0])})"  # a list grows, as a model writes it
            else:
                op, text = "=", _literal_value(value)
            lines.append(f"SET VARIABLE: <<{out.target} {op} {text}>>")
        return "\n".join(lines)

    def tool_calls(
        self, turn: OfflineTurn, messages: Sequence[Mapping[str, Any]] = ()
    ) -> tuple[ToolCall, ...]:
        """Each offered tool in ``turn.safe_tools`` once per turn, with arguments valid for its
        schema: the first call of a turn (no tool result in ``messages`` yet) asks for them
        all. A rehearsal with the mock must change nothing, so it calls no tool that may
        write (§15.3)."""
        if any(m.get("role") == "tool" for m in messages):
            return ()
        return tuple(
            ToolCall("", tool["name"], json.dumps(example_arguments(tool.get("parameters", {}))))
            for tool in turn.tools
            if tool["name"] in turn.safe_tools
        )


def safe_tool_names(tools: Iterable[Tool]) -> tuple[str, ...]:
    """The wire names of the tools `fems/mock` may call of itself (§15.3): the built-ins that
    read, an MCP tool its server marks read-only (``readOnlyHint: true``) and a ``code:``
    function (the script's own); never ``write``, ``edit`` or an MCP tool without the mark."""
    return tuple(tool.wire_name for tool in tools if tool.read_only is not False)


def mock_value(out: OfflineOut, actors: Sequence[str], rng: random.Random) -> Any:
    """A valid value for one out (§15.3), actors as ``"@name"``: a choice if it has choices, an
    actor where only an actor fits, else a small value of its type (untyped: shaped like the
    variable's current value). Shared by `fems/mock` and the mock human."""
    if out.choices:
        return rng.choice(out.choices)
    if out.holds_actor:
        return rng.choice(actors)
    row = out_type(out.type)
    if row is not None and row.example is not None:
        return row.example(actors, rng)
    return _untyped(out.current, actors, rng)


def _untyped(current: Any, actors: Sequence[str], rng: random.Random) -> Any:
    """An untyped out takes a value shaped like the variable's current value."""
    if isinstance(current, bool):
        return rng.random() < 0.5
    if isinstance(current, int):
        return rng.randint(0, 3)
    if isinstance(current, float):
        return rng.randint(0, 10) / 2
    if isinstance(current, list):
        return [rng.choice(actors)]
    if isinstance(current, dict):
        return {rng.choice(actors): rng.randint(0, 3)}
    if isinstance(current, str) and (current == "" or current.startswith("@")):
        return rng.choice(actors)
    return rng.choice(MOCK_WORDS)


def _literal_value(value: Any) -> str:
    """:func:`_literal` for the containers :func:`mock_value` makes too."""
    if isinstance(value, list):
        return "[" + ", ".join(_literal(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_literal(k)}: {_literal(v)}" for k, v in value.items()) + "}"
    return _literal(value)


def example_arguments(schema: Mapping[str, Any]) -> dict[str, Any]:
    """Arguments valid for a tool's JSON schema: its required parameters, each given the
    simplest value of its type (an enum's first member, a default when there is one)."""
    value = _example(schema, schema.get("$defs", {}))
    return value if isinstance(value, dict) else {}


def _example(schema: Mapping[str, Any], defs: Mapping[str, Any]) -> Any:
    if "$ref" in schema:
        return _example(defs.get(str(schema["$ref"]).rsplit("/", 1)[-1], {}), defs)
    if "default" in schema:
        return schema["default"]
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for union in ("anyOf", "oneOf"):
        if schema.get(union):
            return _example(schema[union][0], defs)
    examples = {"string": "example", "integer": 1, "number": 1.0, "boolean": True, "null": None}
    kind = schema.get("type")
    if kind == "array":  # as few items as the schema allows (an MCP server's minItems)
        return [_example(schema.get("items", {}), defs)] * int(schema.get("minItems", 0))
    if kind in ("integer", "number") and "minimum" in schema:
        return max(schema["minimum"], min(examples[kind], schema.get("maximum", examples[kind])))
    if kind == "object":
        properties = schema.get("properties", {})
        return {
            name: _example(properties.get(name, {}), defs) for name in schema.get("required", ())
        }
    return examples.get(kind, "example") if isinstance(kind, str) else "example"


REPLY_SHAPE = 'a string or {"tool_calls": [{"name": "read", "arguments": {"path": "x"}}]}'
"""What one reply of a replies file is (§15.3), as the messages about a wrong one say it."""

_REPLY_FIELDS = frozenset({"tool_calls", "text", "content"})


class ScriptModel:
    """`fems/script`: replies from a JSON file or dict, per `ACTION@ACTOR`, `ACTION`, then `*`."""

    def __init__(self, replies: str | Path | Mapping[str, Any]) -> None:
        self.origin = "the replies" if isinstance(replies, Mapping) else str(replies)
        self.replies = self._load(replies)
        self._used: dict[str, int] = {}

    @staticmethod
    def _load(replies: str | Path | Mapping[str, Any]) -> dict[str, list[str | ScriptedCalls]]:
        """Every entry checked here, before the run starts: a wrong one is named, not found
        out turns later as a reply that is missing."""
        if isinstance(replies, Mapping):
            data: Any = replies
            where = "the replies"
        else:
            where = str(replies)
            text = read_input(replies, "replies file")
            try:
                data = json.loads(text)
            except json.JSONDecodeError as exc:
                raise RunError(f"replies file {where}: invalid JSON: {exc}") from None
        if not isinstance(data, Mapping):
            raise RunError(f"{where}: expected an object of reply lists, not {json_kind(data)}")
        loaded: dict[str, list[str | ScriptedCalls]] = {}
        for key, value in data.items():
            items = entry_list(value, f"{where}: {quoted(key)}", "replies", REPLY_SHAPE)
            loaded[str(key)] = [
                _scripted(item, f"{where}: {quoted(key)}, reply {number}")
                for number, item in enumerate(items, 1)
            ]
        return loaded

    @property
    def used(self) -> bool:
        """Whether any turn took a reply: the run's models may all be others (§15.3)."""
        return bool(self._used)

    def reply(self, turn: OfflineTurn) -> str | ScriptedCalls:
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
            f"fems/script has no reply left for action {turn.action} by {turn.actor}"
            f"{used_up(keys, self.replies, ('reply', 'replies'), self.origin)} "
            f"(looked for {', '.join(repr(k) for k in keys)})"
        )


def _scripted(item: Any, where: str) -> str | ScriptedCalls:
    """A reply string, or a ``{"tool_calls": [...]}`` entry checked here, when it is loaded."""
    if isinstance(item, str):
        return item
    if not isinstance(item, Mapping):
        raise RunError(f"{where}: a reply is {REPLY_SHAPE}, not {json_kind(item)}")
    if unknown := [str(name) for name in item if name not in _REPLY_FIELDS]:
        raise RunError(f"{where}: {unknown_fields(unknown)}; a reply is {REPLY_SHAPE}")
    if not isinstance(item.get("tool_calls"), list):
        raise RunError(f"{where}: a reply is {REPLY_SHAPE}")
    calls = []
    for call in item["tool_calls"]:
        if not isinstance(call, Mapping) or not isinstance(call.get("name"), str):
            raise RunError(f'{where}: each tool call needs a "name"; a reply is {REPLY_SHAPE}')
        arguments = call.get("arguments", {})
        text = arguments if isinstance(arguments, str) else json.dumps(arguments)
        calls.append(ToolCall("", call["name"], text))
    content = item.get("text", item.get("content", ""))
    return ScriptedCalls(tuple(calls), content if isinstance(content, str) else "")


# ------------------------------------------- what replies and answers files share (§15.3)


def quoted(key: Any) -> str:
    """A file's key as JSON writes it (``"suggest"``), so the message shows what to look for."""
    return json.dumps(str(key), ensure_ascii=False)


def json_kind(value: Any) -> str:
    """What a JSON value is, for a message about an entry of the wrong shape."""
    if value is None:
        return "null"
    if isinstance(value, bool | int | float):
        return f"{'a boolean' if isinstance(value, bool) else 'a number'} ({json.dumps(value)})"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list | tuple):
        return "a list"
    return f"a {type(value).__name__}"


def unknown_fields(names: Sequence[str]) -> str:
    """``unknown field "txt"``: a misspelt field would otherwise be ignored without a word."""
    return f"unknown field{'s' if len(names) > 1 else ''} {', '.join(map(quoted, names))}"


def entry_list(value: Any, where: str, plural: str, shape: str) -> list[Any]:
    """One key's replies or answers: a list, or a single one (a string or an object) that
    stands for a list of one (§15.3); anything else is named as the mistake it is."""
    if isinstance(value, list | tuple):
        return list(value)
    if isinstance(value, str | Mapping):
        return [value]
    raise RunError(
        f"{where} must be a list of {plural} (each {shape}) or a single one, not {json_kind(value)}"
    )


def used_up(
    keys: Sequence[str],
    lists: Mapping[str, Sequence[Any]],
    nouns: tuple[str, str],
    origin: str | None = None,
) -> str:
    """Why a turn found nothing when keys it looked for are there: they are used up (a single
    reply is a list of one, not one that repeats; only the last of ``*`` repeats)."""
    one, plural = nouns
    spent = [
        f"{quoted(key)} ({len(lists[key])} {one if len(lists[key]) == 1 else plural})"
        for key in keys
        if lists.get(key)
    ]
    if not spent:
        return ""
    place = f"in {origin}, " if origin else ""
    verb = "is" if len(spent) == 1 else "are"
    return (
        f": {place}{' and '.join(spent)} {verb} used up by earlier turns; "
        f'only the last {one} of "*" repeats'
    )
