"""Property: whatever the text, parse + check only ever report diagnostics, never crash.

Valid scripts are mutated the way editing goes wrong — lines deleted, duplicated or swapped,
punctuation dropped in, indentation changed, the file cut short — and the front end must
answer with a tree and diagnostics, not an exception.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fems2py.checker import CheckedScript, check
from fems2py.diagnostics import Diagnostic
from fems2py.parser import parse

CORPUS = [
    """\
meta:
    name = fuzz
    max_steps = 50
vars:
    day = 0
    alive = [@a, @b]
    votes = {}
    hp = {@a: 3}
    @speaker = ""
    @ballot = ""
actors:
    ai @a = soul:a
    ai @b = soul:b, source:fast
    human @p = soul:a, source:0
action speak @ai(@speaker):
    prompt: |
        Day {day}. You are {@speaker} with {@speaker.hp} hp.
        Living: {alive}.
    scope: [@a] + alive
action vote @mind(@speaker):
    prompt: Vote. SET VARIABLE: <<@ballot = @a>>
    out: @ballot(actor, "vote")
action record @assign:
    out: votes.@speaker = @ballot
         day += 1
mainflow:
    [START] -> [Day]
    [Day] -> for @speaker in alive:
        -> if (@speaker.type == "ai") -> speak ->
        -> if (@speaker.type == human) -> vote -> record ->
    -> [Check]
    [Check] -> fork:
        -> if (day < 3) -> [Day]
        -> if (day >= 3) -> [END]
""",
    """\
vars:
    task = "poem"
    finish = false
    answer = ""
code:
    tools = file:"tools.py"
actors:
    ai @coder = soul:c
    ai @boss = soul:b
module Sandbox(job):
    vars:
        tries = 0
    action write @ai(@coder):
        prompt: Write {job}; try {tries}.
        out: finish(bool, "done")
    action count @assign:
        out: tries += 1
    flow:
        [IN] -> write -> [C]:count -> fork:
            -> if (finish == true) -> [OUT]
            -> if (finish == false and tries < 3) -> [IN]
            -> if (tries >= 3) -> [BREAK]
action review @func(tools.review):
    in: text = answer
    out: answer
action race_a @ai(@coder):
    prompt: Answer {task}.
    out: answer
action race_b @ai(@boss):
    prompt: Answer {task}.
    out: answer
mainflow:
    [START] -> &Sandbox(task) -> review -> [Go]
    [Go] -> [A]:race_a
    [Go] -> [B]:race_b
    join(1):
        [A] ->
        [B] ->
    to [Done]
    [Done] -> par @coder in [@coder, @boss]:
        -> race_a ->
    -> [END]
""",
]
PUNCTUATION = list("[](){}:,->|#@&\"'=+.\t/") + ["->", "：", "【", "--", "&&", "\\"]


@st.composite
def mutated(draw: st.DrawFn) -> str:
    lines = draw(st.sampled_from(CORPUS)).splitlines()
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        if not lines:
            break
        index = draw(st.integers(min_value=0, max_value=len(lines) - 1))
        kind = draw(
            st.sampled_from(["delete", "duplicate", "swap", "punctuate", "indent", "truncate"])
        )
        if kind == "delete":
            del lines[index]
        elif kind == "duplicate":
            lines.insert(index, lines[index])
        elif kind == "swap":
            other = draw(st.integers(min_value=0, max_value=len(lines) - 1))
            lines[index], lines[other] = lines[other], lines[index]
        elif kind == "punctuate":
            line = lines[index]
            at = draw(st.integers(min_value=0, max_value=len(line)))
            lines[index] = line[:at] + draw(st.sampled_from(PUNCTUATION)) + line[at:]
        elif kind == "indent":
            stripped = lines[index].lstrip(" ")
            width = draw(st.sampled_from([0, 1, 2, 3, 6, 8, 12]))
            lines[index] = draw(st.sampled_from([" ", "\t"])) * width + stripped
        else:
            text = "\n".join(lines)
            cut = draw(st.integers(min_value=0, max_value=len(text)))
            lines = text[:cut].splitlines()
    return "\n".join(lines) + draw(st.sampled_from(["\n", "", "\r\n"]))


def front_end(source: str, folder: Path) -> tuple[list[Diagnostic], CheckedScript]:
    script, diagnostics = parse(source, "fuzz.fems", folder)
    return diagnostics, check(script, folder)


def test_the_corpus_is_valid(tmp_path: Path) -> None:
    (tmp_path / "tools.py").write_text("def review(text):\n    return text\n")
    for source in CORPUS:
        diagnostics, checked = front_end(source, tmp_path)
        problems = [d for d in [*diagnostics, *checked.diagnostics] if d.severity == "error"]
        assert problems == []


@settings(
    max_examples=120,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(source=mutated())
def test_mutated_scripts_only_produce_diagnostics(source: str, tmp_path: Path) -> None:
    (tmp_path / "tools.py").write_text("def review(text):\n    return text\n")
    diagnostics, checked = front_end(source, tmp_path)
    for diagnostic in [*diagnostics, *checked.diagnostics]:
        assert isinstance(diagnostic, Diagnostic)
        assert diagnostic.span.line >= 1 and diagnostic.span.col >= 1
    assert all(value is None or isinstance(value, str) for value in checked.merge_nodes.values())


PATHOLOGICAL = {
    "empty": "",
    "only comments": "# one\n// two\n\n   # three\n",
    "deep brackets in a value": "vars:\n    x = " + "[" * 3000 + "]" * 3000 + "\n",
    "deep dict in a value": "vars:\n    x = " + "{a:" * 2000 + "1" + "}" * 2000 + "\n",
    "deep parentheses in a condition": (
        "vars:\n    x = 1\nmainflow:\n    [START] -> if ("
        + "(" * 3000
        + "x"
        + ")" * 3000
        + ") -> [END]\n"
    ),
    "a long unary chain": "mainflow:\n    [START] -> if (" + "not " * 20000 + "x) -> [END]\n",
    "a huge line": "mainflow:\n    [START] -> [END] " + "x" * 1_000_000 + "\n",
    "control characters": "vars:\n    x = \x00\x01\x02\nmainflow:\n    [START]\x0b-> [END]\x0c\n",
    "unbalanced closers": "vars:\n    x = ]]]\nmainflow:\n    ) -> [END]\n",
    "a byte order mark": "\ufeffmainflow:\n    [START] -> [END]\n",
    "deeply nested modules": "".join(
        "    " * depth + f"module M{depth}:\n" for depth in range(300)
    ),
    "deeply nested loops": "mainflow:\n    [START] -> [A]\n"
    + "".join("    " * (depth + 1) + f"[N{depth}] -> for i in x:\n" for depth in range(300)),
}


@pytest.mark.parametrize("source", PATHOLOGICAL.values(), ids=PATHOLOGICAL.keys())
def test_pathological_input_only_produces_diagnostics(source: str, tmp_path: Path) -> None:
    diagnostics, checked = front_end(source, tmp_path)
    for diagnostic in [*diagnostics, *checked.diagnostics]:
        assert isinstance(diagnostic, Diagnostic)
        assert diagnostic.span.line >= 1 and diagnostic.span.col >= 1
