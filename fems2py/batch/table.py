"""The batch's memory in the store: which session is which run of a batch, and how it ended.

A table of its own beside the runtime's (``fems_batch_runs``, created when a batch first opens
a database, so databases made before batches simply gain it, §14). A session run by
``fems2py batch`` is tagged with its batch and index in the transaction that creates its row,
so a batch never loses track of a session it started; its results row is kept with the tag
when it ends. SQLAlchemy is imported when a table is first opened (a worker starts quickly).
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fems_runtime.store import Store
from fems_runtime.store.schema import tables


@dataclass(frozen=True)
class BatchTag:
    """The place of a new session in a batch: the batch's name, the run's index in it and its
    JSON-ready settings (seed, model, variables set)."""

    batch: str
    index: int
    settings: Mapping[str, Any]


@functools.cache
def batch_runs_table() -> Any:
    """``fems_batch_runs``: one row per run of a batch, on a metadata of its own (the
    runtime's tables are only what a run needs)."""
    sa = tables().sa
    return sa.Table(
        "fems_batch_runs",
        sa.MetaData(),
        sa.Column("batch_id", sa.String(200), primary_key=True),
        sa.Column("run_index", sa.Integer, primary_key=True),
        sa.Column("session_id", sa.Integer, nullable=False, index=True),
        sa.Column("settings", sa.Text, nullable=False),
        sa.Column("result", sa.Text),
        sa.Column("created", sa.Float, nullable=False),
    )


def played_models(store: Store, session: int) -> list[str]:
    """The models a session's calls were made with, in the order it first used them: what
    its row says it played when the batch named no model."""
    t = store.database().tables
    messages, sa = t.messages, t.sa
    with store.read() as db:
        rows = db.execute(
            sa.select(messages.c.model)
            .where((messages.c.session_id == session) & messages.c.model.is_not(None))
            .group_by(messages.c.model)
            .order_by(sa.func.min(messages.c.id))
        ).all()
    return [row.model for row in rows]


class BatchTable:
    """The batch runs kept in one store's database (the table is created if it is missing)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._runs = batch_runs_table()
        with store.schema_change() as db:
            self._runs.metadata.create_all(db)

    def open_session(
        self,
        tag: BatchTag,
        *,
        title: str | None = None,
        script: str | None = None,
        script_hash: str | None = None,
    ) -> int:
        """A new session of the store, tagged with ``tag`` in the transaction that creates it."""
        return self.store.open_session(
            "new",
            title=title,
            script=script,
            script_hash=script_hash,
            on_create=self.tag_writer(tag),
        )

    def tag_writer(self, tag: BatchTag) -> Callable[[Any, int], None]:
        """What tags a session with ``tag`` inside the transaction that creates it."""

        def write_tag(db: Any, session: int) -> None:
            db.execute(
                self._runs.insert().values(
                    batch_id=tag.batch,
                    run_index=tag.index,
                    session_id=session,
                    settings=json.dumps(tag.settings, ensure_ascii=False, sort_keys=True),
                    created=time.time(),
                )
            )

        return write_tag

    def runs(self, batch: str) -> dict[int, dict[str, Any]]:
        """The runs of a batch by index: ``{"session", "status", "settings", "result"}``
        (``result`` None until the run has ended), with the session's current status."""
        runs, sessions = self._runs, self.store.database().tables.sessions
        sa = self.store.database().tables.sa
        with self.store.read() as db:
            rows = db.execute(
                sa.select(
                    runs.c.run_index,
                    runs.c.session_id,
                    runs.c.settings,
                    runs.c.result,
                    sessions.c.status,
                )
                .join(sessions, sessions.c.id == runs.c.session_id)
                .where(runs.c.batch_id == batch)
            ).all()
        return {
            row.run_index: {
                "session": row.session_id,
                "status": row.status,
                "settings": json.loads(row.settings),
                "result": json.loads(row.result) if row.result is not None else None,
            }
            for row in rows
        }

    def save_result(self, batch: str, index: int, result: Mapping[str, Any]) -> None:
        """Keep how a batch run ended (its row of the results table, JSON-ready)."""
        runs = self._runs
        where = (runs.c.batch_id == batch) & (runs.c.run_index == index)
        text = json.dumps(result, ensure_ascii=False, sort_keys=True)
        with self.store.write() as db:
            db.execute(runs.update().where(where).values(result=text))
