"""Opening a database (§14) and what the store's parts need of it.

A plain path (the default ``./dialog.db``) is a SQLite file in WAL mode with a busy timeout;
anything with ``://`` is a SQLAlchemy URL used as is. The parts of the store (the message log,
the sessions, people, checkpoints) reach the database through :class:`Database`, which
:class:`~fems_runtime.store.open_database.OpenDatabase` implements: its reads see every message
submitted to the log, and its writes come after them.
"""

from __future__ import annotations

import functools
import re
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote

from fems_runtime.store.schema import tables

DEFAULT_DATABASE = "./dialog.db"
BUSY_TIMEOUT_MS = 30_000
# PostgreSQL advisory lock keys: creating the tables, numbering a new session
SCHEMA_LOCK, SESSION_LOCK = 0x66656D73, 0x66656D74


class Database(Protocol):
    """The store as its parts use it: three kinds of connection."""

    def read(self, *, wait: bool = True) -> AbstractContextManager[Any]:
        """A connection that sees every submitted write (``wait`` False: for tables the
        message log's writer does not write, so nothing needs writing first)."""
        ...

    def write(self) -> AbstractContextManager[Any]:
        """A write transaction after the submitted ones."""
        ...

    def transaction(self) -> AbstractContextManager[Any]:
        """A bare write transaction: the message log's writer commits its batches in one."""
        ...


def database_url(database: str | Path | None) -> str:
    """A SQLAlchemy URL for ``meta.database`` / ``--db``: a URL as is, ``:memory:``, or a path
    (relative to the working directory) to a SQLite file."""
    text = str(database or DEFAULT_DATABASE)
    if "://" in text:
        return text
    if text == ":memory:":
        return "sqlite://"
    return f"sqlite:///{Path(text).expanduser().resolve()}"


_URL_PASSWORD = re.compile(r"[\w+.-]+://[^:/?#@\s]*:(?P<password>[^@/?#\s]+)@")


def hide_password(text: str, database: str | Path | None) -> str:
    """``text`` with the password of the database URL ``database`` replaced by ``***`` wherever
    it appears, as written and URL-decoded (error messages quote URLs and driver texts)."""
    match = _URL_PASSWORD.match(str(database or ""))
    if match is None:
        return text
    for secret in sorted({match["password"], unquote(match["password"])}, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def create_engine(sa: Any, url: str) -> tuple[Any, bool]:
    """An engine for ``url`` and whether its one connection is shared (an in-memory SQLite
    database, whose reads must then take the store's lock like its writes)."""
    options: dict[str, Any] = {}
    shared = False
    if url.startswith("sqlite"):
        options["connect_args"] = {"check_same_thread": False, "timeout": BUSY_TIMEOUT_MS / 1000}
        if url in ("sqlite://", "sqlite:///:memory:"):
            from sqlalchemy.pool import StaticPool

            options["poolclass"] = StaticPool
            shared = True
    engine = sa.create_engine(url, **options)
    if url.startswith("sqlite"):
        sa.event.listen(engine, "connect", _sqlite_pragmas)
    return engine, shared


def _sqlite_pragmas(connection: Any, _record: Any) -> None:
    cursor = connection.cursor()
    cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA journal_mode = WAL")
    cursor.execute("PRAGMA synchronous = NORMAL")
    cursor.close()


def serialize(db: Any, key: int) -> None:
    """Hold the lock ``key`` until ``db``'s transaction ends, so that concurrent check-then-write
    steps (create missing tables, take the next session number) run one at a time. SQLite
    needs nothing: its write transactions start with ``BEGIN IMMEDIATE``."""
    if db.dialect.name == "postgresql":
        db.exec_driver_sql(f"SELECT pg_advisory_xact_lock({key})")


def bulk_insert(db: Any, table: str, columns: tuple[str, ...], rows: list[tuple[Any, ...]]) -> None:
    """Insert rows (values of ``columns``, in that order) into the runtime's table ``table``
    (the table ``fems_<table>`` of :class:`~fems_runtime.store.schema.Tables`) with one ``executemany``
    straight to the driver: SQLAlchemy's own per-row work was ten times the driver's, and most
    of a batch's cost."""
    sql, order = _driver_insert(table, db.dialect, columns)
    if order is None:  # the driver takes named parameters
        db.exec_driver_sql(sql, [dict(zip(columns, row, strict=True)) for row in rows])
    elif order == columns:
        db.exec_driver_sql(sql, rows)
    else:
        where = [columns.index(name) for name in order]
        db.exec_driver_sql(sql, [tuple(row[i] for i in where) for row in rows])


@functools.lru_cache
def _driver_insert(table: str, dialect: Any, columns: tuple[str, ...]) -> tuple[str, Any]:
    """The driver's SQL of ``INSERT INTO fems_<table>`` for ``columns``, and the order of its
    parameters when the driver's are positional (else None)."""
    insert = tables().meta.tables[f"fems_{table}"].insert()
    compiled = insert.compile(dialect=dialect, column_keys=list(columns))
    return compiled.string, tuple(compiled.positiontup) if compiled.positional else None
