"""The runtime's tables (§14) and how a database made by an earlier runtime gains what it lacks.

Tables are built on first use, so importing the runtime does not import SQLAlchemy. When a store
opens a database, a missing table is created (``create_all``), and a column added to a table
after its first release (listed in :data:`ADDED_COLUMNS`) is added to an older database's table.
Columns are only ever added, and nullable, so an older runtime still reads and writes a newer
database.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from fems_runtime.imports import import_large

# columns added to a table after its first release, as (table, column): a store that opens an
# older database adds them (SQLite and PostgreSQL both add a nullable column in place)
ADDED_COLUMNS = (
    ("fems_sessions", "parent"),
    ("fems_sessions", "branch_turn"),
)


@dataclass(frozen=True)
class Tables:
    """SQLAlchemy (``sa``), the metadata and the runtime's tables."""

    sa: Any
    meta: Any
    sessions: Any
    souls: Any
    users: Any
    messages: Any
    message_souls: Any
    message_users: Any
    checkpoints: Any
    session_actors: Any


@functools.cache
def tables() -> Tables:
    """The runtime's tables, built once."""
    sa: Any = import_large("sqlalchemy")
    meta = sa.MetaData()
    return Tables(
        sa=sa,
        meta=meta,
        sessions=_sessions(sa, meta),
        souls=_people(sa, meta, "soul", "persona"),
        users=_people(sa, meta, "user", "profile"),
        messages=_messages(sa, meta),
        message_souls=_scope_tags(sa, meta, "soul"),
        message_users=_scope_tags(sa, meta, "user"),
        checkpoints=_checkpoints(sa, meta),
        session_actors=_session_actors(sa, meta),
    )


def create_schema(db: Any) -> None:
    """Create the missing tables and add the missing columns, in ``db``'s transaction (whose
    caller holds the database's schema lock, so two first starts never both create)."""
    schema = tables()
    schema.meta.create_all(db)
    inspector = schema.sa.inspect(db)
    present: dict[str, set[str]] = {}
    for table, column in ADDED_COLUMNS:
        if table not in present:
            present[table] = {found["name"] for found in inspector.get_columns(table)}
        if column not in present[table]:
            definition = schema.sa.schema.CreateColumn(schema.meta.tables[table].c[column])
            db.exec_driver_sql(
                f"ALTER TABLE {table} ADD COLUMN {definition.compile(dialect=db.dialect)}"
            )


def _sessions(sa: Any, meta: Any) -> Any:
    return sa.Table(
        "fems_sessions",
        meta,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("title", sa.Text),
        sa.Column("script", sa.Text),
        sa.Column("script_hash", sa.String(64)),
        sa.Column("status", sa.String(16), nullable=False, default="running"),
        sa.Column("last_seq", sa.Integer, nullable=False, default=0),
        sa.Column("last_turn", sa.Integer, nullable=False, default=0),
        sa.Column("created", sa.Float, nullable=False),
        # lineage (§16.4a): the session this one was forked from, and how many of that
        # session's turns it began with (its turns 1..branch_turn are the parent's)
        sa.Column("parent", sa.Integer),
        sa.Column("branch_turn", sa.Integer),
    )


def _people(sa: Any, meta: Any, who: str, text: str) -> Any:
    """``fems_souls`` (id, name, persona) or ``fems_users`` (id, name, profile)."""
    return sa.Table(
        f"fems_{who}s",
        meta,
        sa.Column(f"{who}_id", sa.String(200), primary_key=True),
        sa.Column("name", sa.Text),
        sa.Column(text, sa.Text),
    )


def _messages(sa: Any, meta: Any) -> Any:
    return sa.Table(
        "fems_messages",
        meta,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("session_id", sa.Integer, sa.ForeignKey("fems_sessions.id"), nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("turn", sa.Integer),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("action", sa.Text),
        sa.Column("node", sa.Text),
        sa.Column("speaker_soul", sa.String(200)),
        sa.Column("speaker_user", sa.String(200)),
        sa.Column("speaker_name", sa.Text),
        sa.Column("content", sa.Text, nullable=False),
        sa.Column("model", sa.Text),
        sa.Column("prompt_tokens", sa.Integer),
        sa.Column("completion_tokens", sa.Integer),
        sa.Column("cost", sa.Float),
        sa.Column("created", sa.Float, nullable=False),
        sa.UniqueConstraint("session_id", "seq", name="fems_messages_session_seq"),
    )


def _scope_tags(sa: Any, meta: Any, who: str) -> Any:
    """Scope tags as rows (§14): message ↔ soul or user, indexed so that "the messages this
    soul may see in this session" is one index range scan in sequence order."""
    return sa.Table(
        f"fems_message_{who}s",
        meta,
        sa.Column("message_id", sa.Integer, sa.ForeignKey("fems_messages.id"), primary_key=True),
        sa.Column(f"{who}_id", sa.String(200), primary_key=True),
        sa.Column("session_id", sa.Integer, nullable=False),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Index(f"fems_message_{who}s_scan", "session_id", f"{who}_id", "seq"),
    )


def _checkpoints(sa: Any, meta: Any) -> Any:
    return sa.Table(
        "fems_checkpoints",
        meta,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("session_id", sa.Integer, nullable=False, index=True),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("step", sa.Integer, nullable=False),
        sa.Column("node", sa.Text),
        sa.Column("state", sa.Text, nullable=False),
        sa.Column("created", sa.Float, nullable=False),
    )


def _session_actors(sa: Any, meta: Any) -> Any:
    return sa.Table(
        "fems_session_actors",
        meta,
        sa.Column("session_id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(200), primary_key=True),
        sa.Column("type", sa.String(8), nullable=False),
        sa.Column("soul_id", sa.String(200), nullable=False),
        sa.Column("source", sa.Text),
        sa.Column("blueprint", sa.Text),
        sa.Column("created", sa.Float, nullable=False),
    )
