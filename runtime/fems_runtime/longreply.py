"""A reply that runs on without a cap is shown while it runs (§15.4): small and quantised local
models often write until their window is full, which at a laptop's speed takes minutes a turn.
When a streamed reply that no `max_tokens` caps passes about `LONG_REPLY_TOKENS` tokens or
`LONG_REPLY_SECONDS` seconds without ending, one warning names the actor, the action, the
tokens so far and the fix, in the transcript and on the stage; the reply goes on."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from fems_runtime.context import estimate_tokens

if TYPE_CHECKING:
    from fems_runtime.records import LiveReplyListener
    from fems_runtime.turns.calls import CallingTurn

LONG_REPLY_TOKENS = 1000
LONG_REPLY_SECONDS = 60.0


class LongReplyWatch:
    """Listens to one streamed reply (a `LiveReplyListener`) and calls ``warn(tokens,
    seconds)`` once, the first time the reply (its reasoning included) has passed ``tokens``
    tokens or ``seconds`` since its first piece. A stream that broke off and is asked again
    starts over, but a warning given stays given."""

    def __init__(
        self,
        warn: Callable[[int, float], None],
        *,
        tokens: int = LONG_REPLY_TOKENS,
        seconds: float = LONG_REPLY_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._warn = warn
        self._limit_tokens = tokens
        self._limit_seconds = seconds
        self._clock = clock
        self._size = 0.0  # estimated tokens so far (§13.2a's estimate, summed piece by piece)
        self._started: float | None = None
        self.warned = False

    def feed(self, kind: str, chunk: str) -> None:
        """A piece of the stream: counted, then the limits checked."""
        if kind == "discard":
            self._size, self._started = 0.0, None
            return
        if self.warned or kind not in ("text", "reasoning") or not chunk:
            return
        now = self._clock()
        if self._started is None:
            self._started = now
        self._size += len(chunk) / 3 if chunk.isascii() else estimate_tokens(chunk)
        elapsed = now - self._started
        if self._size >= self._limit_tokens or elapsed >= self._limit_seconds:
            self.warned = True
            self._warn(round(self._size), elapsed)

    def finish(self, final: str) -> None:
        """The reply ended: nothing more to watch."""


def long_reply_watch(
    turn: CallingTurn, shown: Sequence[LiveReplyListener]
) -> tuple[LongReplyWatch, ...]:
    """The watch of a live call of ``turn`` that no `max_tokens` caps (the action's, meta's or
    the model map's), as a tuple of one to add to the stream's listeners; none for a capped or
    offline call. Its warning is the turn's (the transcript and the run's warnings) and is
    given to ``shown``, the stage's listeners, as a piece of kind ``warning``."""
    choice = turn.choice
    if choice is None or choice.offline or turn.max_tokens is not None:
        return ()
    if choice.options.get("max_tokens") or choice.options.get("max_completion_tokens"):
        return ()

    def warn(tokens: int, seconds: float) -> None:
        problem = (
            f"the reply of {turn.actor} has run to about {tokens} tokens in {seconds:.0f} s "
            "without ending, and no max_tokens caps it: set max_tokens in meta:, in the "
            "action or in the model's model-map entry (the reply goes on)"
        )
        turn.warn(problem)
        for listener in shown:
            listener.feed("warning", problem)

    return (LongReplyWatch(warn),)
