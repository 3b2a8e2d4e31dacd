"""``python game.py --resume [--session N]`` (§16.3, §16.4): a run whose ``fems/script`` replies
ran out continues, with a longer replies file, from its last checkpoint; exit statuses."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from fems_helpers import build_script, load, read_trace, run_program
from fems_runtime.store import Store

SCRIPT = """
vars:
    round = 0
    said = ""
    notes = 0

code:
    side = file:"side.py"

actors:
    ai @Ann
    ai @Bob

action speak @ai(@Ann):
    showprompt: Round {round}.
    prompt: Say something.
    scope: all
    out: said(string)

action answer @ai(@Bob):
    prompt: Answer @Ann.
    scope: all

action note @func(side.note):
    in: said = said
    out: notes

action next @assign:
    out: round += 1

mainflow:
    [START] -> [R]
    [R] -> speak -> answer -> note -> next -> [C]
    [C] -> if (round < 3) -> [R]
    [C] -> if (round >= 3) -> [END]
"""

SIDE = """
from pathlib import Path


def note(said):
    log = Path(__file__).with_name("side.log")
    with log.open("a", encoding="utf-8") as out:
        out.write(said + "\\n")
    return len(log.read_text(encoding="utf-8").splitlines())
"""

SPEAK = [f'Round {n}. SET VARIABLE: <<said = "line {n}">>' for n in range(3)]
ANSWER = [f"Answer {n}." for n in range(3)]


def _replies(path: Path, speak: list[str], answer: list[str]) -> str:
    path.write_text(json.dumps({"speak": speak, "answer": answer}), encoding="utf-8")
    return str(path)


def test_resume_continues_a_session_whose_replies_ran_out(tmp_path: Path) -> None:
    module = build_script(tmp_path, SCRIPT, {"side.py": SIDE})
    short = _replies(tmp_path / "short.json", SPEAK[:2], ANSWER[:1])
    failed = run_program(module, "--db", "d.db", "--replies", short, "--result", "r1.json")
    assert failed.returncode == 1
    assert "fems/script has no reply left for action answer" in failed.stderr
    assert json.loads((tmp_path / "r1.json").read_text())["status"] == "failed"

    full = _replies(tmp_path / "full.json", SPEAK, ANSWER)
    args = ("--db", "d.db", "--replies", full, "--resume", "--session", "1")
    resumed = run_program(module, *args, "--result", "r2.json", "--show", "notes,said")
    assert resumed.returncode == 0, resumed.stderr
    assert "(session 1, 4 recorded calls replayed)" in resumed.stderr
    result = json.loads((tmp_path / "r2.json").read_text())
    assert result["status"] == "completed" and result["session"] == 1
    assert result["vars"] == {"round": 3, "said": "line 2", "notes": 3}

    with Store(str(tmp_path / "d.db")) as store:
        messages = store.messages(1)
        assert store.session(1)["status"] == "completed"
    replies = [(m.speaker_name, m.content) for m in messages if m.kind == "reply"]
    expected = [pair for n in range(3) for pair in (("@Ann", SPEAK[n]), ("@Bob", ANSWER[n]))]
    assert replies == expected  # in order, none twice, none missing
    assert [m.content for m in messages if m.kind == "narration"] == [
        f"Round {n}." for n in range(3)
    ]
    turns = [m.turn for m in messages if m.kind == "reply"]
    assert turns == list(range(1, 7))
    assert [m.seq for m in messages] == list(range(1, len(messages) + 1))
    side = (tmp_path / "side.log").read_text(encoding="utf-8").splitlines()
    assert side == ["line 0", "line 1", "line 2"]  # the func ran once per round

    again = run_program(module, *args)
    assert again.returncode == 1
    assert "session 1 is completed; there is nothing to resume" in again.stderr
    assert "or with --fork 1 to branch from it" in again.stderr
    assert "Traceback" not in again.stderr


def test_resume_exit_statuses(tmp_path: Path) -> None:
    module = build_script(tmp_path, SCRIPT, {"side.py": SIDE})
    full = _replies(tmp_path / "full.json", SPEAK, ANSWER)
    usage = run_program(module, "--db", "d.db", "--replies", full, "--resume", "--session", "new")
    assert usage.returncode == 2 and "--resume continues a session" in usage.stderr
    missing = run_program(module, "--db", "d.db", "--replies", full, "--resume")
    assert missing.returncode == 1
    assert "t.fems: error: --resume: no session of t.fems in this database" in missing.stderr
    absent = run_program(module, "--db", "d.db", "--replies", full, "--resume", "--session", "9")
    assert absent.returncode == 1 and "session 9 does not exist" in absent.stderr


def test_an_interrupted_run_says_how_to_go_on_when_its_session_was_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    program = load(build_script(tmp_path, SCRIPT, {"side.py": SIDE})).PROGRAM
    assert program.report(KeyboardInterrupt(), {"db": "games.db"}, []) == 1
    said = capsys.readouterr().err
    assert said.endswith(
        "error: interrupted; the same command with --resume goes on where it stopped\n"
    )
    assert program.report(KeyboardInterrupt(), {"db": ":memory:"}, []) == 1
    assert capsys.readouterr().err.endswith("error: interrupted\n")  # nothing kept to resume
    for started in ({"fork": "1:3"}, {"reuse": 1}, {"session": "new"}):  # --resume refuses them
        assert program.report(KeyboardInterrupt(), {"db": "games.db", **started}, []) == 1
        flag = " ".join(f"--{key} {value}" for key, value in started.items())
        assert capsys.readouterr().err.endswith(
            f"error: interrupted; the same command with --resume in place of {flag} goes on "
            "where it stopped\n"
        )


def test_an_interrupted_run_says_so_in_its_result_and_trace(tmp_path: Path) -> None:
    """A run cancelled (as Ctrl-C cancels it) is failed with "error: interrupted" in its
    --result file and its trace's error event (§16.3), not with an empty error."""
    source = """
    code:
        slow = file:"slow.py"
    vars:
        done = false
    action wait @func(slow.wait):
        out: done
    mainflow:
        [START] -> wait -> [END]
    """
    slow = "import time\n\ndef wait():\n    time.sleep(1)\n    return True\n"
    game = load(build_script(tmp_path, source, {"slow.py": slow}))
    result, trace = tmp_path / "result.json", tmp_path / "trace.jsonl"

    async def cancelled() -> None:
        run = asyncio.ensure_future(game.run_async(db=":memory:", result=result, trace=trace))
        await asyncio.sleep(0.3)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run

    asyncio.run(cancelled())
    written = json.loads(result.read_text(encoding="utf-8"))
    assert (written["status"], written["error"]) == ("failed", "t.fems: error: interrupted")
    errors = [event for event in read_trace(trace) if event["event"] == "error"]
    assert [event["message"] for event in errors] == ["t.fems: error: interrupted"]
