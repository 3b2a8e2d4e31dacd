"""Dialog storage (§14): sessions, souls, users, messages with scope-tag rows, checkpoints.

SQLAlchemy Core over any URL; a plain path (the default ``./dialog.db``) is a SQLite file in WAL
mode with a busy timeout. Scopes are rows (message ↔ soul, message ↔ user) indexed by
``(session, soul, seq)``, so the messages one soul may see in one session are an index range
scan. SQLAlchemy is imported when the first store is opened, not when this module is imported.

A run writes its session alone, and fast: the store hands out sequence numbers and turn ids
from counters it keeps (:class:`_SessionLog`), and :meth:`Store.submit` queues a turn's messages
for the store's one writer (:class:`_Writer`), which commits every batch waiting in one
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
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import unquote

from fems_runtime.imports import import_large
from fems_runtime.records import RunError

DEFAULT_DATABASE = "./dialog.db"
BUSY_TIMEOUT_MS = 30_000
# PostgreSQL advisory lock keys: creating the tables, numbering a new session
_SCHEMA_LOCK, _SESSION_LOCK = 0x66656D73, 0x66656D74
GROUP_COMMIT_S = 0.05  # how long a submitted turn may wait to be written with the next ones


@dataclass(frozen=True)
class Message:
    """One stored message (§13.1); ``kind`` is prompt, narration, reply, human, feedback, or
    tool_call / tool_result (§15.5)."""

    id: int
    session: int
    seq: int
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
    created: float = 0.0


_MESSAGE_FIELDS = tuple(field.name for field in dataclasses.fields(Message))
_ASSIGNED_FIELDS = ("id", "session", "seq", "created")  # given by the store, not the caller
_GIVEN_FIELDS = tuple(name for name in _MESSAGE_FIELDS if name not in _ASSIGNED_FIELDS)


@dataclass(frozen=True)
class NewMessage:
    """A message to store: :class:`Message` without what the store assigns, plus its scope
    (``souls`` and ``users`` that may see it)."""

    kind: str
    content: str
    souls: Iterable[str] = ()
    users: Iterable[str] = ()
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


@dataclass(frozen=True)
class BatchTag:
    """The place of a new session in a batch (``fems2py batch``): the batch's name, the run's
    index in it and its JSON-ready settings (seed, model, variables set)."""

    batch: str
    index: int
    settings: Mapping[str, Any]


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint row to save with messages: JSON-ready ``state``, run step and node."""

    state: Mapping[str, Any]
    step: int = 0
    node: str | None = None


ContextLine = tuple[str, str | None, str | None, str]
"""``(kind, speaker_name, speaker_soul, content)``: the part of a visible message the built-in
context text is made of (§13.2); plain rows, because a context reads tens of thousands."""
CONTEXT_COLUMNS = ("kind", "speaker_name", "speaker_soul", "content")
_SeqLine = tuple[int, ContextLine]  # a visible line with its sequence number

ACTOR_FIELDS = ("type", "soul_id", "source", "blueprint")  # of a session's actor row
MESSAGE_KINDS = (
    "prompt",
    "narration",
    "reply",
    "human",
    "feedback",
    "tool_call",
    "tool_result",
    "reasoning",  # in nobody's context (§13.1): not a visible kind
)
VISIBLE_KINDS = ("narration", "reply", "human", "feedback", "tool_call", "tool_result")
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
class _Batch:
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
            Message(id=i, session=self.session, seq=seq, created=created, **_fields(message))
            for i, (seq, message, created) in zip(self.ids, self.messages, strict=True)
        ]


class _Writer:
    """The store's one writer: batches wait in memory and are written together, in one
    transaction, at most ``GROUP_COMMIT_S`` after the first of them (group commit) or when the
    store is read, flushed or closed. Inside an event loop the write runs as a callback on
    it, so a turn never waits for the database and no thread fights the loop for the GIL.

    A failed write fails every later submit and flush with the same error (the batches after
    it would leave gaps), so the run stops at its next store operation with the reason.
    """

    def __init__(self, commit: Callable[[list[_Batch]], None]) -> None:
        self._commit = commit
        self._pending: list[_Batch] = []
        self._timer: asyncio.TimerHandle | None = None
        self.error: BaseException | None = None

    def submit(self, batch: _Batch) -> None:
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


@functools.cache
def _schema() -> SimpleNamespace:
    """The tables, built on first use so importing the runtime does not import SQLAlchemy."""
    sa: Any = import_large("sqlalchemy")

    meta = sa.MetaData()
    sessions = sa.Table(
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
    )
    souls = sa.Table(
        "fems_souls",
        meta,
        sa.Column("soul_id", sa.String(200), primary_key=True),
        sa.Column("name", sa.Text),
        sa.Column("persona", sa.Text),
    )
    users = sa.Table(
        "fems_users",
        meta,
        sa.Column("user_id", sa.String(200), primary_key=True),
        sa.Column("name", sa.Text),
        sa.Column("profile", sa.Text),
    )
    messages = sa.Table(
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

    def scope_tags(who: str) -> Any:
        """Scope tags as rows (§14): message ↔ soul or user, indexed so that "the messages this
        soul may see in this session" is one index range scan in sequence order."""
        return sa.Table(
            f"fems_message_{who}s",
            meta,
            sa.Column(
                "message_id", sa.Integer, sa.ForeignKey("fems_messages.id"), primary_key=True
            ),
            sa.Column(f"{who}_id", sa.String(200), primary_key=True),
            sa.Column("session_id", sa.Integer, nullable=False),
            sa.Column("seq", sa.Integer, nullable=False),
            sa.Index(f"fems_message_{who}s_scan", "session_id", f"{who}_id", "seq"),
        )

    message_souls = scope_tags("soul")
    message_users = scope_tags("user")
    checkpoints = sa.Table(
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
    session_actors = sa.Table(
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
    # a session run by `fems2py batch`: its batch and place in it, written with the session
    # row (a table of its own, so databases made before it simply gain it, §14)
    batch_runs = sa.Table(
        "fems_batch_runs",
        meta,
        sa.Column("batch_id", sa.String(200), primary_key=True),
        sa.Column("run_index", sa.Integer, primary_key=True),
        sa.Column("session_id", sa.Integer, nullable=False, index=True),
        sa.Column("settings", sa.Text, nullable=False),
        sa.Column("result", sa.Text),
        sa.Column("created", sa.Float, nullable=False),
    )
    return SimpleNamespace(
        sa=sa,
        meta=meta,
        batch_runs=batch_runs,
        sessions=sessions,
        souls=souls,
        users=users,
        messages=messages,
        message_souls=message_souls,
        message_users=message_users,
        checkpoints=checkpoints,
        session_actors=session_actors,
    )


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


def parse_session_spec(spec: str | int | None) -> tuple[int | None, bool]:
    """``new``/None → (None, True); ``N`` → (N, False); ``N / new`` → (N, True) (§3)."""
    if spec is None:
        return None, True
    if isinstance(spec, bool):
        raise RunError(f"session must be 'new', N or 'N / new', not {spec!r}")
    if isinstance(spec, int):
        return spec, False
    text = str(spec).strip()
    if text.lower() in ("", "new"):
        return None, True
    number, slash, rest = text.partition("/")
    try:
        value = int(number.strip())
    except ValueError:
        raise RunError(f"session must be 'new', N or 'N / new', not {text!r}") from None
    if slash and rest.strip().lower() != "new":
        raise RunError(f"session must be 'new', N or 'N / new', not {text!r}")
    return value, bool(slash)


class Store:
    """One database of dialogs. Methods are synchronous and called from one thread at a time
    (a run's event loop); ``a``-prefixed ones do their waiting in a worker thread."""

    def __init__(self, database: str | Path | None = None) -> None:
        schema = _schema()
        sa = schema.sa
        self.url = database_url(database)
        self._t = schema
        self._lock = threading.RLock()
        self._writer = _Writer(self._commit)
        self._listeners: list[Callable[[list[Message]], None]] = []
        self._logs: dict[int, _SessionLog] = {}
        self._personas: dict[str, str] = {}
        self._profiles: dict[tuple[str, ...], str] = {}
        options: dict[str, Any] = {}
        self._shared = False
        sqlite = self._sqlite = self.url.startswith("sqlite")
        if sqlite:
            options["connect_args"] = {
                "check_same_thread": False,
                "timeout": BUSY_TIMEOUT_MS / 1000,
            }
            if self.url in ("sqlite://", "sqlite:///:memory:"):
                from sqlalchemy.pool import StaticPool

                options["poolclass"] = StaticPool
                self._shared = True
        try:
            self.engine = sa.create_engine(self.url, **options)
            if sqlite:
                sa.event.listen(self.engine, "connect", _sqlite_pragmas)
            self._create_schema()
        except (sa.exc.SQLAlchemyError, ImportError, ValueError) as error:
            reason = getattr(error, "orig", None) or error
            message = f"cannot open database {database or DEFAULT_DATABASE}: {reason}"
            raise RunError(hide_password(message, database)) from None

    def _create_schema(self) -> None:
        """Create the missing tables, safely when many processes open a new database at once.

        ``create_all`` checks, then creates, so two first starts can both decide to create a
        table. The check and the creation run in one transaction that holds the database's
        write lock (:func:`_serialize`; PostgreSQL's DDL is transactional), so a second process
        sees the tables the first made.
        """
        with self._write() as db:
            _serialize(db, _SCHEMA_LOCK)
            self._t.meta.create_all(db)

    def close(self) -> None:
        """Write what was submitted, then release the database."""
        try:
            self.flush()
        finally:
            self.engine.dispose()

    def flush(self) -> None:
        """Wait until every submitted message, counter and checkpoint is written; a failed
        write is raised here (and by every later store operation)."""
        for session, log in self._logs.items():
            if log.last_turn != log.saved_turn:
                self._submit(session, log, [], None)
        self._writer.flush()

    @contextlib.contextmanager
    def _read(self, *, wait: bool = True) -> Iterator[Any]:
        """A read-only connection that sees every submitted write (``wait`` False: for tables
        the writer does not write); an in-memory database has a single shared connection, so
        its reads take the write lock too."""
        if wait:
            self.flush()
        if self._shared:
            with self._lock, self.engine.connect() as db:
                yield db
        else:
            with self.engine.connect() as db:
                yield db

    @contextlib.contextmanager
    def _write(self) -> Iterator[Any]:
        """One write transaction after the submitted ones; it changes what the session logs
        counted, so they are loaded again when next needed."""
        self.flush()
        with self._transaction() as db:
            yield db
        self._logs.clear()

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[Any]:
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

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ sessions

    def open_session(
        self,
        spec: str | int | None = "new",
        *,
        title: str | None = None,
        script: str | None = None,
        script_hash: str | None = None,
        batch: BatchTag | None = None,
    ) -> int:
        """Start or continue a session per ``meta.session`` (§3); never prompts. A new
        session's ``batch`` tag is written in the same transaction as its row, so a batch
        never loses track of a session it started."""
        number, create = parse_session_spec(spec)
        info = {"title": title, "script": script, "script_hash": script_hash}
        retries = 5
        while True:
            try:
                return self._open_session(number, create, info, batch)
            except self._t.sa.exc.IntegrityError as error:
                # another process created the same number first (not on SQLite or PostgreSQL,
                # where numbering is serialized): take the next one, or continue ``N``
                retries -= 1
                if retries == 0:
                    raise RunError(f"cannot open a session: {error.orig}") from None

    def _open_session(
        self, number: int | None, create: bool, info: dict[str, Any], batch: BatchTag | None
    ) -> int:
        t, sa = self._t, self._t.sa
        with self._write() as db:
            if number is not None:
                exists = db.execute(
                    sa.select(t.sessions.c.id).where(t.sessions.c.id == number)
                ).first()
                if exists is not None:
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
                _serialize(db, _SESSION_LOCK)
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
            if batch is not None:
                db.execute(
                    t.batch_runs.insert().values(
                        batch_id=batch.batch,
                        run_index=batch.index,
                        session_id=number,
                        settings=json.dumps(batch.settings, ensure_ascii=False, sort_keys=True),
                        created=time.time(),
                    )
                )
        return number

    # ------------------------------------------------------------------ batches

    def batch_runs(self, batch: str) -> dict[int, dict[str, Any]]:
        """The runs of a batch by index: ``{"session", "status", "settings", "result"}``
        (``result`` None until the run has ended), with the session's current status."""
        t, sa = self._t, self._t.sa
        runs, sessions = t.batch_runs, t.sessions
        with self._read() as db:
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

    def save_batch_result(self, batch: str, index: int, result: Mapping[str, Any]) -> None:
        """Keep how a batch run ended (its row of the results table, JSON-ready)."""
        t = self._t
        where = (t.batch_runs.c.batch_id == batch) & (t.batch_runs.c.run_index == index)
        text = json.dumps(result, ensure_ascii=False, sort_keys=True)
        with self._write() as db:
            db.execute(t.batch_runs.update().where(where).values(result=text))

    def session_usage(self, session: int) -> dict[str, Any]:
        """The model calls of a session and what they used: ``{"model_calls",
        "prompt_tokens", "completion_tokens", "cost"}`` (a call's figures are stored once,
        with its reply or its first tool call)."""
        m, sa = self._t.messages, self._t.sa
        with self._read() as db:
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

    def session(self, session: int) -> dict[str, Any] | None:
        t = self._t
        with self._read() as db:
            row = (
                db.execute(t.sa.select(t.sessions).where(t.sessions.c.id == session))
                .mappings()
                .first()
            )
        return dict(row) if row is not None else None

    def set_status(self, session: int, status: str) -> None:
        t = self._t
        with self._write() as db:
            db.execute(t.sessions.update().where(t.sessions.c.id == session).values(status=status))

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
            t = self._t
            with self._read() as db:
                row = db.execute(
                    t.sa.select(t.sessions.c.last_seq, t.sessions.c.last_turn).where(
                        t.sessions.c.id == session
                    )
                ).first()
            if row is None:
                raise RunError(f"session {session} does not exist")
            log = self._logs[session] = _SessionLog(
                row.last_seq, row.last_seq, row.last_turn, row.last_turn
            )
        return log

    # ------------------------------------------------------------------ souls and users

    def put_soul(self, soul_id: str, name: str | None = None, persona: str | None = None) -> None:
        """Create or update a soul (its persona is the system block of §13.3)."""
        self._upsert(self._t.souls, "soul_id", str(soul_id), name=name, persona=persona)

    def put_user(self, user_id: str, name: str | None = None, profile: str | None = None) -> None:
        """Create or update a user (owners' profiles form ``user_info``, §13.3)."""
        self._upsert(self._t.users, "user_id", str(user_id), name=name, profile=profile)

    def _upsert(self, table: Any, key: str, value: str, **fields: Any) -> None:
        sa = self._t.sa
        fields = {k: v for k, v in fields.items() if v is not None}
        self._personas.clear()
        self._profiles.clear()
        with self._write() as db:
            exists = db.execute(sa.select(table.c[key]).where(table.c[key] == value)).first()
            if exists is None:
                db.execute(table.insert().values({key: value, **fields}))
            elif fields:
                db.execute(table.update().where(table.c[key] == value).values(fields))

    def soul(self, soul_id: str) -> dict[str, Any] | None:
        return self._row(self._t.souls, "soul_id", str(soul_id))

    def user(self, user_id: str) -> dict[str, Any] | None:
        return self._row(self._t.users, "user_id", str(user_id))

    def _row(self, table: Any, key: str, value: str) -> dict[str, Any] | None:
        with self._read() as db:
            row = (
                db.execute(self._t.sa.select(table).where(table.c[key] == value)).mappings().first()
            )
        return dict(row) if row is not None else None

    def persona(self, soul_id: str) -> str:
        """The soul's persona text, ``""`` if unknown (read once: souls are seeded before a
        run, and writing one through this store forgets what was read)."""
        soul_id = str(soul_id)
        if soul_id not in self._personas:
            self.load_personas([soul_id])
        return self._personas[soul_id]

    def load_personas(self, soul_ids: Iterable[str]) -> None:
        """Read the personas of many souls (a run's actors) with a query per thousand."""
        missing = sorted({str(i) for i in soul_ids} - self._personas.keys())
        for start in range(0, len(missing), 1000):
            chunk = missing[start : start + 1000]
            with self._read(wait=False) as db:  # the writer never writes souls
                found = dict(db.execute(_personas_statement(), {"souls": chunk}).all())
            self._personas.update((soul, found.get(soul) or "") for soul in chunk)

    def profiles(self, user_ids: Iterable[str]) -> str:
        """The owners' profiles joined by blank lines, in the order given (``user_info``);
        read once per list, like :meth:`persona`."""
        ids = tuple(str(u) for u in user_ids)
        if not ids:
            return ""
        text = self._profiles.get(ids)
        if text is None:
            with self._read(wait=False) as db:
                found = dict(db.execute(_profiles_statement(), {"users": list(ids)}).all())
            text = self._profiles[ids] = "\n\n".join(found[u] for u in ids if found.get(u))
        return text

    def seed(self, data: Mapping[str, Any]) -> None:
        """Load souls and users from Python data::

        {"souls": {"1": {"name": "Eve", "persona": "…"}} or [{"id": "1", …}],
         "users": {"7": {"name": "Ann", "profile": "…"}} or [{"id": "7", …}]}
        """
        for soul_id, fields in _entries(data.get("souls"), "soul_id"):
            self.put_soul(soul_id, fields.get("name"), fields.get("persona"))
        for user_id, fields in _entries(data.get("users"), "user_id"):
            self.put_user(user_id, fields.get("name"), fields.get("profile"))

    def seed_file(self, path: str | Path) -> None:
        """Load souls and users from a YAML (``.yaml``/``.yml``) or JSON file (see :meth:`seed`)."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as error:
            raise RunError(f"cannot read seed file {path}: {error.strerror}") from None
        try:
            if path.suffix.lower() in (".yaml", ".yml"):
                import yaml

                data = yaml.safe_load(text) or {}
            else:
                data = json.loads(text)
        except ValueError as error:  # json.JSONDecodeError
            raise RunError(f"seed file {path} is not valid JSON: {error}") from None
        except Exception as error:  # yaml.YAMLError, without importing yaml up front
            raise RunError(f"seed file {path} is not valid YAML: {error}") from None
        if not isinstance(data, Mapping):
            raise RunError(f"seed file {path} must hold a mapping with 'souls' and/or 'users'")
        self.seed(data)

    # ------------------------------------------------------------------ messages

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
    ) -> _Batch:
        """Queue messages for the writer, in order, each with the session's next sequence
        number and its scope tags (the souls and users that may see it); they are written in
        one transaction, with ``checkpoint`` (a turn record, §16.4) whose state notes
        ``before``: the last sequence number before these messages. Returns at once."""
        new = list(new)
        for message in new:
            if message.kind not in MESSAGE_KINDS:
                raise ValueError(
                    f"message kind must be one of {MESSAGE_KINDS}, not {message.kind!r}"
                )
        log = self._log(session)
        return self._submit(session, log, new, checkpoint)

    def _submit(
        self,
        session: int,
        log: _SessionLog,
        new: list[NewMessage],
        checkpoint: Checkpoint | None,
    ) -> _Batch:
        now = time.time()
        batch = _Batch(session, log.last_seq, log.last_seq + len(new), log.last_turn, [])
        for seq, message in enumerate(new, start=log.last_seq + 1):
            batch.messages.append((seq, message, now))
            log.index(seq, message)
        if checkpoint is not None:
            extra = {"before": batch.seq_from} if new else {}
            batch.checkpoint = _checkpoint_row(session, batch.seq_to, checkpoint, now, **extra)
        log.last_seq, log.saved_turn = batch.seq_to, log.last_turn
        self._writer.submit(batch)
        return batch

    def _commit(self, batches: Sequence[_Batch]) -> None:
        """The writer's transaction for ``batches``: per session one compare-and-set of its
        counters, then every message, scope tag and checkpoint in one statement each."""
        sa = self._t.sa
        try:
            with self._transaction() as db:
                self._commit_in(db, batches)
        except RunError:
            raise
        except sa.exc.SQLAlchemyError as error:
            reason = getattr(error, "orig", None) or error
            raise RunError(f"cannot write to the database: {reason}") from None
        if self._listeners:
            written = [message for batch in batches for message in batch.stored()]
            for listener in self._listeners:
                listener(written)

    def listen(self, listener: Callable[[list[Message]], None]) -> None:
        """Call ``listener`` with the messages of each write once they are committed (the
        stage, §17), in the writing thread."""
        self._listeners.append(listener)

    def _commit_in(self, db: Any, batches: Sequence[_Batch]) -> None:
        counters: dict[int, list[int]] = {}  # session → [seq before, seq after, last turn]
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
        rows = [
            (batch.session, seq, created, *(getattr(message, name) for name in _GIVEN_FIELDS))
            for batch in batches
            for seq, message, created in batch.messages
        ]
        if rows:
            _bulk_insert(db, "messages", ("session_id", "seq", "created", *_GIVEN_FIELDS), rows)
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
                    _bulk_insert(db, table, ("message_id", key, "session_id", "seq"), tags)
        checkpoints = [batch.checkpoint for batch in batches if batch.checkpoint is not None]
        if checkpoints:
            _bulk_insert(db, "checkpoints", _CHECKPOINT_COLUMNS, checkpoints)

    def messages(self, session: int) -> list[Message]:
        """Every message of the session, in sequence order."""
        t = self._t
        query = (
            self._select_messages()
            .where(t.messages.c.session_id == session)
            .order_by(t.messages.c.seq)
        )
        return self._messages(query)

    def visible_messages(
        self, session: int, soul: str | None = None, user: str | None = None
    ) -> list[Message]:
        """The messages whose soul scope holds ``soul`` or whose user scope holds ``user``,
        oldest first, without private prompts (§13.2)."""
        return [Message(*row) for row in self._visible(session, soul, user, narrow=False)]

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

        Lines of the messages this store submitted come from its session log; older ones from
        one range scan of the tag index, so the cost is that of the new lines (§13.2).
        """
        log = self._logs.get(session)
        if soul is None and user is None:
            return [], after
        if log is None:  # a session this store does not write: all from the database
            rows = self._visible(session, soul, user, narrow=True, after=after, last=last)
            lines = [(row[0], tuple(row[1:])) for row in rows]
            return lines, lines[-1][0] if lines else after
        top = log.last_seq if last is None else min(last, log.last_seq)
        lines = []
        if after < min(log.base, top):  # committed before this store loaded the log
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
        with self._read(wait=wait) as db:
            return db.execute(statement, params).all()

    def scope_of(self, message_id: int) -> tuple[list[str], list[str]]:
        """The souls and users a message is tagged with."""
        t, sa = self._t, self._t.sa
        with self._read() as db:
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
        with self._read() as db:
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

    def sessions(self) -> list[dict[str, Any]]:
        """Every session, newest first (the stage's session list, §17)."""
        t = self._t
        with self._read() as db:
            rows = db.execute(t.sa.select(t.sessions).order_by(t.sessions.c.id.desc())).mappings()
            return [dict(row) for row in rows]

    def _select_messages(self) -> Any:
        """A select of the message columns in :class:`Message` field order, so rows become
        messages positionally (building them from mappings was most of a context's cost)."""
        return self._t.sa.select(*_message_columns(self._t.messages))

    def _messages(self, query: Any) -> list[Message]:
        with self._read() as db:
            rows = db.execute(query).all()
        return [Message(*row) for row in rows]

    # ------------------------------------------------------------------ actors and checkpoints

    def record_actor(
        self,
        session: int,
        name: str,
        *,
        type: str,
        soul: str,
        source: str | None = None,
        blueprint: str | None = None,
    ) -> None:
        """Record an actor of the session (spawned actors, §9.8); recording it again (a
        continued session) updates the row."""
        actor = {"type": type, "soul_id": soul, "source": source, "blueprint": blueprint}
        self.record_actors(session, {name: actor})

    def record_actors(self, session: int, actors: Mapping[str, Mapping[str, Any]]) -> None:
        """:meth:`record_actor` for many actors (name → type, soul_id, source, blueprint), in
        one transaction: a script may declare thousands."""
        t, sa = self._t, self._t.sa
        table = t.session_actors
        with self._write() as db:
            known = set(
                db.execute(
                    sa.select(table.c.name).where(
                        table.c.session_id == session,
                        table.c.name.in_(sa.bindparam("names", expanding=True)),
                    ),
                    {"names": list(actors)},
                ).scalars()
            )
            now = time.time()
            added = [
                {"session_id": session, "name": name, "created": now, **actors[name]}
                for name in actors
                if name not in known
            ]
            if added:
                db.execute(table.insert(), added)
            changed = [
                {"session": session, "actor": name, **{k: actors[name][k] for k in ACTOR_FIELDS}}
                for name in actors
                if name in known
            ]
            if changed:  # the columns to set are the parameters' other keys
                db.execute(
                    table.update().where(
                        table.c.session_id == sa.bindparam("session"),
                        table.c.name == sa.bindparam("actor"),
                    ),
                    changed,
                )

    def session_actors(self, session: int) -> list[dict[str, Any]]:
        t, sa = self._t, self._t.sa
        with self._read() as db:
            rows = db.execute(
                sa.select(t.session_actors)
                .where(t.session_actors.c.session_id == session)
                .order_by(t.session_actors.c.created, t.session_actors.c.name)
            ).mappings()
            return [dict(r) for r in rows]

    def save_checkpoint(
        self, session: int, *, step: int, state: Mapping[str, Any], node: str | None = None
    ) -> int:
        """Save a checkpoint (§16.4) and wait for it: ``state`` is JSON-ready; the session's
        current sequence number is recorded with it so a resume knows which messages it
        already has. Returns its id. Turns :meth:`submit` theirs with their messages."""
        self.submit(session, (), Checkpoint(state, step, node))
        return self.last_checkpoint(session)["id"]  # type: ignore[index]

    def start_run(self, session: int) -> None:
        """Mark the start of a run of the session (§16.4): its turn records follow, and
        ``--resume`` replays the records after the last mark."""
        t, sa = self._t, self._t.sa
        with self._write() as db:
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
            row = _checkpoint_row(session, row.last_seq, Checkpoint(state), time.time())
            _bulk_insert(db, "checkpoints", _CHECKPOINT_COLUMNS, [row])

    def run_records(self, session: int) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
        """The last run's start mark and its turn records in order, or None when no run of the
        session left a mark (it ran before this runtime recorded turns)."""
        t, sa = self._t, self._t.sa
        with self._read() as db:
            rows = db.execute(
                sa.select(t.checkpoints.c.state)
                .where(t.checkpoints.c.session_id == session)
                .order_by(t.checkpoints.c.id)
            ).scalars()
            states = [json.loads(text) for text in rows]
        starts = [i for i, s in enumerate(states) if isinstance(s, dict) and s.get("kind") == "run"]
        if not starts:
            return None
        start = starts[-1]
        records = [s for s in states[start + 1 :] if isinstance(s, dict) and "key" in s]
        return states[start], records

    def latest_session(self, script: str) -> int | None:
        """The newest session run from the script named ``script``."""
        t, sa = self._t, self._t.sa
        with self._read() as db:
            return db.execute(
                sa.select(sa.func.max(t.sessions.c.id)).where(t.sessions.c.script == script)
            ).scalar()

    def set_last_turn(self, session: int, value: int, *, at_least: bool = False) -> None:
        """Set the session's turn counter (``at_least``: only raise it) for a resumed run."""
        t = self._t
        where = t.sessions.c.id == session
        if at_least:
            where = where & (t.sessions.c.last_turn < value)
        with self._write() as db:
            db.execute(t.sessions.update().where(where).values(last_turn=value))

    def last_checkpoint(self, session: int) -> dict[str, Any] | None:
        """The newest checkpoint: ``{"id", "seq", "step", "node", "state"}`` or None."""
        t, sa = self._t, self._t.sa
        with self._read() as db:
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

    # ------------------------------------------------------------------ async wrappers

    async def aopen_session(self, spec: str | int | None = "new", **kwargs: Any) -> int:
        return await asyncio.to_thread(self.open_session, spec, **kwargs)

    async def aadd_message(self, session: int, kind: str, content: str, **kwargs: Any) -> Message:
        return (await self.aadd_messages(session, [NewMessage(kind, content, **kwargs)]))[0]

    async def aadd_messages(
        self, session: int, new: Iterable[NewMessage], checkpoint: Checkpoint | None = None
    ) -> list[Message]:
        """:meth:`add_messages` for async callers (the write itself is short)."""
        batch = self.submit(session, new, checkpoint)
        self.flush()
        return batch.stored()

    async def avisible_messages(
        self, session: int, soul: str | None = None, user: str | None = None
    ) -> list[Message]:
        return await asyncio.to_thread(self.visible_messages, session, soul, user)

    async def asave_checkpoint(self, session: int, **kwargs: Any) -> int:
        return await asyncio.to_thread(self.save_checkpoint, session, **kwargs)


@functools.cache
def _advance_statement() -> Any:
    """Move a session's counters from what this store last wrote to its new values, only if
    nobody else moved them (a compare-and-set; parameters ``session``, ``seq_from``,
    ``seq_to``, ``turn``). Built once: building statements per call was a large share of a
    model turn's cost."""
    tables = _schema()
    sa, sessions = tables.sa, tables.sessions
    return (
        sessions.update()
        .where(
            sessions.c.id == sa.bindparam("session"),
            sessions.c.last_seq == sa.bindparam("seq_from"),
        )
        .values(last_seq=sa.bindparam("seq_to"), last_turn=sa.bindparam("turn"))
    )


_MESSAGE_COLUMN_NAMES = tuple(
    "session_id" if name == "session" else name for name in _MESSAGE_FIELDS
)


def _message_columns(messages: Any) -> list[Any]:
    """The message table's columns in :class:`Message` field order."""
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
    tables = _schema()
    sa, messages = tables.sa, tables.messages
    names = ("seq", *CONTEXT_COLUMNS) if narrow else _MESSAGE_COLUMN_NAMES
    scopes = [(tables.message_souls, "soul")] if by_soul else []
    scopes += [(tables.message_users, "user")] if by_user else []

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
def _insert_statement(table: str) -> Any:
    """``INSERT INTO fems_<table>``, built once (values come as execute parameters)."""
    return getattr(_schema(), table).insert()


def _bulk_insert(
    db: Any, table: str, columns: tuple[str, ...], rows: list[tuple[Any, ...]]
) -> None:
    """Insert rows (values of ``columns``, in that order) with one ``executemany`` straight to
    the driver: SQLAlchemy's own per-row work was ten times the driver's, and most of a batch's
    cost."""
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
    """The driver's SQL of :func:`_insert_statement` for ``columns``, and the order of its
    parameters when the driver's are positional (else None)."""
    compiled = _insert_statement(table).compile(dialect=dialect, column_keys=list(columns))
    return compiled.string, tuple(compiled.positiontup) if compiled.positional else None


@functools.cache
def _message_ids_statement() -> Any:
    """``(id, seq)`` of a session's messages in a range of sequence numbers; parameters
    ``session``, ``seq_from`` (excluded), ``seq_to``."""
    tables = _schema()
    sa, messages = tables.sa, tables.messages
    return sa.select(messages.c.id, messages.c.seq).where(
        messages.c.session_id == sa.bindparam("session"),
        messages.c.seq > sa.bindparam("seq_from"),
        messages.c.seq <= sa.bindparam("seq_to"),
    )


@functools.cache
def _personas_statement() -> Any:
    """``(soul id, persona)`` of the listed souls; parameter ``souls`` (a list)."""
    tables = _schema()
    sa, souls = tables.sa, tables.souls
    return sa.select(souls.c.soul_id, souls.c.persona).where(
        souls.c.soul_id.in_(sa.bindparam("souls", expanding=True))
    )


@functools.cache
def _profiles_statement() -> Any:
    """``(user id, profile)`` of the listed users; parameter ``users`` (a list)."""
    tables = _schema()
    sa, users = tables.sa, tables.users
    return sa.select(users.c.user_id, users.c.profile).where(
        users.c.user_id.in_(sa.bindparam("users", expanding=True))
    )


def _fields(new: NewMessage) -> dict[str, Any]:
    """The message columns a caller gives (all but id, session, seq and created)."""
    return {name: getattr(new, name) for name in _GIVEN_FIELDS}


_CHECKPOINT_COLUMNS = ("session_id", "seq", "step", "node", "state", "created")
# a checkpoint's state as JSON; one encoder for every row (json.dumps builds one per call)
_STATE_JSON = json.JSONEncoder(ensure_ascii=False, sort_keys=True)


def _checkpoint_row(
    session: int, seq: int, checkpoint: Checkpoint, created: float, **extra: Any
) -> tuple[Any, ...]:
    """A checkpoint row (:data:`_CHECKPOINT_COLUMNS`); ``seq`` is the session's last sequence
    number when it was taken; ``extra`` entries are added to its state."""
    state = _STATE_JSON.encode({**checkpoint.state, **extra})
    return (session, seq, checkpoint.step, checkpoint.node, state, created)


def _text_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def _serialize(db: Any, key: int) -> None:
    """Hold the lock ``key`` until ``db``'s transaction ends, so that concurrent check-then-write
    steps (create missing tables, take the next session number) run one at a time. SQLite
    needs nothing: its write transactions start with ``BEGIN IMMEDIATE``."""
    if db.dialect.name == "postgresql":
        db.exec_driver_sql(f"SELECT pg_advisory_xact_lock({key})")


def _sqlite_pragmas(connection: Any, _record: Any) -> None:
    cursor = connection.cursor()
    cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA journal_mode = WAL")
    cursor.execute("PRAGMA synchronous = NORMAL")
    cursor.close()


def _entries(section: Any, key: str) -> list[tuple[str, Mapping[str, Any]]]:
    """Seed entries as (id, fields) from a mapping keyed by id or a list of records with an id."""
    if section is None:
        return []
    if isinstance(section, Mapping):
        return [
            (str(k), v if isinstance(v, Mapping) else {"persona": v, "profile": v})
            for k, v in section.items()
        ]
    if isinstance(section, list):
        out = []
        for item in section:
            ident = item.get("id", item.get(key)) if isinstance(item, Mapping) else None
            if ident is None:
                raise RunError(f"every seed entry needs an 'id' (or '{key}'): {item!r}")
            out.append((str(ident), item))
        return out
    raise RunError(f"seed section must be a mapping or a list, not {type(section).__name__}")
