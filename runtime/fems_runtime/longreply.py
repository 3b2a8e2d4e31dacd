"""A long reply made visible while it runs (§15.4): a subscriber of the run's events
(:mod:`fems_runtime.events`) that warns once about a streamed reply without `max_tokens` that
has gone on past a size or a time without ending.

Hosted models end their replies; small and quantised local ones often write on to the end of
their window, minutes per turn, and a run that looks stuck gives no hint why. The warning names
the actor, the action, the tokens so far and the fix (`max_tokens`), as a
:class:`~fems_runtime.events.ProblemReported` inside the model call, so the transcript prints it
and the stage shows it on the reply being written; the run's warnings list it at the end. The
reply goes on: only the script's author knows how long it may be.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fems_runtime.events import (
    ModelCallBegan,
    ModelCallEnded,
    ProblemReported,
    ReplyChunk,
    RunEvent,
    RunEvents,
)
from fems_runtime.reasoning import Piece

LONG_REPLY_TOKENS = 1000
"""The tokens after which a reply without a cap is warned about (issue #33: a reply a turn
needs is rarely longer; a local model that never stops passes it in seconds)."""
LONG_REPLY_SECONDS = 60.0
"""The seconds after which a streaming reply without a cap is warned about, however short."""


@dataclass
class _Watched:
    """A streaming reply without a cap: its call, and the tokens that have arrived of it."""

    began: ModelCallBegan
    tokens: int = 0


class LongReplies:
    """Watches the streamed replies without `max_tokens` of one run (a subscriber of
    ``events``) and warns once per reply that passes ``tokens`` or ``seconds`` without ending;
    ``warn`` also receives the warning, located, for the run's list of warnings."""

    def __init__(
        self,
        events: RunEvents,
        warn: Callable[[str], None] | None = None,
        *,
        tokens: int | None = None,
        seconds: float | None = None,
    ) -> None:
        self._events = events
        self._warn = warn
        self.tokens = LONG_REPLY_TOKENS if tokens is None else tokens
        self.seconds = LONG_REPLY_SECONDS if seconds is None else seconds
        self._watched: dict[int, _Watched] = {}  # by model call

    def __call__(self, event: RunEvent) -> None:
        match event:
            case ModelCallBegan(streamed=True, max_tokens=None):
                self._watched[event.id] = _Watched(event)
            case ReplyChunk():
                watched = self._watched.get(event.parent or 0)
                if watched is not None:
                    self._arrived(watched, event)
            case ModelCallEnded():
                self._watched.pop(event.id, None)

    def _arrived(self, watched: _Watched, chunk: ReplyChunk) -> None:
        """A piece of a watched reply: counted (a discarded attempt's pieces no longer count;
        its time does), and the reply warned about once it is long."""
        if chunk.kind == Piece.DISCARD:
            watched.tokens = 0
            return
        watched.tokens += chunk_tokens(chunk.chunk)
        took = chunk.mono - watched.began.mono
        if watched.tokens >= self.tokens or took >= self.seconds:
            del self._watched[watched.began.id]  # one warning per reply
            self._report(watched.began, long_reply_warning(watched.began, watched.tokens, took))

    def _report(self, began: ModelCallBegan, problem: str) -> None:
        events, where = self._events, began.where
        events.emit(
            ProblemReported(id=events.new_id(), parent=began.id, where=where, problem=problem)
        )
        if self._warn is not None:
            place = f"{where.file}:{where.line}" if where.file else f"line {where.line}"
            self._warn(f"{place}: warning: action {where.action}: {problem}")


def chunk_tokens(chunk: str) -> int:
    """The tokens of one streamed piece: a local server streams a token a piece; a provider
    that sends several at once, about one per 4 characters."""
    return max(1, len(chunk) // 4)


def long_reply_warning(began: ModelCallBegan, tokens: int, seconds: float) -> str:
    """The warning about a reply of ``tokens`` after ``seconds`` that has not ended."""
    actor = began.where.actor or "the model"
    return (
        f"the reply of {actor} has run to about {tokens} tokens in {seconds:.0f} s without "
        f"ending, and action {began.where.action} sets no max_tokens: it goes on until the "
        "model stops; set max_tokens (in the action, in meta: or in the model-map entry) to "
        "end replies of this action"
    )
