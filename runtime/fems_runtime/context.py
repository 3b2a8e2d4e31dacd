"""What an actor sees (§13) and the messages of a model call: the built-in context, the author's
memory/context methods (§8), the system blocks.

The built-in context is default-deny: an actor sees exactly the stored messages whose scope
tags include its soul (or its user, for humans with a source), oldest first.
"""

from __future__ import annotations

import bisect
import functools
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from fems_runtime.authored import off_loop
from fems_runtime.records import RunError
from fems_runtime.values import format_value
from fems_runtime.words import MESSAGE_KINDS

if TYPE_CHECKING:
    from fems_runtime.flow import Context, MethodSpec
    from fems_runtime.specs import TurnSpec
    from fems_runtime.store import ContextLine, Message, Store
    from fems_runtime.values import Actor
    from fems_runtime.variables import ActorSpec, Frame

MEMORY_HEADER = "Relevant memory:"


def format_context(messages: Iterable[Message]) -> str:
    """``[@speaker]: text`` per message, narration as ``[narrator]: text``, blank lines between."""
    return format_lines((m.kind, m.speaker_name, m.speaker_soul, m.content) for m in messages)


def format_lines(lines: Iterable[ContextLine]) -> str:
    """:func:`format_context` for ``(kind, speaker_name, speaker_soul, content)`` rows; the
    kinds in nobody's context are left out."""
    return "\n\n".join(context_entries(lines))


def context_entries(lines: Iterable[ContextLine]) -> list[str]:
    """One ``[@speaker]: text`` entry per row of a kind in contexts (§13.1)."""
    return [
        f"[{speaker}]: {content}"
        for kind, name, soul, content in lines
        if (speaker := _speaker(kind, name, soul)) is not None
    ]


@functools.lru_cache(maxsize=1024)  # a context reads tens of thousands of rows, few speakers
def _speaker(kind: str, name: str | None, soul: str | None) -> str | None:
    """The speaker as its kind's row names it, or None for a kind in nobody's context."""
    row = MESSAGE_KINDS[kind]
    return row.label.format(who=name or soul or "unknown", name=name) if row.in_context else None


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


@functools.cache
def _wide() -> re.Pattern[str]:
    """The CJK and other wide characters: compiled when non-ASCII text is first estimated, since
    its ranges took ~3 ms of every run's start to compile (a third of the runtime's regexes)."""
    return re.compile(
        r"[\u1100-\u11ff\u2e80-\ua4cf\uac00-\ud7af\uf900-\ufaff\ufe30-\ufe4f\uff00-\uffef]"
    )


MESSAGE_OVERHEAD = 4  # tokens a chat message costs besides its content (role, separators)


def estimate_tokens(text: str) -> int:
    """A size in tokens without a tokenizer (§13.2a), erring high: a CJK character is a token,
    other text about 3 characters per one (tokenizers average about 4 on Latin text)."""
    if text.isascii():
        return -(-len(text) // 3)
    wide = len(_wide().findall(text))
    return wide + -(-(len(text) - wide) // 3)


@dataclass
class _Kept:
    """An actor's context entries as they grow, and their text (the entries joined by blank
    lines) as far as a turn has asked for it: a turn adds only its new entries, and a model
    call that reads no text (an offline one that nobody watches) never joins it, so a turn's
    cost does not grow with the run's transcript."""

    entries: list[str] = field(default_factory=list)
    sizes: list[int] = field(default_factory=lambda: [0])
    joined: str = ""  # the text of the first ``joined_count`` entries
    joined_count: int = 0
    seen: int = 0  # the last sequence number read

    def text(self, count: int) -> str:
        """The text of the first ``count`` entries: the text joined before, extended by the
        entries added since (an earlier, shorter view's is joined apart: a rare ask)."""
        done = self.joined_count
        if count > done:
            added = "\n\n".join(self.entries[done:count])
            self.joined = f"{self.joined}\n\n{added}" if done else added
            self.joined_count = done = count
        if count == done:
            return self.joined
        return "\n\n".join(self.entries[:count])

    def view(self) -> ContextView:
        return ContextView(self, len(self.entries))


@dataclass(frozen=True)
class ContextView:
    """An actor's context as one turn sees it: its first ``count`` entries (messages), oldest
    first. The entries are shared with a :class:`ContextCache`, which appends later turns'
    entries; a view reads its own. Their ``text`` (joined by blank lines) is made when first
    asked for; ``sizes`` holds the estimated tokens before each entry, worked out when a
    window asks for them (§13.2a), so a run without a known window never estimates."""

    kept: _Kept = field(default_factory=_Kept)
    count: int = 0

    @classmethod
    def of(cls, entries: Sequence[str]) -> ContextView:
        """The view of ``entries``, oldest first."""
        kept = _Kept()
        kept.entries.extend(entries)
        return kept.view()

    @property
    def entries(self) -> list[str]:
        """The entries of every view of this actor's context (this one's: the first ``count``);
        the same list for each longer version, which only grows at its end."""
        return self.kept.entries

    @property
    def text(self) -> str:
        return self.kept.text(self.count)

    @property
    def tokens(self) -> int:
        return self._sizes()[self.count]

    def newest_within(self, budget: int) -> int:
        """How many of the newest entries fit in ``budget`` tokens."""
        sizes = self._sizes()
        first = bisect.bisect_left(sizes, sizes[self.count] - budget, 0, self.count + 1)
        return max(0, self.count - first)

    def block(self, keep: int | None = None) -> str:
        """The context text of the newest ``keep`` entries (default: all), starting with a line
        saying how many earlier ones are not shown (§13.2a)."""
        if keep is None or keep >= self.count:
            return self.text
        left_out = self.count - keep
        notice = (
            f"({left_out} earlier {'message is' if left_out == 1 else 'messages are'} not shown)"
        )
        shown = "\n\n".join(self.entries[left_out : self.count])
        return f"{notice}\n\n{shown}" if shown else notice

    def _sizes(self) -> list[int]:
        """``sizes`` up to this view's entries: each entry and the blank line after it."""
        sizes, entries = self.kept.sizes, self.entries
        for index in range(len(sizes) - 1, self.count):
            sizes.append(sizes[-1] + estimate_tokens(entries[index]) + 1)
        return sizes


class ContextCache:
    """Each actor's built-in context kept between its turns (§13.2): a turn formats only the
    messages new to the actor since its last one, so the cost follows what is new, not the
    size of the session."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._kept: dict[tuple[int, str | None, str | None], _Kept] = {}

    def text(
        self, session: int, *, soul: str | None, user: str | None = None, last: int | None = None
    ) -> str:
        """:func:`builtin_context`, from the text kept for this actor and what is new."""
        return self.view(session, soul=soul, user=user, last=last).text

    def view(
        self, session: int, *, soul: str | None, user: str | None = None, last: int | None = None
    ) -> ContextView:
        """The actor's context as a :class:`ContextView`; ``last`` as for :func:`builtin_context`."""
        if last is not None:  # a resumed turn's bounded context: rare, built whole
            lines = self.store.visible_lines(session, soul=soul, user=user, last=last)
            return ContextView.of(context_entries(lines))
        kept = self._kept.get((session, soul, user))
        if kept is None:
            kept = self._kept[(session, soul, user)] = _Kept()
        new, kept.seen = self.store.visible_since(session, soul, user, after=kept.seen)
        kept.entries.extend(context_entries(line for _, line in new))
        return kept.view()


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
    """Run an author's memory/context function off the event loop (§8.4)."""
    try:
        return await off_loop(func, kwargs)
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


@dataclass(frozen=True)
class Request:
    """What a turn's first call sends (§13.3) in its parts, so that the context can be cut to
    the model's window (§13.2a): the system text, the context, and the memory block and
    prompt, which are never cut."""

    system: str
    context: ContextView
    memory: str
    prompt: str

    @classmethod
    def of(
        cls,
        *,
        prompt: str,
        system: Sequence[str],
        context: ContextView,
        memory: str,
        narration: str,
    ) -> Request:
        memory_block = f"{MEMORY_HEADER}\n{memory.strip()}" if memory.strip() else ""
        return cls(_join(*system), context, memory_block, _join(narration, prompt))

    def messages(self, keep: int | None = None, *, context: bool = True) -> list[dict[str, str]]:
        """The messages, with the newest ``keep`` context entries (default: all); without the
        context when ``context`` is false, for a model that never reads it (the context is
        the one part whose cost grows with the run)."""
        user = _join(self.context.block(keep) if context else "", self.memory, self.prompt)
        messages = []
        if self.system:
            messages.append({"role": "system", "content": self.system})
        messages.append({"role": "user", "content": user})
        return messages

    @property
    def fixed_tokens(self) -> int:
        """The estimated size of what is never cut: system text, memory and prompt."""
        parts = (self.system, self.memory, self.prompt)
        return sum(estimate_tokens(part) + MESSAGE_OVERHEAD for part in parts if part)


def estimate_messages(messages: Iterable[Mapping[str, Any]]) -> int:
    """The estimated size of chat messages (tool calls as their JSON)."""
    total = 0
    for message in messages:
        total += MESSAGE_OVERHEAD + estimate_tokens(str(message.get("content") or ""))
        if message.get("tool_calls"):
            total += estimate_tokens(json.dumps(message["tool_calls"], ensure_ascii=False))
    return total


def retry_messages(
    messages: Sequence[Mapping[str, str]], reply: str, feedback: str
) -> list[dict[str, str]]:
    """The messages of a retry: the previous ones, the model's reply, then the feedback (§13.3)."""
    return [dict(m) for m in messages] + [
        {"role": "assistant", "content": reply},
        {"role": "user", "content": feedback},
    ]


def _join(*blocks: str) -> str:
    """The blocks that hold text, without their outer newlines, a blank line between."""
    return "\n\n".join(b.strip("\n") for b in blocks if b and b.strip())


# ---------------------------------------------------------------------- one turn's messages


class _RunParts(Protocol):
    """What building a request reads of the run's shared services (turns/shared.py)."""

    @property
    def session(self) -> int: ...
    @property
    def code(self) -> Callable[[str], Any] | None: ...
    @property
    def contexts(self) -> ContextCache: ...
    @property
    def store(self) -> Store: ...
    @property
    def safety(self) -> str: ...
    @property
    def style(self) -> str: ...
    @property
    def owners(self) -> tuple[str, ...]: ...


class _RoomParts(Protocol):
    @property
    def voice(self) -> Actor: ...
    @property
    def voice_soul(self) -> str: ...
    @property
    def executor_spec(self) -> ActorSpec: ...


class _TextParts(Protocol):
    @property
    def prompt(self) -> str: ...
    @property
    def lead(self) -> str: ...


class TurnParts(Protocol):
    """What building a turn's request reads of the turn (a ``fems_runtime.turns`` Turn), so
    that this module needs nothing of the turns package."""

    @property
    def services(self) -> _RunParts: ...
    @property
    def ctx(self) -> Context: ...
    @property
    def spec(self) -> TurnSpec: ...
    @property
    def room(self) -> _RoomParts: ...
    @property
    def texts(self) -> _TextParts: ...
    @property
    def id(self) -> int: ...
    @property
    def frame(self) -> Frame: ...


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


async def method_block(turn: TurnParts, method: MethodSpec, outputs: list[tuple[str, Any]]) -> str:
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


async def context_view(
    turn: TurnParts, outputs: list[tuple[str, Any]], *, last: int | None = None
) -> ContextView:
    """The turn's context: its action's context method's block (a message per paragraph),
    else the built-in context of the executor (§13.2); ``last`` bounds the built-in one (a
    resumed turn's, §16.4)."""
    method = find_method(turn.ctx.methods, "context", turn.spec.context)
    if method is not None:
        text = await method_block(turn, method, outputs)
        return ContextView.of(text.split("\n\n") if text else [])
    services, room = turn.services, turn.room
    return services.contexts.view(
        services.session, soul=room.voice_soul, user=room.executor_spec.user, last=last
    )


async def model_request(
    turn: TurnParts, outputs: list[tuple[str, Any]], *, last: int | None = None
) -> Request:
    """What the turn's first call sends (§13.3); ``last`` bounds the built-in context to the
    messages stored before this turn (a resumed turn whose first attempts replayed)."""
    context = await context_view(turn, outputs, last=last)
    memory_method = find_method(turn.ctx.methods, "memory", turn.spec.memory)
    memory = "" if memory_method is None else await method_block(turn, memory_method, outputs)
    services = turn.services
    persona = services.store.persona(turn.room.voice_soul)
    user_info = services.store.profiles(services.owners)
    return Request.of(
        prompt=turn.texts.prompt,
        system=(services.safety, services.style, persona, user_info),
        context=context,
        memory=memory,
        narration=turn.texts.lead,
    )


def fit_to_window(
    request: Request, added: Sequence[Mapping[str, Any]], budget: int, describe: Callable[[], str]
) -> int:
    """How many of the request's newest context entries fit in ``budget`` tokens with the
    messages ``added`` after it (§13.2a). The system text, memory and prompt are never cut:
    when they alone do not fit, a run error says so, with ``describe()`` naming the model and
    its window."""
    fixed = request.fixed_tokens + estimate_messages(added)
    if fixed > budget:
        raise RunError(
            f"the system blocks, memory and prompt alone are about {fixed} tokens, more than "
            f"{describe()} leaves for them ({budget}); shorten them or choose a larger model"
        )
    context = request.context
    if context.tokens + fixed <= budget:
        return context.count
    notice = 12  # the line saying how many are not shown
    return context.newest_within(budget - fixed - notice)
