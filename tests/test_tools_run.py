"""Tools in built scripts (§15.5): a code: function and the built-ins through the generated
module, ``--root``, the transcript, ``--resume`` replaying tool rounds without calling again, and
the names of real scripts that are not tools here (host tools, ``deep_think``, §6.4)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fems_helpers import build_script, llm_calls, load, read_trace, run_program, run_script
from fems_runtime.store import Store
from fems_runtime.tools import asks_reasoning

from fems2py.cli import main

SCRIPT = """
meta:
    max_tool_rounds = 4

vars:
    answer = ""

code:
    notes = file:"notes.py"

actors:
    ai @reader = tools: [read, notes.count]
    ai @friend
    ai @stranger

action ask @ai(@reader):
    prompt: How often does 'mat' appear in notes.txt?
    scope: [@friend]
    out: answer(string)

action chat @ai(@stranger):
    prompt: Say hello.

mainflow:
    [START] -> ask -> chat -> [END]
"""

NOTES = """
from pathlib import Path


def count(word: str, text: str) -> int:
    \"\"\"How often `word` appears in `text`.\"\"\"
    log = Path(__file__).with_name("calls.log")
    with log.open("a", encoding="utf-8") as out:
        out.write(word + "\\n")
    return text.count(word)
"""

READ = {"tool_calls": [{"name": "read", "arguments": {"path": "notes.txt"}}]}
COUNT = {"tool_calls": [{"name": "notes.count", "arguments": {"word": "mat", "text": "mat mat"}}]}
ANSWER = 'Twice. SET VARIABLE: <<answer = "2">>'


def test_a_built_script_calls_its_tools(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("a mat and a mat\n", encoding="utf-8")
    replies = {"ask": [READ, COUNT, ANSWER], "chat": ["Hello."]}
    result, events = run_script(tmp_path, SCRIPT, {"notes.py": NOTES}, replies=replies)
    assert result.variables["answer"] == "2"
    tool_events = [e for e in events if e["event"] == "tool_call"]
    assert [(e["name"], e["result"]) for e in tool_events] == [
        ("read", "a mat and a mat\n"),
        ("notes.count", "2"),
    ]
    assert (tmp_path / "calls.log").read_text(encoding="utf-8") == "mat\n"
    # the stranger's later turn does not see the reader's tool traffic (scope, §13.2)
    chat = llm_calls(events, "chat")[0]
    assert "a mat and a mat" not in json.dumps(chat["messages"])
    assert len(llm_calls(events, "ask")) == 3


def test_the_generated_module_reads_only_inside_root(tmp_path: Path) -> None:
    module = build_script(tmp_path, SCRIPT, {"notes.py": NOTES})
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "notes.txt").write_text("inside data\n", encoding="utf-8")
    (tmp_path / "notes.txt").write_text("beside the script\n", encoding="utf-8")
    escape = {"tool_calls": [{"name": "read", "arguments": {"path": "../notes.txt"}}]}
    replies = tmp_path / "replies.json"
    replies.write_text(
        json.dumps({"ask": [READ, escape, ANSWER], "chat": ["Hello."]}), encoding="utf-8"
    )
    trace = tmp_path / "trace.jsonl"
    done = run_program(
        module,
        "--replies",
        str(replies),
        "--db",
        ":memory:",
        "--root",
        "data",
        "--trace",
        str(trace),
        "--transcript",
    )
    assert done.returncode == 0, done.stderr
    results = [e["result"] for e in read_trace(trace) if e["event"] == "tool_call"]
    assert results[0] == "inside data\n"
    assert "outside the project folder" in results[1]
    assert "⚙ @reader calls read" in done.stdout and "↳ read: inside data" in done.stdout


def test_resume_replays_tool_rounds_without_calling_again(tmp_path: Path) -> None:
    module = build_script(tmp_path, SCRIPT, {"notes.py": NOTES})
    (tmp_path / "notes.txt").write_text("mat\n", encoding="utf-8")
    replies = tmp_path / "replies.json"
    db = tmp_path / "dialog.db"
    replies.write_text(json.dumps({"ask": [COUNT]}), encoding="utf-8")
    common = ("--replies", str(replies), "--db", str(db))
    failed = run_program(module, *common)
    assert failed.returncode == 1 and "no reply left" in failed.stderr
    assert (tmp_path / "calls.log").read_text(encoding="utf-8") == "mat\n"

    replies.write_text(json.dumps({"ask": [COUNT, ANSWER], "chat": ["Hi."]}), encoding="utf-8")
    trace = tmp_path / "trace.jsonl"
    resumed = run_program(module, *common, "--resume", "--trace", str(trace))
    assert resumed.returncode == 0, resumed.stderr
    assert (tmp_path / "calls.log").read_text(encoding="utf-8") == "mat\n"  # not called again
    events = read_trace(trace)
    assert [e["event"] for e in events if e["event"] in ("replay", "tool_call")] == ["replay"]
    # the live call after the replayed round carries the round's call and result
    sent = llm_calls(events, "ask")[0]["messages"]
    assert [m["role"] for m in sent[-2:]] == ["assistant", "tool"] and sent[-1]["content"] == "2"
    with Store(f"sqlite:///{db}") as store:
        kinds = [m.kind for m in store.messages(1)]
    assert kinds.count("tool_call") == 1 and kinds.count("tool_result") == 1


HOST_TOOLS = """
vars:
    answer = ""

actors:
    ai @wolfbob = soul:1, tools: [deep_think, web_search, read, shell]

action ask @ai(@wolfbob):
    prompt: Who is the wolf?
    out: answer(string)

mainflow:
    [START] -> ask -> [END]
"""


def test_host_tool_names_warn_and_the_actor_runs_without_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "t.fems"
    script.write_text(HOST_TOOLS.lstrip("\n"), encoding="utf-8")
    assert main(["check", str(script)]) == 0
    err = capsys.readouterr().err
    assert "warning: tool web_search is not available: @wolfbob runs without it" in err
    assert "warning: tool shell is not available: @wolfbob runs without it" in err
    assert "tool deep_think" not in err and "0 errors, 2 warnings" in err
    assert main(["check", "--strict", str(script)]) == 1
    assert "error: tool web_search is not available" in capsys.readouterr().err
    (tmp_path / "notes.txt").write_text("the wolf is Bob\n", encoding="utf-8")
    module = load(build_script(tmp_path, HOST_TOOLS))
    # deep_think reaches the run as a name of the actor's tools: (§15.7 reads it from there)
    (spec,) = module.ACTORS
    assert spec.tools == ("deep_think", "web_search", "read", "shell")
    assert asks_reasoning(spec.tools) and not asks_reasoning(("read",))
    trace = tmp_path / "trace.jsonl"
    result = module.run(model="fems/mock", db=":memory:", trace=str(trace))
    assert result.status == "completed"
    called = [e["name"] for e in read_trace(trace) if e["event"] == "tool_call"]
    assert called == ["read"]  # the only tool offered
