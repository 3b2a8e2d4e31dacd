"""Storage (§14, §3 session rules): sessions, souls/users seeding, messages with scope rows,
concurrency on one SQLite file, checkpoints, lineage and the migration of older databases."""

from __future__ import annotations

import argparse
import inspect
import json
import sqlite3
import threading
from pathlib import Path

import pytest
from fems_runtime.options import session_spec
from fems_runtime.records import RunError
from fems_runtime.store import (
    NewMessage,
    Store,
    _visible_statement,
    database_url,
    parse_session_spec,
)
from old_databases import database_before_lineage, session_columns


@pytest.fixture
def store(tmp_path: Path):
    with Store(tmp_path / "dialog.db") as db:
        yield db


@pytest.mark.parametrize(
    ("spec", "parsed"),
    [
        (None, (None, True)),
        ("new", (None, True)),
        ("NEW", (None, True)),
        (3, (3, False)),
        ("3", (3, False)),
        ("3 / new", (3, True)),
        ("3/new", (3, True)),
    ],
)
def test_parse_session_spec(spec, parsed) -> None:
    assert parse_session_spec(spec) == parsed


@pytest.mark.parametrize(
    "text", ["new", " 3 ", "03", "3 / NEW", "+3", "1_0", "３", "3 /", "/ new", "new / new", "0"]
)
def test_the_store_and_the_command_line_read_sessions_by_one_grammar(text: str) -> None:
    """A session written in Python (``run(session=…)``) is read as ``--session`` and meta
    ``session`` read it (§3): once, by words.SESSION_SPEC (int() took '+3' and '1_0')."""
    try:
        session_spec(text)
    except argparse.ArgumentTypeError:
        with pytest.raises(RunError, match="session must be"):
            parse_session_spec(text)
    else:
        parse_session_spec(text)


@pytest.mark.parametrize("spec", ["x", "3 / old", True, "1.5", 0, -1, "0", "-1 / new", "0 / new"])
def test_bad_session_spec(spec) -> None:
    with pytest.raises(RunError, match="session must be"):
        parse_session_spec(spec)


@pytest.mark.parametrize(
    ("database", "url_start"),
    [
        ("postgresql://u@h/db", "postgresql://u@h/db"),
        (":memory:", "sqlite://"),
        ("x.db", "sqlite:////"),
        (None, "sqlite:////"),
    ],
)
def test_database_url(database, url_start: str) -> None:
    assert database_url(database).startswith(url_start)


def test_session_rules(store: Store) -> None:
    assert store.open_session("new", title="T", script="s.fems", script_hash="h") == 1
    assert store.open_session(None) == 2
    assert store.open_session(1) == 1
    with pytest.raises(RunError, match="session 9 does not exist"):
        store.open_session(9)
    assert store.open_session("9 / new") == 9
    assert store.open_session("9 / new") == 9
    assert store.open_session("new") == 10
    row = store.session(1)
    assert row is not None and row["title"] == "T" and row["script_hash"] == "h"
    store.set_status(1, "completed")
    assert store.session(1)["status"] == "completed"
    assert store.session(99) is None


def test_sqlite_file_uses_wal(tmp_path: Path) -> None:
    path = tmp_path / "wal.db"
    Store(path).close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"fems_sessions", "fems_souls", "fems_users", "fems_messages"} <= tables
    assert all(t.startswith("fems_") for t in tables)


def test_memory_database() -> None:
    with Store(":memory:") as db:
        session = db.open_session()
        db.add_message(session, "reply", "hi", souls=["1"])
        assert [m.content for m in db.visible_messages(session, soul="1")] == ["hi"]


def test_messages_and_scope(store: Store) -> None:
    session = store.open_session()
    other = store.open_session()
    store.add_message(session, "prompt", "secret prompt", souls=["1"], speaker_soul="1")
    store.add_message(session, "narration", "night falls", souls=["1", "2"], users=["7"])
    m = store.add_message(
        session,
        "reply",
        "I vote @Bob",
        souls=["1"],
        speaker_soul="1",
        speaker_name="@Eve",
        turn=1,
        action="vote",
        node="V",
        model="fems/mock",
        prompt_tokens=3,
        completion_tokens=4,
        cost=0.5,
    )
    store.add_message(other, "reply", "other session", souls=["1"])
    assert m.seq == 3 and m.cost == 0.5
    assert [x.content for x in store.visible_messages(session, soul="1")] == [
        "night falls",
        "I vote @Bob",
    ]
    assert [x.content for x in store.visible_messages(session, soul="2")] == ["night falls"]
    assert [x.content for x in store.visible_messages(session, user="7")] == ["night falls"]
    assert [x.content for x in store.visible_messages(session, soul="2", user="7")] == [
        "night falls"
    ]
    assert store.visible_messages(session) == []
    assert [x.seq for x in store.messages(session)] == [1, 2, 3]
    assert store.messages(other)[0].seq == 1
    assert store.scope_of(m.id) == (["1"], [])
    full = store.messages(session)[2]
    assert (full.speaker_name, full.turn, full.action, full.model) == (
        "@Eve",
        1,
        "vote",
        "fems/mock",
    )
    with pytest.raises(ValueError):
        store.add_message(session, "chat", "x")
    with pytest.raises(RunError, match="does not exist"):
        store.add_message(42, "reply", "x")


def test_scope_lookup_uses_the_index(store: Store) -> None:
    session = store.open_session()
    store.add_message(session, "reply", "x", souls=["1"])
    with store.database().engine.connect() as conn:
        plan = conn.exec_driver_sql(
            "EXPLAIN QUERY PLAN SELECT message_id FROM fems_message_souls "
            "WHERE session_id = 1 AND soul_id = '1' ORDER BY seq"
        ).fetchall()
    assert any("fems_message_souls_scan" in str(row) for row in plan)


def test_context_query_scans_the_index_in_order(store: Store) -> None:
    """The built-in context's statement is an index range scan with no sort (§14)."""
    session = store.open_session()
    store.add_message(session, "reply", "x", souls=["1"])
    statement = _visible_statement(True, False, True).params(
        session=session, soul="1", after=0, last=10
    )
    sql = str(statement.compile(store.database().engine, compile_kwargs={"literal_binds": True}))
    with store.database().engine.connect() as conn:
        plan = " ".join(str(r) for r in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}"))
    assert "fems_message_souls_scan" in plan and "TEMP B-TREE" not in plan


def test_add_messages_in_one_call(store: Store) -> None:
    session = store.open_session()
    stored = store.add_messages(
        session,
        [
            NewMessage("narration", "night", souls=["1", "2"], users=["7"]),
            NewMessage("prompt", "secret"),
            NewMessage("reply", "howl", souls=["1"], speaker_name="@wolf", speaker_soul="1"),
        ],
    )
    assert [(m.seq, m.kind) for m in stored] == [(1, "narration"), (2, "prompt"), (3, "reply")]
    assert store.visible_lines(session, soul="1") == [
        ("narration", None, None, "night"),
        ("reply", "@wolf", "1", "howl"),
    ]
    assert store.visible_lines(session, soul="2", user="7") == [("narration", None, None, "night")]
    assert store.visible_messages(session, soul="2", user="7") == [stored[0]]
    with pytest.raises(ValueError, match="message kind"):
        store.add_messages(session, [NewMessage("reply", "kept?"), NewMessage("shout", "x")])
    assert len(store.messages(session)) == 3  # the whole call was rolled back


def test_turns(store: Store) -> None:
    session = store.open_session()
    assert [store.new_turn(session) for _ in range(3)] == [1, 2, 3]


def test_two_hundred_concurrent_writers(tmp_path: Path) -> None:
    """Two runs (two engines) write their own sessions of one SQLite file at the same time."""
    path = tmp_path / "busy.db"
    stores = [Store(path), Store(path)]
    sessions = [store.open_session() for store in stores]

    for i in range(200):  # each store's writer commits while the other's does
        message = NewMessage("reply", f"m{i}", souls=[str(i % 5)], users=["u"])
        stores[i % 2].submit(sessions[i % 2], [message])
    for store in stores:
        store.flush()
    for run, session in enumerate(sessions):
        messages = stores[0].messages(session)
        assert [m.content for m in messages] == [f"m{i}" for i in range(run, 200, 2)]
        assert [m.seq for m in messages] == list(range(1, 101))
        by_id = sorted(messages, key=lambda m: m.id)
        assert all(a.seq < b.seq for a, b in zip(by_id, by_id[1:], strict=False))
        assert len(stores[1].visible_messages(session, soul=str(run))) == 20
    for s in stores:
        s.close()


def test_two_hundred_concurrent_first_starts_on_a_new_file(tmp_path: Path) -> None:
    """Each start opens its own engine on a file nobody created yet, all at once (§14): the
    schema is created once and no start fails with "table … already exists"."""
    path, starts = tmp_path / "new.db", 200
    ready = threading.Barrier(starts)
    failures: list[str] = []

    def first_start() -> None:
        ready.wait()
        try:
            with Store(path) as store:
                store.open_session("new")
        except RunError as error:
            failures.append(error.message)

    threads = [threading.Thread(target=first_start) for _ in range(starts)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    with Store(path) as store:
        assert store.session(starts) is not None and store.session(starts + 1) is None


def test_a_session_written_by_two_runs_at_once_fails_loudly(tmp_path: Path) -> None:
    """Sequence numbers are the store's own counter: a second writer of the same session is
    caught by the compare-and-set, never interleaved."""
    path = tmp_path / "shared.db"
    first, second = Store(path), Store(path)
    session = first.open_session()
    first.add_message(session, "reply", "one", souls=["1"])
    second.add_message(session, "reply", "two", souls=["1"])
    with pytest.raises(RunError, match="written by another run at the same time"):
        first.add_message(session, "reply", "three", souls=["1"])
    with pytest.raises(RunError, match="written by another run"):  # and stays failed
        first.flush()
    assert [m.content for m in second.messages(session)] == ["one", "two"]
    second.close()
    first.database().engine.dispose()


def test_the_writer_batches_and_reads_see_submitted_writes(store: Store) -> None:
    session = store.open_session()
    batches = [
        store.submit(session, [NewMessage("reply", f"m{i}", souls=["1"])]) for i in range(50)
    ]
    assert [m.content for m in store.messages(session)] == [f"m{i}" for i in range(50)]
    assert [b.stored()[0].seq for b in batches] == list(range(1, 51))
    assert store.session(session)["last_seq"] == 50


def test_turn_ids_and_contexts_need_no_database_round_trip(store: Store) -> None:
    """Turn ids come from the session log; the lines of submitted messages are kept by soul
    and by user, and older ones come from the tag index (a store opened later)."""
    session = store.open_session()
    store.submit(session, [NewMessage("narration", "night", souls=["1", "2"], users=["7"])])
    store.submit(session, [NewMessage("prompt", "secret", souls=["1"])])
    store.submit(session, [NewMessage("reply", "howl", souls=["1"], speaker_name="@wolf")])
    assert store.new_turn(session) == 1 and store.new_turn(session) == 2
    since = store.visible_since(session, soul="1", after=1)
    assert since == ([(3, ("reply", "@wolf", None, "howl"))], 3)
    both = store.visible_since(session, soul="2", user="7")
    assert both == ([(1, ("narration", None, None, "night"))], 3)
    assert store.visible_since(session, soul="2", after=3) == ([], 3)
    store.close()
    with Store(store.database().url.removeprefix("sqlite:///")) as later:
        assert later.session(session)["last_turn"] == 2
        assert later.visible_since(session, soul="1", after=1) == since
        later.submit(session, [NewMessage("reply", "dawn", souls=["1"])])
        lines, upto = later.visible_since(session, soul="1")
        assert [seq for seq, _ in lines] == [1, 3, 4] and upto == 4
        assert later.visible_lines(session, soul="1", last=3)[-1][3] == "howl"


def test_seed_from_python_yaml_and_json(store: Store, tmp_path: Path) -> None:
    store.seed({"souls": {"1": {"name": "Eve", "persona": "A careful seer."}, "2": "A wolf."}})
    assert store.persona("1") == "A careful seer." and store.persona("2") == "A wolf."
    assert store.persona("3") == ""
    yaml_file = tmp_path / "seed.yaml"
    yaml_file.write_text(
        "souls:\n  - id: 1\n    persona: Updated.\nusers:\n  - id: '007'\n    name: Ann\n    profile: Likes puzzles.\n",
        encoding="utf-8",
    )
    store.seed_file(yaml_file)
    assert store.persona("1") == "Updated." and store.soul("1")["name"] == "Eve"
    json_file = tmp_path / "seed.json"
    json_file.write_text(
        json.dumps({"users": {"8": {"profile": "Plays rarely."}}}), encoding="utf-8"
    )
    store.seed_file(json_file)
    assert store.profiles(["007", "8", "9"]) == "Likes puzzles.\n\nPlays rarely."
    assert store.user("007")["name"] == "Ann"


@pytest.mark.parametrize(
    "content",
    ["[1, 2]", '{"souls": [{"name": "no id"}]}', '{"souls": 3}', '{"souls": {"x": 3}}'],
)
def test_bad_seed_files(store: Store, tmp_path: Path, content: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(RunError):
        store.seed_file(path)


def test_missing_seed_file(store: Store, tmp_path: Path) -> None:
    with pytest.raises(RunError, match="cannot read souls file"):
        store.seed_file(tmp_path / "nope.yaml")


def test_checkpoints_and_actors(store: Store) -> None:
    session = store.open_session()
    assert store.last_checkpoint(session) is None
    store.add_message(session, "reply", "a", souls=["1"])
    store.save_checkpoint(session, step=4, node="A", state={"vars": {"x": 1}})
    store.add_message(session, "reply", "b", souls=["1"])
    store.save_checkpoint(session, step=9, node="B", state={"vars": {"x": 2}})
    last = store.last_checkpoint(session)
    assert last is not None and (last["seq"], last["step"], last["node"]) == (2, 9, "B")
    assert last["state"] == {"vars": {"x": 2}}
    coder = {"type": "ai", "soul_id": "spawned:coder_1", "source": None}
    store.record_actors(session, {"@coder_1": {**coder, "blueprint": "coder"}})
    assert store.session_actors(session)[0]["blueprint"] == "coder"
    store.record_actors(session, {"@coder_1": {**coder, "source": "fast", "blueprint": None}})
    rows = store.session_actors(session)
    assert len(rows) == 1 and rows[0]["source"] == "fast" and rows[0]["blueprint"] is None


def test_a_new_session_s_first_message_turn_and_checkpoint(store: Store) -> None:
    session = store.open_session("new")
    store.submit(session, [NewMessage("reply", "x", souls=["1"])])
    turn = store.new_turn(session)  # a counter in memory: nothing to wait for
    store.save_checkpoint(session, step=1, state={})
    messages = store.visible_messages(session, soul="1")
    assert session == 1 and turn == 1 and [m.content for m in messages] == ["x"]


@pytest.mark.parametrize(
    "database", ["{dir}/missing/dir/x.db", "nosuchdialect://x", "postgresql+nodriver://h/db"]
)
def test_unopenable_database_is_a_run_error(tmp_path: Path, database: str) -> None:
    with pytest.raises(RunError, match="cannot open database"):
        Store(database.format(dir=tmp_path))


def test_forked_sessions_record_their_parent_and_branch_turn(store: Store) -> None:
    """Lineage (§16.4a): a fork names its parent and how many of its turns it began with;
    the chain of parents and the tree of forks are read back."""
    root = store.open_session("new", title="the game")
    night = store.open_session("new", parent=root, branch_turn=12)
    seer = store.open_session("new", parent=night, branch_turn=20)
    later = store.open_session("new", parent=root, branch_turn=40)
    reuse = store.open_session("new", parent=root)
    alone = store.open_session("new")
    assert store.session(root)["parent"] is None and store.session(root)["branch_turn"] is None
    assert (store.session(seer)["parent"], store.session(seer)["branch_turn"]) == (night, 20)
    assert [row["id"] for row in store.lineage(seer)] == [seer, night, root]
    assert [row["branch_turn"] for row in store.lineage(seer)] == [20, 12, None]
    assert store.lineage(99) == []
    store.set_branch_turn(reuse, 7)
    assert store.session(reuse)["branch_turn"] == 7

    def shape(nodes: list) -> list:
        return [(node.session["id"], shape(node.children)) for node in nodes]

    tree = store.session_tree()
    assert shape(tree) == [(alone, []), (root, [(night, [(seer, [])]), (later, []), (reuse, [])])]
    assert tree[1].children[0].session["branch_turn"] == 12
    assert {row["id"]: row["parent"] for row in store.sessions()}[later] == root


def test_lineage_mistakes(store: Store) -> None:
    root = store.open_session("new")
    with pytest.raises(RunError, match="cannot fork session 5: it does not exist"):
        store.open_session("new", parent=5, branch_turn=1)
    with pytest.raises(RunError, match="session 1 already exists: a fork starts a new session"):
        store.open_session(root, parent=root, branch_turn=1)
    with pytest.raises(ValueError, match="needs a parent session"):
        store.open_session("new", branch_turn=3)
    with pytest.raises(RunError, match="was not forked"):
        store.set_branch_turn(root, 2)
    with pytest.raises(RunError, match="session 8 does not exist"):
        store.set_branch_turn(8, 2)
    assert [row["id"] for row in store.sessions()] == [root]  # no failed fork left a session


def test_a_database_made_before_lineage_gains_its_columns(tmp_path: Path) -> None:
    """An older database's sessions table gets parent and branch_turn when a store opens it
    (§14), keeping its sessions, which can then be forked."""
    path = str(tmp_path / "old.db")
    database_before_lineage(path)
    with Store(path) as store:
        assert {"parent", "branch_turn"} <= session_columns(store.database().engine)
        old = store.session(1)
        assert old["title"] == "an earlier run" and old["parent"] is None
        fork = store.open_session("new", parent=1, branch_turn=2)
        assert [row["id"] for row in store.lineage(fork)] == [fork, 1]
    with Store(path) as store:  # a second opening finds nothing to add
        assert store.lineage(fork)[0]["branch_turn"] == 2


def test_many_first_starts_on_a_database_made_before_lineage(tmp_path: Path) -> None:
    """Runs opening an older database at once add its columns once: none fails with a
    "duplicate column"."""
    path, starts = str(tmp_path / "old.db"), 20
    database_before_lineage(path)
    ready = threading.Barrier(starts)
    failures: list[str] = []

    def first_start() -> None:
        ready.wait()
        try:
            Store(path).close()
        except RunError as error:
            failures.append(error.message)

    threads = [threading.Thread(target=first_start) for _ in range(starts)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    with Store(path) as store:
        assert {"parent", "branch_turn"} <= session_columns(store.database().engine)


def test_every_method_of_the_store_is_a_function_of_its_own() -> None:
    """Go-to-definition on ``store.submit`` lands on code, not on a descriptor that looks the
    method up in a part."""
    methods = {name: value for name, value in vars(Store).items() if not name.startswith("__")}
    assert "submit" in methods and "open_session" in methods
    assert [name for name, value in methods.items() if not inspect.isfunction(value)] == []
