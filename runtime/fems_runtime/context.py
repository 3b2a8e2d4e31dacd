"""What an actor sees (§13) and the messages of a model call; author memory/context methods (§8).

The built-in context is default-deny: an actor sees exactly the stored messages whose scope
tags include its soul (or its user, for humans with a source), oldest first.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from fems_runtime.records import RunError
from fems_runtime.values import format_value

if TYPE_CHECKING:
    from fems_runtime.store import ContextLine, Message, Store
    from fems_runtime.variables import Frame

MEMORY_HEADER = "Relevant memory:"
NARRATOR = "narrator"


def format_context(messages: Iterable[Message]) -> str:
    """``[@speaker]: text`` per message, narration as ``[narrator]: text``, blank lines between."""
    return format_lines((m.kind, m.speaker_name, m.speaker_soul, m.content) for m in messages)


def format_lines(lines: Iterable[ContextLine]) -> str:
    """:func:`format_context` for ``(kind, speaker_name, speaker_soul, content)`` rows."""
    return "\n\n".join(
        f"[{_speaker(kind, name, soul)}]: {content}" for kind, name, soul, content in lines
    )


def _speaker(kind: str, name: str | None, soul: str | None) -> str:
    if kind == "narration":
        return NARRATOR
    if kind == "feedback":
        return "feedback"
    if kind == "tool_call":
        return f"{name or soul or 'unknown'} → tool"
    if kind == "tool_result":
        return f"tool {name}"
    return name or soul or "unknown"


def builtin_context(
    store: Store,
    session: int,
    *,
    soul: str | None,
    user: str | None = None,
    last: int | None = None,
) -> str:
    """The built-in scope context (§13.2) for the actor with ``soul`` (and ``user``); ``last``
    keeps only messages with a sequence number up to it (a resumed turn's context)."""
    return format_lines(store.visible_lines(session, soul=soul, user=user, last=last))


class ContextCache:
    """Each actor's built-in context kept between its turns (§13.2): a turn formats only the
    messages new to the actor since its last one, so the cost follows what is new, not the
    size of the session."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._kept: dict[tuple[int, str | None, str | None], tuple[str, int]] = {}

    def text(
        self, session: int, *, soul: str | None, user: str | None = None, last: int | None = None
    ) -> str:
        """:func:`builtin_context`, from the text kept for this actor and what is new."""
        if last is not None:  # a resumed turn's bounded context: rare, built whole
            return builtin_context(self.store, session, soul=soul, user=user, last=last)
        key = (session, soul, user)
        text, seen = self._kept.get(key, ("", 0))
        new, seen = self.store.visible_since(session, soul, user, after=seen)
        if new:
            added = format_lines(line for _, line in new)
            text = f"{text}\n\n{added}" if text else added
        self._kept[key] = (text, seen)
        return text


async def abuiltin_context(
    store: Store, session: int, *, soul: str | None, user: str | None = None
) -> str:
    """:func:`builtin_context` off the event loop."""
    return await asyncio.to_thread(builtin_context, store, session, soul=soul, user=user)


def method_kwargs(
    inputs: Sequence[str],
    frame: Frame,
    *,
    prompt: str = "",
    session: int | None = None,
    turn: int | None = None,
    actor_info: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Keyword arguments of a memory/context method from its ``in:`` names (§8.1)."""
    kwargs: dict[str, Any] = {}
    for name in inputs:
        if name == "prompt":
            kwargs[name] = prompt
        elif name in ("session", "session_id"):
            kwargs[name] = session
        elif name in ("turn", "turn_id"):
            kwargs[name] = turn
        elif name == "@actor":
            kwargs["actor_info"] = dict(actor_info or {})
        else:
            kwargs[name.lstrip("@")] = frame.get(name)
    return kwargs


async def call_method(
    func: Callable[..., Any], kwargs: Mapping[str, Any], *, name: str = "method"
) -> Any:
    """Run an author's memory/context function in a worker thread (§8.4)."""
    try:
        return await asyncio.to_thread(func, **kwargs)
    except Exception as error:  # the author's code failed: report it as a run error
        raise RunError(f"{name} raised {type(error).__name__}: {error}") from error


def method_outputs(value: Any, outs: Sequence[str], *, name: str = "method") -> dict[str, Any]:
    """Map a method's return to its ``out:`` names (§8.2): one out takes the value; several
    outs take the keys of a returned dict."""
    if not outs:
        return {}
    if len(outs) == 1:
        return {outs[0]: value}
    if not isinstance(value, Mapping):
        raise RunError(f"{name} has outs {', '.join(outs)} and must return a dict with those keys")
    missing = [o for o in outs if o not in value]
    if missing:
        raise RunError(f"{name} returned no value for {', '.join(missing)}")
    return {o: value[o] for o in outs}


def method_text(value: Any) -> str:
    """The block text of a method's return: ``str`` of it, ``""`` when empty (§8.2)."""
    if value is None or value == "" or value == [] or value == {}:
        return ""
    if isinstance(value, Mapping):
        return "\n\n".join(t for t in (method_text(v) for v in value.values()) if t)
    return value if isinstance(value, str) else format_value(value)


def build_messages(
    *,
    prompt: str,
    safety: str = "",
    style: str = "",
    persona: str = "",
    user_info: str = "",
    context: str = "",
    memory: str = "",
    narration: str = "",
) -> list[dict[str, str]]:
    """The messages of one model call (§13.3): ``system`` (safety, style, persona, user_info)
    and ``user`` (context, memory under a short header, narration + prompt)."""
    system = _join(safety, style, persona, user_info)
    memory_block = f"{MEMORY_HEADER}\n{memory.strip()}" if memory.strip() else ""
    user = _join(context, memory_block, _join(narration, prompt))
    messages = []
    if system:
        messages.append({"role": "system", "content": system})
    messages.append({"role": "user", "content": user})
    return messages


def retry_messages(
    messages: Sequence[Mapping[str, str]], reply: str, feedback: str
) -> list[dict[str, str]]:
    """The messages of a retry: the previous ones, the model's reply, then the feedback (§13.3)."""
    return [dict(m) for m in messages] + [
        {"role": "assistant", "content": reply},
        {"role": "user", "content": feedback},
    ]


def _join(*blocks: str) -> str:
    return "\n\n".join(b.strip("\n") for b in blocks if b and b.strip())
