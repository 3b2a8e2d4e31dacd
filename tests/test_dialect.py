"""Scripts written for the original engine (FemWA) build and run unchanged (issue #9).

One small script per rule, each through ``fems2py check``, ``fems2py build`` and a ``fems/mock``
run; where a rule has a limit, a script on the wrong side of it too.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
from fems_helpers import load, read_trace, run_program
from fems_runtime.records import RunError

from fems2py.cli import main

ACTORS = """
actors:
    ai @a = soul:1
    ai @b = soul:2
"""


def write(directory: Path, source: str, name: str = "t.fems") -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(source).lstrip("\n"), encoding="utf-8")
    return path


def check(path: Path, capsys: pytest.CaptureFixture[str], *options: str) -> tuple[int, str]:
    """``fems2py check``: exit status and what it printed on stderr."""
    status = main(["check", *options, str(path)])
    return status, capsys.readouterr().err


def build_and_run(
    path: Path, capsys: pytest.CaptureFixture[str], **options: Any
) -> tuple[Any, list[dict[str, Any]]]:
    """``fems2py build`` (must succeed), then a ``fems/mock`` run of the module it wrote."""
    output = path.with_suffix(".py")
    assert main(["build", str(path), "-o", str(output)]) == 0, capsys.readouterr().err
    trace = path.parent / "trace.jsonl"
    options.setdefault("model", "fems/mock")
    result = load(output).run(db=":memory:", trace=str(trace), **options)
    return result, read_trace(trace)


def steps(events: list[dict[str, Any]]) -> list[str]:
    return [e["node"] for e in events if e["event"] == "step"]


# --------------------------------------------------------------------- 1. binding lines (§12.1)

BINDING_LINES = (
    """
vars:
    alive = [@a, @b]
    votes = {}
    @voter = ""
"""
    + ACTORS
    + """
action ai_vote @ai(@voter):
    prompt: Vote.
action collect_vote @assign:
    out: votes.@voter = "counted"
flow:
    [vote]: collect_vote
    [IN_DONE]: tally
    [START] -> par @voter in alive:
        -> if (@voter.type == "ai") -> ai_vote -> [vote] ->
    -> [IN_DONE] -> [END]
action tally @assign:
    out: alive = remove(@b)
"""
)


def test_a_binding_line_declares_a_node_used_in_a_loop_body(tmp_path, capsys):
    path = write(tmp_path, BINDING_LINES)
    assert check(path, capsys) == (0, f"{path}: ok\n")
    result, events = build_and_run(path, capsys)
    assert result.status == "completed"
    assert result.variables["votes"] == {"@a": "counted", "@b": "counted"}
    assert steps(events).count("vote") == 2 and "IN_DONE" in steps(events)


def test_a_binding_line_after_the_start_line_declares_the_node_too(tmp_path, capsys):
    lines = BINDING_LINES.replace("    [vote]: collect_vote\n", "")
    path = write(
        tmp_path,
        lines.replace(
            "    -> [IN_DONE] -> [END]\n", "    -> [IN_DONE] -> [END]\n    [vote]: collect_vote\n"
        ),
    )
    assert check(path, capsys) == (0, f"{path}: ok\n")
    result, _events = build_and_run(path, capsys)
    assert result.variables["votes"] == {"@a": "counted", "@b": "counted"}


def test_a_declared_node_connected_inside_and_outside_a_body_is_still_an_error(tmp_path, capsys):
    source = BINDING_LINES.replace("-> [IN_DONE] -> [END]", "-> [IN_DONE] -> [vote] -> [END]")
    status, err = check(write(tmp_path, source), capsys)
    assert status == 1
    assert "node [vote] belongs to the body of 'par @voter'" in err


def test_a_binding_line_holds_one_target(tmp_path, capsys):
    source = BINDING_LINES.replace("[vote]: collect_vote", "[vote]: collect_vote tally")
    status, err = check(write(tmp_path, source), capsys)
    assert status == 1
    assert "unexpected 'tally' after '[vote]: collect_vote'" in err


# --------------------------------------------------------------------- 2. empty bindings (§12.1)

# A counter, two AI actors and one action: the start of several scripts below.
HELLO = (
    """
vars:
    n = 0
"""
    + ACTORS
    + """
action hello @ai(@a):
    prompt: Hello.
"""
)
EMPTY_BINDINGS = (
    HELLO
    + """mainflow:
    [B1]:
    [B2]:
    [START] -> hello -> [B1] -> [B2]: -> [END]
"""
)


def test_empty_bindings_are_pass_through_nodes(tmp_path, capsys):
    path = write(tmp_path, EMPTY_BINDINGS)
    assert check(path, capsys) == (0, f"{path}: ok\n")
    result, events = build_and_run(path, capsys)
    assert result.status == "completed"
    assert [s for s in steps(events) if not s.startswith("hello")] == ["START", "B1", "B2", "END"]


def test_an_empty_binding_the_flow_never_reaches_is_a_warning(tmp_path, capsys):
    source = EMPTY_BINDINGS.replace("[B2]:\n", "[B2]:\n    [B3]:\n")
    status, err = check(write(tmp_path, source), capsys)
    assert status == 0
    assert "t.fems:13:5: warning: [B3] is never reached from [START]" in err


# --------------------------------------------------------------------- 3. stub modules (§12.11)

STUB = (
    HELLO
    + """module NightPhase(day):
    vars:
        dead_tonight = ""
    flow:
mainflow:
    [START] -> &NightPhase(n) -> hello -> [END]
"""
)


def test_a_module_with_an_empty_flow_is_a_warning_and_a_no_op_step(tmp_path, capsys):
    path = write(tmp_path, STUB)
    status, err = check(path, capsys)
    assert status == 0
    assert (
        "t.fems:10:1: warning: module 'NightPhase' has an empty flow: calling it does nothing"
        in (err)
    )
    result, events = build_and_run(path, capsys)
    assert result.status == "completed"
    assert [s.split("@")[0] for s in steps(events)] == ["START", "&NightPhase", "hello", "END"]


def test_a_module_without_flow_block_is_still_an_error(tmp_path, capsys):
    status, err = check(write(tmp_path, STUB.replace("    flow:\n", "")), capsys)
    assert status == 1
    assert "module 'NightPhase' has no flow:" in err


# --------------------------------------------------------------------- 4. booleans (§12.2)

BOOLEANS = (
    """
vars:
    done = TRUE
    lost = False
    rounds = 0
"""
    + ACTORS
    + """
action again @assign:
    out: rounds += 1
action hello @ai(@a):
    prompt: Hello.
mainflow:
    [START] -> [A]
    [A] -> if (FALSE) -> hello -> [END]
    [A] -> if (done == True and lost == false and rounds < 2) -> again -> [A]
    [A] -> if (rounds == 2 and not FALSE) -> [END]
"""
)


def test_booleans_in_any_case_in_conditions_and_vars(tmp_path, capsys):
    path = write(tmp_path, BOOLEANS)
    assert check(path, capsys) == (0, f"{path}: ok\n")
    result, events = build_and_run(path, capsys)
    assert result.status == "completed"
    assert result.variables["done"] is True and result.variables["rounds"] == 2
    assert not any(s.startswith("hello") for s in steps(events))


def test_a_misspelled_boolean_is_still_an_undeclared_name(tmp_path, capsys):
    status, err = check(write(tmp_path, BOOLEANS.replace("if (FALSE)", "if (FALS)")), capsys)
    assert status == 1
    assert "undeclared variable 'FALS'" in err


# --------------------------------------------------------------------- 5. unused actions (§12.11)

UNUSED = (
    """
vars:
    n = 0
"""
    + ACTORS
    + """
action hello @ai(@a):
    prompt: Hello {n}.
    fallback: rescue
action rescue @assign:
    out: n += 1
action draft @ai(@speaker):
    prompt: Say {mood}.
    scope: [@a, @nobody]
    bogus: 1
module Later:
    action plan @assign:
        out: n = remove(
    flow:
        [IN] -> [OUT]
mainflow:
    [START] -> hello -> &Later -> [END]
"""
)


def test_problems_inside_unused_actions_are_warnings_and_the_actions_are_left_out(tmp_path, capsys):
    path = write(tmp_path, UNUSED)
    status, err = check(path, capsys)
    assert status == 0
    assert "t.fems:13:18: warning: action draft is never used: unknown actor '@speaker'" in err
    assert "t.fems:14:17: warning: action draft is never used: undeclared variable 'mood'" in err
    assert "t.fems:16:5: warning: action draft is never used: unknown action field 'bogus'" in err
    assert "t.fems:19:25: warning: action plan is never used: invalid expression" in err
    assert "0 errors, 5 warnings" in err
    result, _events = build_and_run(path, capsys)
    assert result.status == "completed"
    module = path.with_suffix(".py").read_text(encoding="utf-8")
    assert "async def rescue(" in module  # the fallback of a used action is used
    assert "draft" not in module and "async def plan" not in module


def test_strict_makes_every_warning_an_error(tmp_path, capsys):
    path = write(tmp_path, UNUSED)
    status, err = check(path, capsys, "--strict")
    assert status == 1 and "5 errors, 0 warnings" in err
    assert "error: action draft is never used: unknown actor '@speaker'" in err
    assert main(["build", "--strict", str(path), "-o", str(tmp_path / "t.py")]) == 1
    assert not (tmp_path / "t.py").exists()
    assert "5 errors" in capsys.readouterr().err


def test_the_same_mistake_in_a_used_action_stays_an_error(tmp_path, capsys):
    source = UNUSED.replace("prompt: Hello {n}.", "prompt: Hello {mood}.")
    status, err = check(write(tmp_path, source), capsys)
    assert status == 1
    assert "t.fems:9:19: error: undeclared variable 'mood'" in err
    assert "warning: action draft is never used: undeclared variable 'mood'" in err


# --------------------------------------------------------------------- 6. module locals (§12.11)

MODULE_LOCAL = (
    """
vars:
    day = 1
"""
    + ACTORS
    + """
module NightPhase:
    vars:
        dead_tonight = ""
    action kill @assign:
        out: dead_tonight = "@b"
    flow:
        [IN] -> kill -> [OUT]
action announce @ai(@a):
    prompt: Last night {dead_tonight} died.
mainflow:
    [START] -> &NightPhase -> announce -> [END]
"""
)


def test_a_module_local_read_elsewhere_says_where_it_is_declared(tmp_path, capsys):
    status, err = check(write(tmp_path, MODULE_LOCAL), capsys)
    assert status == 1
    assert "t.fems:16:24: error: undeclared variable 'dead_tonight'" in err
    assert (
        "hint: 'dead_tonight' is a local of module NightPhase (line 10); declare it in the "
        "top-level vars: to share it between modules"
    ) in err


def test_a_shared_variable_declared_at_the_top_level_passes(tmp_path, capsys):
    source = MODULE_LOCAL.replace("    day = 1\n", '    day = 1\n    dead_tonight = ""\n')
    source = source.replace('    vars:\n        dead_tonight = ""\n', "")
    path = write(tmp_path, source)
    assert check(path, capsys) == (0, f"{path}: ok\n")
    result, _events = build_and_run(path, capsys)
    assert result.status == "completed" and result.variables["dead_tonight"] == "@b"


# --------------------------------------------------------------------- 7. one out, dict return (§9.7)

DICT_RETURN = (
    """
vars:
    hp = {}
    party = [@a, @b]
code:
    rules = file:"rules.py"
"""
    + ACTORS
    + """
action heal @func(rules.heal):
    in: party
    out: hp
action split @func(rules.split):
    in: party
    out: hp, party
mainflow:
    [START] -> heal -> [END]
"""
)
RULES = """
def heal(party):
    return {name: 80 + 5 * i for i, name in enumerate(party)}


def split(party):
    return {"hp": {}, "party": party, "extra": 1}
"""


def test_one_out_takes_a_dict_whose_keys_are_not_its_name(tmp_path, capsys):
    (tmp_path / "rules.py").write_text(RULES, encoding="utf-8")
    path = write(tmp_path, DICT_RETURN)
    assert check(path, capsys) == (0, f"{path}: ok\n")
    result, _events = build_and_run(path, capsys)
    assert result.status == "completed"
    assert result.variables["hp"] == {"@a": 80, "@b": 85}


def test_several_outs_still_need_matching_keys(tmp_path, capsys):
    (tmp_path / "rules.py").write_text(RULES, encoding="utf-8")
    path = write(tmp_path, DICT_RETURN.replace("-> heal ->", "-> split ->"))
    output = path.with_suffix(".py")
    assert main(["build", str(path), "-o", str(output)]) == 0
    with pytest.raises(RunError, match="returned a dict whose keys do not match its outs"):
        load(output).run(db=":memory:", model="fems/mock")


# --------------------------------------------------------------------- 8. offline play (§15.3)

NIGHT = (
    """
meta:
    max_steps = 40
vars:
    alive = [@a, @b]
    votes = {}
    tries = 0
    @KILL = ""
    @voter = ""
"""
    + ACTORS
    + """
    human @me = soul:9, source:0
action wolf @ai(@a):
    prompt: Living players: {alive}. SET VARIABLE: <<@KILL = @name>>
    out: @KILL(string, "victim")
action ballot @human(@voter):
    prompt: Vote among {alive}.
    out: votes.@voter(string, "ballot")
action count @assign:
    out: tries += 1
mainflow:
    [Night]: wolf
    [START] -> [Night] -> count -> [Check]
    [Check] -> if (@KILL == "" and tries < 5) -> [Night]
    [Check] -> if (@KILL != "" or tries >= 5) -> par @voter in [@me]:
        -> ballot ->
    -> [END]
"""
)


def test_mock_gives_an_actor_variable_out_an_actor_whatever_type_it_declares(tmp_path, capsys):
    path = write(tmp_path, NIGHT)
    assert check(path, capsys) == (0, f"{path}: ok\n")
    result, events = build_and_run(path, capsys, human="fems/mock", seed=4)
    assert result.status == "completed"
    assert result.variables["tries"] == 1  # the first night already has a victim
    assert result.variables["@KILL"] in ("@a", "@b")
    assert result.variables["votes"]["@me"] in ("@a", "@b")
    assert not [e for e in events if e["event"] == "rejected"]


def test_a_string_out_naming_an_actor_sets_an_actor_variable_and_a_word_does_not(tmp_path, capsys):
    path = write(tmp_path, NIGHT)
    output = path.with_suffix(".py")
    assert main(["build", str(path), "-o", str(output)]) == 0
    module = load(output)
    answers = {"*": [{"text": "ok", "vars": {"votes.@voter": "@b"}}]}
    named = module.run(
        db=":memory:", replies={"*": ["SET VARIABLE: <<@KILL = @b>>"]}, human=answers
    )
    assert named.variables["@KILL"] == "@b" and named.variables["tries"] == 1
    word = module.run(
        db=":memory:", replies={"*": ["SET VARIABLE: <<@KILL = nobody>>"]}, human=answers
    )
    assert word.variables["@KILL"] == "" and word.variables["tries"] == 5


def test_human_mock_answers_choices_first_and_runs_unattended(tmp_path, capsys):
    source = NIGHT.replace(
        'out: votes.@voter(string, "ballot")',
        'out: votes.@voter(dropdown, choices={alive}, label="ballot")',
    )
    path = write(tmp_path, source)
    trace = tmp_path / "run.jsonl"
    args = ["--model", "fems/mock", "--human", "fems/mock", "--seed", "2", "--db", ":memory:"]
    assert main(["run", str(path), *args, "--trace", str(trace)]) == 0
    humans = [e for e in read_trace(trace) if e["event"] == "human"]
    assert [h["actor"] for h in humans] == ["@me"]
    assert humans[0]["vars"]["votes.@voter"] in ("@a", "@b") and humans[0]["text"]
    output = tmp_path / "game.py"
    assert main(["build", str(path), "-o", str(output)]) == 0
    again = run_program(output, *args, "--trace", str(tmp_path / "again.jsonl"))
    assert again.returncode == 0, again.stderr
    repeated = [e for e in read_trace(tmp_path / "again.jsonl") if e["event"] == "human"]
    assert repeated == humans  # deterministic for a seed


REPEATING = """
meta:
    max_steps = 100
vars:
    n = 0
    rounds = 0
actors:
    ai @a = soul:1
action guess @ai(@a):
    prompt: Pick a number.
    out: n(int, "number")
action more @assign:
    out: rounds += 1
mainflow:
    [G]: guess
    [START] -> [G] -> more -> [C]
    [C] -> if (rounds < 7) -> [G]
    [C] -> if (rounds >= 7) -> [END]
"""


def test_a_repeated_run_warning_is_printed_once_with_a_count(tmp_path, capsys):
    path = write(tmp_path, REPEATING)
    replies = tmp_path / "replies.json"
    replies.write_text('{"*": ["SET VARIABLE: <<n = lots>>"]}', encoding="utf-8")
    trace = tmp_path / "trace.jsonl"
    argv = ["run", str(path), "--replies", str(replies), "--db", ":memory:", "--trace", str(trace)]
    assert main(argv) == 0
    err = capsys.readouterr().err
    warning = "t.fems:8: warning: action guess: rejected signal 'SET VARIABLE: <<n = lots>>'"
    [line] = [line for line in err.splitlines() if warning in line]
    assert line.endswith("'lots' is not an integer (repeated 7 times)")
    assert len([e for e in read_trace(trace) if e["event"] == "rejected"]) == 7
