"""Dialog storage (§14): sessions, souls, users, messages with scope-tag rows, checkpoints.

SQLAlchemy Core over any URL; a plain path (the default ``./dialog.db``) is a SQLite file in WAL
mode with a busy timeout. SQLAlchemy is imported when the first store is opened, not when this
package is imported.

The store is in parts over one database: the message log (:mod:`.messages`: the messages, their
one writer and the scope reads), the sessions table (:mod:`.sessions`), the souls, users and
actors (:mod:`.people`), and the checkpoints (:mod:`.checkpoints`); the tables are in
:mod:`.schema`. :class:`Store` opens the engine, creates the schema and holds the transactions,
and offers each part's methods as its own (``store.submit`` is ``store.log.submit``), so code
that needs one part, such as a turn writing its messages, can be given that part alone.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

from fems_runtime.records import RunError
from fems_runtime.store.checkpoints import Checkpoints
from fems_runtime.store.database import (
    DEFAULT_DATABASE,
    SCHEMA_LOCK,
    create_engine,
    database_url,
    hide_password,
    serialize,
)
from fems_runtime.store.database import bulk_insert as _bulk_insert
from fems_runtime.store.messages import (
    CONTEXT_COLUMNS,
    MESSAGE_KINDS,
    VISIBLE_KINDS,
    Checkpoint,
    ContextLine,
    Message,
    MessageLog,
    NewMessage,
    _visible_statement,
)
from fems_runtime.store.people import ACTOR_FIELDS, People
from fems_runtime.store.schema import Tables, create_schema, tables
from fems_runtime.store.sessions import SessionCatalog, SessionNode, parse_session_spec

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

_P = ParamSpec("_P")
_R = TypeVar("_R")


class _Served(Generic[_P, _R]):
    """A method of the store that one of its parts serves: in the class body,
    ``submit = _Served("log", MessageLog.submit)`` makes ``store.submit(…)`` call
    ``store.log.submit(…)``, with its signature and docstring."""

    def __init__(self, part: str, method: Callable[Concatenate[Any, _P], _R]) -> None:
        self._part = part
        self._name = method.__name__
        self.__doc__ = method.__doc__

    @overload
    def __get__(self, store: None, owner: type) -> _Served[_P, _R]: ...

    @overload
    def __get__(self, store: object, owner: type) -> Callable[_P, _R]: ...

    def __get__(self, store: object | None, owner: type) -> Any:
        if store is None:
            return self
        return getattr(getattr(store, self._part), self._name)


class Store:
    """One database of dialogs. Methods are synchronous and called from one thread at a time
    (a run's event loop); ``a``-prefixed ones do their waiting in a worker thread."""

    def __init__(self, database: str | Path | None = None) -> None:
        self.tables = tables()
        sa = self.tables.sa
        self.url = database_url(database)
        self._lock = threading.RLock()
        self._sqlite = self.url.startswith("sqlite")
        self.log = MessageLog(self)
        self.catalog = SessionCatalog(self)
        self.people = People(self)
        self.checkpoints = Checkpoints(self, self.log)
        try:
            self.engine, self._shared = create_engine(sa, self.url)
            with self.schema_change() as db:
                create_schema(db)
        except (sa.exc.SQLAlchemyError, ImportError, ValueError) as error:
            reason = getattr(error, "orig", None) or error
            message = f"cannot open database {database or DEFAULT_DATABASE}: {reason}"
            raise RunError(hide_password(message, database)) from None

    def close(self) -> None:
        """Write what was submitted, then release the database."""
        try:
            self.flush()
        finally:
            self.engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ connections

    @contextlib.contextmanager
    def read(self, *, wait: bool = True) -> Iterator[Any]:
        """A read-only connection that sees every submitted write (``wait`` False: for tables
        the message log's writer does not write); an in-memory database has a single shared
        connection, so its reads take the write lock too."""
        if wait:
            self.log.flush()
        if self._shared:
            with self._lock, self.engine.connect() as db:
                yield db
        else:
            with self.engine.connect() as db:
                yield db

    @contextlib.contextmanager
    def write(self) -> Iterator[Any]:
        """One write transaction after the submitted ones; it may change what the message log
        counted of a session, so the log loads its counters again when next needed."""
        self.log.flush()
        with self.transaction() as db:
            yield db
        self.log.forget()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Any]:
        """One write transaction. On SQLite it starts with ``BEGIN IMMEDIATE`` so that two
        processes never both read and then fail to upgrade to a write lock."""
        with self._lock, self.engine.connect() as db:
            if self._sqlite:
                db.exec_driver_sql("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.rollback()
                raise
            db.commit()

    @contextlib.contextmanager
    def schema_change(self) -> Iterator[Any]:
        """A write transaction for creating tables, safe when many processes open a new
        database at once: ``create_all`` checks, then creates, so two first starts could both
        decide to create a table; this transaction holds the database's write lock (and, on
        PostgreSQL, whose DDL is transactional, an advisory lock), so a second process sees the
        tables the first made. Tools that keep tables beside the runtime's use it too."""
        with self.write() as db:
            serialize(db, SCHEMA_LOCK)
            yield db

    # ------------------------------------------------------------------ the parts' methods

    # the message log
    add_message = _Served("log", MessageLog.add_message)
    add_messages = _Served("log", MessageLog.add_messages)
    aadd_message = _Served("log", MessageLog.aadd_message)
    aadd_messages = _Served("log", MessageLog.aadd_messages)
    submit = _Served("log", MessageLog.submit)
    flush = _Served("log", MessageLog.flush)
    listen = _Served("log", MessageLog.listen)
    new_turn = _Served("log", MessageLog.new_turn)
    messages = _Served("log", MessageLog.messages)
    visible_messages = _Served("log", MessageLog.visible_messages)
    avisible_messages = _Served("log", MessageLog.avisible_messages)
    visible_lines = _Served("log", MessageLog.visible_lines)
    visible_since = _Served("log", MessageLog.visible_since)
    scope_of = _Served("log", MessageLog.scope_of)
    message_scopes = _Served("log", MessageLog.message_scopes)
    session_usage = _Served("log", MessageLog.session_usage)
    # the sessions table
    open_session = _Served("catalog", SessionCatalog.open_session)
    aopen_session = _Served("catalog", SessionCatalog.aopen_session)
    session = _Served("catalog", SessionCatalog.session)
    sessions = _Served("catalog", SessionCatalog.sessions)
    latest_session = _Served("catalog", SessionCatalog.latest_session)
    set_status = _Served("catalog", SessionCatalog.set_status)
    set_last_turn = _Served("catalog", SessionCatalog.set_last_turn)
    set_branch_turn = _Served("catalog", SessionCatalog.set_branch_turn)
    lineage = _Served("catalog", SessionCatalog.lineage)
    session_tree = _Served("catalog", SessionCatalog.session_tree)
    # souls, users and a session's actors
    put_soul = _Served("people", People.put_soul)
    put_user = _Served("people", People.put_user)
    soul = _Served("people", People.soul)
    user = _Served("people", People.user)
    persona = _Served("people", People.persona)
    load_personas = _Served("people", People.load_personas)
    profiles = _Served("people", People.profiles)
    seed = _Served("people", People.seed)
    seed_file = _Served("people", People.seed_file)
    record_actor = _Served("people", People.record_actor)
    record_actors = _Served("people", People.record_actors)
    session_actors = _Served("people", People.session_actors)
    # checkpoints
    save_checkpoint = _Served("checkpoints", Checkpoints.save_checkpoint)
    asave_checkpoint = _Served("checkpoints", Checkpoints.asave_checkpoint)
    start_run = _Served("checkpoints", Checkpoints.start_run)
    run_records = _Served("checkpoints", Checkpoints.run_records)
    run_rows = _Served("checkpoints", Checkpoints.run_rows)
    last_checkpoint = _Served("checkpoints", Checkpoints.last_checkpoint)
