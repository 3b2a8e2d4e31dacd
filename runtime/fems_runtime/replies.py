"""A model's reply as it streams in (§13.1, §15.4), the same from either path.

What each piece of a reply is (`Piece`) and who is told it (a `Listener`). The model's private
reasoning is cut out of the reply before anything reads it (§13.1): reasoning models served by
vLLM, Ollama or llama.cpp (Qwen3, DeepSeek-R1 …) write their thoughts into the content itself,
as a ``<think>…</think>`` (or ``<thinking>…</thinking>``) block at its start; one the model
never closed (cut by ``max_tokens``) holds everything after it. Only a block at the very start
counts (leading whitespace aside): a ``<think>`` further on is part of the reply.
`split_reasoning` cuts a whole text; `ReasoningSplitter` does the same to a reply that arrives
in pieces, whatever the pieces (``<thi`` + ``nk>`` included), so a stream and the whole text
split alike.

A streamed chat completion arrives as chunks: pieces of the content, of the provider's
reasoning field (``reasoning_content``, ``reasoning``, litellm's ``thinking_blocks``), of each
tool call (its arguments in pieces, by index), a finish reason, and a last chunk of usage
with no choices. The `openai` path hands chunks over as their JSON, litellm as its objects:
`ReplyBuilder` reads either, and also a whole answer (`WholeAnswer`) from a server that
ignored ``stream``, and tells its listener each piece as it is decided. A call's `ReplyStream`
keeps what it has received so far, for those who show it and for an interrupt.

A long reply is made visible while it runs (§15.4): a warning, once per reply, about a
streamed reply without `max_tokens` that has gone on past a size or a time without ending.
Hosted models end their replies; small and quantised local ones often write on to the end of
their window, minutes per turn, and a run that looks stuck gives no hint why. The warning names
the actor, the action, the tokens so far and the fix (`max_tokens`). The reply goes on: only the
script's author knows how long it may be. Each such reply is watched the same way, whoever
follows the run: a `LongReplyWatch` listens to its pieces in the turn's model call
(:mod:`fems_runtime.turns.calls`), which says the warning: inside the call as an event when the
run has events (the transcript prints it, the stage shows it on the reply being written), and
as a located run warning (on stderr at once in a run nobody shows live, among the run's
warnings at its end in one shown).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from fems_runtime.prices import Usage


class Piece(StrEnum):
    """What a piece of a streamed reply is, as its listeners are told (§13.1, §15.4): the
    reply's text, its reasoning, or ``DISCARD`` (with no text) when an attempt's stream broke
    off and what it said is dropped before the call is made again."""

    TEXT = "text"
    REASONING = "reasoning"
    DISCARD = "discard"


Listener = Callable[[Piece, str], None]
"""Told each decided piece of a reply as it arrives: its kind (text or reasoning) and text."""


# ---------------------------------------------------------------------- the reasoning

TAGS = ("think", "thinking")
_OPENINGS = tuple(f"<{tag}>" for tag in TAGS)
_LEADING_BLOCK = re.compile(r"\s*<(think|thinking)>", re.IGNORECASE)
_CLOSINGS = {tag: re.compile(f"</{tag}>", re.IGNORECASE) for tag in TAGS}


def split_reasoning(text: str) -> tuple[str, str]:
    """(reasoning, reply) of a whole reply: the leading think block's inside (stripped) and
    what follows it (leading whitespace dropped); ``("", text)`` when there is no such block."""
    opening = _LEADING_BLOCK.match(text)
    if opening is None:
        return "", text
    closing = _CLOSINGS[opening.group(1).lower()].search(text, opening.end())
    if closing is None:
        return text[opening.end() :].strip(), ""
    return text[opening.end() : closing.start()].strip(), text[closing.end() :].lstrip()


def join_reasoning(*parts: str) -> str:
    """Reasoning from several sources (a provider field, a think block), blank-line separated."""
    return "\n\n".join(part for part in (p.strip() for p in parts) if part)


class ReasoningSplitter:
    """`split_reasoning` for a reply that arrives in pieces.

    `feed` takes each piece and returns what can be told already, as ``(kind, text)`` pairs
    of kind `Piece.REASONING` or `Piece.TEXT`; it holds back only what is still undecided: the
    start of the reply while it may yet open a think block, and the end of the block while it
    may be the start of its closing tag. `finish` returns what is held at the end.
    """

    def __init__(self) -> None:
        self._held = ""
        self._closing: str | None = None  # inside a block: its tag's name, lowercase
        self._decided = False  # past the start: pieces are reply text
        self._trim = False  # right after a block: the reply's leading whitespace is dropped

    def feed(self, piece: str) -> list[tuple[Piece, str]]:
        """The parts of ``piece`` (with what was held) that are decided."""
        if self._decided and self._closing is None:
            return self._text(piece)
        self._held += piece
        if self._closing is None:
            return self._at_start()
        return self._in_block()

    def finish(self) -> list[tuple[Piece, str]]:
        """What was held back when the reply ends: an unfinished tag is what it looked like
        (text at the start, reasoning inside a block)."""
        held, self._held = self._held, ""
        if not held:
            return []
        if self._closing is not None:
            return [(Piece.REASONING, held)]
        return [(Piece.TEXT, held)]

    def _at_start(self) -> list[tuple[Piece, str]]:
        start = self._held.lstrip()
        lowered = start[: len(_OPENINGS[-1])].lower()
        for opening in _OPENINGS:
            if lowered.startswith(opening):
                self._closing = opening[1:-1]
                self._decided = True
                self._held = start[len(opening) :]
                return self._in_block()
        if not start or any(opening.startswith(lowered) for opening in _OPENINGS):
            return []  # still only whitespace, or the start of an opening tag
        self._decided = True
        held, self._held = self._held, ""
        return [(Piece.TEXT, held)]

    def _in_block(self) -> list[tuple[Piece, str]]:
        assert self._closing is not None
        held = self._held
        closing = _CLOSINGS[self._closing].search(held)
        if closing is not None:
            self._closing, self._held, self._trim = None, "", True
            return [
                *_some(Piece.REASONING, held[: closing.start()]),
                *self._text(held[closing.end() :]),
            ]
        keep = _partial_suffix(held, f"</{self._closing}>")
        self._held = held[len(held) - keep :] if keep else ""
        return _some(Piece.REASONING, held[: len(held) - keep])

    def _text(self, piece: str) -> list[tuple[Piece, str]]:
        if self._trim:
            piece = piece.lstrip()
            self._trim = not piece
        return _some(Piece.TEXT, piece)


def _some(kind: Piece, text: str) -> list[tuple[Piece, str]]:
    return [(kind, text)] if text else []


def _partial_suffix(text: str, tag: str) -> int:
    """The length of the longest end of ``text`` that is a proper start of ``tag`` (any case)."""
    for size in range(min(len(text), len(tag) - 1), 0, -1):
        if tag.startswith(text[-size:].lower()):
            return size
    return 0


# ---------------------------------------------------------------------- the reply from its chunks


@dataclass(frozen=True)
class Reply:
    """One answer, whichever path it took: text (reasoning cut out), usage, the message as
    JSON (its `tool_calls`), the reasoning, and why it ended (``length``: ``max_tokens``)."""

    text: str
    usage: Usage
    message: Mapping[str, Any] | None = None
    reasoning: str = ""
    finish_reason: str | None = None


@dataclass(frozen=True)
class WholeAnswer:
    """A chat completion that came whole (a server that answers JSON to a streamed request)."""

    completion: Any


class MalformedReply(Exception):
    """An answer that is not a chat completion (the caller's `ModelCallError` says so)."""


def field_of(value: Any, name: str) -> Any:
    """``value[name]`` of a JSON object, ``value.name`` of litellm's objects, else None."""
    if type(value) is dict:  # the openai path's JSON: read ~90 times a reply, before the ABC
        return value.get(name)
    if isinstance(value, Mapping):
        return value.get(name)
    return getattr(value, name, None)


class ReplyBuilder:
    """Gathers one reply from its chunks, telling ``listener`` what arrives as it arrives."""

    def __init__(self, listener: Listener | None = None) -> None:
        self._listener = listener
        self._splitter = ReasoningSplitter()
        self._text: list[str] = []
        self._thoughts: list[str] = []  # the content's leading think block
        self._provider_reasoning: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self._usage: Any = None
        self.finish_reason: str | None = None

    def add(self, chunk: Any) -> None:
        """One chunk of the stream (or the whole answer)."""
        if isinstance(chunk, WholeAnswer):
            self._whole(chunk.completion)
            return
        usage = field_of(chunk, "usage")
        if usage:
            self._usage = usage
        for choice in field_of(chunk, "choices") or ():
            delta = field_of(choice, "delta")
            if delta is not None:
                self._delta(delta)
            finish = field_of(choice, "finish_reason")
            if isinstance(finish, str) and finish:
                self.finish_reason = finish

    def reply(self) -> Reply:
        """The reply gathered so far, as it ended."""
        self._parts(self._splitter.finish())
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self._text)}
        if self._calls:
            message["tool_calls"] = [self._calls[index] for index in sorted(self._calls)]
        reasoning = join_reasoning("".join(self._provider_reasoning), "".join(self._thoughts))
        return Reply(
            message["content"], usage_of(self._usage), message, reasoning, self.finish_reason
        )

    def _delta(self, delta: Any) -> None:
        reasoning = _reasoning_of(delta)
        if reasoning:
            self._provider_reasoning.append(reasoning)
            self._tell(Piece.REASONING, reasoning)
        content = field_of(delta, "content")
        if isinstance(content, str) and content:
            self._parts(self._splitter.feed(content))
        for position, call in enumerate(field_of(delta, "tool_calls") or ()):
            self._tool_call(position, call)

    def _tool_call(self, position: int, call: Any) -> None:
        """A piece of one tool call: its id and name come once, its arguments in pieces."""
        index = field_of(call, "index")
        entry = self._calls.setdefault(
            index if isinstance(index, int) else position,
            {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
        )
        if call_id := field_of(call, "id"):
            entry["id"] = str(call_id)
        function = field_of(call, "function")
        if function is None:
            return
        if name := field_of(function, "name"):
            entry["function"]["name"] = str(name)
        arguments = field_of(function, "arguments")
        if arguments is not None:  # a server may give a whole answer's arguments as an object
            text = arguments if isinstance(arguments, str) else json.dumps(arguments)
            entry["function"]["arguments"] += text

    def _parts(self, parts: list[tuple[Piece, str]]) -> None:
        for kind, text in parts:
            (self._text if kind == Piece.TEXT else self._thoughts).append(text)
            self._tell(kind, text)

    def _tell(self, kind: Piece, text: str) -> None:
        if self._listener is not None:
            self._listener(kind, text)

    def _whole(self, completion: Any) -> None:
        """A completion that came whole: its message read as one big delta."""
        if not isinstance(completion, Mapping):
            dump = getattr(completion, "model_dump", None)
            completion = dump() if callable(dump) else None
        try:
            choice = completion["choices"][0]
            message = choice["message"]
            content = message.get("content") or ""
        except (AttributeError, IndexError, KeyError, TypeError) as error:
            raise MalformedReply(f"no message in the answer ({error!r})") from None
        if not isinstance(content, str):
            raise MalformedReply("the message content is not text")
        self._delta(message)
        self._usage = completion.get("usage")
        finish = choice.get("finish_reason")
        self.finish_reason = finish if isinstance(finish, str) else None


def _reasoning_of(delta: Any) -> str:
    """The provider's reasoning in one delta: ``reasoning_content`` (DeepSeek, vLLM, litellm),
    else ``reasoning`` (OpenRouter, Ollama), else the text of litellm's ``thinking_blocks``."""
    for name in ("reasoning_content", "reasoning"):
        value = field_of(delta, name)
        if isinstance(value, str) and value:
            return value
    blocks = field_of(delta, "thinking_blocks")
    if not blocks:
        return ""
    texts = (field_of(block, "thinking") for block in blocks)
    return "".join(text for text in texts if isinstance(text, str))


def usage_of(usage: Any) -> Usage:
    """The token counts of a usage object (JSON or litellm's), `Usage()` when there is none."""
    if not usage:
        return Usage()
    prompt, completion = field_of(usage, "prompt_tokens"), field_of(usage, "completion_tokens")
    cached = field_of(field_of(usage, "prompt_tokens_details"), "cached_tokens")
    reasoning = field_of(field_of(usage, "completion_tokens_details"), "reasoning_tokens")
    return Usage(
        prompt if isinstance(prompt, int) else None,
        completion if isinstance(completion, int) else None,
        cached if isinstance(cached, int) else 0,
        reasoning if isinstance(reasoning, int) else None,
    )


# ---------------------------------------------------------------------- what a call has received


class ReplyStream:
    """What a call has received so far, for the transcript, the stage and an interrupt
    (§10.7): the reply text and the reasoning, each cut from the other as they arrive.

    ``listener(kind, chunk)`` is told every piece as it arrives (a `Piece`), and
    ``(Piece.DISCARD, "")`` when an attempt's stream broke off and its pieces are dropped
    before the call is retried (§15.4).
    """

    def __init__(self, listener: Listener | None = None) -> None:
        self._listener = listener
        self._text: list[str] = []
        self._reasoning: list[str] = []

    @property
    def text(self) -> str:
        """The reply so far, reasoning cut out."""
        return "".join(self._text)

    @property
    def reasoning(self) -> str:
        """The reasoning so far (provider field, or the leading think block)."""
        return "".join(self._reasoning)

    def add(self, kind: Piece, chunk: str) -> None:
        """One piece of the reply or of its reasoning."""
        (self._text if kind == Piece.TEXT else self._reasoning).append(chunk)
        if self._listener is not None:
            self._listener(kind, chunk)

    def discard(self) -> None:
        """Forget an attempt that failed part-way: its text never counts."""
        if not (self._text or self._reasoning):
            return
        self._text.clear()
        self._reasoning.clear()
        if self._listener is not None:
            self._listener(Piece.DISCARD, "")


# ---------------------------------------------------------------------- a long reply


LONG_REPLY_TOKENS = 1000
"""The tokens after which a reply without a cap is warned about (issue #33: a reply a turn
needs is rarely longer; a local model that never stops passes it in seconds)."""
LONG_REPLY_SECONDS = 60.0
"""The seconds, from its first piece, after which a streaming reply without a cap is warned
about, however short."""


class LongReplyWatch:
    """The watch of one reply without a cap: a listener of its pieces that hands each on to
    the reply's other listener (``forward``: its run events, if any) and calls ``say`` once,
    with the tokens and the seconds, when the reply has run past ``tokens`` or ``seconds``.

    The time counts from the first piece: a local server may read a long prompt for minutes
    before it writes, and that is not the reply's length. A discarded attempt's pieces no
    longer count; its time does."""

    def __init__(
        self,
        say: Callable[[int, float], None],
        forward: Listener | None = None,
        *,
        tokens: int | None = None,
        seconds: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._say: Callable[[int, float], None] | None = say  # None once said
        self._forward = forward
        self.tokens = LONG_REPLY_TOKENS if tokens is None else tokens
        self.seconds = LONG_REPLY_SECONDS if seconds is None else seconds
        self._clock = clock
        self._began: float | None = None
        self._count = 0

    def __call__(self, kind: Piece, chunk: str) -> None:
        if self._forward is not None:
            self._forward(kind, chunk)
        say = self._say
        if say is None:
            return
        if kind == Piece.DISCARD:
            self._count = 0
            return
        now = self._clock()
        if self._began is None:
            self._began = now
        self._count += chunk_tokens(chunk)
        if self._count >= self.tokens or now - self._began >= self.seconds:
            self._say = None
            say(self._count, now - self._began)


def chunk_tokens(chunk: str) -> int:
    """The tokens of one streamed piece: a local server streams a token a piece; a provider
    that sends several at once, about one per 4 characters."""
    return max(1, len(chunk) // 4)


def long_reply_warning(actor: str | None, action: str | None, tokens: int, seconds: float) -> str:
    """The warning about the reply of ``actor`` in ``action``, ``tokens`` long after
    ``seconds``, that has not ended."""
    return (
        f"the reply of {actor or 'the model'} has run to about {tokens} tokens in "
        f"{seconds:.0f} s without ending, and action {action} sets no max_tokens: it goes on "
        "until the model stops; set max_tokens (in the action, in meta: or in the model-map "
        "entry) to end replies of this action"
    )
