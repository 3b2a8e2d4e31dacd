"""A new session in a database file not made yet opens its store behind its first request
(#30 item 4): the first turn asks its model before the database exists, and what the run
stores is what it stores when the database is open from the start."""

from __future__ import annotations

import inspect
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from fems_helpers import build_script, load, run_program
from fems_runtime.llm import ModelClient
from fems_runtime.records import RunError
from fems_runtime.store import Checkpoint, NewMessage, Store
from fems_runtime.store.open_database import OpenDatabase
from fems_runtime.store.opening import FIRST_SESSION, OpeningStore, fresh_file

from .fake_openai import Behaviour, fake_openai

SCRIPT = """
meta:
  name = opening
  session = new
actors:
  ai @eve = soul:eve
  ai @bob = soul:bob
action ask @ai(@eve):
  prompt: "Say something to Bob."
  scope: [@eve, @bob]
action answer @ai(@bob):
  prompt: "Answer Eve."
  scope: [@eve, @bob]
mainflow:
  [A]: ask
  [B]: answer
  [START] -> [A] -> [B] -> [END]
"""


def stored(db: Path) -> tuple[list[tuple[Any, ...]], ...]:
    """What a run stored, without the times: its sessions, actors, messages and checkpoints."""
    with sqlite3.connect(db) as connection:
        return tuple(
            connection.execute(query).fetchall()
            for query in (
                "SELECT id, title, script, status, last_seq, last_turn FROM fems_sessions",
                "SELECT session_id, name, type, soul_id FROM fems_session_actors ORDER BY name",
                "SELECT session_id, seq, turn, kind, action, node, speaker_soul, speaker_name, content "
                "FROM fems_messages ORDER BY seq",
                "SELECT session_id, seq, step, node, state FROM fems_checkpoints ORDER BY id",
            )
        )


def test_the_first_request_leaves_before_the_database_exists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = load(build_script(tmp_path, SCRIPT))
    fresh, made = tmp_path / "fresh.db", tmp_path / "made.db"
    Store(made).close()  # a database that exists: opened before the run's first step
    existed: dict[str, list[bool]] = {}
    complete = ModelClient.complete

    async def watched(self: ModelClient, *args: Any, **kwargs: Any) -> Any:
        for db in (fresh, made):
            if db in running:
                existed.setdefault(db.name, []).append(db.exists())
        return await complete(self, *args, **kwargs)

    monkeypatch.setattr(ModelClient, "complete", watched)
    for db in (fresh, made):
        running = {db}
        result = module.run(model="fems/mock", seed=1, db=str(db))
        assert (result.status, result.session) == ("completed", FIRST_SESSION)
    # the fresh database is made after the first request, before the second one
    assert existed == {"fresh.db": [False, True], "made.db": [True, True]}
    assert stored(fresh) == stored(made)
    assert len(stored(fresh)[2]) == 4  # both turns' prompts and replies


def test_only_a_new_database_file_is_fresh(tmp_path: Path) -> None:
    (tmp_path / "old.db").touch()
    assert fresh_file(tmp_path / "new.db")
    assert not fresh_file(tmp_path / "old.db")
    assert not fresh_file(tmp_path / "missing" / "new.db")
    assert not fresh_file(":memory:")
    assert not fresh_file(f"sqlite:///{tmp_path / 'url.db'}")


def test_turn_ids_and_checkpoints_given_before_it_opens_are_stored_in_order(
    tmp_path: Path,
) -> None:
    db = tmp_path / "fresh.db"

    def opens() -> tuple[Store, int]:
        store = Store(db)
        return store, store.open_session("new")

    store = OpeningStore(opens)
    assert store.new_turn(FIRST_SESSION) == 1
    assert store.visible_since(FIRST_SESSION, "eve", after=0) == ([], 0)
    assert (store.persona("eve"), store.profiles(["ann"])) == ("", "")
    store.submit(FIRST_SESSION, (), Checkpoint({"kind": "step"}, 1, "A"))
    assert store.new_turn(FIRST_SESSION) == 2
    assert not db.exists()
    store.submit(
        FIRST_SESSION, [NewMessage("reply", "hi", turn=2, speaker_soul="eve", souls=["eve"])]
    )
    assert db.exists()
    assert store.new_turn(FIRST_SESSION) == 3
    assert [m.content for m in store.visible_messages(FIRST_SESSION, "eve")] == ["hi"]
    store.close()
    _, _, messages, checkpoints = stored(db)
    assert [(seq, turn, content) for _, seq, turn, _, _, _, _, _, content in messages] == [
        (1, 2, "hi")
    ]
    assert [(seq, step, node) for _, seq, step, node, _ in checkpoints] == [(0, 1, "A")]


def test_a_deferred_store_opens_its_database_once_for_every_thread(tmp_path: Path) -> None:
    db, opened = tmp_path / "later.db", []

    def opens() -> OpenDatabase:
        opened.append(threading.current_thread().name)
        return OpenDatabase(db)

    store = Store(opens=opens)
    assert not db.exists()
    threads = [threading.Thread(target=store.sessions) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(opened) == 1 and db.exists()
    store.close()


def test_the_opening_store_forwards_nothing_by_name() -> None:
    """Go-to-definition and types hold for a new session's store too: it overrides plain
    methods of the :class:`Store`, and no attribute is looked up in another store by name."""
    members = {name: value for name, value in vars(OpeningStore).items() if name[:2] != "__"}
    assert "__getattr__" not in vars(OpeningStore) and "new_turn" in members
    assert [name for name, value in members.items() if not inspect.isfunction(value)] == []


def test_a_session_another_run_took_meanwhile_fails_the_run(tmp_path: Path) -> None:
    db = tmp_path / "fresh.db"

    def opens() -> tuple[Store, int]:
        store = Store(db)
        store.open_session("new")  # another run's, made at the same moment
        return store, store.open_session("new")

    store = OpeningStore(opens)
    store.new_turn(FIRST_SESSION)
    with pytest.raises(RunError, match="another run made the database"):
        store.submit(FIRST_SESSION, [NewMessage("reply", "hi", turn=1)])


def test_over_the_network_a_new_file_stores_what_an_open_database_does(tmp_path: Path) -> None:
    """The worker opens the store while the first request is under way (the turn waits for
    it to store its reply); what is stored is the same."""
    module = build_script(tmp_path, SCRIPT.replace("Bob.", "Bob. REPLY[[Hi Bob.]]"))
    fresh, made = tmp_path / "fresh.db", tmp_path / "made.db"
    Store(made).close()
    with fake_openai(Behaviour(text=None, pause=0.05)) as server:
        (tmp_path / "fems.toml").write_text(
            f'[models]\nm = {{ model = "openai/m", api_base = "{server.api_base}", '
            'api_key = "k" }\n',
            encoding="utf-8",
        )
        for db in (fresh, made):
            done = run_program(module, "--model", "m", "--db", str(db))
            assert done.returncode == 0, done.stderr
        assert len(server.requests) == 4
    assert stored(fresh) == stored(made)
    assert [content for *_, content in stored(fresh)[2]][:2] == [
        "Say something to Bob. REPLY[[Hi Bob.]]",
        "Hi Bob.",
    ]


PAR_SCRIPT = """
meta:
  name = opening-par
  session = new
  max_concurrency = 1
vars:
  team = [@eve, @bob]
  @w = ""
actors:
  ai @eve = soul:eve
  ai @bob = soul:bob
action work @ai(@w):
  prompt: "Do one unit of work."
  scope: [@w]
mainflow:
  [START] -> [A] -> par @w in team:
    -> [W]:work ->
  -> [END]
"""


def test_a_turn_waiting_for_the_opening_leaves_the_event_loop_free(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reply that must wait for the store to open does not hold the run: with one call in
    flight at a time, the second branch's request leaves as soon as the first reply is in,
    before the database is open."""
    module = load(build_script(tmp_path, PAR_SCRIPT))
    happened: list[str] = []
    second_call = threading.Event()
    complete, open_store = ModelClient.complete, OpeningStore._open

    async def watched(self: ModelClient, *args: Any, **kwargs: Any) -> Any:
        result = await complete(self, *args, **kwargs)
        happened.append("reply")
        if happened.count("reply") == 2:
            second_call.set()
        return result

    def held_open(self: OpeningStore) -> None:
        second_call.wait(timeout=5)  # a run whose loop waits for the opening gets here late
        happened.append("opened")
        open_store(self)

    monkeypatch.setattr(ModelClient, "complete", watched)
    monkeypatch.setattr(OpeningStore, "_open", held_open)
    with fake_openai(Behaviour(text="Done.")) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.api_base)
        monkeypatch.setenv("OPENAI_API_KEY", "k")
        result = module.run(model="openai/m", db=str(tmp_path / "fresh.db"))
    assert result.status == "completed"
    assert happened == ["reply", "reply", "opened"]
    assert len(stored(tmp_path / "fresh.db")[2]) == 4  # both turns' prompts and replies
