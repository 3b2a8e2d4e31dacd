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

from fems_runtime.records import RunError
from fems_runtime.store import Checkpoint, ContextLine, NewMessage, Store
from fems_runtime.store.database import DEFAULT_DATABASE
from fems_runtime.store.messages import Batch
from fems_runtime.store.open_database import OpenDatabase

#: the number of a fresh database's first session (the sessions table numbers from 1)
FIRST_SESSION = 1


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
    behind the first request. ``opens`` opens a store and its new session; this store takes
    that store's database as its own (:meth:`Store.database`).

    Until it opens, it answers what a turn asks before its request as the empty database would
    (no persona, no profile, no visible message, turn ids from 1) and keeps, in order, the turn
    ids handed out and the checkpoints submitted meanwhile, to give them to the opened store.
    Anything else it is asked (a turn's messages, a session row, closing) opens it first, in
    the caller's thread. The opening itself runs in a worker thread that the event loop starts
    after the turns ready to run have sent their requests (the first turn id schedules it), so
    it overlaps the wait for the replies.
    """

    def __init__(self, opens: Callable[[], tuple[Store, int]]) -> None:
        super().__init__(opens=self._opened)
        self._opens_session = opens
        self._early: list[Callable[[Store], object]] = []
        self._turns = 0
        self._scheduled = False
        self._outcome: Future[Store] = Future()

    def _opened(self) -> OpenDatabase:
        """The opened store's database (:meth:`Store.database` asks, holding the opening lock):
        opens it in this thread unless the worker has begun (then waits for it), then gives it
        the turn ids and checkpoints handed out before."""
        if self._pending():
            self._outcome.set_running_or_notify_cancel()
            self._open()
        store = self._outcome.result()
        for early in self._early:
            early(store)
        self._early.clear()
        return store.database()

    def _pending(self) -> bool:
        """Whether the opening has not begun, in the worker or in a caller's thread."""
        return not (self._outcome.running() or self._outcome.done())

    def _open(self) -> None:
        """Open the store and its session (the outcome is running), in the worker or in the
        thread that needs it first; the outcome raises what failed in the thread that asks."""
        try:
            store, session = self._opens_session()
            if session != FIRST_SESSION:
                url = store.database().url
                store.close()
                raise RunError(
                    f"another run made the database {url} at the same moment and took session "
                    f"{FIRST_SESSION}: run again"
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

    async def opened(self) -> None:
        """Wait for the opening in the worker (started now if it was not), the event loop
        free meanwhile: the other turns' requests go out while SQLAlchemy loads."""
        if self._database is None:
            self._start_worker()
            await asyncio.wrap_future(self._outcome)
        self.database()

    def _fresh(self, session: int) -> bool:
        """Whether a read of ``session`` is answered as the empty database would."""
        return self._database is None and session == FIRST_SESSION

    def new_turn(self, session: int) -> int:
        with self._opening_lock:  # not while another thread gives the opened store the early ones
            if self._fresh(session):
                self._open_soon()
                self._turns += 1
                self._early.append(lambda store: store.new_turn(session))
                return self._turns
        return super().new_turn(session)

    def submit(
        self, session: int, new: Iterable[NewMessage], checkpoint: Checkpoint | None = None
    ) -> Batch:
        """A checkpoint alone waits for the opening; messages open the store first."""
        new = list(new)
        with self._opening_lock:
            if not new and self._fresh(session):
                self._early.append(lambda store: store.submit(session, (), checkpoint))
                return Batch(session, 0, 0, self._turns, [])
        return super().submit(session, new, checkpoint)

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
        return "" if self._database is None else super().persona(soul_id)

    def profiles(self, user_ids: Iterable[str]) -> str:
        return "" if self._database is None else super().profiles(user_ids)
