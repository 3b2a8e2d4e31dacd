"""Dialog storage (§14): sessions, souls, users, messages with scope-tag rows, checkpoints.

SQLAlchemy Core over any URL; a plain path (the default ``./dialog.db``) is a SQLite file in WAL
mode with a busy timeout. SQLAlchemy is imported when the first store is opened, not when this
package is imported.

The store is in parts over one database: the message log (:mod:`.messages`: the messages, their
one writer and the scope reads), the sessions table (:mod:`.sessions`), the souls, users and
actors (:mod:`.people`), and the checkpoints (:mod:`.checkpoints`); the tables are in
:mod:`.schema`. :class:`~.open_database.OpenDatabase` opens the engine, creates the schema, holds
the transactions and the parts; :class:`Store` offers each part's methods as its own:
``store.submit`` calls the log's ``submit``, so a caller needs to know the store, not which part
serves a method.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from fems_runtime.store.checkpoints import RecordRow
from fems_runtime.store.database import DEFAULT_DATABASE, database_url, hide_password
from fems_runtime.store.database import bulk_insert as _bulk_insert
from fems_runtime.store.messages import (
    CONTEXT_COLUMNS,
    MESSAGE_KINDS,
    VISIBLE_KINDS,
    Batch,
    Checkpoint,
    ContextLine,
    Message,
    MessageLog,
    NewMessage,
    _visible_statement,
)
from fems_runtime.store.open_database import OpenDatabase
from fems_runtime.store.people import ACTOR_FIELDS
from fems_runtime.store.schema import Tables
from fems_runtime.store.sessions import OnCreate, SessionNode, parse_session_spec

__all__ = [
    "ACTOR_FIELDS",
    "CONTEXT_COLUMNS",
    "DEFAULT_DATABASE",
    "MESSAGE_KINDS",
    "VISIBLE_KINDS",
    "Checkpoint",
    "ContextLine",
    "Message",
    "MessageLog",
    "NewMessage",
    "SessionNode",
    "Store",
    "Tables",
    "_bulk_insert",  # bench/bench_context.py loads messages with it
    "_visible_statement",  # tests/runtime/test_store.py checks its query plan
    "database_url",
    "hide_password",
    "parse_session_spec",
]


class Store:
    """One database of dialogs. Methods are synchronous and called from one thread at a time
    (a run's event loop); ``a``-prefixed ones do their waiting in a worker thread. Each
    reaches the database through :meth:`database`, opened when the store is made or, with
    ``opens``, when a method first needs it."""

    def __init__(
        self,
        database: str | Path | None = None,
        *,
        opens: Callable[[], OpenDatabase] | None = None,
    ) -> None:
        """``opens``: how to open the database later, instead of ``database`` now (a new
        session's store opens behind the run's first request: :mod:`.opening`)."""
        self._opens = opens or (lambda: OpenDatabase(database))
        self._database = None if opens else self._opens()
        self._opening_lock = threading.RLock()  # memory/context methods ask from threads too

    def database(self) -> OpenDatabase:
        """The open database, opened now if it was deferred and nothing opened it yet."""
        if self._database is None:
            with self._opening_lock:
                if self._database is None:
                    self._database = self._opens()
        return self._database

    async def opened(self) -> None:
        """Wait until the database is open (it is, unless it opens behind the first request:
        :class:`.opening.OpeningStore` waits without holding the event loop)."""
        self.database()

    def close(self) -> None:
        """Write what was submitted, then release the database."""
        self.database().close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ connections

    def read(self, *, wait: bool = True) -> AbstractContextManager[Any]:
        """:meth:`OpenDatabase.read`."""
        return self.database().read(wait=wait)

    def write(self) -> AbstractContextManager[Any]:
        """:meth:`OpenDatabase.write`."""
        return self.database().write()

    def transaction(self) -> AbstractContextManager[Any]:
        """:meth:`OpenDatabase.transaction`."""
        return self.database().transaction()

    def schema_change(self) -> AbstractContextManager[Any]:
        """:meth:`OpenDatabase.schema_change`."""
        return self.database().schema_change()

    # ------------------------------------------------------------------ the parts' methods

    # the message log
    def add_message(self, session: int, kind: str, content: str, **fields: Any) -> Message:
        """:meth:`MessageLog.add_message`."""
        return self.database().log.add_message(session, kind, content, **fields)

    def add_messages(
        self, session: int, new: Iterable[NewMessage], checkpoint: Checkpoint | None = None
    ) -> list[Message]:
        """:meth:`MessageLog.add_messages`."""
        return self.database().log.add_messages(session, new, checkpoint)

    def submit(
        self, session: int, new: Iterable[NewMessage], checkpoint: Checkpoint | None = None
    ) -> Batch:
        """:meth:`MessageLog.submit`."""
        return self.database().log.submit(session, new, checkpoint)

    def flush(self) -> None:
        """:meth:`MessageLog.flush`."""
        self.database().log.flush()

    def listen(self, listener: Callable[[list[Message]], None]) -> None:
        """:meth:`MessageLog.listen`."""
        self.database().log.listen(listener)

    def new_turn(self, session: int) -> int:
        """:meth:`MessageLog.new_turn`."""
        return self.database().log.new_turn(session)

    def messages(self, session: int) -> list[Message]:
        """:meth:`MessageLog.messages`."""
        return self.database().log.messages(session)

    def visible_messages(
        self, session: int, soul: str | None = None, user: str | None = None
    ) -> list[Message]:
        """:meth:`MessageLog.visible_messages`."""
        return self.database().log.visible_messages(session, soul, user)

    def visible_lines(
        self,
        session: int,
        soul: str | None = None,
        user: str | None = None,
        *,
        last: int | None = None,
    ) -> list[ContextLine]:
        """:meth:`MessageLog.visible_lines`."""
        return self.database().log.visible_lines(session, soul, user, last=last)

    def visible_since(
        self,
        session: int,
        soul: str | None = None,
        user: str | None = None,
        *,
        after: int = 0,
        last: int | None = None,
    ) -> tuple[list[tuple[int, ContextLine]], int]:
        """:meth:`MessageLog.visible_since`."""
        return self.database().log.visible_since(session, soul, user, after=after, last=last)

    def scope_of(self, message_id: int) -> tuple[list[str], list[str]]:
        """:meth:`MessageLog.scope_of`."""
        return self.database().log.scope_of(message_id)

    def message_scopes(self, session: int) -> dict[int, tuple[list[str], list[str]]]:
        """:meth:`MessageLog.message_scopes`."""
        return self.database().log.message_scopes(session)

    def session_usage(self, session: int) -> dict[str, Any]:
        """:meth:`MessageLog.session_usage`."""
        return self.database().log.session_usage(session)

    # the sessions table
    def open_session(
        self,
        spec: str | int | None = "new",
        *,
        title: str | None = None,
        script: str | None = None,
        script_hash: str | None = None,
        parent: int | None = None,
        branch_turn: int | None = None,
        on_create: OnCreate | None = None,
    ) -> int:
        """:meth:`SessionCatalog.open_session`."""
        return self.database().catalog.open_session(
            spec,
            title=title,
            script=script,
            script_hash=script_hash,
            parent=parent,
            branch_turn=branch_turn,
            on_create=on_create,
        )

    def session(self, session: int) -> dict[str, Any] | None:
        """:meth:`SessionCatalog.session`."""
        return self.database().catalog.session(session)

    def sessions(self) -> list[dict[str, Any]]:
        """:meth:`SessionCatalog.sessions`."""
        return self.database().catalog.sessions()

    def latest_session(self, script: str) -> int | None:
        """:meth:`SessionCatalog.latest_session`."""
        return self.database().catalog.latest_session(script)

    def set_status(self, session: int, status: str) -> None:
        """:meth:`SessionCatalog.set_status`."""
        self.database().catalog.set_status(session, status)

    def set_last_turn(self, session: int, value: int, *, at_least: bool = False) -> None:
        """:meth:`SessionCatalog.set_last_turn`."""
        self.database().catalog.set_last_turn(session, value, at_least=at_least)

    def set_branch_turn(self, session: int, turn: int) -> None:
        """:meth:`SessionCatalog.set_branch_turn`."""
        self.database().catalog.set_branch_turn(session, turn)

    def lineage(self, session: int) -> list[dict[str, Any]]:
        """:meth:`SessionCatalog.lineage`."""
        return self.database().catalog.lineage(session)

    def session_tree(self) -> list[SessionNode]:
        """:meth:`SessionCatalog.session_tree`."""
        return self.database().catalog.session_tree()

    # souls, users and a session's actors
    def put_soul(self, soul_id: str, name: str | None = None, persona: str | None = None) -> None:
        """:meth:`People.put_soul`."""
        self.database().people.put_soul(soul_id, name, persona)

    def put_user(self, user_id: str, name: str | None = None, profile: str | None = None) -> None:
        """:meth:`People.put_user`."""
        self.database().people.put_user(user_id, name, profile)

    def soul(self, soul_id: str) -> dict[str, Any] | None:
        """:meth:`People.soul`."""
        return self.database().people.soul(soul_id)

    def user(self, user_id: str) -> dict[str, Any] | None:
        """:meth:`People.user`."""
        return self.database().people.user(user_id)

    def persona(self, soul_id: str) -> str:
        """:meth:`People.persona`."""
        return self.database().people.persona(soul_id)

    def load_personas(self, soul_ids: Iterable[str]) -> None:
        """:meth:`People.load_personas`."""
        self.database().people.load_personas(soul_ids)

    def profiles(self, user_ids: Iterable[str]) -> str:
        """:meth:`People.profiles`."""
        return self.database().people.profiles(user_ids)

    def seed(self, data: Mapping[str, Any]) -> None:
        """:meth:`People.seed`."""
        self.database().people.seed(data)

    def seed_file(self, path: str | Path) -> None:
        """:meth:`People.seed_file`."""
        self.database().people.seed_file(path)

    def record_actors(self, session: int, actors: Mapping[str, Mapping[str, Any]]) -> None:
        """:meth:`People.record_actors`."""
        self.database().people.record_actors(session, actors)

    def session_actors(self, session: int) -> list[dict[str, Any]]:
        """:meth:`People.session_actors`."""
        return self.database().people.session_actors(session)

    # checkpoints
    def save_checkpoint(
        self, session: int, *, step: int, state: Mapping[str, Any], node: str | None = None
    ) -> int:
        """:meth:`Checkpoints.save_checkpoint`."""
        return self.database().checkpoints.save_checkpoint(
            session, step=step, state=state, node=node
        )

    def start_run(self, session: int) -> None:
        """:meth:`Checkpoints.start_run`."""
        self.database().checkpoints.start_run(session)

    def run_records(self, session: int) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
        """:meth:`Checkpoints.run_records`."""
        return self.database().checkpoints.run_records(session)

    def run_rows(self, session: int) -> tuple[dict[str, Any], list[RecordRow]] | None:
        """:meth:`Checkpoints.run_rows`."""
        return self.database().checkpoints.run_rows(session)

    def last_checkpoint(self, session: int) -> dict[str, Any] | None:
        """:meth:`Checkpoints.last_checkpoint`."""
        return self.database().checkpoints.last_checkpoint(session)
