"""Databases as earlier runtimes made them, for the migration tests of the SQLite suite
(tests/runtime/test_store.py) and the PostgreSQL one (tests_postgres)."""

from __future__ import annotations

import sqlalchemy
from fems_runtime.store import database_url

# fems_sessions as runtimes made it before lineage (§16.4a): no parent, no branch_turn
SESSIONS_BEFORE_LINEAGE = """
CREATE TABLE fems_sessions (
    id INTEGER NOT NULL,
    title TEXT,
    script TEXT,
    script_hash VARCHAR(64),
    status VARCHAR(16) NOT NULL,
    last_seq INTEGER NOT NULL,
    last_turn INTEGER NOT NULL,
    created FLOAT NOT NULL,
    PRIMARY KEY (id)
)
"""


def database_before_lineage(database: str) -> None:
    """Make ``database`` hold a sessions table without lineage, with one finished session
    (1, "an earlier run", three turns)."""
    engine = sqlalchemy.create_engine(database_url(database))
    with engine.begin() as db:
        db.exec_driver_sql(SESSIONS_BEFORE_LINEAGE)
        db.exec_driver_sql(
            "INSERT INTO fems_sessions (id, title, script, script_hash, status, last_seq, "
            "last_turn, created) VALUES (1, 'an earlier run', 'game.fems', 'h', 'completed', "
            "0, 3, 0.0)"
        )
    engine.dispose()


def session_columns(engine: sqlalchemy.Engine) -> set[str]:
    """The columns of the database's sessions table."""
    return {column["name"] for column in sqlalchemy.inspect(engine).get_columns("fems_sessions")}
