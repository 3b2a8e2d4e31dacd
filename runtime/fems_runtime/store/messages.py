"""The message log (§13.1, §14): messages with their scope tags, the one writer, and the reads
of "the messages this soul may see".

A run writes its session alone, and fast: the log hands out sequence numbers and turn ids from
counters it keeps (:class:`_SessionLog`), and :meth:`MessageLog.submit` queues a turn's
messages for the log's one writer (:class:`_Writer`), which commits every batch waiting in one
transaction (group commit). A turn never waits for the database and never hops threads. Reads
write what is pending first, so they see it. The writer advances the session's counter with a
compare-and-set, so a second process writing the same session at the same time fails loudly
instead of interleaving sequence numbers. The lines each soul and user may see of the messages
submitted are kept in memory too, so a context reads only what is new (§13.2).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import dataclasses
import functools
import heapq
import itertools
import json
import operator
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fems_runtime.records import RunError
from fems_runtime.store.database import Database, bulk_insert
from fems_runtime.store.schema import tables
from fems_runtime.words import MESSAGE_KINDS, VISIBLE_KINDS

GROUP_COMMIT_S = 0.05  # how long a submitted turn may wait to be written with the next ones


@dataclass(frozen=True)
class MessageBody:
    """What a message's writer says of it (§13.1): ``kind`` is one of
    :data:`~fems_runtime.words.MESSAGE_KINDS`; its turn, action and node, who spoke, and the
    model and usage of the call that wrote it. :class:`Message` is it as stored,
    :class:`NewMessage` as it is handed to the store."""

    kind: str
    content: str
    turn: int | None = None
    action: str | None = None
    node: str | None = None
    speaker_soul: str | None = None
    speaker_user: str | None = None
    speaker_name: str | None = None
    model: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cost: float | None = None


@dataclass(frozen=True, kw_only=True)
class Message(MessageBody):
    """One stored message: its body and what the store gave it, its id, session, sequence
    number and time."""

    id: int
    session: int
    seq: int
    created: float = 0.0


@dataclass(frozen=True, kw_only=True)
class NewMessage(MessageBody):
    """A message to store: its body and its scope (the ``souls`` and ``users`` that may see
    it)."""

    souls: Iterable[str] = ()
    users: Iterable[str] = ()


_BODY_FIELDS = tuple(field.name for field in dataclasses.fields(MessageBody))
_body = operator.attrgetter(*_BODY_FIELDS)  # a message's body as a tuple, in field order
_STORED_FIELDS = (*_BODY_FIELDS, "id", "session", "seq", "created")  # a stored row's order


def _stored(row: Sequence[Any]) -> Message:
    """A message from a row of :data:`_STORED_FIELDS`, read positionally (building messages
    from mappings was most of a read's cost)."""
    *body, message_id, session, seq, created = row
    return Message(*body, id=message_id, session=session, seq=seq, created=created)


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint row to save with messages (a turn's record, §16.4): JSON-ready ``state``,
    run step and node."""

    state: Mapping[str, Any]
    step: int = 0
    node: str | None = None


CHECKPOINT_COLUMNS = ("session_id", "seq", "step", "node", "state", "created")
# a checkpoint's state as JSON; one encoder for every row (json.dumps builds one per call)
_STATE_JSON = json.JSONEncoder(ensure_ascii=False, sort_keys=True)


def checkpoint_row(
    session: int, seq: int, checkpoint: Checkpoint, created: float, **extra: Any
) -> tuple[Any, ...]:
    """A checkpoint row (:data:`CHECKPOINT_COLUMNS`); ``seq`` is the session's last sequence
    number when it was taken; ``extra`` entries are added to its state."""
    state = _STATE_JSON.encode({**checkpoint.state, **extra})
    return (session, seq, checkpoint.step, checkpoint.node, state, created)


ContextLine = tuple[str, str | None, str | None, str]
"""``(kind, speaker_name, speaker_soul, content)``: the part of a visible message the built-in
context text is made of (§13.2); plain rows, because a context reads tens of thousands."""
CONTEXT_COLUMNS = ("kind", "speaker_name", "speaker_soul", "content")
_SeqLine = tuple[int, ContextLine]  # a visible line with its sequence number

_NO_LIMIT = 2**31 - 1  # above every sequence number (the column is a 32-bit integer on PostgreSQL)


@dataclass
class _SessionLog:
    """What a store knows of a session it writes: the counters it hands out without a database
    round trip, and the visible lines of the messages it submitted, by soul and by user.

    ``base`` is the session's last sequence number in the database when the log was loaded:
    lines up to it are read from the database, lines after it from here.
    """

    base: int
    last_seq: int
    last_turn: int
    saved_turn: int  # the turn counter as the session row will hold it once submitted
    souls: dict[str, list[_SeqLine]] = field(default_factory=dict)
    users: dict[str, list[_SeqLine]] = field(default_factory=dict)

    def index(self, seq: int, new: NewMessage) -> None:
        """Remember a visible message's line under every soul and user of its scope."""
        if new.kind not in VISIBLE_KINDS:
            return
        entry = (seq, (new.kind, new.speaker_name, new.speaker_soul, new.content))
        for key, table in ((new.souls, self.souls), (new.users, self.users)):
            for who in {str(i) for i in key}:
                table.setdefault(who, []).append(entry)

    def visible(self, soul: str | None, user: str | None, after: int, last: int) -> list[_SeqLine]:
        """The lines ``soul`` or ``user`` may see with a sequence number in (after, last]."""
        parts = [
            _between(table.get(str(who), []), after, last)
            for who, table in ((soul, self.souls), (user, self.users))
            if who is not None
        ]
        if len(parts) == 1:
            return parts[0]
        merged = heapq.merge(*parts, key=_seq_of)
        # a message both the soul and the user may see comes twice: keep it once
        return [next(group) for _, group in itertools.groupby(merged, key=_seq_of)]


def _seq_of(entry: _SeqLine) -> int:
    return entry[0]


def _between(entries: list[_SeqLine], after: int, last: int) -> list[_SeqLine]:
    """The entries (in sequence order) with a sequence number in (after, last]."""
    start = bisect.bisect_right(entries, after, key=_seq_of)
    if last >= _NO_LIMIT:
        return entries[start:]
    return entries[start : bisect.bisect_right(entries, last, key=_seq_of)]


@dataclass
class Batch:
    """One submission for the writer: a session's messages (sequence numbers already given),
    its counters before and after, and a checkpoint; the writer fills ``ids``."""

    session: int
    seq_from: int
    seq_to: int
    last_turn: int
    messages: list[tuple[int, NewMessage, float]]
    checkpoint: tuple[Any, ...] | None = None
    ids: list[int] = field(default_factory=list)

    def stored(self) -> list[Message]:
        """The messages as written (once the writer has given them their ids)."""
        return [
            Message(*_body(message), id=i, session=self.session, seq=seq, created=created)
            for i, (seq, message, created) in zip(self.ids, self.messages, strict=True)
        ]


class _Writer:
    """The log's one writer: batches wait in memory and are written together, in one
    transaction, at most ``GROUP_COMMIT_S`` after the first of them (group commit) or when the
    store is read, flushed or closed. Inside an event loop the write runs as a callback on
    it, so a turn never waits for the database and no thread fights the loop for the GIL.

    A failed write fails every later submit and flush with the same error (the batches after
    it would leave gaps), so the run stops at its next store operation with the reason.
    """

    def __init__(self, commit: Callable[[list[Batch]], None]) -> None:
        self._commit = commit
        self._pending: list[Batch] = []
        self._timer: asyncio.TimerHandle | None = None
        self.error: BaseException | None = None

    def submit(self, batch: Batch) -> None:
        self._check()
        self._pending.append(batch)
        if self._timer is None:
            with contextlib.suppress(RuntimeError):  # no running loop: the caller flushes
                loop = asyncio.get_running_loop()
                self._timer = loop.call_later(GROUP_COMMIT_S, self._write_quietly)

    def flush(self) -> None:
        """Write every pending batch now."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._check()
        if self._pending:
            batches, self._pending = self._pending, []
            try:
                self._commit(batches)
            except BaseException as error:
                self.error = error
                raise

    def _write_quietly(self) -> None:
        """The timer's write: a failure is kept for the run's next store operation."""
        self._timer = None
        with contextlib.suppress(Exception):
            self.flush()

    def _check(self) -> None:
        if self.error is not None:
            raise self.error


class MessageLog:
    """The messages of a database's sessions: written through one writer, read by scope.
    Methods are synchronous and called from one thread at a time (a run's event loop)."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._t = tables()
        self._writer = _Writer(self._commit)
        self._listeners: list[Callable[[list[Message]], None]] = []
        self._logs: dict[int, _SessionLog] = {}

    # ------------------------------------------------------------------ counters

    def new_turn(self, session: int) -> int:
        """The next turn id of the session (one per model, human or mind turn); the session
        row learns it with the next write."""
        log = self._log(session)
        log.last_turn += 1
        return log.last_turn

    def _log(self, session: int) -> _SessionLog:
        """The session's log, loaded from its row on first use."""
        log = self._logs.get(session)
        if log is None:
            sessions = self._t.sessions
            with self._db.read() as db:
                row = db.execute(
                    self._t.sa.select(sessions.c.last_seq, sessions.c.last_turn).where(
                        sessions.c.id == session
                    )
                ).first()
            if row is None:
                raise RunError(f"session {session} does not exist")
            log = self._logs[session] = _SessionLog(
                row.last_seq, row.last_seq, row.last_turn, row.last_turn
            )
        return log

    def forget(self) -> None:
        """Drop the counters kept of each session: a write outside the log changed the session
        rows, so they are loaded again when next needed."""
        self._logs.clear()

    # ------------------------------------------------------------------ writing

    def add_message(self, session: int, kind: str, content: str, **fields: Any) -> Message:
        """Store one message with its scope tags; ``fields`` are those of :class:`NewMessage`."""
        return self.add_messages(session, [NewMessage(kind, content, **fields)])[0]

    def add_messages(
        self, session: int, new: Iterable[NewMessage], checkpoint: Checkpoint | None = None
    ) -> list[Message]:
        """:meth:`submit`, then wait for the write: the stored messages with their ids."""
        batch = self.submit(session, new, checkpoint)
        self.flush()
        return batch.stored()

    def submit(
        self, session: int, new: Iterable[NewMessage], checkpoint: Checkpoint | None = None
    ) -> Batch:
        """Queue messages for the writer, in order, each with the session's next sequence
        number and its scope tags (the souls and users that may see it); they are written in
        one transaction, with ``checkpoint`` (a turn record, §16.4) whose state notes
        ``before``: the last sequence number before these messages. Returns at once."""
        new = list(new)
        for message in new:
            if message.kind not in MESSAGE_KINDS:
                raise ValueError(
                    f"message kind must be one of {tuple(MESSAGE_KINDS)}, not {message.kind!r}"
                )
        log = self._log(session)
        return self._submit(session, log, new, checkpoint)

    def _submit(
        self,
        session: int,
        log: _SessionLog,
        new: list[NewMessage],
        checkpoint: Checkpoint | None,
    ) -> Batch:
        now = time.time()
        batch = Batch(session, log.last_seq, log.last_seq + len(new), log.last_turn, [])
        for seq, message in enumerate(new, start=log.last_seq + 1):
            batch.messages.append((seq, message, now))
            log.index(seq, message)
        if checkpoint is not None:
            extra = {"before": batch.seq_from} if new else {}
            batch.checkpoint = checkpoint_row(session, batch.seq_to, checkpoint, now, **extra)
        log.last_seq, log.saved_turn = batch.seq_to, log.last_turn
        self._writer.submit(batch)
        return batch

    def flush(self) -> None:
        """Wait until every submitted message, counter and checkpoint is written; a failed
        write is raised here (and by every later store operation)."""
        for session, log in self._logs.items():
            if log.last_turn != log.saved_turn:
                self._submit(session, log, [], None)
        self._writer.flush()

    def listen(self, listener: Callable[[list[Message]], None]) -> None:
        """Call ``listener`` with the messages of each write once they are committed (the
        stage, §17), in the writing thread."""
        self._listeners.append(listener)

    def _commit(self, batches: Sequence[Batch]) -> None:
        """The writer's transaction for ``batches``: per session one compare-and-set of its
        counters, then every message, scope tag and checkpoint in one statement each."""
        sa = self._t.sa
        try:
            with self._db.transaction() as db:
                counters = _advance_counters(db, batches)
                _insert_messages(db, batches, counters)
                checkpoints = [b.checkpoint for b in batches if b.checkpoint is not None]
                if checkpoints:
                    bulk_insert(db, "checkpoints", CHECKPOINT_COLUMNS, checkpoints)
        except RunError:
            raise
        except sa.exc.SQLAlchemyError as error:
            reason = getattr(error, "orig", None) or error
            raise RunError(f"cannot write to the database: {reason}") from None
        if self._listeners:
            written = [message for batch in batches for message in batch.stored()]
            for listener in self._listeners:
                listener(written)

    # ------------------------------------------------------------------ reading

    def messages(self, session: int) -> list[Message]:
        """Every message of the session, in sequence order."""
        messages = self._t.messages
        query = (
            self._t.sa.select(*_message_columns(messages))
            .where(messages.c.session_id == session)
            .order_by(messages.c.seq)
        )
        with self._db.read() as db:
            rows = db.execute(query).all()
        return [_stored(row) for row in rows]

    def visible_messages(
        self, session: int, soul: str | None = None, user: str | None = None
    ) -> list[Message]:
        """The messages whose soul scope holds ``soul`` or whose user scope holds ``user``,
        oldest first, without private prompts (§13.2)."""
        return [_stored(row) for row in self._visible(session, soul, user, narrow=False)]

    def visible_lines(
        self,
        session: int,
        soul: str | None = None,
        user: str | None = None,
        *,
        last: int | None = None,
    ) -> list[ContextLine]:
        """:meth:`visible_messages` narrowed to what the built-in context text needs; ``last``
        keeps only messages with a sequence number up to it (a resumed turn's context)."""
        return [line for _, line in self.visible_since(session, soul, user, last=last)[0]]

    def visible_since(
        self,
        session: int,
        soul: str | None = None,
        user: str | None = None,
        *,
        after: int = 0,
        last: int | None = None,
    ) -> tuple[list[tuple[int, ContextLine]], int]:
        """The lines of :meth:`visible_lines` with a sequence number above ``after`` (and up to
        ``last``), each with its sequence number: what a context kept since ``after`` lacks.
        Also the sequence number they bring the reader up to (the next call's ``after``).

        Lines of the messages this log submitted come from its session log; older ones from
        one range scan of the tag index, so the cost is that of the new lines (§13.2).
        """
        log = self._logs.get(session)
        if soul is None and user is None:
            return [], after
        if log is None:  # a session this log does not write: all from the database
            rows = self._visible(session, soul, user, narrow=True, after=after, last=last)
            lines = [(row[0], tuple(row[1:])) for row in rows]
            return lines, lines[-1][0] if lines else after
        top = log.last_seq if last is None else min(last, log.last_seq)
        lines = []
        if after < min(log.base, top):  # committed before this log loaded the session
            rows = self._visible(
                session, soul, user, narrow=True, after=after, last=min(log.base, top), wait=False
            )
            lines = [(row[0], tuple(row[1:])) for row in rows]
        if top > log.base:
            lines += log.visible(soul, user, max(after, log.base), top)
        return lines, max(after, top)

    def _visible(
        self,
        session: int,
        soul: str | None,
        user: str | None,
        *,
        narrow: bool,
        after: int = 0,
        last: int | None = None,
        wait: bool = True,
    ) -> Any:
        if soul is None and user is None:
            return []
        statement = _visible_statement(soul is not None, user is not None, narrow)
        params = {
            "session": session,
            "soul": _text_or_none(soul),
            "user": _text_or_none(user),
            "after": after,
            "last": _NO_LIMIT if last is None else last,
        }
        with self._db.read(wait=wait) as db:
            return db.execute(statement, params).all()

    def scope_of(self, message_id: int) -> tuple[list[str], list[str]]:
        """The souls and users a message is tagged with."""
        t, sa = self._t, self._t.sa
        with self._db.read() as db:
            souls = db.execute(
                sa.select(t.message_souls.c.soul_id).where(
                    t.message_souls.c.message_id == message_id
                )
            ).scalars()
            users = db.execute(
                sa.select(t.message_users.c.user_id).where(
                    t.message_users.c.message_id == message_id
                )
            ).scalars()
            return sorted(souls), sorted(users)

    def message_scopes(self, session: int) -> dict[int, tuple[list[str], list[str]]]:
        """:meth:`scope_of` for every tagged message of the session at once: id → (souls,
        users), each sorted."""
        t, sa = self._t, self._t.sa
        scopes: dict[int, tuple[list[str], list[str]]] = {}
        with self._db.read() as db:
            for index, (table, column) in enumerate(
                ((t.message_souls, "soul_id"), (t.message_users, "user_id"))
            ):
                rows = db.execute(
                    sa.select(table.c.message_id, table.c[column])
                    .where(table.c.session_id == session)
                    .order_by(table.c.message_id, table.c[column])
                )
                for message_id, tag in rows:
                    scopes.setdefault(message_id, ([], []))[index].append(tag)
        return scopes

    def session_usage(self, session: int) -> dict[str, Any]:
        """The model calls of a session and what they used: ``{"model_calls",
        "prompt_tokens", "completion_tokens", "cost"}`` (a call's figures are stored once,
        with its reply or its first tool call)."""
        m, sa = self._t.messages, self._t.sa
        with self._db.read() as db:
            row = db.execute(
                sa.select(
                    sa.func.count(m.c.model),
                    sa.func.coalesce(sa.func.sum(m.c.prompt_tokens), 0),
                    sa.func.coalesce(sa.func.sum(m.c.completion_tokens), 0),
                    sa.func.coalesce(sa.func.sum(m.c.cost), 0.0),
                ).where(m.c.session_id == session)
            ).one()
        calls, prompt, completion, cost = row
        return {
            "model_calls": int(calls),
            "prompt_tokens": int(prompt),
            "completion_tokens": int(completion),
            "cost": float(cost),
        }


def _advance_counters(db: Any, batches: Sequence[Batch]) -> dict[int, list[int]]:
    """Move each session's counters over ``batches`` with one compare-and-set, failing if
    another run moved them; returns session → [seq before, seq after, last turn]."""
    counters: dict[int, list[int]] = {}
    for batch in batches:
        counter = counters.setdefault(batch.session, [batch.seq_from, 0, 0])
        counter[1:] = [batch.seq_to, batch.last_turn]
    for session, (seq_from, seq_to, turn) in counters.items():
        params = {"session": session, "seq_from": seq_from, "seq_to": seq_to, "turn": turn}
        if db.execute(_advance_statement(), params).rowcount != 1:
            raise RunError(
                f"session {session} was written by another run at the same time: a session "
                "is run by one process at a time (start a new session, or let the other "
                "run finish)"
            )
    return counters


def _insert_messages(db: Any, batches: Sequence[Batch], counters: dict[int, list[int]]) -> None:
    """Insert the batches' messages, give each batch its messages' ids, then insert their
    scope tags."""
    rows = [
        (batch.session, seq, created, *_body(message))
        for batch in batches
        for seq, message, created in batch.messages
    ]
    if not rows:
        return
    bulk_insert(db, "messages", ("session_id", "seq", "created", *_BODY_FIELDS), rows)
    ids = {  # the new messages' ids, by (session, seq)
        (session, seq): message_id
        for session, (seq_from, seq_to, _) in counters.items()
        for message_id, seq in db.execute(
            _message_ids_statement(),
            {"session": session, "seq_from": seq_from, "seq_to": seq_to},
        )
    }
    souls: list[tuple[int, str, int, int]] = []
    users: list[tuple[int, str, int, int]] = []
    for batch in batches:
        for seq, message, _ in batch.messages:
            message_id = ids[batch.session, seq]
            batch.ids.append(message_id)
            for tags, who in ((souls, message.souls), (users, message.users)):
                tags += ((message_id, i, batch.session, seq) for i in {str(i) for i in who})
    for table, key, tags in (
        ("message_souls", "soul_id", souls),
        ("message_users", "user_id", users),
    ):
        if tags:
            bulk_insert(db, table, ("message_id", key, "session_id", "seq"), tags)


@functools.cache
def _advance_statement() -> Any:
    """Move a session's counters from what this log last wrote to its new values, only if
    nobody else moved them (a compare-and-set; parameters ``session``, ``seq_from``,
    ``seq_to``, ``turn``). Built once: building statements per call was a large share of a
    model turn's cost."""
    t = tables()
    sa, sessions = t.sa, t.sessions
    return (
        sessions.update()
        .where(
            sessions.c.id == sa.bindparam("session"),
            sessions.c.last_seq == sa.bindparam("seq_from"),
        )
        .values(last_seq=sa.bindparam("seq_to"), last_turn=sa.bindparam("turn"))
    )


_MESSAGE_COLUMN_NAMES = tuple(
    "session_id" if name == "session" else name for name in _STORED_FIELDS
)


def _message_columns(messages: Any) -> list[Any]:
    """The message table's columns in the order :func:`_stored` reads a row."""
    return [messages.c[name] for name in _MESSAGE_COLUMN_NAMES]


@functools.cache
def _visible_statement(by_soul: bool, by_user: bool, narrow: bool) -> Any:
    """The messages one soul and/or user may see (§13.2), oldest first, built once per shape.

    Each scope is a join driven by the tag index ``(session, soul|user, seq)``, so a single
    scope comes back in sequence order without a sort; two scopes are a union ordered by
    ``seq``. ``narrow`` selects ``seq`` and the :data:`ContextLine` columns, else the
    :class:`Message` columns. Parameters: ``session``, ``soul``, ``user``, and the sequence
    numbers kept: above ``after``, up to ``last``.
    """
    t = tables()
    sa, messages = t.sa, t.messages
    names = ("seq", *CONTEXT_COLUMNS) if narrow else _MESSAGE_COLUMN_NAMES
    scopes = [(t.message_souls, "soul")] if by_soul else []
    scopes += [(t.message_users, "user")] if by_user else []

    def select_scope(tags: Any, key: str) -> Any:
        return (
            sa.select(*(messages.c[name] for name in names))
            .join_from(tags, messages, messages.c.id == tags.c.message_id)
            .where(
                tags.c.session_id == sa.bindparam("session"),
                tags.c[f"{key}_id"] == sa.bindparam(key),
                tags.c.seq > sa.bindparam("after"),
                tags.c.seq <= sa.bindparam("last"),
                messages.c.kind.in_(VISIBLE_KINDS),
            )
        )

    if len(scopes) == 1:
        tags, key = scopes[0]
        return select_scope(tags, key).order_by(tags.c.seq)
    either = sa.union(*(select_scope(tags, key) for tags, key in scopes)).subquery()
    return sa.select(*(either.c[name] for name in names)).order_by(either.c.seq)


@functools.cache
def _message_ids_statement() -> Any:
    """``(id, seq)`` of a session's messages in a range of sequence numbers; parameters
    ``session``, ``seq_from`` (excluded), ``seq_to``."""
    t = tables()
    sa, messages = t.sa, t.messages
    return sa.select(messages.c.id, messages.c.seq).where(
        messages.c.session_id == sa.bindparam("session"),
        messages.c.seq > sa.bindparam("seq_from"),
        messages.c.seq <= sa.bindparam("seq_to"),
    )


def _text_or_none(value: Any) -> str | None:
    return None if value is None else str(value)
