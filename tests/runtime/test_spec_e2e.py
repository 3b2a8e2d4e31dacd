"""Turn rules end to end: `.fems` scripts built and run, checked against the spec sentence by
sentence (§3, §9, §10, §13, §16.3)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from fems_helpers import build_script, llm_calls, load, read_trace, run_script
from fems_runtime import funcs
from fems_runtime.records import RunError
from fems_runtime.store import Store
from fems_runtime.transcript import Transcript

from fems2py.build import build_cached, cache_root

from .fake_openai import Behaviour, fake_openai


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
    intro, check, talk1, talk2 = llm_calls(events)
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
    tell, hear = llm_calls(events)
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
    assert llm_calls(events)[0]["scope"] == ["@a", "@god"]


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
    events = read_trace(trace)
    assert len(llm_calls(events)) == 1


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
        model="openai/never-called",  # ranks below the actor's source (§15.2)
    )
    assert llm_calls(events)[0]["model"] == "fems/script"
    assert llm_calls(events)[0]["reply"] == "scripted"


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


# ---------------------------------------------------------------------- §13.1 rooms


def test_feedback_reaches_only_the_executor_and_mind_follows_the_type(tmp_path: Path) -> None:
    result, events = run_script(
        tmp_path,
        """
        vars:
            alive = [@a, @you, @b]
            votes = {}
        actors:
            ai @a
            ai @b
            human @you = source:0
        action vote @mind(@voter):
            prompt: Vote among {alive}.
            scope: alive
            out: votes.@voter: dropdown, choices={alive}
            max_retries: 1
        action after @ai(@b):
            prompt: What happened?
        mainflow:
            [START] -> for @voter in alive:
                -> vote ->
            -> after -> [END]
        """,
        replies={
            "vote@a": ["SET VARIABLE: <<votes.@a = @nobody>>", "SET VARIABLE: <<votes.@a = @b>>"],
            "vote@b": ["SET VARIABLE: <<votes.@voter = @a>>"],
            "after": ["ok"],
        },
        human={"vote@you": [{"text": "I vote a", "vars": {"votes.@voter": "@a"}}]},
    )
    assert result.variables["votes"] == {"@a": "@b", "@you": "@a", "@b": "@a"}
    retry = llm_calls(events, "vote")[1]
    assert retry["messages"][-1]["content"].startswith(
        "Your previous reply could not be accepted:\n- rejected signal "
        "'SET VARIABLE: <<votes.@a = @nobody>>': @nobody is not a defined actor"
    )
    seen = user_text(llm_calls(events, "after")[0])
    assert "[@you]: I vote a" in seen and "[@a]: SET VARIABLE: <<votes.@a = @b>>" in seen
    assert "feedback" not in seen and "Your previous reply" not in seen


REJECTED = """
    vars:
        n = 0
    actors:
        ai @a
        ai @b
    action pick @ai(@a):
        prompt: Pick a number.
        scope: all
        out: n(int)
        max_retries: 2
    action next @ai(@b):
        prompt: What did @a pick?
        scope: all
    action again @ai(@a):
        prompt: Again.
        scope: all
    mainflow:
        [START] -> pick -> next -> again -> [END]
"""


def test_later_turns_see_only_the_accepted_reply_of_a_retried_turn(tmp_path: Path) -> None:
    """§13.3: the rejected attempt and its feedback are in nobody's later context, the
    executor's included; the retry itself still carries them."""
    bad, good = "I pick banana. SET VARIABLE: <<n = banana>>", "Fine. SET VARIABLE: <<n = 3>>"
    db = f"sqlite:///{tmp_path / 'rejected.db'}"
    result, events = run_script(
        tmp_path, REJECTED, replies={"pick": [bad, good], "*": ["ok"]}, db=db
    )
    assert result.variables["n"] == 3
    retry = llm_calls(events, "pick")[1]["messages"]
    assert retry[-2] == {"role": "assistant", "content": bad}
    assert retry[-1]["content"].startswith("Your previous reply could not be accepted:")
    (after_b,) = llm_calls(events, "next")
    assert after_b["messages"] == [
        {"role": "user", "content": f"[@a]: {good}\n\nWhat did @a pick?"}
    ]
    (after_a,) = llm_calls(events, "again")
    assert after_a["messages"] == [
        {"role": "user", "content": f"[@a]: {good}\n\n[@b]: ok\n\nAgain."}
    ]
    # both stay stored, as feedback of the executor's soul
    with Store(db) as store:
        kept = [m for m in store.messages(1) if m.action == "pick"]
        assert [(m.kind, m.content) for m in kept][1:] == [
            ("feedback", bad),
            ("feedback", retry[-1]["content"]),
            ("reply", good),
        ]
        assert store.scope_of(kept[1].id) == store.scope_of(kept[2].id) == (["a"], [])


def test_a_fallback_leaves_none_of_its_replies_in_a_later_context(tmp_path: Path) -> None:
    """§10.6, §13.3: retries exhausted, no attempt was accepted."""
    source = REJECTED.replace("max_retries: 2", "max_retries: 1\n        fallback: next")
    source = source.replace("[START] -> pick -> next", "[START] -> pick")
    _, events = run_script(
        tmp_path, source, replies={"pick": ["no number", "still none"], "*": ["ok"]}
    )
    later = [call for call in llm_calls(events) if call["action"] != "pick"]
    assert [call["action"] for call in later] == ["next", "again"]
    seen = "".join(user_text(call) for call in later)
    assert "no number" not in seen and "still none" not in seen
    assert "could not be accepted" not in seen


# ---------------------------------------------------------------------- §9.3 scope forms

SCOPES = """
    vars:
        alive = [@a, @b]
        wolves = [@w]
        @x = @c
        @u = ""
    actors:
        ai @god
        ai @a
        ai @b
        ai @c
        ai @w
    action s @ai(@god):
        prompt: hi
        scope: SCOPE
    mainflow:
        [START] -> s -> [END]
"""


@pytest.mark.parametrize(
    ("scope", "names"),
    [
        ("[@god, {alive}]", ["@a", "@b", "@god"]),
        ("[@god] + wolves", ["@god", "@w"]),
        ("@a, @x", ["@a", "@c", "@god"]),
        ("@x", ["@c", "@god"]),
        ("alive", ["@a", "@b", "@god"]),
        ("all", ["@a", "@b", "@c", "@god", "@w"]),
        ("[@w]", ["@god", "@w"]),
    ],
)
def test_scope_forms(tmp_path: Path, scope: str, names: list[str]) -> None:
    _, events = run_script(tmp_path, SCOPES.replace("SCOPE", scope), model="fems/mock")
    assert llm_calls(events)[0]["scope"] == names


@pytest.mark.parametrize(
    ("executor", "scope", "message"),
    [
        ("@god", "[@a, @u]", "action s: actor variable @u is unbound but an actor in scope"),
        ("@u", "[@a]", "action s: actor variable @u is unbound but the executor is required"),
    ],
)
def test_unbound_actor_variables_are_run_errors_naming_them(
    tmp_path: Path, executor: str, scope: str, message: str
) -> None:
    source = SCOPES.replace("SCOPE", scope).replace("@ai(@god)", f"@ai({executor})")
    with pytest.raises(RunError, match=message) as caught:
        run_script(tmp_path, source, model="fems/mock")
    assert caught.value.file == "t.fems" and caught.value.line == 12


@pytest.mark.parametrize("write", ["hp.@u -= 3", "@u.hp = 5"])
def test_an_entry_keyed_by_an_unbound_actor_variable_is_a_run_error(
    tmp_path: Path, write: str
) -> None:
    """§7.2: the write names the variable instead of filling the entry at the key ``""``."""
    source = f"""
    vars:
        hp = {{@a: 10}}
        @u = ""
    actors:
        ai @a
    action hit @assign:
        out: |
            {write}
    mainflow:
        [START] -> hit -> [END]
    """
    with pytest.raises(RunError, match="actor variable @u is unbound but an actor as an entry"):
        run_script(tmp_path, source, model="fems/mock")


# ---------------------------------------------------------------------- §9.4 rendering


def test_prompt_rendering(tmp_path: Path) -> None:
    _, events = run_script(
        tmp_path,
        """
        vars:
            task_list = {@a: "write tests", @b: "fix bugs"}
            flags = {x: true, y: false}
            alive = [@a, @b]
            hp = {@a: 3}
            nothing = null
            d = {}
        actors:
            ai @a
            ai @b
        action p1 @ai(@a):
            prompt: |
                {alive} {task_list} {flags} {@a.hp} {hp.@b}|{nothing}|{d[zz]}|{@a.type}
                {{literal}} {"a": 1} { } {task_list[@a]} {flags.x}
        action p2 @ai(@b):
            in: my_task = task_list[@b]
            prompt: task {my_task}, not {alive}
        mainflow:
            [START] -> p1 -> p2 -> [END]
        """,
        model="fems/mock",
    )
    p1, p2 = llm_calls(events)
    assert user_text(p1) == (
        "[@a, @b] {@a: write tests, @b: fix bugs} {x: true, y: false} 3 |||ai\n"
        '{literal} {"a": 1} { } write tests true'
    )
    assert user_text(p2).endswith("task fix bugs, not {alive}")


# ---------------------------------------------------------------------- §10 signals and outs

TYPED = """
    vars:
        alive = [@a, @b, @c]
        pick = ""
        n = 0
        f = 0.0
        ok = false
        color = ""
        @target = ""
        name = ""
        hp = {@a: 10}
        words = []
    actors:
        ai @a
        ai @b
        ai @c
    action typed @ai(@a):
        prompt: typed
        out: pick: dropdown, choices={alive}
             n: int
             f: float
             ok: bool
             color: enum([red, green])
             @target: actor
             name: string
    action free @ai(@a):
        prompt: free
    mainflow:
        [START] -> typed -> free -> [END]
"""


def test_typed_outs_and_every_signal_form(tmp_path: Path) -> None:
    typed = (
        "Thinking. SET VARIABLE: <<pick = @c>>, set variable : 《n = 3.0》\n"
        "设定变量：《《f = 2》》 设置变量:〈ok = true〉 SET_VARIABLE：<<color = green>> "
        "SET VARIABLE: <<@target = @zz>> SET VARIABLE: <<name = 42>> SET VARIABLE: <<n = 4>>"
    )
    free = (
        "SET VARIABLE: <<hp.@a -= 3>> SET VARIABLE: <<words = add(hello world)>> "
        "SET VARIABLE: <<undeclared = 1>> SET VARIABLE: <<n += 5>> "
        "SET VARIABLE: <<name = __import__('os')>> SET VARIABLE: <<pick = @nobody>>"
    )
    result, events = run_script(tmp_path, TYPED, replies={"typed": [typed], "free": [free]})
    values = result.variables
    assert {k: values[k] for k in ("pick", "f", "ok", "color", "@target")} == {
        "pick": "@c",
        "f": 2.0,
        "ok": True,
        "color": "green",
        "@target": "",
    }
    assert values["n"] == 9 and isinstance(values["n"], int)
    assert values["name"] == "__import__('os')"
    assert values["hp"] == {"@a": 7} and values["words"] == ["hello world"]
    problems = [p for e in events if e["event"] == "rejected" for p in e["problems"]]
    assert problems == [
        "rejected signal 'SET VARIABLE: <<@target = @zz>>': @zz is not a defined actor",
        "rejected signal 'SET VARIABLE: <<undeclared = 1>>': 'undeclared' is not a declared variable",
        "rejected signal 'SET VARIABLE: <<pick = @nobody>>': @nobody is not a defined actor",
    ]


@pytest.mark.parametrize(
    ("out", "value", "problem"),
    [
        ("n: int", "3.5", "'3.5' is not an integer"),
        ("n: int", "true", "true is not an integer"),
        ("ok: bool", "2", "'2' is not true or false"),
        ("color: enum([red, green])", "blue", "'blue' is not one of the choices [red, green]"),
        ("pick: dropdown, choices={alive}", "@a", ""),
        ("pick: dropdown, choices={alive}", "z", "'z' is not one of the choices [@a, @b, @c]"),
        ("@target: actor", "bob", "'bob' is not a defined actor (write it as @name)"),
        ("name: string", "[1, 2]", "[1, 2] is not a single text value"),
    ],
)
def test_typed_out_conversions(tmp_path: Path, out: str, value: str, problem: str) -> None:
    target = out.split(":")[0]
    source = TYPED.replace(
        """        out: pick: dropdown, choices={alive}
             n: int
             f: float
             ok: bool
             color: enum([red, green])
             @target: actor
             name: string""",
        f"        out: {out}",
    )
    result, events = run_script(
        tmp_path,
        source,
        replies={"typed": [f"SET VARIABLE: <<{target} = {value}>>"], "free": ["-"]},
    )
    problems = [p for e in events if e["event"] == "rejected" for p in e["problems"]]
    if problem:
        assert problems == [f"rejected signal 'SET VARIABLE: <<{target} = {value}>>': {problem}"]
    else:
        assert problems == [] and result.variables[target] == value


# ---------------------------------------------------------------------- §10.5–§10.6 validation

CHECKS = {
    "chk.py": """
        calls = []


        def even(prompt, llm_output, SET_VARIABLE=None, n=None):
            calls.append(("default", prompt, n, SET_VARIABLE))
            if "bad" in llm_output:
                return [(False, True, "n must be even")]
            return [(True, False, "")]


        def named(n, SET_VARIABLE):
            calls.append(("named", n, SET_VARIABLE))
            return [(n % 2 == 0, False, "hidden reason")]
    """
}
STRICT = """
    vars:
        n = 0
        m = 0
        SET_VARIABLE = []
        log = []
    code:
        chk = file:"chk.py"
    actors:
        ai @a
    action s1 @ai(@a):
        prompt: give n
        out: n: int
        max_retries: 2
    action s2 @ai(@a):
        prompt: give an even n
        in: n
        out: n: int
        resolve: chk.even
        max_retries: 1
    action s3 @ai(@a):
        prompt: third
        out: n: int
             m: int
        resolve: chk.named(n, SET_VARIABLE)
        fallback: fix
    action s4 @ai(@a):
        prompt: fourth
        out: n: int
        fallback: &Fix(8)
    action lenient @ai(@a):
        prompt: lenient
        out: m: int
        resolve: chk.even
    action fix @assign:
        out: log = add("action")
    module Fix(v):
        action put @assign:
            out: n = v
                 log = add("module")
        flow:
            [IN] -> put -> [OUT]
    mainflow:
        [START] -> s1 -> s2 -> s3 -> s4 -> lenient -> [END]
"""


def test_strict_retries_resolve_rollback_and_fallbacks(tmp_path: Path) -> None:
    result, events = run_script(
        tmp_path,
        STRICT,
        CHECKS,
        replies={
            "s1": ["no signal", "SET VARIABLE: <<n = abc>>", "SET VARIABLE: <<n = 4>>"],
            "s2": ["bad SET VARIABLE: <<n = 5>>", "SET VARIABLE: <<n = 6>>"],
            "s3": ["SET VARIABLE: <<n = 7>> SET VARIABLE: <<m = 1>> SET VARIABLE: <<x = 1>>"],
            "s4": ["nothing"],
            "lenient": ["bad SET VARIABLE: <<m = 3>>"],
        },
    )
    assert [c["attempt"] for c in llm_calls(events)] == [0, 1, 2, 0, 1, 0, 0, 0]
    s1_last = llm_calls(events, "s1")[2]["messages"]
    assert [m["role"] for m in s1_last] == ["user", "assistant", "user", "assistant", "user"]
    assert s1_last[2]["content"].splitlines()[1] == "- out 'n' was not set"
    assert s1_last[4]["content"].splitlines()[1:3] == [
        "- rejected signal 'SET VARIABLE: <<n = abc>>': 'abc' is not an integer",
        "- out 'n' was not set",
    ]
    assert llm_calls(events, "s2")[1]["messages"][-1]["content"].splitlines()[1] == (
        "- chk.even rejected the reply: n must be even"
    )
    # s3: the resolve rejected 7, so n and m were rolled back before the fallback action
    # s4: out unset, no retries, the module fallback set n = 8
    # lenient: the failed resolve rolls m back and the flow goes on
    assert result.variables["n"] == 8 and result.variables["m"] == 0
    assert result.variables["log"] == ["action", "module"]
    assert result.variables["SET_VARIABLE"] == []
    finals = [e for e in events if e["event"] == "rejected"]
    assert [e["action"] for e in finals] == ["s3", "s4", "lenient"]
    assert finals[0]["problems"] == [
        "rejected signal 'SET VARIABLE: <<x = 1>>': 'x' is not a declared variable",
        "chk.named rejected the reply",
        "hidden reason",
    ]
    assert finals[2]["problems"] == ["chk.even rejected the reply: n must be even"]
    (checks,) = [m for path, m in funcs._modules.items() if path == (tmp_path / "chk.py").resolve()]
    assert checks.calls == [
        ("default", "give an even n", 4, None),  # in: n is passed, SET_VARIABLE only if any
        ("default", "give an even n", 4, None),
        ("named", 7, ["SET VARIABLE: <<x = 1>>"]),
        ("default", "lenient", None, None),
    ]


def test_exhausted_retries_without_fallback_name_action_reply_and_problem(
    tmp_path: Path,
) -> None:
    with pytest.raises(RunError) as caught:
        run_script(tmp_path, STRICT, CHECKS, replies={"s1": ["a", "b", "c"]})
    assert str(caught.value) == (
        "t.fems:10: error: action s1: no valid reply from @a after 3 call(s); "
        "last reply: 'c'; problem: out 'n' was not set"
    )


# ---------------------------------------------------------------------- §3 session and database

SESSION = """
    meta:
        database = DATABASE
        session = SESSION
    actors:
        ai @a
    action s @ai(@a):
        prompt: go
    mainflow:
        [START] -> s -> [END]
"""


@pytest.mark.parametrize(
    ("database", "stored"),
    [('file:"my.db"', "my.db"), ("plain.db", "plain.db"), ("sqlite:///url.db", "url.db")],
)
def test_session_forms_and_database_forms(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, database: str, stored: str
) -> None:
    """`database` is relative to the working directory; `N / new` creates N then continues it;
    `new` takes max+1; `N` continues N."""
    monkeypatch.chdir(tmp_path)
    module_for = {
        spec: load(
            build_script(
                tmp_path,
                SESSION.replace("DATABASE", database).replace("SESSION", spec),
                name=f"s{index}.fems",
            )
        )
        for index, spec in enumerate(("5 / new", "new", "5"))
    }
    sessions = [
        module_for[spec].run(model="fems/mock").session
        for spec in ("5 / new", "5 / new", "new", "5")
    ]
    assert sessions == [5, 5, 6, 5]
    assert (tmp_path / stored).is_file()


def test_end_of_input_on_the_terminal_is_a_clear_error_without_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    module = load(
        build_script(
            tmp_path,
            """
            actors:
                human @h = source:0
            action ask @human(@h):
                prompt: Say.
            mainflow:
                [START] -> ask -> [END]
            """,
        )
    )
    assert module.PROGRAM.main(["--human", "terminal", "--db", ":memory:"]) == 1
    err = capsys.readouterr().err
    assert err == (
        "t.fems:3: error: action ask: input ended (EOF) while @h was answering ask; "
        "the run cannot continue without it\n"
    )


def test_offline_notice_only_when_no_model_is_configured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("FEMS_MODEL", raising=False)
    source = """
        actors:
            ai @a
            ai @b = source:fems/mock
        action s @ai(@a):
            prompt: go
        action t @ai(@b):
            prompt: go
        mainflow:
            [START] -> t -> s -> s -> [END]
    """
    _, events = run_script(tmp_path, source)
    assert [c["model"] for c in llm_calls(events)] == ["fems/mock"] * 3
    assert capsys.readouterr().err.count("no model configured; using the offline model") == 1
    run_script(tmp_path, source, model="fems/mock")
    assert "no model configured" not in capsys.readouterr().err


# ---------------------------------------------------------------------- §10.7 interrupt


@pytest.mark.parametrize(
    ("interrupt", "interrupted"),
    [("HUMAN", True), ("HUMAN_EXCEPT(@h)", False), ("stop == true", False)],
)
def test_human_input_interrupts_a_slow_model_call(
    tmp_path: Path, interrupt: str, interrupted: bool
) -> None:
    """The person answers (after a pause) while the model call is in flight."""
    with fake_openai(Behaviour(text="slow answer", pause=1.5)) as server:
        (tmp_path / "fems.toml").write_text(
            f'[models]\nslow = {{ model = "openai/slow", api_base = "{server.api_base}", '
            'api_key = "k" }\n',
            encoding="utf-8",
        )
        _, events = run_script(
            tmp_path,
            f"""
            vars:
                stop = false
            code:
                later = file:"later.py"
            actors:
                ai @a = source:slow
                human @h = source:0
            action think @ai(@a):
                prompt: Think slowly.
                interrupt: {interrupt}
            action ask @human(@h):
                prompt: Say something.
            action pause @func(later.pause):
            mainflow:
                [START] -> fork:
                    -> think -> [END]
                    -> pause -> ask -> [END]
            """,
            {"later.py": "import time\n\ndef pause():\n    time.sleep(0.3)\n"},
            human={"ask": ["I interrupt"]},
        )
    (call,) = llm_calls(events)
    assert call["interrupted"] is interrupted
    assert call["reply"] == ("[Interrupted]" if interrupted else "slow answer")


# ---------------------------------------------------------------------- §9.8 spawn


def test_spawned_actors_are_fresh_in_a_continued_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """§9.8: spawned actors get fresh souls, so a continued session's new helper does not see
    what an earlier run's helper said."""
    monkeypatch.chdir(tmp_path)
    module = load(
        build_script(
            tmp_path,
            """
            meta:
                session = 1 / new
            vars:
                spawn_requests = [{blueprint: coder, count: 1}]
                coders = []
                @c = ""
            actors:
                ai @boss
                blueprint coder:
                    tools: false
            action hire @func(system.spawn):
                in: spawn_requests
                out: coders
            action work @ai(@c):
                prompt: Work.
            mainflow:
                [START] -> hire -> for @c in coders:
                    -> work ->
                -> [END]
            """,
        )
    )
    first = module.run(model="fems/mock", db="s.db")
    trace = tmp_path / "second.jsonl"
    second = module.run(model="fems/mock", db="s.db", trace=str(trace))
    assert first.variables["coders"] == ["@coder_1"]
    assert second.variables["coders"] == ["@coder_2"]
    events = read_trace(trace)
    assert user_text(llm_calls(events)[0]) == "Work."


def test_model_map_next_to_the_script_is_used_by_cached_builds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`fems2py run` builds into the user cache directory, nothing beside the script; the
    fems.toml beside the script still counts (run_module hands the run its directory)."""
    (tmp_path / "fems.toml").write_text('[models]\nfast = "fems/script"\n', encoding="utf-8")
    script = tmp_path / "r.fems"
    script.write_text(
        "actors:\n    ai @a = source:fast\naction s @ai(@a):\n    prompt: go\n"
        "mainflow:\n    [START] -> s -> [END]\n",
        encoding="utf-8",
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    module_path = build_cached(script).output
    assert module_path.is_relative_to(cache_root()) and sorted(tmp_path.iterdir()) == [
        elsewhere,
        tmp_path / "fems.toml",
        script,
    ]
    module = load(module_path)
    module.PROGRAM.project_dir = str(tmp_path)  # what `fems2py run` does (build.run_module)
    result = module.run(replies={"s": ["scripted"]}, model="openai/never-called", db=":memory:")
    assert result.model_calls == 1
