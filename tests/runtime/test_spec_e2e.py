"""Turn rules end to end: `.fems` scripts built and run, checked against the spec sentence by
sentence (§3, §9, §10, §13, §16.3)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from fems_helpers import build_script, load, run_script
from fems_runtime.records import RunError
from fems_runtime.transcript import Transcript


def calls(events: list[dict[str, Any]], action: str | None = None) -> list[dict[str, Any]]:
    """The llm_call events (of one action)."""
    return [
        e for e in events if e["event"] == "llm_call" and (action is None or e["action"] == action)
    ]


def user_text(call: dict[str, Any]) -> str:
    return next(m["content"] for m in call["messages"] if m["role"] == "user")


def system_text(call: dict[str, Any]) -> str:
    return next((m["content"] for m in call["messages"] if m["role"] == "system"), "")


# ---------------------------------------------------------------------- §13.3 messages

ROOMS = """
    meta:
        owner = 001
        system_safety = Be safe.
        output_style = Be brief.
    vars:
        seen = ""
    actors:
        ai @god = soul:g
        ai @seer = soul:s
        ai @villager = soul:v
        human @ann = soul:a, source:7
    action intro @ai(@god):
        showprompt: Night falls.
        prompt: Open the game.
        scope: all
    action check @ai(@seer):
        prompt: Whom do you check?
        scope: [@god, @seer]
        out: seen: actor
    action talk @ai(@villager):
        prompt: Speak.
        scope: [@god, @villager]
    action say @human(@ann) as (@villager):
        prompt: Your say.
        scope: [@god, @villager]
    mainflow:
        [START] -> intro -> check -> talk -> say -> talk -> [END]
"""
ROOM_REPLIES = {
    "intro": ["The game starts."],
    "check": ["SET VARIABLE: <<seen = @villager>> the seer's secret"],
    "talk": ["I am a villager.", "Again."],
}
SOULS = {
    "souls": {"g": {"persona": "You are god."}, "v": {"persona": "You are a villager."}},
    "users": {"001": {"profile": "The owner."}, "7": {"profile": "Ann."}},
}


def test_model_call_messages_follow_the_spec_exactly(tmp_path: Path) -> None:
    _, events = run_script(
        tmp_path,
        ROOMS,
        replies=ROOM_REPLIES,
        human={"say": [{"text": "hello from ann"}]},
        souls=SOULS,
    )
    intro, check, talk1, talk2 = calls(events)
    assert intro["messages"] == [
        {"role": "system", "content": "Be safe.\n\nBe brief.\n\nYou are god.\n\nThe owner."},
        {"role": "user", "content": "Night falls.\n\nOpen the game."},
    ]
    assert system_text(check) == "Be safe.\n\nBe brief.\n\nThe owner."  # no persona for "s"
    assert user_text(check) == (
        "[narrator]: Night falls.\n\n[@god]: The game starts.\n\nWhom do you check?"
    )
    # default deny: the seer's reply never reaches the villager; the person spoke as @villager
    assert user_text(talk1) == "[narrator]: Night falls.\n\n[@god]: The game starts.\n\nSpeak."
    assert user_text(talk2) == (
        "[narrator]: Night falls.\n\n[@god]: The game starts.\n\n[@villager]: I am a villager."
        "\n\n[@villager]: hello from ann\n\nSpeak."
    )
    assert intro["scope"] == ["@ann", "@god", "@seer", "@villager"]
    assert check["actor"] == "@seer" and check["model"] == "fems/script"


def test_showprompt_without_prompt_is_narration_for_the_whole_scope(tmp_path: Path) -> None:
    """§9.2: showprompt is stored as narration (visible to the scope) and, with no prompt,
    is also the prompt."""
    _, events = run_script(
        tmp_path,
        """
        actors:
            ai @a
            ai @b
        action tell @ai(@a):
            showprompt: The moon is red.
            scope: [@a, @b]
        action hear @ai(@b):
            prompt: What did you hear?
        mainflow:
            [START] -> tell -> hear -> [END]
        """,
        replies={"tell": ["Look up."], "hear": ["ok"]},
    )
    tell, hear = calls(events)
    assert user_text(tell) == "The moon is red."
    assert user_text(hear) == (
        "[narrator]: The moon is red.\n\n[@a]: Look up.\n\nWhat did you hear?"
    )


# ---------------------------------------------------------------------- §9.3 scopes


def test_scope_all_is_the_variable_when_one_is_declared(tmp_path: Path) -> None:
    _, events = run_script(
        tmp_path,
        """
        vars:
            all = [@a]
        actors:
            ai @god
            ai @a
            ai @b
        action s @ai(@god):
            prompt: hi
            scope: all
        mainflow:
            [START] -> s -> [END]
        """,
        replies={"*": ["ok"]},
    )
    assert calls(events)[0]["scope"] == ["@a", "@god"]


# ---------------------------------------------------------------------- §10.1 signals


def test_unclosed_signal_does_not_swallow_the_next_one_on_its_line(tmp_path: Path) -> None:
    result, events = run_script(
        tmp_path,
        """
        vars:
            a = 0
            b = 0
        actors:
            ai @x
        action s @ai(@x):
            prompt: go
        mainflow:
            [START] -> s -> [END]
        """,
        replies={"s": ["SET VARIABLE: <<a = 1 and SET VARIABLE: <<b = 2>>"]},
    )
    assert result.variables["a"] == 0 and result.variables["b"] == 2
    (rejected,) = [e for e in events if e["event"] == "rejected"]
    assert rejected["problems"] == [
        "rejected signal 'SET VARIABLE: <<a = 1 and': no <<…>> after SET VARIABLE:"
    ]


# ---------------------------------------------------------------------- §16.3 trace and CLI


def test_trace_file_holds_only_this_runs_events(tmp_path: Path) -> None:
    source = """
        actors:
            ai @a
        action s @ai(@a):
            prompt: go
        mainflow:
            [START] -> s -> [END]
    """
    module = load(build_script(tmp_path, source))
    trace = tmp_path / "trace.jsonl"
    for _ in range(2):
        module.run(model="fems/mock", db=":memory:", trace=str(trace))
    events = [json.loads(line) for line in trace.read_text(encoding="utf-8").splitlines()]
    assert len(calls(events)) == 1


def test_session_that_does_not_exist_is_a_located_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = """
        meta:
            session = 9
        actors:
            ai @a
        action s @ai(@a):
            prompt: go
        mainflow:
            [START] -> s -> [END]
    """
    module = load(build_script(tmp_path, source))
    assert module.PROGRAM.main(["--model", "fems/mock", "--db", ":memory:"]) == 1
    assert capsys.readouterr().err.strip() == (
        "t.fems: error: session 9 does not exist (use 'new' or '9 / new')"
    )
    with pytest.raises(RunError, match="session 9 does not exist"):
        module.run(model="fems/mock", db=":memory:")


def test_model_map_next_to_the_script_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """§15.2: the project's fems.toml [models] resolves an actor's source alias even when the
    module runs from another working directory."""
    (tmp_path / "fems.toml").write_text('[models]\nfast = "fems/script"\n', encoding="utf-8")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    _, events = run_script(
        tmp_path,
        """
        actors:
            ai @a = source:fast
        action s @ai(@a):
            prompt: go
        mainflow:
            [START] -> s -> [END]
        """,
        replies={"s": ["scripted"]},
        model="fems/mock",
    )
    assert calls(events)[0]["model"] == "fems/script"
    assert calls(events)[0]["reply"] == "scripted"


# ---------------------------------------------------------------------- §10.6 transcript

TRANSCRIPT = """
    vars:
        n = 0
    actors:
        ai @a
    action strict @ai(@a):
        prompt: give n
        out: n: int
        max_retries: 1
    action lenient @ai(@a):
        prompt: again
        out: n: int
    mainflow:
        [START] -> strict -> lenient -> [END]
"""


def test_transcript_names_feedback_receiver_and_reports_lenient_rejections(
    tmp_path: Path,
) -> None:
    """§10.6: lenient problems are reported in the trace, the transcript and a warning;
    feedback is addressed to the executor."""
    stream = io.StringIO()
    run_script(
        tmp_path,
        TRANSCRIPT,
        replies={
            "strict": ["none", "SET VARIABLE: <<n = 2>>"],
            "lenient": ["SET VARIABLE: <<n = x>>"],
        },
        transcript=Transcript(everyone=["@a"], stream=stream),
    )
    text = stream.getvalue()
    assert "(feedback to @a, private) Your previous reply could not be accepted:" in text
    assert "feedback to feedback" not in text
    assert (
        "! lenient by @a: rejected signal 'SET VARIABLE: <<n = x>>': 'x' is not an integer" in text
    )


# ---------------------------------------------------------------------- §10.8 human input


def test_terminal_answers_follow_the_literal_grammar_and_menus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Untyped outs read a value like a signal does (3 is an int); menus re-ask."""
    monkeypatch.setattr("sys.stdin", io.StringIO("my text\n3\n@b\nhello world\n7\n2\n"))
    result, events = run_script(
        tmp_path,
        """
        vars:
            alive = [@a, @b]
            n = 0
            who = ""
            note = ""
            pick = ""
        actors:
            ai @a
            ai @b
            human @h = source:0
        action ask @human(@h):
            prompt: Say.
            out: n
                 who
                 note
                 pick: dropdown, choices={alive}
        mainflow:
            [START] -> ask -> [END]
        """,
        human="terminal",
    )
    assert {k: result.variables[k] for k in ("n", "who", "note", "pick")} == {
        "n": 3,
        "who": "@b",
        "note": "hello world",
        "pick": "@b",
    }
    out = capsys.readouterr().out
    assert "  1. @a\n  2. @b\n" in out and "please enter a number from 1 to 2" in out
    (human,) = [e for e in events if e["event"] == "human"]
    assert human["text"] == "my text"
