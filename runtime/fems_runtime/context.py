"""What an actor sees (§13) and the messages of a model call: the built-in context, the author's
memory/context methods (§8), the system blocks.

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
    from fems_runtime.flow import MethodSpec
    from fems_runtime.store import ContextLine, Message, Store
    from fems_runtime.turns.turn import Turn
    from fems_runtime.variables import Frame

MEMORY_HEADER = "Relevant memory:"
NARRATOR = "narrator"
#: Kinds in nobody's context (§13.1): the prompt, and a model's private reasoning, which its
#: own later turns do not see either.
PRIVATE_KINDS = frozenset({"prompt", "reasoning"})


def format_context(messages: Iterable[Message]) -> str:
    """``[@speaker]: text`` per message, narration as ``[narrator]: text``, blank lines between."""
    return format_lines((m.kind, m.speaker_name, m.speaker_soul, m.content) for m in messages)


def format_lines(lines: Iterable[ContextLine]) -> str:
    """:func:`format_context` for ``(kind, speaker_name, speaker_soul, content)`` rows; the
    private kinds are left out."""
    return "\n\n".join(
        f"[{_speaker(kind, name, soul)}]: {content}"
        for kind, name, soul, content in lines
        if kind not in PRIVATE_KINDS
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


# ---------------------------------------------------------------------- one turn's messages


def find_method(
    methods: Mapping[str, MethodSpec], kind: str, name: str | None
) -> MethodSpec | None:
    """The action's ``memory:``/``context:`` method (by ``name``), else the first of that kind
    in scope, else None (§8)."""
    if name is not None:
        method = methods.get(name)
        if method is None or method.kind != kind:
            raise RunError(f"no {kind} method named '{name}'")
        return method
    return next((m for m in methods.values() if m.kind == kind), None)


async def method_block(turn: Turn, method: MethodSpec, outputs: list[tuple[str, Any]]) -> str:
    """Call a memory/context method (§8) and return its block text; outs are assigned (and
    listed in ``outputs``, for the turn record)."""
    services, frame = turn.services, turn.frame
    kwargs: dict[str, Any] = {}
    for name, compute in method.inputs.items():
        if compute is not None:
            kwargs[name.lstrip("@")] = compute(turn.ctx)
        else:
            kwargs.update(
                method_kwargs(
                    [name],
                    frame,
                    prompt=turn.texts.prompt,
                    session=services.session,
                    turn=turn.id,
                    actor_info=turn.room.voice.state(),
                )
            )
    label = f"{method.kind} method {method.name}"
    if services.code is None:
        raise RunError(f"{label} needs the script's code: files")
    function = getattr(services.code(method.code), method.function, None)
    if not callable(function):
        raise RunError(f"{label}: {method.code}.{method.function} is not a function")
    value = await call_method(function, kwargs, name=label)
    for out, out_value in method_outputs(value, method.outputs, name=label).items():
        frame.assign(out, "=", out_value)
        outputs.append((out, out_value))
    return method_text(value)


async def context_block(
    turn: Turn, outputs: list[tuple[str, Any]], *, last: int | None = None
) -> str:
    """The turn's context: its action's context method, else the built-in context of the
    executor (§13.2); ``last`` bounds the built-in one (a resumed turn's, §16.4)."""
    method = find_method(turn.ctx.methods, "context", turn.spec.context)
    if method is not None:
        return await method_block(turn, method, outputs)
    services, room = turn.services, turn.room
    assert services.contexts is not None
    return services.contexts.text(
        services.session, soul=room.voice_soul, user=room.executor_spec.user, last=last
    )


async def model_messages(
    turn: Turn, outputs: list[tuple[str, Any]], *, last: int | None = None
) -> list[dict[str, str]]:
    """The messages of the turn's first call (§13.3); ``last`` bounds the built-in context
    to the messages stored before this turn (a resumed turn whose first attempts replayed)."""
    context = await context_block(turn, outputs, last=last)
    memory_method = find_method(turn.ctx.methods, "memory", turn.spec.memory)
    memory = "" if memory_method is None else await method_block(turn, memory_method, outputs)
    services = turn.services
    return build_messages(
        prompt=turn.texts.prompt,
        safety=services.safety,
        style=services.style,
        persona=services.store.persona(turn.room.voice_soul),
        user_info=services.store.profiles(services.owners),
        context=context,
        memory=memory,
        narration=turn.texts.lead,
    )
