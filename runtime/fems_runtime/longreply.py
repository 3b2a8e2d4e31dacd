"""A long reply made visible while it runs (§15.4): a warning, once per reply, about a
streamed reply without `max_tokens` that has gone on past a size or a time without ending.

Hosted models end their replies; small and quantised local ones often write on to the end of
their window, minutes per turn, and a run that looks stuck gives no hint why. The warning names
the actor, the action, the tokens so far and the fix (`max_tokens`). The reply goes on: only the
script's author knows how long it may be.

Where it goes depends on who follows the run. :class:`LongReplies`, a subscriber of the run's
events (:mod:`fems_runtime.events`), makes it a :class:`~fems_runtime.events.ProblemReported`
inside the model call, so the transcript prints it and the stage shows it on the reply being
written. A run without events (a plain `fems2py run`) watches each such reply itself
(:class:`UnshownReply`, a listener of the reply's pieces) at the cost of a counter per piece,
not of the events every step would build. A run nobody shows live says the warning on stderr
at once; one shown lists it with the run's warnings at the end too.
"""

from __future__ import annotations

import time
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
class _Tally:
    """How long one reply has grown: the tokens that have arrived of it since its first piece
    came (``began``, None before). A local server may read a long prompt for minutes before it
    writes: that is not the reply's length."""

    began: float | None = None
    tokens: int = 0

    def passed(self, kind: str, chunk: str, now: float, tokens: int, seconds: float) -> bool:
        """Count one piece (a discarded attempt's pieces no longer count; its time does);
        whether the reply has now run past ``tokens`` or ``seconds``."""
        if kind == Piece.DISCARD:
            self.tokens = 0
            return False
        if self.began is None:
            self.began = now
        self.tokens += chunk_tokens(chunk)
        return self.tokens >= tokens or now - self.began >= seconds

    def seconds(self, now: float) -> float:
        """The seconds the reply has been arriving."""
        return 0.0 if self.began is None else now - self.began


@dataclass
class _Watched:
    """A streaming reply without a cap: its call, and how long it has grown."""

    began: ModelCallBegan
    tally: _Tally


class LongReplies:
    """Watches the streamed replies without `max_tokens` of one run (a subscriber of
    ``events``) and warns once per reply that passes ``tokens`` or ``seconds`` without ending;
    ``warn`` also receives the warning, located (the run's ``warn_now``: stderr at once, or
    the run's list of warnings when the run is shown live)."""

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
                self._watched[event.id] = _Watched(event, _Tally())
            case ReplyChunk():
                watched = self._watched.get(event.parent or 0)
                if watched is not None:
                    self._arrived(watched, event)
            case ModelCallEnded():
                self._watched.pop(event.id, None)

    def _arrived(self, watched: _Watched, chunk: ReplyChunk) -> None:
        """A piece of a watched reply: counted, and the reply warned about once it is long."""
        tally = watched.tally
        if tally.passed(chunk.kind, chunk.chunk, chunk.mono, self.tokens, self.seconds):
            del self._watched[watched.began.id]  # one warning per reply
            where, took = watched.began.where, tally.seconds(chunk.mono)
            problem = long_reply_warning(where.actor, where.action, tally.tokens, took)
            self._report(watched.began, problem)

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


class UnshownReply:
    """The watch of one reply without a cap in a run without events (§15.4): a listener of
    its pieces (a :class:`~fems_runtime.llm.ReplyStream`'s) that calls ``say`` with the tokens
    and the seconds once, when the reply has run past ``tokens`` or ``seconds``."""

    def __init__(
        self,
        say: Callable[[int, float], None],
        *,
        tokens: int | None = None,
        seconds: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._say: Callable[[int, float], None] | None = say  # None once said
        self.tokens = LONG_REPLY_TOKENS if tokens is None else tokens
        self.seconds = LONG_REPLY_SECONDS if seconds is None else seconds
        self._clock = clock
        self._tally = _Tally()

    def __call__(self, kind: Piece, chunk: str) -> None:
        say, tally = self._say, self._tally
        if say is None:
            return
        now = self._clock()
        if tally.passed(kind, chunk, now, self.tokens, self.seconds):
            self._say = None
            say(tally.tokens, tally.seconds(now))


def long_reply_warning(actor: str | None, action: str | None, tokens: int, seconds: float) -> str:
    """The warning about the reply of ``actor`` in ``action``, ``tokens`` long after
    ``seconds``, that has not ended."""
    return (
        f"the reply of {actor or 'the model'} has run to about {tokens} tokens in "
        f"{seconds:.0f} s without ending, and action {action} sets no max_tokens: it goes on "
        "until the model stops; set max_tokens (in the action, in meta: or in the model-map "
        "entry) to end replies of this action"
    )
