"""A new session's store, opened behind the run's first model request (#30 item 4).

Opening a store costs more than the rest of a run's start-up together: SQLAlchemy's import, the
tables, the session's row and its actors. A new session in a database file that does not exist
yet needs none of it for its first request: nothing is stored there, so its first turn has no
persona, no owner profile and no context to read. :class:`OpeningStore` lets that turn ask
before the database is open, and opens it while the request is under way.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from fems_runtime.records import RunError
from fems_runtime.store import Checkpoint, ContextLine, NewMessage, Store
from fems_runtime.store.database import DEFAULT_DATABASE
from fems_runtime.store.messages import Batch

#: the number of a fresh database's first session (the sessions table numbers from 1)
FIRST_SESSION = 1
#: what an :class:`OpeningStore` holds itself; every other attribute is the opened store's
_OWN = frozenset(
    {"_opens", "_opened", "_early", "_turns", "_scheduled", "_outcome", "_opening_lock"}
)


def fresh_file(database: str | Path | None) -> bool:
    """Whether ``database`` (``--db``, ``meta.database``; None: the default) is a SQLite file
    that does not exist yet, in a folder where it can be made: a database with nothing stored."""
    text = str(database or DEFAULT_DATABASE)
    if "://" in text or text == ":memory:":
        return False
    path = Path(text).expanduser()
    folder = path.parent.resolve()
    return not path.exists() and not path.is_symlink() and os.access(folder, os.W_OK | os.X_OK)


class OpeningStore(Store):
    """The store of a new session in a fresh database (:func:`fresh_file`), whose opening runs
    behind the first request. ``opens`` opens the real store and its new session.

    Until it opens, it answers what a turn asks before its request as the empty database would
    (no persona, no profile, no visible message, turn ids from 1) and keeps, in order, the turn
    ids handed out and the checkpoints submitted meanwhile, to give them to the opened store.
    Anything else it is asked (a turn's messages, a session row, closing) opens it first, in
    the caller's thread: every other method is the :class:`Store`'s own, reaching the opened
    store's parts through :meth:`__getattr__`. The opening itself runs in a worker thread that
    the event loop starts after the turns ready to run have sent their requests (the first
    turn id schedules it), so it overlaps the wait for the replies.
    """

    def __init__(self, opens: Callable[[], tuple[Store, int]]) -> None:
        # no Store.__init__: the opened store's engine and parts serve every Store method
        self._opens = opens
        self._opened: Store | None = None
        self._early: list[Callable[[Store], object]] = []
        self._turns = 0
        self._scheduled = False
        self._outcome: Future[Store] = Future()
        self._opening_lock = threading.Lock()  # memory/context methods ask from threads too

    def __getattr__(self, name: str) -> Any:
        """An attribute a :class:`Store` method reaches (``log``, ``engine``…): the opened
        store's, once it is open."""
        if name in _OWN or name.startswith("__"):
            raise AttributeError(name)  # not set yet (a copy being made): nothing to open
        return getattr(self.opened(), name)

    def opened(self) -> Store:
        """The opened store: opens it in this thread unless the worker has begun (then waits
        for it), then gives it the turn ids and checkpoints handed out before."""
        with self._opening_lock:
            if self._opened is None:
                if self._pending():
                    self._outcome.set_running_or_notify_cancel()
                    self._open()
                store = self._outcome.result()
                for early in self._early:
                    early(store)
                self._early.clear()
                self._opened = store
            return self._opened

    def _pending(self) -> bool:
        """Whether the opening has not begun, in the worker or in a caller's thread."""
        return not (self._outcome.running() or self._outcome.done())

    def _open(self) -> None:
        """Open the store and its session (the outcome is running), in the worker or in the
        thread that needs it first; the outcome raises what failed in the thread that asks."""
        try:
            store, session = self._opens()
            if session != FIRST_SESSION:
                store.close()
                raise RunError(
                    f"another run made the database {store.url} at the same moment and took "
                    f"session {FIRST_SESSION}: run again"
                )
            self._outcome.set_result(store)
        except BaseException as error:
            self._outcome.set_exception(error)

    def _open_soon(self) -> None:
        """Have the event loop start the worker when it is back (once the turns that were
        ready have sent their requests); outside a loop, the store opens when needed."""
        if not self._scheduled:
            self._scheduled = True
            with contextlib.suppress(RuntimeError):  # no running loop
                asyncio.get_running_loop().call_soon(self._start_worker)

    def _start_worker(self) -> None:
        with self._opening_lock:
            if not self._pending():  # opened meanwhile
                return
            self._outcome.set_running_or_notify_cancel()
        threading.Thread(target=self._open, name="fems-store-opening", daemon=True).start()

    def _fresh(self, session: int) -> bool:
        """Whether a read of ``session`` is answered as the empty database would."""
        return self._opened is None and session == FIRST_SESSION

    def new_turn(self, session: int) -> int:
        if not self._fresh(session):
            return super().new_turn(session)
        self._open_soon()
        self._turns += 1
        self._early.append(lambda store: store.new_turn(session))
        return self._turns

    def submit(
        self, session: int, new: Iterable[NewMessage], checkpoint: Checkpoint | None = None
    ) -> Batch:
        """A checkpoint alone waits for the opening; messages open the store first."""
        new = list(new)
        if new or not self._fresh(session):
            return super().submit(session, new, checkpoint)
        self._early.append(lambda store: store.submit(session, (), checkpoint))
        return Batch(session, 0, 0, self._turns, [])

    def visible_lines(
        self,
        session: int,
        soul: str | None = None,
        user: str | None = None,
        *,
        last: int | None = None,
    ) -> list[ContextLine]:
        if not self._fresh(session):
            return super().visible_lines(session, soul, user, last=last)
        return []

    def visible_since(
        self,
        session: int,
        soul: str | None = None,
        user: str | None = None,
        *,
        after: int = 0,
        last: int | None = None,
    ) -> tuple[list[tuple[int, ContextLine]], int]:
        if not self._fresh(session):
            return super().visible_since(session, soul, user, after=after, last=last)
        return [], after

    def persona(self, soul_id: str) -> str:
        return "" if self._opened is None else super().persona(soul_id)

    def profiles(self, user_ids: Iterable[str]) -> str:
        return "" if self._opened is None else super().profiles(user_ids)
