"""An open database of dialogs (§14): its engine, its connections and the store's parts over it.

:class:`fems_runtime.store.Store` offers the parts' methods as its own and reaches them through
one :class:`OpenDatabase`, opened when the store is made or, for a new session's store,
behind the run's first request (:mod:`.opening`).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
from fems_runtime.store.messages import MessageLog
from fems_runtime.store.people import People
from fems_runtime.store.schema import create_schema, tables
from fems_runtime.store.sessions import SessionCatalog


class OpenDatabase:
    """The engine of ``database`` (``--db``, ``meta.database``; None: the default), its tables
    made if missing, and the parts that read and write it (the message log, the sessions,
    people, checkpoints) through its connections."""

    def __init__(self, database: str | Path | None) -> None:
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
            self.log.flush()
        finally:
            self.engine.dispose()

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
