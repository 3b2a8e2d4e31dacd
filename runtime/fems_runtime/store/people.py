"""Souls, users and the actors of a session (§13.3, §14): seeding them, and reading the
personas and profiles a turn's system block is made of."""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from fems_runtime.records import RunError, read_input
from fems_runtime.store.database import Database
from fems_runtime.store.schema import tables

ACTOR_FIELDS = ("type", "soul_id", "source", "blueprint")  # of a session's actor row


class People:
    """The souls and users of a database, and which soul plays each actor of a session.

    Personas and profiles are read once: souls and users are seeded before a run, and writing
    one through this object forgets what was read.
    """

    def __init__(self, db: Database) -> None:
        self._db = db
        self._t = tables()
        self._personas: dict[str, str] = {}
        self._profiles: dict[tuple[str, ...], str] = {}

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
        with self._db.write() as db:
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
        with self._db.read() as db:
            row = (
                db.execute(self._t.sa.select(table).where(table.c[key] == value)).mappings().first()
            )
        return dict(row) if row is not None else None

    def persona(self, soul_id: str) -> str:
        """The soul's persona text, ``""`` if unknown."""
        soul_id = str(soul_id)
        if soul_id not in self._personas:
            self.load_personas([soul_id])
        return self._personas[soul_id]

    def load_personas(self, soul_ids: Iterable[str]) -> None:
        """Read the personas of many souls (a run's actors) with a query per thousand."""
        missing = sorted({str(i) for i in soul_ids} - self._personas.keys())
        for start in range(0, len(missing), 1000):
            chunk = missing[start : start + 1000]
            with self._db.read(wait=False) as db:  # the message log never writes souls
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
            with self._db.read(wait=False) as db:
                found = dict(db.execute(_profiles_statement(), {"users": list(ids)}).all())
            text = self._profiles[ids] = "\n\n".join(found[u] for u in ids if found.get(u))
        return text

    # ------------------------------------------------------------------ seeding

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
        text = read_input(path, "souls file")
        try:
            if path.suffix.lower() in (".yaml", ".yml"):
                import yaml

                data = yaml.safe_load(text) or {}
            else:
                data = json.loads(text)
        except ValueError as error:  # json.JSONDecodeError
            raise RunError(f"souls file {path} is not valid JSON: {error}") from None
        except Exception as error:  # yaml.YAMLError, without importing yaml up front
            raise RunError(f"souls file {path} is not valid YAML: {error}") from None
        if not isinstance(data, Mapping):
            raise RunError(f"souls file {path} must hold a mapping with 'souls' and/or 'users'")
        self.seed(data)

    # ------------------------------------------------------------------ a session's actors

    def record_actors(self, session: int, actors: Mapping[str, Mapping[str, Any]]) -> None:
        """Record actors of the session (name → type, soul_id, source, blueprint; spawned
        actors, §9.8) in one transaction, a script may declare thousands; recording one again
        (a continued session) updates its row."""
        sa, table = self._t.sa, self._t.session_actors
        with self._db.write() as db:
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
        """The actors recorded for the session, in the order they were first recorded."""
        sa, table = self._t.sa, self._t.session_actors
        with self._db.read() as db:
            rows = db.execute(
                sa.select(table)
                .where(table.c.session_id == session)
                .order_by(table.c.created, table.c.name)
            ).mappings()
            return [dict(r) for r in rows]


@functools.cache
def _personas_statement() -> Any:
    """``(soul id, persona)`` of the listed souls; parameter ``souls`` (a list)."""
    t = tables()
    sa, souls = t.sa, t.souls
    return sa.select(souls.c.soul_id, souls.c.persona).where(
        souls.c.soul_id.in_(sa.bindparam("souls", expanding=True))
    )


@functools.cache
def _profiles_statement() -> Any:
    """``(user id, profile)`` of the listed users; parameter ``users`` (a list)."""
    t = tables()
    sa, users = t.sa, t.users
    return sa.select(users.c.user_id, users.c.profile).where(
        users.c.user_id.in_(sa.bindparam("users", expanding=True))
    )


def _entries(section: Any, key: str) -> list[tuple[str, Mapping[str, Any]]]:
    """Seed entries as (id, fields) from a mapping keyed by id or a list of records with an id."""
    if section is None:
        return []
    if isinstance(section, Mapping):
        entries = []
        for k, v in section.items():
            if not isinstance(v, Mapping | str):
                raise RunError(
                    f"seed entry {k!r} must be a mapping (name and persona or profile) or a "
                    f"text, not {type(v).__name__}"
                )
            entries.append((str(k), v if isinstance(v, Mapping) else {"persona": v, "profile": v}))
        return entries
    if isinstance(section, list):
        out = []
        for item in section:
            ident = item.get("id", item.get(key)) if isinstance(item, Mapping) else None
            if ident is None:
                raise RunError(f"every seed entry needs an 'id' (or '{key}'): {item!r}")
            out.append((str(ident), item))
        return out
    raise RunError(f"seed section must be a mapping or a list, not {type(section).__name__}")
