"""The sessions table (§3, §14): starting or continuing a session, its status and counters,
and its lineage (§16.4a): the session it was forked from and the turn it branched at, so the
sessions of a database form a tree."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fems_runtime.records import RunError
from fems_runtime.store.database import SESSION_LOCK, Database, serialize
from fems_runtime.store.schema import tables
from fems_runtime.words import SESSION_SPEC

OnCreate = Callable[[Any, int], None]
"""Called with the connection and the new session's number inside the transaction that
creates a session, to write what a tool keeps beside it (a batch's tag)."""


@dataclass
class SessionNode:
    """A session in the tree of forks (§17.1): its row (``id``, ``title``, ``status``,
    ``parent``, ``branch_turn``, …) and the sessions forked from it, oldest first."""

    session: dict[str, Any]
    children: list[SessionNode] = field(default_factory=list)


def parse_session_spec(spec: str | int | None) -> tuple[int | None, bool]:
    """``new``/None → (None, True); ``N`` → (N, False); ``N / new`` → (N, True), by the
    grammar of :data:`~fems_runtime.words.SESSION_SPEC` (§3). Sessions are numbered from 1,
    as ``--reuse`` and ``--fork`` name them."""
    if spec is None:
        return None, True
    wrong = f"session must be 'new', N or 'N / new' (N ≥ 1), not {spec!r}"
    if isinstance(spec, bool):
        raise RunError(wrong)
    if isinstance(spec, int):
        if spec < 1:
            raise RunError(wrong)
        return spec, False
    if not str(spec).strip():
        return None, True
    found = SESSION_SPEC.fullmatch(str(spec))
    if found is None:
        raise RunError(wrong)
    if found["number"] is None:
        return None, True
    return int(found["number"]), found["or_new"] is not None


class SessionCatalog:
    """The sessions of a database: their rows, numbering and status."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._t = tables()

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
        """Start or continue a session per ``meta.session`` (§3); never prompts. A new
        session forked from the session ``parent`` records it, with ``branch_turn``: how many
        of the parent's turns it begins with (None until known, see :meth:`set_branch_turn`).
        A new session's ``on_create`` writes in the same transaction as its row, so a batch
        never loses track of a session it started."""
        number, create = parse_session_spec(spec)
        if branch_turn is not None and (parent is None or branch_turn < 0):
            raise ValueError(f"branch turn {branch_turn} needs a parent session and must be >= 0")
        info = {
            "title": title,
            "script": script,
            "script_hash": script_hash,
            "parent": parent,
            "branch_turn": branch_turn,
        }
        retries = 5
        while True:
            try:
                return self._open_session(number, create, info, on_create)
            except self._t.sa.exc.IntegrityError as error:
                # another process created the same number first (not on SQLite or PostgreSQL,
                # where numbering is serialized): take the next one, or continue ``N``
                retries -= 1
                if retries == 0:
                    raise RunError(f"cannot open a session: {error.orig}") from None

    def _open_session(
        self,
        number: int | None,
        create: bool,
        info: dict[str, Any],
        on_create: OnCreate | None,
    ) -> int:
        t, sa = self._t, self._t.sa
        with self._db.write() as db:
            if info["parent"] is not None:
                self._check_parent(db, info["parent"])
            if number is not None:
                exists = db.execute(
                    sa.select(t.sessions.c.id).where(t.sessions.c.id == number)
                ).first()
                if exists is not None:
                    if info["parent"] is not None:
                        raise RunError(
                            f"session {number} already exists: a fork starts a new session "
                            "(use 'new' or a number no session has)"
                        )
                    db.execute(
                        t.sessions.update()
                        .where(t.sessions.c.id == number)
                        .values(status="running")
                    )
                    return number
                if not create:
                    raise RunError(
                        f"session {number} does not exist (use 'new' or '{number} / new')"
                    )
            else:
                serialize(db, SESSION_LOCK)
                number = (db.execute(sa.select(sa.func.max(t.sessions.c.id))).scalar() or 0) + 1
            db.execute(
                t.sessions.insert().values(
                    id=number,
                    status="running",
                    last_seq=0,
                    last_turn=0,
                    created=time.time(),
                    **info,
                )
            )
            if on_create is not None:
                on_create(db, number)
        return number

    def _check_parent(self, db: Any, parent: int) -> None:
        sessions = self._t.sessions
        found = db.execute(self._t.sa.select(sessions.c.id).where(sessions.c.id == parent))
        if found.first() is None:
            raise RunError(f"cannot fork session {parent}: it does not exist")

    def session(self, session: int) -> dict[str, Any] | None:
        """The session's row, or None."""
        t = self._t
        with self._db.read() as db:
            row = (
                db.execute(t.sa.select(t.sessions).where(t.sessions.c.id == session))
                .mappings()
                .first()
            )
        return dict(row) if row is not None else None

    def sessions(self) -> list[dict[str, Any]]:
        """Every session, newest first (the stage's session list, §17)."""
        t = self._t
        with self._db.read() as db:
            rows = db.execute(t.sa.select(t.sessions).order_by(t.sessions.c.id.desc())).mappings()
            return [dict(row) for row in rows]

    def latest_session(self, script: str) -> int | None:
        """The newest session run from the script named ``script``."""
        t, sa = self._t, self._t.sa
        with self._db.read() as db:
            return db.execute(
                sa.select(sa.func.max(t.sessions.c.id)).where(t.sessions.c.script == script)
            ).scalar()

    def set_status(self, session: int, status: str) -> None:
        t = self._t
        with self._db.write() as db:
            db.execute(t.sessions.update().where(t.sessions.c.id == session).values(status=status))

    def set_last_turn(self, session: int, value: int, *, at_least: bool = False) -> None:
        """Set the session's turn counter (``at_least``: only raise it) for a resumed run."""
        t = self._t
        where = t.sessions.c.id == session
        if at_least:
            where = where & (t.sessions.c.last_turn < value)
        with self._db.write() as db:
            db.execute(t.sessions.update().where(where).values(last_turn=value))

    def set_branch_turn(self, session: int, turn: int) -> None:
        """Record the turn a forked session branched at once it is known (a rerun that reuses
        its parent's turns goes live at the first turn whose request differs, §16.4a)."""
        t = self._t
        if turn < 0:
            raise ValueError(f"branch turn must be >= 0, not {turn}")
        with self._db.write() as db:
            row = db.execute(
                t.sa.select(t.sessions.c.parent).where(t.sessions.c.id == session)
            ).first()
            if row is None:
                raise RunError(f"session {session} does not exist")
            if row.parent is None:
                raise RunError(f"session {session} was not forked: it has no branch turn")
            db.execute(
                t.sessions.update().where(t.sessions.c.id == session).values(branch_turn=turn)
            )

    def lineage(self, session: int) -> list[dict[str, Any]]:
        """The session's row, its parent's, and so on up to the session it all began from
        (``[]`` if the session does not exist)."""
        t = self._t
        chain: list[dict[str, Any]] = []
        with self._db.read() as db:
            current: int | None = session
            while current is not None and all(row["id"] != current for row in chain):
                row = (
                    db.execute(t.sa.select(t.sessions).where(t.sessions.c.id == current))
                    .mappings()
                    .first()
                )
                if row is None:  # a parent removed from the database by hand: the chain ends
                    break
                chain.append(dict(row))
                current = row["parent"]
        return chain

    def session_tree(self) -> list[SessionNode]:
        """Every session as a tree of forks (§17.1): the sessions that were not forked (or
        whose parent is gone), newest first, each with the sessions forked from it. A
        session's parent exists when it is created and never changes, so there are no
        cycles."""
        rows = self.sessions()
        nodes = {row["id"]: SessionNode(row) for row in rows}
        roots = []
        for row in reversed(rows):  # oldest first, so children come in the order they began
            parent = nodes.get(row["parent"])
            if parent is None:
                roots.append(nodes[row["id"]])
            else:
                parent.children.append(nodes[row["id"]])
        return roots[::-1]
