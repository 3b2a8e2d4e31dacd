"""Sessions that start from another (§16.4a): ``--fork SESSION[:TURN]`` and ``--reuse SESSION``.

Turn numbers
------------
A turn's number is its turn id: the one :meth:`~fems_runtime.records.TurnLog.new_turn`
hands out to each model, human or mind turn, in the order the turns ask for it. Its messages
carry it (the stage shows "turn 14 · fork here" under each turn), its records carry it, and so
do the trace's ``llm_call``, ``human`` and ``replay`` events. A ``@func`` turn has no number of
its own: it belongs to the turns before it.

How a branch starts
-------------------
:func:`open_branch` creates the new session in one transaction: its row names the parent (and,
for a fork, the turn it branches at), the parent's messages of earlier runs are copied, and a
``run`` mark (§16.4) records where the session comes from. The run is then a resumed run of the
new session (see :mod:`fems_runtime.records`): it replays its own records first, and a turn
without one asks :class:`Inheritance` for the parent's record. A record taken from the parent is
stored in the new session with copies of the messages the parent stored with it (without their
usage figures: the new session did not pay for them), in one transaction, marked
``"from": PARENT``; the parent is only read. So a fork or a reuse that is
killed resumes with ``--resume`` like any session, and takes from the parent what it had not
taken yet.

- A fork takes the parent's records up to its branch turn, whenever their turn comes up.
- A reuse takes a record only when the request the turn would send has the recorded digest
  (:func:`request_digest`, kept in every record), and only until its first live turn: from
  there on everything is live, and the session's branch turn is set.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fems_runtime.options import FORK_POINT
from fems_runtime.records import RunError
from fems_runtime.store import Checkpoint, NewMessage
from fems_runtime.store.database import bulk_insert
from fems_runtime.store.messages import CHECKPOINT_COLUMNS, checkpoint_row

if TYPE_CHECKING:
    from fems_runtime.store import Message, Store

SECRET_OPTIONS = frozenset({"api_key", "api_base", "base_url", "headers", "extra_headers"})
"""Model options that say where and as whom a request goes, not what it asks: not in a digest."""

UNPAID = ("model", "prompt_tokens", "completion_tokens", "cost")
"""What a copied message leaves out: a replayed turn is not a model call of the new session, so
its cost limit (§15.6) and its usage count only what it called itself."""

_REGION = re.compile(r"/.*?#\d+(?=[>\[]|$)")  # the outermost fork or par of a branch path


@dataclass(frozen=True)
class Branch:
    """Where a new session starts: ``--fork PARENT[:TURN]`` (``turn`` None: all of it), or
    ``--reuse PARENT`` (``reuse`` True)."""

    parent: int
    turn: int | None = None
    reuse: bool = False

    @property
    def option(self) -> str:
        return f"--reuse {self.parent}" if self.reuse else f"--fork {self.parent}"

    @classmethod
    def fork(cls, value: str | int | Sequence[int]) -> Branch:
        """``run(fork=…)``: ``"3:40"``, ``"3"``, ``3`` or ``(3, 40)``."""
        if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            return cls(value)
        if isinstance(value, str):
            if found := FORK_POINT.fullmatch(value):
                return cls(int(found[1]), int(found[2]) if found[2] else None)
        elif isinstance(value, tuple | list) and len(value) == 2:
            session_number, turn_number = value
            if type(session_number) is int and type(turn_number) is int and session_number >= 1:
                return cls(session_number, turn_number)
        raise RunError(
            f"--fork {value!r}: give SESSION or SESSION:TURN, sessions numbered from 1 (for "
            "example 3:40)"
        )


def request_digest(request: Mapping[str, Any]) -> str:
    """The sha256 of what a turn asks (its kind, action, executor, model and options, the
    messages it sends; a function, its inputs and its code file's hash): ``--reuse`` replays
    a turn only when this is the recorded one. Values JSON cannot hold count by their
    ``repr``."""
    text = json.dumps(request, sort_keys=True, ensure_ascii=False, default=repr)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def model_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """A model's options as a digest sees them: without keys, addresses and headers."""
    return {name: value for name, value in options.items() if name not in SECRET_OPTIONS}


# ---------------------------------------------------------------------- the parent's records


@dataclass(frozen=True)
class ParentRecord:
    """One turn record of the parent's last run, with the checkpoint row's ``seq``, ``step``
    and ``node`` (the messages stored with it are those after ``state["before"]`` up to
    ``seq``)."""

    state: Mapping[str, Any]
    seq: int
    step: int
    node: str | None

    @property
    def turn(self) -> int | None:
        turn = self.state.get("turn")
        return None if turn is None else int(turn)

    @property
    def slot(self) -> tuple[Any, ...]:
        return (*self.state["key"], self.state.get("attempt", 0))


@dataclass(frozen=True)
class ParentRun:
    """The parent's last run: its ``run`` mark and its turn records, oldest first."""

    mark: Mapping[str, Any]
    records: tuple[ParentRecord, ...]

    @property
    def last_turn(self) -> int:
        """The highest turn number recorded (the run's start when none is)."""
        numbered = [r.turn for r in self.records if r.turn is not None]
        return max(numbered, default=int(self.mark.get("turn") or 0))


def parent_run(store: Store, parent: int, option: str) -> ParentRun:
    """Read the parent's last run (a still running or interrupted one too: what it has
    recorded so far)."""
    found = store.run_rows(parent)
    if found is None:
        raise RunError(
            f"{option}: session {parent} has no turn records (it ran before this runtime "
            "recorded turns, or it never started)"
        )
    mark, rows = found
    return ParentRun(mark, tuple(ParentRecord(*row) for row in rows))


def fork_turn(run: ParentRun, branch: Branch, warn: Callable[[str], None]) -> int:
    """The turn a fork branches at: ``branch.turn``, else the parent's last; a turn past the
    parent's end is its end, a turn strictly inside a concurrent region (one with turns
    recorded after it) moves to the last turn before the region, and a turn from an earlier
    run of the parent to its last run's start (each with a notice). A fork at the end takes
    every recorded turn: a region none of whose recorded turns comes after the fork point is
    whole, and splitting it is what the region rule prevents."""
    parent, last = branch.parent, run.last_turn
    written = f"--fork {parent}" if branch.turn is None else f"--fork {parent}:{branch.turn}"
    start = int(run.mark.get("turn") or 0)
    turn = last if branch.turn is None else branch.turn
    if turn >= last:
        if turn > last:
            warn(f"{written}: session {parent} has turns up to {last}: forking at its end")
        return last
    if turn < start:
        warn(
            f"{written}: turn {turn} is from an earlier run of session {parent}, whose "
            f"records are not kept: forking at the start of its last run (turn {start})"
        )
        return start
    path = next((str(r.state["key"][0]) for r in run.records if r.turn == turn), "")
    region = _REGION.match(path)
    if region is None:
        return turn
    branches = (f"{region[0]}>", f"{region[0]}[")  # its branches' paths (not `#10` for `#1`)
    inside = [
        r.turn
        for r in run.records
        if r.turn is not None and str(r.state["key"][0]).startswith(branches)
    ]
    if turn >= max(inside):  # the region's last recorded turn: it is taken whole
        return turn
    before = max(
        (r.turn for r in run.records if r.turn is not None and r.turn < min(inside)), default=start
    )
    warn(
        f"{written}: turn {turn} runs in a concurrent region ({region[0].lstrip('/')}, "
        f"turns {min(inside)}–{max(inside)}): forking at turn {before}, the last before it"
    )
    return before


def fork_records(run: ParentRun, turn: int) -> list[ParentRecord]:
    """The records a fork at ``turn`` takes: the turns numbered up to it, and the ``@func``
    turns recorded before the last of their records."""
    numbered = [i for i, r in enumerate(run.records) if r.turn is not None and r.turn <= turn]
    end = numbered[-1] if numbered else -1
    return [
        record
        for index, record in enumerate(run.records)
        if (record.turn is not None and record.turn <= turn)
        or (record.turn is None and index < end)
    ]


# ---------------------------------------------------------------------- opening a branch


def open_branch(
    store: Store,
    branch: Branch,
    *,
    title: str | None,
    script: str,
    script_hash: str,
    warn: Callable[[str], None],
    on_create: Callable[[Any, int], None] | None = None,
) -> int:
    """Create the session that ``branch`` starts (see the module's docstring) and return its
    number; ``on_create`` writes in the same transaction (a batch's tag)."""
    if store.session(branch.parent) is None:
        raise RunError(f"{branch.option}: session {branch.parent} does not exist")
    run = parent_run(store, branch.parent, branch.option)
    origin: dict[str, Any] = {"session": branch.parent}
    turn = None
    if not branch.reuse:
        turn = origin["turn"] = fork_turn(run, branch, warn)
    history, start = int(run.mark.get("seq") or 0), int(run.mark.get("turn") or 0)
    mark = {
        "kind": "run",
        "turn": start,
        "seq": history,
        "reuse" if branch.reuse else "fork": origin,
    }

    def begin(db: Any, session: int) -> None:
        _copy_history(store, db, branch.parent, session, history, start)
        row = checkpoint_row(session, history, Checkpoint(mark), time.time())
        bulk_insert(db, "checkpoints", CHECKPOINT_COLUMNS, [row])
        if on_create is not None:
            on_create(db, session)

    return store.open_session(
        "new",
        title=title,
        script=script,
        script_hash=script_hash,
        parent=branch.parent,
        branch_turn=turn,
        on_create=begin,
    )


def _copy_history(store: Store, db: Any, parent: int, session: int, upto: int, turn: int) -> None:
    """Copy the parent's messages before its last run (sequence numbers 1..``upto``, with their
    scope tags) into the new session, whose counters then start where the parent's last run
    started."""
    t = store.database().tables
    sa = t.sa
    if upto:
        m = t.messages
        names = [c.name for c in m.columns if c.name not in ("id", "session_id")]
        values = (sa.null() if n in UNPAID else m.c[n] for n in names)
        rows = sa.select(sa.literal(session), *values).where(
            (m.c.session_id == parent) & (m.c.seq <= upto)
        )
        db.execute(m.insert().from_select(["session_id", *names], rows))
        copy = m.alias("copy")
        for table, column in ((t.message_souls, "soul_id"), (t.message_users, "user_id")):
            joined = table.join(copy, (copy.c.session_id == session) & (copy.c.seq == table.c.seq))
            tags = (
                sa.select(copy.c.id, table.c[column], sa.literal(session), table.c.seq)
                .select_from(joined)
                .where((table.c.session_id == parent) & (table.c.seq <= upto))
            )
            db.execute(
                table.insert().from_select(["message_id", column, "session_id", "seq"], tags)
            )
    db.execute(
        t.sessions.update().where(t.sessions.c.id == session).values(last_seq=upto, last_turn=turn)
    )


# ---------------------------------------------------------------------- taking records


@dataclass
class Inheritance:
    """The parent's records a branch may still take (see the module's docstring); a
    :class:`~fems_runtime.records.TurnLog` asks it for the turns it has no record of.

    ``order`` holds the records in the parent's order, ``records`` those not taken yet. The
    copies are stored in the parent's order too: the branches of a ``par`` replay in the order
    they start, not in the order their replies came in, so a record taken before an earlier
    one waits for it (``ready``), and the context of the turns after the region is the
    parent's. A live turn, and the end of the run, store what waits.
    """

    store: Store
    session: int
    parent: int
    order: list[ParentRecord]
    records: dict[tuple[Any, ...], ParentRecord]
    reuse: bool
    messages: dict[int, tuple[Message, tuple[list[str], list[str]]]] = field(default_factory=dict)
    live: bool = False  # a reuse went live: nothing more is taken
    taken: set[int] = field(default_factory=set)  # the numbers of the turns taken
    positions: dict[tuple[Any, ...], int] = field(default_factory=dict)  # in ``order``
    ready: dict[int, dict[str, Any]] = field(default_factory=dict)  # taken, by position
    cursor: int = 0  # the parent position of the first record not stored or skipped
    in_order: bool = True  # False once a turn went live: copies are stored when taken

    @classmethod
    def load(
        cls, store: Store, session: int, mark: Mapping[str, Any], own: Sequence[Mapping[str, Any]]
    ) -> Inheritance | None:
        """What the session's ``run`` mark says it inherits (None: nothing), less what its own
        records hold already (an interrupted branch took those); a reuse whose own records
        include a live one is live."""
        reuse = "reuse" in mark
        origin = mark.get("reuse") or mark.get("fork")
        if not isinstance(origin, Mapping):
            return None
        parent = int(origin["session"])
        option = f"--reuse {parent}" if reuse else f"--fork {parent}"
        run = parent_run(store, parent, option)
        order = list(run.records) if reuse else fork_records(run, int(origin["turn"]))
        held = {(*r["key"], r.get("attempt", 0)) for r in own}
        live = any("from" not in r for r in own)
        inheritance = cls(
            store,
            session,
            parent,
            order,
            {r.slot: r for r in order if r.slot not in held},
            reuse,
            live=reuse and live,
            taken={int(r["turn"]) for r in own if "from" in r and r.get("turn") is not None},
            in_order=not live,
        )
        inheritance.positions = {record.slot: index for index, record in enumerate(order)}
        inheritance.messages = _messages_by_seq(store, parent)
        return inheritance

    @property
    def compares(self) -> bool:
        """Whether a record is taken only for the same request (a reuse that is not live)."""
        return self.reuse and not self.live

    def turns(self) -> set[int]:
        """The numbers the parent's records hold: a fork keeps them for its replayed turns."""
        if self.reuse:
            return set()
        return {r.turn for r in self.records.values() if r.turn is not None}

    def peek(self, key: Sequence[Any], attempt: int = 0) -> Mapping[str, Any] | None:
        """A fork's record of ``key``, to be taken without a comparison."""
        return None if self.reuse else self._state(key, attempt)

    def candidate(self, key: Sequence[Any], attempt: int = 0) -> Mapping[str, Any] | None:
        """A reuse's record of ``key`` that the turn's request may match."""
        return self._state(key, attempt) if self.compares else None

    def _state(self, key: Sequence[Any], attempt: int) -> Mapping[str, Any] | None:
        record = self.records.get((*key, attempt))
        return record.state if record is not None else None

    def take(
        self, key: Sequence[Any], attempt: int = 0, request: str | None = None
    ) -> Mapping[str, Any] | None:
        """The record of ``key``, to be stored in the new session with copies of its messages
        (its ``before`` then in the new session's numbering); None: the turn goes live."""
        record = self.records.get((*key, attempt))
        if record is None or (self.reuse and (self.live or record.state.get("request") != request)):
            return None
        del self.records[record.slot]
        if record.turn is not None:
            self.taken.add(record.turn)
        state = {**record.state, "from": self.parent}
        if self.in_order:
            self.ready[self.positions[record.slot]] = state
            self._store_ready()
        else:
            self._store(record, state)
        return state

    def _store_ready(self) -> None:
        """Store the taken records that no record before them in the parent's order waits
        for (a record held by the session already waits for nothing)."""
        while self.cursor < len(self.order):
            record = self.order[self.cursor]
            state = self.ready.pop(self.cursor, None)
            if state is not None:
                self._store(record, state)
            elif record.slot in self.records:
                return
            self.cursor += 1

    def _store(self, record: ParentRecord, state: dict[str, Any]) -> None:
        """Store one taken record with copies of the messages the parent stored with it."""
        before = record.state.get("before")
        copies = [] if before is None else self._copies(int(before), record.seq)
        batch = self.store.submit(
            self.session, copies, Checkpoint(dict(state), record.step, record.node)
        )
        if copies:
            state["before"] = batch.seq_from

    def _store_all(self) -> None:
        """Store every taken record now (in the parent's order), and later ones when taken."""
        for position in sorted(self.ready):
            self._store(self.order[position], self.ready[position])
        self.ready.clear()
        self.in_order = False

    def _copies(self, after: int, upto: int) -> list[NewMessage]:
        """Copies of the parent's messages after ``after`` up to ``upto``: what was said, by
        whom, to whom; not the usage figures (:data:`UNPAID`)."""
        copies = []
        for seq in range(after + 1, upto + 1):
            message, (souls, users) = self.messages[seq]
            copies.append(
                NewMessage(
                    message.kind,
                    message.content,
                    souls=souls,
                    users=users,
                    turn=message.turn,
                    action=message.action,
                    node=message.node,
                    speaker_soul=message.speaker_soul,
                    speaker_user=message.speaker_user,
                    speaker_name=message.speaker_name,
                )
            )
        return copies

    def went_live(self) -> None:
        """A turn goes live: what was taken is stored; a reuse takes nothing more, and
        records where it branched."""
        if self.in_order:
            self._store_all()
        if self.compares:
            self.live = True
            self.store.set_branch_turn(self.session, max(self.taken, default=0))

    def finish(self) -> None:
        """At the end of the run: what was taken is stored; a reuse that never went live
        branched at its last turn."""
        self._store_all()
        if self.compares:
            self.store.set_branch_turn(self.session, max(self.taken, default=0))

    @property
    def reused(self) -> int:
        """How many numbered turns (model and human turns) this run took from the parent."""
        return len(self.taken)

    def left(self) -> int:
        """How many of a fork's records it never took (its script changed before the fork
        point, or took another way)."""
        return 0 if self.reuse else len(self.records)


def _messages_by_seq(
    store: Store, session: int
) -> dict[int, tuple[Message, tuple[list[str], list[str]]]]:
    """The session's messages by sequence number, each with its scope tags."""
    scopes = store.message_scopes(session)
    return {m.seq: (m, scopes.get(m.id, ([], []))) for m in store.messages(session)}
