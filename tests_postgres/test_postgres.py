"""The same storage guarantees on PostgreSQL (§14: "any SQLAlchemy URL; PostgreSQL for shared
or multi-process use"), against a throwaway server this suite starts itself.

Run with ``make test-postgres`` (CI does). It needs PostgreSQL's server programs (``initdb``,
``pg_ctl``; Debian: ``apt-get install postgresql``) and the ``psycopg`` driver, which the
runtime's ``postgres`` extra installs. It is a separate suite so that ``make test`` runs
anywhere.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from fems_runtime.context import builtin_context
from fems_runtime.records import RunError
from fems_runtime.store import NewMessage, Store
from old_databases import database_before_lineage, session_columns

from fems2py.build import build_file

ROOT = Path(__file__).resolve().parent.parent
WEREWOLF = ROOT / "examples" / "werewolf"


def test_sessions_messages_and_scopes(url: str) -> None:
    with Store(url) as store:
        assert store.open_session("new", title="T", script="s.fems", script_hash="h") == 1
        assert store.open_session("9 / new") == 9
        with pytest.raises(RunError, match="session 5 does not exist"):
            store.open_session(5)
        store.add_message(1, "prompt", "private", souls=["1"])
        store.add_message(1, "narration", "night falls", souls=["1", "2"], users=["7"])
        store.add_message(1, "reply", "the den", souls=["1"], speaker_name="@wolf")
        assert builtin_context(store, 1, soul="1") == "[narrator]: night falls\n\n[@wolf]: the den"
        assert builtin_context(store, 1, soul="2") == "[narrator]: night falls"
        assert [m.seq for m in store.messages(1)] == [1, 2, 3]


def test_two_hundred_concurrent_writers_from_two_engines(url: str) -> None:
    """Two runs (two engines) write their own sessions of one database at the same time."""
    stores = [Store(url), Store(url)]
    sessions = [store.open_session() for store in stores]

    for i in range(200):  # each store's writer commits while the other's does
        message = NewMessage("reply", f"m{i}", souls=[str(i % 5)])
        stores[i % 2].submit(sessions[i % 2], [message])
    for store in stores:
        store.flush()
    for run, session in enumerate(sessions):
        messages = stores[0].messages(session)
        assert [m.content for m in messages] == [f"m{i}" for i in range(run, 200, 2)]
        assert [m.seq for m in messages] == list(range(1, 101))
        assert len(stores[1].visible_messages(session, soul=str(run))) == 20
    for store in stores:
        store.close()


def test_two_hundred_concurrent_first_starts_on_a_new_database(url: str) -> None:
    """200 starts at once on a database without tables: the schema is created once (under an
    advisory lock) and every start gets its own session."""
    starts = 200
    ready = threading.Barrier(starts)
    failures: list[str] = []

    def first_start() -> None:
        ready.wait()
        try:
            with Store(url) as store:
                store.open_session("new")
        except RunError as error:
            failures.append(error.message)

    threads = [threading.Thread(target=first_start) for _ in range(starts)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    with Store(url) as store:
        assert store.session(starts) is not None and store.session(starts + 1) is None


def test_a_session_written_by_two_runs_at_once_fails_loudly(url: str) -> None:
    first, second = Store(url), Store(url)
    session = first.open_session()
    first.add_message(session, "reply", "one", souls=["1"])
    second.add_message(session, "reply", "two", souls=["1"])
    with pytest.raises(RunError, match="written by another run at the same time"):
        first.add_message(session, "reply", "three", souls=["1"])
    assert [m.content for m in second.messages(session)] == ["one", "two"]
    second.close()
    first.database().engine.dispose()


def test_a_whole_werewolf_game_on_postgres_leaks_nothing(url: str, tmp_path: Path) -> None:
    module = tmp_path / "werewolf.py"
    build_file(WEREWOLF / "werewolf.fems", module, bundle=True)
    trace, result = tmp_path / "trace.jsonl", tmp_path / "result.json"
    done = subprocess.run(
        [
            sys.executable,
            str(module),
            "--model",
            "fems/mock",
            "--seed",
            "5",
            "--db",
            url,
            "--trace",
            str(trace),
            "--result",
            str(result),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    outcome = json.loads(result.read_text())
    assert outcome["status"] == "completed" and outcome["vars"]["winner"]
    with Store(url) as store:
        session = outcome["session"]
        wolves = set(outcome["vars"]["wolves"])
        den = {
            m.id
            for m in store.messages(session)
            if m.action == "wolf_discuss" and m.kind == "reply"
        }
        assert den
        for actor in ("@Alice", "@Bob", "@Cleo", "@Dan", "@Eve", "@Fay"):
            seen = {m.id for m in store.visible_messages(session, soul=actor[1:].lower())}
            assert bool(seen & den) == (actor in wolves), actor


def test_a_database_made_before_lineage_gains_its_columns(url: str) -> None:
    """The sessions table of an older database gets parent and branch_turn (§14, §16.4a) when
    a store opens it, once even when many open it at the same time."""
    database_before_lineage(url)
    starts = 20
    ready = threading.Barrier(starts)
    failures: list[str] = []

    def first_start() -> None:
        ready.wait()
        try:
            Store(url).close()
        except RunError as error:
            failures.append(error.message)

    threads = [threading.Thread(target=first_start) for _ in range(starts)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    with Store(url) as store:
        assert {"parent", "branch_turn"} <= session_columns(store.database().engine)
        assert store.session(1)["title"] == "an earlier run"
        fork = store.open_session("new", parent=1, branch_turn=2)
        assert [(row["id"], row["branch_turn"]) for row in store.lineage(fork)] == [
            (fork, 2),
            (1, None),
        ]
        assert [node.session["id"] for node in store.session_tree()[0].children] == [fork]


def test_forks_and_reuses_of_a_werewolf_game_on_postgres(url: str, tmp_path: Path) -> None:
    """§16.4a on PostgreSQL: a session continued by a second run is forked with its first
    run's messages as history (copied by INSERT … SELECT, scope tags too), and reused whole."""
    from fems_helpers import load

    module = tmp_path / "werewolf.py"
    build_file(WEREWOLF / "werewolf.fems", module, bundle=True)
    game = load(module)
    options = {"model": "fems/mock", "human": "fems/mock", "db": url}
    game.run(**options, seed=1, session="1 / new")
    game.run(**options, seed=2, session=1)  # a second game in session 1, after the first
    forked = game.run(**options, seed=2, fork=1)
    reused = game.run(**options, seed=2, reuse=1)
    assert forked.model_calls == reused.model_calls == 0
    with Store(url) as store:
        parent = [(m.seq, m.kind, m.content, m.turn) for m in store.messages(1)]
        scopes = [store.visible_lines(1, soul) for soul in ("alice", "bob")]
        for session in (forked.session, reused.session):
            assert [(m.seq, m.kind, m.content, m.turn) for m in store.messages(session)] == parent
            assert [store.visible_lines(session, soul) for soul in ("alice", "bob")] == scopes
            assert store.session(session)["parent"] == 1
