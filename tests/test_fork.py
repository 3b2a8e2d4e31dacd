"""``--fork SESSION[:TURN]`` and ``--reuse SESSION`` (§16.4a): a new session that starts with
another one's turns, replayed from its records, with its own copies of their messages."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from fems_helpers import load, read_trace, run_program
from fems_runtime.records import RunError
from fems_runtime.store import Store

from fems2py.build import build_file
from fems2py.cli import main as fems2py_main
from tests.runtime.fake_openai import fake_openai

ROOT = Path(__file__).resolve().parent.parent
WEREWOLF = ROOT / "examples" / "werewolf"
LAST_PROMPT = "Read out the roles that were revealed and say good night."
MOCK = ("--model", "fems/mock", "--human", "fems/mock")


def werewolf(folder: Path, edits: dict[str, str] | None = None) -> Path:
    """examples/werewolf copied into ``folder`` (its text changed by ``edits``), built."""
    folder.mkdir(parents=True, exist_ok=True)
    for path in WEREWOLF.iterdir():
        if path.is_file():
            shutil.copy(path, folder / path.name)
    script = folder / "werewolf.fems"
    text = script.read_text(encoding="utf-8")
    for old, new in (edits or {}).items():
        assert old in text
        text = text.replace(old, new)
    script.write_text(text, encoding="utf-8")
    module = folder / "werewolf_gen.py"
    build_file(script, module)
    return module


def messages(db: Path, session: int) -> list[tuple[Any, ...]]:
    """A session's messages as the actors see them: order, kind, text, turn, speaker, scope."""
    with Store(str(db)) as store:
        scopes = store.message_scopes(session)
        return [
            (m.seq, m.kind, m.content, m.turn, m.action, m.speaker_name, scopes.get(m.id))
            for m in store.messages(session)
        ]


def session_row(db: Path, session: int) -> dict[str, Any]:
    with Store(str(db)) as store:
        row = store.session(session)
    assert row is not None
    return row


def checkpoints(db: Path, session: int) -> list[Any]:
    with Store(str(db)) as store:
        found = store.run_records(session)
    assert found is not None
    return found[1]


def main(module: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """Run the module's command line in this process: its exit status and stderr."""
    status = load(module).PROGRAM.main([*args])
    return status, capsys.readouterr().err


@pytest.fixture(scope="module")
def parent(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A werewolf game played with fems/mock, session 1 of its database (copied per test)."""
    folder = tmp_path_factory.mktemp("werewolf")
    module = werewolf(folder)
    outcome = load(module).run(
        model="fems/mock", human="fems/mock", seed=1, db=str(folder / "p.db")
    )
    assert outcome.status == "completed"
    return module, folder / "p.db"


def copied(parent: tuple[Path, Path], folder: Path) -> tuple[Path, Path]:
    module, db = parent
    shutil.copy(db, folder / "d.db")
    return module, folder / "d.db"


def test_a_fork_replays_the_first_turns_then_goes_live_with_its_own_copies(
    parent: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module, db = copied(parent, tmp_path)
    before = (messages(db, 1), checkpoints(db, 1))
    trace = tmp_path / "t.jsonl"
    status, err = main(
        module,
        capsys,
        *MOCK,
        "--db",
        str(db),
        "--seed",
        "2",
        "--fork",
        "1:10",
        "--trace",
        str(trace),
    )
    assert status == 0, err
    assert "(session 2, 10 turns replayed from session 1)" in err
    assert (messages(db, 1), checkpoints(db, 1)) == before  # the parent is only read
    forked = [m for m in messages(db, 2) if m[3] <= 10]
    assert forked == [m for m in before[0] if m[3] <= 10]  # the same messages, its own rows
    assert any(m[3] > 10 for m in messages(db, 2))
    row = session_row(db, 2)
    assert (row["parent"], row["branch_turn"], row["status"]) == (1, 10, "completed")
    events = read_trace(trace)
    calls = [e for e in events if e["event"] == "llm_call"]
    assert calls and min(e["turn"] for e in calls) == 11  # nothing up to turn 10 was called
    with Store(str(db)) as store:  # the copies are not its calls: no usage of their own
        assert store.session_usage(2)["model_calls"] == len(calls)
    replayed = {e["turn"] for e in events if e["event"] == "replay" and "turn" in e}
    assert replayed == set(range(1, 11))
    # the fork has the parent's first ten turns, then another game (seed 2)
    assert messages(db, 2) != before[0]


def test_a_fork_past_the_end_or_inside_a_par_region_moves_and_says_so(
    parent: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module, db = copied(parent, tmp_path)
    status, err = main(module, capsys, *MOCK, "--db", str(db), "--seed", "1", "--fork", "1:999")
    assert status == 0, err
    assert "notice: --fork 1:999: session 1 has turns up to 56: forking at its end" in err
    assert "0 model calls" in err  # the same options: the whole game is the parent's
    assert messages(db, 2) == messages(db, 1)
    assert session_row(db, 2)["branch_turn"] == 56

    # turns 19–24 are the first day's votes, cast at once (`par @voter in alive`)
    status, err = main(module, capsys, *MOCK, "--db", str(db), "--seed", "3", "--fork", "1:21")
    assert status == 0, err
    assert "turn 21 runs in a concurrent region (par_voter @voter#0, turns 19–24)" in err
    assert "forking at turn 18, the last before it" in err
    assert session_row(db, 3)["branch_turn"] == 18
    assert [m for m in messages(db, 3) if m[3] <= 18] == [m for m in messages(db, 1) if m[3] <= 18]


VOTE = """\
vars:
    alive = [@ann, @ben, @cat]
    votes = {}
    count = 0
    @voter = ""
    @VOTE = ""
actors:
    ai @ann
    ai @ben
    ai @cat
action vote @ai(@voter):
    prompt: Vote for one of {alive}. SET VARIABLE: <<@VOTE = @...>>
    out: @VOTE
action record @assign:
    out: |
        votes.@voter = @VOTE
        count += 1
mainflow:
    [START] -> par @voter in alive:
        -> vote -> record ->
    -> [END]
"""


def test_a_fork_at_the_end_takes_a_par_region_recorded_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """§12.5a's vote: all three turns run at once, in one region that ends the session."""
    script = tmp_path / "vote.fems"
    script.write_text(VOTE, encoding="utf-8")
    db = str(tmp_path / "fk.db")

    def run(*args: str) -> str:
        status = fems2py_main(["run", str(script), "--db", db, "--model", "fems/mock", *args])
        err = capsys.readouterr().err
        assert status == 0, err
        return err

    run()
    err = run("--fork", "1")  # no TURN: all of session 1, its region whole
    assert "0 model calls (session 2, 3 turns replayed from session 1)" in err
    assert "notice" not in err  # no `:3` the user never wrote, no move
    err = run("--fork", "1:300")
    assert "notice: --fork 1:300: session 1 has turns up to 3: forking at its end" in err
    assert "concurrent region" not in err
    assert "(session 3, 3 turns replayed from session 1)" in err
    err = run("--fork", "1:3")  # the region's last turn: nothing of it comes after
    assert "notice" not in err and "(session 4, 3 turns replayed from session 1)" in err
    err = run("--fork", "1:2")  # strictly inside: the fork point moves before the region
    assert (
        "notice: --fork 1:2: turn 2 runs in a concurrent region (par_voter @voter#0, "
        "turns 1–3): forking at turn 0, the last before it"
    ) in err
    assert "(session 5, 0 turns replayed from session 1)" in err
    assert [session_row(Path(db), n)["branch_turn"] for n in (2, 3, 4, 5)] == [3, 3, 3, 0]


def test_run_takes_fork_from_python_and_refuses_what_makes_no_sense(
    parent: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module, db = copied(parent, tmp_path)
    game = load(module)
    outcome = game.run(model="fems/mock", human="fems/mock", seed=4, db=str(db), fork="1:5")
    assert (outcome.session, outcome.reused) == (2, 5)
    assert game.run(model="fems/mock", human="fems/mock", db=str(db), fork=(1, 3)).reused == 3
    script = str(module.with_name("werewolf.fems"))
    args = ["run", script, "--db", str(db), *MOCK, "--fork", "1:7"]
    assert fems2py_main(args) == 0  # `fems2py run` passes the options to the module
    assert "(session 4, 7 turns replayed from session 1)" in capsys.readouterr().err
    with pytest.raises(RunError, match="give SESSION or SESSION:TURN"):
        game.run(db=str(db), fork="one")
    with pytest.raises(RunError, match="--fork 9: session 9 does not exist"):
        game.run(db=str(db), fork=9)
    for numbered_from_zero in (0, (0, 2), "0:2"):  # sessions are numbered from 1, as --reuse's
        with pytest.raises(RunError, match="sessions numbered from 1"):
            game.run(db=str(db), fork=numbered_from_zero)
    for args, problem in (
        (("--fork", "1", "--resume"), "--fork starts a new session; --resume continues one"),
        (("--reuse", "1", "--session", "2"), "--reuse starts a new session: leave out --session"),
        (("--fork", "1", "--reuse", "1"), "--fork and --reuse both start a new session"),
        (("--fork", "1:x"), "give SESSION or SESSION:TURN"),
        (("--fork", "0"), "sessions numbered from 1"),
        (("--fork", "00:3"), "sessions numbered from 1"),
    ):
        status, err = main(module, capsys, "--db", str(db), *args)
        assert status == 2 and problem in err
    for options, problem in (  # from Python too: a run error, no session made or changed
        ({"fork": 1, "resume": True}, "--fork starts a new session; --resume continues one"),
        ({"reuse": 1, "session": 2}, "--reuse starts a new session: leave out --session"),
        ({"fork": "1:2", "session": "3 / new"}, "--fork starts a new session: leave out"),
        ({"resume": True, "session": "new"}, "--resume continues a session: give --session N"),
    ):
        with pytest.raises(RunError, match=re.escape(problem)):
            game.run(model="fems/mock", human="fems/mock", db=str(db), **options)
    with Store(str(db)) as store:
        assert sorted(row["id"] for row in store.sessions()) == [1, 2, 3, 4]


SCRIPT = """\
vars:
    said = ""
    notes = 0
code:
    side = file:"side.py"
actors:
    ai @Ann
    ai @Bob
action speak @ai(@Ann):
    prompt: Say something.
    scope: all
    out: said(string)
action answer @ai(@Bob):
    prompt: Answer @Ann.
    scope: all
action note @func(side.note):
    in: said = said
    out: notes
mainflow:
    [START] -> [R]
    [R] -> speak -> note -> answer -> [C]
    [C] -> if (notes < 3) -> [R]
    [C] -> if (notes >= 3) -> [END]
"""
SIDE = "COUNT = []\n\ndef note(said):\n    COUNT.append(said)\n    return len(COUNT)\n"


def test_an_interrupted_parent_can_be_forked_at_any_turn_it_recorded(tmp_path: Path) -> None:
    (tmp_path / "side.py").write_text(SIDE, encoding="utf-8")
    (tmp_path / "t.fems").write_text(SCRIPT, encoding="utf-8")
    module = tmp_path / "t.py"
    build_file(tmp_path / "t.fems", module)
    replies = tmp_path / "r.json"
    speak = [f'SET VARIABLE: <<said = "line {n}">>' for n in range(3)]
    replies.write_text(json.dumps({"speak": speak, "answer": ["Yes."]}), encoding="utf-8")
    failed = run_program(module, "--db", "d.db", "--replies", str(replies))
    assert failed.returncode == 1 and "no reply left for action answer" in failed.stderr
    recorded = [m for m in messages(tmp_path / "d.db", 1)]
    assert max(m[3] for m in recorded) == 3  # speak, answer, speak: the second answer failed
    for turn in (1, 2, 3):
        forked = run_program(module, "--db", "d.db", "--model", "fems/mock", "--fork", f"1:{turn}")
        assert forked.returncode == 0, forked.stderr
        replayed = "1 turn" if turn == 1 else f"{turn} turns"
        assert f"{replayed} replayed from session 1" in forked.stderr
    # the last fork took the three recorded turns and the notes written between them
    assert [m for m in messages(tmp_path / "d.db", 4) if m[3] <= 3] == recorded


def fake_werewolf(folder: Path, server: Any, edits: dict[str, str] | None = None) -> Path:
    module = werewolf(folder, edits)
    (folder / "fems.toml").write_text(
        f'[models]\nfake = {{ model = "openai/fake", api_base = "{server.api_base}", '
        'api_key = "k" }\n',
        encoding="utf-8",
    )
    return module


def test_reuse_after_an_edit_of_the_last_prompt_calls_only_that_turn(tmp_path: Path) -> None:
    shared = tmp_path / "d.db"
    with fake_openai() as server:
        first = fake_werewolf(tmp_path / "a", server)
        played = run_program(first, "--model", "fake", "--human", "fems/mock", "--db", str(shared))
        assert played.returncode == 0, played.stderr
        calls = len(server.requests)
        turns = max(m[3] for m in messages(shared, 1))
        assert calls >= turns > 30

        edited = fake_werewolf(
            tmp_path / "b", server, {LAST_PROMPT: "Name every role and bid farewell."}
        )
        args = ("--model", "fake", "--human", "fems/mock", "--db", str(shared), "--reuse", "1")
        rerun = run_program(edited, *args)
        assert rerun.returncode == 0, rerun.stderr
        assert len(server.requests) == calls + 1  # the curtain's one call, and nothing else
        assert "bid farewell" in json.dumps(server.requests[-1]["messages"])
        assert f"1 model call (session 2, {turns - 1} turns reused from session 1)" in rerun.stderr
        assert session_row(shared, 2)["branch_turn"] == turns - 1
        before, after = messages(shared, 1), messages(shared, 2)
        assert [m for m in after if m[3] < turns] == [m for m in before if m[3] < turns]

        again = run_program(edited, *args[:-1], "2")  # the same script again: nothing changed
        assert again.returncode == 0, again.stderr
        assert len(server.requests) == calls + 1
        assert f"0 model calls (session 3, {turns} turns reused from session 2)" in again.stderr
        assert messages(shared, 3) == messages(shared, 2)


def test_reuse_never_replays_a_turn_whose_request_changed(
    parent: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, db = copied(parent, tmp_path)
    # the first speech of day 1 (turn 13) is asked differently: it and all after it are live
    edited = werewolf(tmp_path / "e", {"Speak once to the village": "Speak up once to the village"})
    trace = tmp_path / "t.jsonl"
    status, err = main(
        edited, capsys, *MOCK, "--db", str(db), "--seed", "1", "--reuse", "1", "--trace", str(trace)
    )
    assert status == 0, err
    assert "12 turns reused from session 1" in err
    calls = [e for e in read_trace(trace) if e["event"] == "llm_call"]
    assert calls[0]["action"] == "speak" and calls[0]["turn"] == 13
    assert session_row(db, 2)["branch_turn"] == 12


def test_a_batch_runs_continuations_of_one_branch_point(
    parent: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module, db = copied(parent, tmp_path)
    script = module.with_name("werewolf.fems")
    args = ["batch", str(script), "--db", str(db), "--fork", "1:18", "--runs", "3"]
    args += ["--workers", "1", "--model", "fems/mock", "--collect", "winner"]
    status = fems2py_main([*args, "--out", str(tmp_path / "out"), "--no-progress"])
    err = capsys.readouterr().err
    assert status == 0, err
    assert "3 sessions continuing session 1 from turn 18" in err
    assert "winner, of 3 completed sessions:" in err
    rows = json.loads((tmp_path / "out" / "results.json").read_text())["rows"]
    assert [row["seed"] for row in rows] == [1, 2, 3]
    for row in rows:
        session = row["session"]
        assert (session_row(db, session)["parent"], session_row(db, session)["branch_turn"]) == (
            1,
            18,
        )
        first = [m for m in messages(db, session) if m[3] <= 18]
        assert first == [m for m in messages(db, 1) if m[3] <= 18]


def test_a_session_run_twice_is_forked_with_its_first_run_as_history(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "side.py").write_text(SIDE, encoding="utf-8")
    (tmp_path / "t.fems").write_text(SCRIPT, encoding="utf-8")
    module = tmp_path / "t.py"
    build_file(tmp_path / "t.fems", module)
    db = tmp_path / "d.db"
    for _ in range(2):  # the second run continues session 1 (§3 `session`) from turn 7
        assert (
            main(module, capsys, "--model", "fems/mock", "--db", str(db), "--session", "1 / new")[0]
            == 0
        )
    turns = max(m[3] for m in messages(db, 1))
    assert turns > 6  # the first run's six, then the second's (side.py counts on)
    status, err = main(module, capsys, "--model", "fems/mock", "--db", str(db), "--fork", "1")
    assert status == 0, err
    assert f"(session 2, {turns - 6} turns replayed from session 1)" in err
    assert messages(db, 2) == messages(db, 1)
    with Store(str(db)) as store:  # the copied history's scope tags came along
        assert store.visible_lines(2, "Ann") == store.visible_lines(1, "Ann")

    status, err = main(module, capsys, "--model", "fems/mock", "--db", str(db), "--fork", "1:3")
    assert status == 0, err
    assert "turn 3 is from an earlier run of session 1" in err
    assert "forking at the start of its last run (turn 6)" in err
    assert session_row(db, 3)["branch_turn"] == 6
    assert [m for m in messages(db, 3) if m[3] <= 6] == [m for m in messages(db, 1) if m[3] <= 6]


WAITING = """\
import os
import re
import time
from pathlib import Path

COUNT = []


def note(said):
    COUNT.append(said)
    if len(COUNT) == 2 and os.environ.get("WAIT"):  # the parent waits here, running
        Path("waiting").touch()
        while not Path("go").exists():
            time.sleep(0.02)
    return len(COUNT)
"""


def test_a_running_parent_is_forked_at_a_turn_it_recorded(tmp_path: Path) -> None:
    (tmp_path / "side.py").write_text(WAITING, encoding="utf-8")
    (tmp_path / "t.fems").write_text(SCRIPT, encoding="utf-8")
    module = tmp_path / "t.py"
    build_file(tmp_path / "t.fems", module)
    args = [sys.executable, str(module), "--db", "d.db", "--model", "fems/mock"]
    wait = {**os.environ, "WAIT": "1"}  # until the test lets it go on
    with subprocess.Popen(
        args, cwd=tmp_path, env=wait, stderr=subprocess.PIPE, text=True
    ) as running:
        try:
            deadline = time.monotonic() + 60
            while not (tmp_path / "waiting").exists():
                assert running.poll() is None and time.monotonic() < deadline
                time.sleep(0.02)
            assert session_row(tmp_path / "d.db", 1)["status"] == "running"
            forked = run_program(module, "--db", "d.db", "--model", "fems/mock", "--fork", "1:3")
            assert forked.returncode == 0, forked.stderr
            assert "3 turns replayed from session 1" in forked.stderr
            (tmp_path / "go").touch()
            _, err = running.communicate(timeout=60)
            assert running.returncode == 0, err
        finally:
            if running.poll() is None:
                running.kill()
    parent = messages(tmp_path / "d.db", 1)
    assert session_row(tmp_path / "d.db", 1)["status"] == "completed"
    assert [m for m in messages(tmp_path / "d.db", 2) if m[3] <= 3] == [
        m for m in parent if m[3] <= 3
    ]
