"""A model's private reasoning, cut out of its reply before anything reads it (§13.1).

Reasoning models served by vLLM, Ollama or llama.cpp (Qwen3, DeepSeek-R1 …) write their
thoughts into the content itself, as a ``<think>…</think>`` (or ``<thinking>…</thinking>``)
block at its start; one the model never closed (cut by ``max_tokens``) holds everything after
it. Only a block at the very start counts (leading whitespace aside): a ``<think>`` further on
is part of the reply. `split_reasoning` cuts a whole text; `ReasoningSplitter` does the same to
a reply that arrives in pieces, whatever the pieces (``<thi`` + ``nk>`` included), so a
stream and the whole text split alike.
"""

from __future__ import annotations

import re
from enum import StrEnum

TAGS = ("think", "thinking")
_OPENINGS = tuple(f"<{tag}>" for tag in TAGS)
_LEADING_BLOCK = re.compile(r"\s*<(think|thinking)>", re.IGNORECASE)
_CLOSINGS = {tag: re.compile(f"</{tag}>", re.IGNORECASE) for tag in TAGS}


class Piece(StrEnum):
    """What a piece of a streamed reply is, as its listeners are told (§13.1, §15.4): the
    reply's text, its reasoning, or ``DISCARD`` (with no text) when an attempt's stream broke
    off and what it said is dropped before the call is made again."""

    TEXT = "text"
    REASONING = "reasoning"
    DISCARD = "discard"


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
