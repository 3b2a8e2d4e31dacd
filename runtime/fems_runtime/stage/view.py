"""One session as the stage shows it, read from the store (§17): the director's view (every
message with the souls and users that may see it) and each actor's view (exactly the messages
its built-in context is made of, §13.2, by the store's own visibility query)."""

from __future__ import annotations

import contextlib
import shlex
import threading
from collections.abc import Callable
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any, TypeVar, cast

from fems_runtime.store import hide_password

if TYPE_CHECKING:
    from fems_runtime.store import Message, Store

_T = TypeVar("_T")

DIRECTOR = ""
"""The seat that sees everything."""

REASONING = "reasoning"
"""The kind of a model's private reasoning: in the director's view only, folded (§13.1)."""


class SessionView:
    """Reads a session from ``store``; :meth:`freeze` keeps what was read when the store is
    about to close (a finished live run whose database may be ``:memory:``)."""

    def __init__(self, store: Store, session: int, module: str | None = None) -> None:
        self._store: Store | None = store
        self.session = session
        self._database = _database_argument(store.database().url)
        self._module = module
        self._lock = threading.Lock()
        self._frozen: dict[str, Any] = {}

    def summary(self) -> dict[str, Any]:
        """Number, title, script, status and creation time of the session, the session it was
        forked from and the turn it branched at (§16.4a), and how to fork it in turn."""
        row = self._read("summary", lambda store: store.session(self.session)) or {}
        return {
            "session": self.session,
            "title": row.get("title"),
            "script": row.get("script"),
            "status": row.get("status"),
            "created": row.get("created"),
            "parent": row.get("parent"),
            "branch_turn": row.get("branch_turn"),
            "fork": self.fork_commands(row.get("script")),
        }

    def fork_commands(self, script: str | None) -> dict[str, Any]:
        """The command lines that start a new session from one of this session's turns
        (§16.4a), without the ``--fork SESSION:TURN`` the page adds per turn; or why there
        are none (``missing``)."""
        if self._database is None:
            return {"commands": [], "missing": "the run's database is in memory: it ends with it"}
        if not script:
            return {"commands": [], "missing": "the session does not name its script"}
        module = self._module or f"{PurePath(script).stem}.py"
        database = shlex.quote(self._database)
        return {
            "commands": [
                f"python {shlex.quote(module)} --db {database}",
                f"fems2py run {shlex.quote(script)} --db {database}",
            ],
            "missing": None,
        }

    def seats(self) -> list[dict[str, Any]]:
        """The session's actors in the order they were recorded: name, type, soul, user."""
        rows = self._read("seats", lambda store: store.session_actors(self.session))
        return [
            {
                "name": row["name"],
                "type": row["type"],
                "soul": row["soul_id"],
                "user": _user_of(row["type"], row["source"]),
            }
            for row in rows
        ]

    def messages(self, seat: str = DIRECTOR) -> list[dict[str, Any]]:
        """The director's view (``seat`` empty) or what actor ``seat`` sees; unknown seats
        raise :class:`KeyError`."""
        if seat == DIRECTOR:
            return self._read("director", self._director)
        found = next((s for s in self.seats() if s["name"] == seat), None)
        if found is None:
            raise KeyError(seat)
        return self._read(
            f"seat {seat}",
            lambda store: [
                _message_json(m)
                for m in store.visible_messages(self.session, found["soul"], found["user"])
            ],
        )

    def freeze(self, status: str) -> None:
        """Read every view once more and stop using the store, whose session is about to
        end with ``status``."""
        with self._lock:
            store = self._store
        if store is None:
            return
        self.summary()
        for seat in [DIRECTOR, *(s["name"] for s in self.seats())]:
            self.messages(seat)
        with self._lock:
            self._store = None
            self._frozen["summary"] = {**(self._frozen.get("summary") or {}), "status": status}

    def _director(self, store: Store) -> list[dict[str, Any]]:
        scopes = store.message_scopes(self.session)
        shown = [
            {**_message_json(m), "seen_by": _seen_by(scopes.get(m.id))}
            for m in store.messages(self.session)
        ]
        return fold_reasoning(shown)

    def _read(self, key: str, read: Callable[[Store], _T]) -> _T:
        """``read`` from the store, remembering the value; once frozen, the value last read."""
        with self._lock:
            store = self._store
        if store is None:
            return cast(_T, self._frozen.get(key, [] if key != "summary" else None))
        value = read(store)
        with self._lock:
            self._frozen[key] = value
        return value


def fold_reasoning(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The director's messages with each model's reasoning (§13.1) folded into the reply (or
    tool call) it led to: the next message, stored in the same batch, of the same turn and
    speaker. Reasoning that led to nothing stored (a call that failed) stays a message."""
    folded: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        if message["kind"] != REASONING:
            folded.append(message)
            continue
        after = messages[index + 1] if index + 1 < len(messages) else None
        if after is not None and _answers(message, after):
            after["reasoning"] = message["content"]
        else:
            folded.append(message)
    return folded


def _answers(reasoning: dict[str, Any], message: dict[str, Any]) -> bool:
    """Whether ``message`` is what the model said after ``reasoning``."""
    return (
        message["kind"] in ("reply", "tool_call")
        and message["turn"] == reasoning["turn"]
        and message["soul"] == reasoning["soul"]
    )


def _database_argument(url: str) -> str | None:
    """``--db`` for a command line that opens the same database: a SQLite file as a path
    (relative to the working directory when it is inside it), another database by its URL
    with the password left out; None for an in-memory database."""
    if url in ("sqlite://", "sqlite:///:memory:"):
        return None
    if url.startswith("sqlite:///"):
        return shown_path(url.removeprefix("sqlite:///"))
    return hide_password(url, url)


def shown_path(path: str) -> str:
    """``path`` as a command line in the working directory names it: relative when inside."""
    resolved = Path(path).resolve()
    with contextlib.suppress(ValueError):
        return str(resolved.relative_to(Path.cwd()))
    return str(resolved)


def _user_of(kind: str, source: str | None) -> str | None:
    """A human actor's user id (§6.3), like :attr:`ActorSpec.user`."""
    return source if kind == "human" and source not in (None, "", "0") else None


def _seen_by(scope: tuple[list[str], list[str]] | None) -> dict[str, list[str]]:
    souls, users = scope or ([], [])
    return {"souls": souls, "users": users}


def _message_json(message: Message) -> dict[str, Any]:
    return {
        "seq": message.seq,
        "kind": message.kind,
        "content": message.content,
        "turn": message.turn,
        "action": message.action,
        "node": message.node,
        "speaker": message.speaker_name or message.speaker_soul,
        "soul": message.speaker_soul,
    }
