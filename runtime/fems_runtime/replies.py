"""A reply put together from the chunks of its stream (§15.4), the same from either path.

A streamed chat completion arrives as chunks: pieces of the content, of the provider's
reasoning field (``reasoning_content``, ``reasoning``, litellm's ``thinking_blocks``), of each
tool call (its arguments in pieces, by index), a finish reason, and a last chunk of usage
with no choices. The `openai` path hands chunks over as their JSON, litellm as its objects:
`ReplyBuilder` reads either, and also a whole answer (`WholeAnswer`) from a server that
ignored ``stream``. Reasoning is cut out of the content as it arrives (`fems_runtime.reasoning`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fems_runtime.prices import Usage
from fems_runtime.reasoning import Piece, ReasoningSplitter, join_reasoning

Listener = Callable[[Piece, str], None]
"""Told each decided piece of a reply as it arrives: its kind (text or reasoning) and text."""


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
