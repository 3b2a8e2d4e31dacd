"""A long reply made visible while it runs (§15.4): a warning, once per reply, about a
streamed reply without `max_tokens` that has gone on past a size or a time without ending.

Hosted models end their replies; small and quantised local ones often write on to the end of
their window, minutes per turn, and a run that looks stuck gives no hint why. The warning names
the actor, the action, the tokens so far and the fix (`max_tokens`). The reply goes on: only the
script's author knows how long it may be.

Each such reply is watched the same way, whoever follows the run: a :class:`LongReplyWatch`
listens to its pieces in the turn's model call (:mod:`fems_runtime.turns.calls`), which says
the warning: inside the call as an event when the run has events (the transcript prints it,
the stage shows it on the reply being written), and as a located run warning (on stderr at
once in a run nobody shows live, among the run's warnings at its end in one shown).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from fems_runtime.reasoning import Piece
from fems_runtime.replies import Listener

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
