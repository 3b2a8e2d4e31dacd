"""Scripts written for the original engine (FemWA) build and run unchanged (issue #9).

One small script per rule, each through ``fems2py check``, ``fems2py build`` and a ``fems/mock``
run; where a rule has a limit, a script on the wrong side of it too.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
from fems_helpers import load, read_trace

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

EMPTY_BINDINGS = (
    """
vars:
    n = 0
"""
    + ACTORS
    + """
action hello @ai(@a):
    prompt: Hello.
mainflow:
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
    """
vars:
    n = 0
"""
    + ACTORS
    + """
action hello @ai(@a):
    prompt: Hello.
module NightPhase(day):
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
