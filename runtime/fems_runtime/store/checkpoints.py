"""Checkpoints (§16.4): a run's start marks and turn records, from which ``--resume`` replays.

A turn's record is written with its messages, in the message log's transaction (a
:class:`~fems_runtime.store.messages.Checkpoint` given to
:meth:`~fems_runtime.store.messages.MessageLog.submit`); :class:`Checkpoints` reads them back
and writes the marks that are not a turn's.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from fems_runtime.records import RunError
from fems_runtime.store.database import Database, bulk_insert
from fems_runtime.store.messages import (
    CHECKPOINT_COLUMNS,
    Checkpoint,
    MessageLog,
    checkpoint_row,
)
from fems_runtime.store.schema import tables

RecordRow = tuple[dict[str, Any], int, int, str | None]
"""A turn record with its checkpoint row's ``seq``, ``step`` and ``node``."""


class Checkpoints:
    """The checkpoints of a database's sessions."""

    def __init__(self, db: Database, log: MessageLog) -> None:
        self._db = db
        self._log = log
        self._t = tables()

    def save_checkpoint(
        self, session: int, *, step: int, state: Mapping[str, Any], node: str | None = None
    ) -> int:
        """Save a checkpoint (§16.4) and wait for it: ``state`` is JSON-ready; the session's
        current sequence number is recorded with it so a resume knows which messages it
        already has. Returns its id. Turns submit theirs with their messages."""
        self._log.submit(session, (), Checkpoint(state, step, node))
        return self.last_checkpoint(session)["id"]  # type: ignore[index]

    def start_run(self, session: int) -> None:
        """Mark the start of a run of the session (§16.4): its turn records follow, and
        ``--resume`` replays the records after the last mark."""
        t, sa = self._t, self._t.sa
        with self._db.write() as db:
            row = db.execute(
                sa.select(t.sessions.c.last_turn, t.sessions.c.last_seq).where(
                    t.sessions.c.id == session
                )
            ).first()
            if row is None:
                raise RunError(f"session {session} does not exist")
            # a resumed run that died lowered the counter: never reuse a stored turn id
            stored = db.execute(
                sa.select(sa.func.max(t.messages.c.turn)).where(t.messages.c.session_id == session)
            ).scalar()
            turn = max(row.last_turn, stored or 0)
            if turn != row.last_turn:
                db.execute(
                    t.sessions.update().where(t.sessions.c.id == session).values(last_turn=turn)
                )
            state = {"kind": "run", "turn": turn, "seq": row.last_seq}
            row = checkpoint_row(session, row.last_seq, Checkpoint(state), time.time())
            bulk_insert(db, "checkpoints", CHECKPOINT_COLUMNS, [row])

    def run_records(self, session: int) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
        """The last run's start mark and its turn records in order, or None when no run of the
        session left a mark (it ran before this runtime recorded turns)."""
        found = self.run_rows(session)
        return None if found is None else (found[0], [row[0] for row in found[1]])

    def run_rows(self, session: int) -> tuple[dict[str, Any], list[RecordRow]] | None:
        """:meth:`run_records` with each record's checkpoint row: its ``seq``, ``step`` and
        ``node`` (what a fork copies with it, §16.4a)."""
        t, sa = self._t, self._t.sa
        c = t.checkpoints.c
        with self._db.read() as db:
            rows = db.execute(
                sa.select(c.state, c.seq, c.step, c.node)
                .where(c.session_id == session)
                .order_by(c.id)
            ).all()
        states = [(json.loads(row[0]), row) for row in rows]
        starts = [
            i for i, (s, _) in enumerate(states) if isinstance(s, dict) and s.get("kind") == "run"
        ]
        if not starts:
            return None
        start = starts[-1]
        records = [
            (state, row[1], row[2], row[3])
            for state, row in states[start + 1 :]
            if isinstance(state, dict) and "key" in state
        ]
        return states[start][0], records

    def last_checkpoint(self, session: int) -> dict[str, Any] | None:
        """The newest checkpoint: ``{"id", "seq", "step", "node", "state"}`` or None."""
        t, sa = self._t, self._t.sa
        with self._db.read() as db:
            row = (
                db.execute(
                    sa.select(t.checkpoints)
                    .where(t.checkpoints.c.session_id == session)
                    .order_by(t.checkpoints.c.id.desc())
                    .limit(1)
                )
                .mappings()
                .first()
            )
        if row is None:
            return None
        return {
            "id": row["id"],
            "seq": row["seq"],
            "step": row["step"],
            "node": row["node"],
            "state": json.loads(row["state"]),
        }
