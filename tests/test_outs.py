"""Out labels (captions) and entry keys of targets, end to end: parse → check → codegen → run
(§9.6, §9.7, §10.2–§10.4, §10.8)."""

from __future__ import annotations

import io
import json
import re
import textwrap
from pathlib import Path

import fems_runtime as fr
import pytest
from fems_helpers import build_script, load, run_script

from fems2py.checker import check
from fems2py.parser import parse

KEYS = """
vars:
    d = {}
    e = {}
    f = {}
    table = {}
    k = "chosen"
code:
    g = file:"g.py"
actors:
    ai @a
action pick @ai(@a):
    prompt: set d[{i}]
    out: d[i](int, "the score")
action fn @func(g.val):
    in: i
    out: e[i]
action fk @func(g.one):
    out: f["k"]
action put @assign:
    out: table[i] = i
         table[k] = 1
         table[word] = 2
         table["k"] = 3
         table[i + 10] = 4
mainflow:
    [START] -> for i in range(3):
        -> pick -> fn -> put ->
    -> fk -> [END]
"""

FILES = {"g.py": "def val(i):\n    return i * 10\ndef one():\n    return 1\n"}


def test_variable_keys_are_resolved_in_the_current_binding(tmp_path: Path) -> None:
    """``out: d[i]`` inside ``for i in range(3)`` writes ``d[0]``, ``d[1]``, ``d[2]`` — never
    ``d["i"]`` — for AI outs (checked when the signal is applied, whether the model writes
    ``d[2]`` or ``d[i]``), ``@func`` outs and ``@assign`` targets; ``f["k"]`` is the key
    ``k``, not ``"k"`` with its quotes."""
    replies = {
        "pick": [
            "SET VARIABLE: <<d[0] = 5>>",
            'SET VARIABLE: <<d["1"] = 6>>',
            "SET VARIABLE: <<d[i] = 7>>",
        ]
    }
    result, events = run_script(tmp_path, KEYS, FILES, replies=replies)
    variables = result.variables  # a JSON snapshot: int keys read as strings
    assert variables["d"] == {"0": 5, "1": 6, "2": 7}
    assert variables["e"] == {"0": 0, "1": 10, "2": 20}
    assert variables["f"] == {"k": 1}
    assert variables["table"] == {
        **{str(i): i for i in range(3)},
        **{str(i + 10): 4 for i in range(3)},
        "chosen": 1,
        "word": 2,
        "k": 3,
    }
    assert not [e for e in events if e["event"] == "warning"]


def test_generated_keys_say_what_was_written(tmp_path: Path) -> None:
    text = build_script(tmp_path, KEYS, FILES).read_text(encoding="utf-8")
    module = re.sub(r"\(\s+", "(", re.sub(r",?\s+\)", ")", text))  # black's wrapping undone
    assert 'fr.OutSpec("d", key=ctx["i"], key_from="i", type="int", caption="the score")' in (
        module
    )
    assert 'fr.OutSpec("e", key=ctx["i"], key_from="i")' in module
    assert 'fr.OutSpec("f", key="k")' in module
    for line in [
        'ctx.assign("table", "=", ctx["i"], key=ctx["i"])',
        'ctx.assign("table", "=", 1, key=ctx["k"])',
        'ctx.assign("table", "=", 2, key="word")',
        'ctx.assign("table", "=", 3, key="k")',
        'ctx.assign("table", "=", 4, key=ctx["i"] + 10)',
    ]:
        assert line in module


def test_checker_records_bare_word_keys_that_are_strings(tmp_path: Path) -> None:
    """§4.2 bare words: ``table[word]`` is ``table["word"]`` unless a variable (declared, or
    a loop variable where the action runs) is named ``word``."""
    script, diagnostics = parse(textwrap.dedent(KEYS), "t.fems")
    (tmp_path / "g.py").write_text(FILES["g.py"], encoding="utf-8")
    checked = check(script, tmp_path)
    assert not [d for d in [*diagnostics, *checked.diagnostics] if d.severity == "error"]
    put = next(a for a in script.actions if a.name == "put")
    strings = [a.target.key for a in put.assignments if a.target.span in checked.string_keys]
    assert strings == ["word"]


HUMAN = """
vars:
    wolf_pick = {}
    alive = [@you, @Eve, @Bob]
    d = {}
actors:
    human @you
    ai @Eve
    ai @Bob
action kill @human(@wolf):
    prompt: Pick.
    out: wolf_pick.@wolf(dropdown, choices={alive}, label="tonight's victim"), d[i](int)
mainflow:
    [START] -> for @wolf in [@you]:
        -> for i in [7]:
            -> kill ->
        ->
    -> [END]
"""


def test_human_outs_show_captions_and_bindings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """§10.8 at the terminal: ``tonight's victim (wolf_pick.@you) [1-3]:``."""
    monkeypatch.setattr("sys.stdin", io.StringIO("I choose\n2\n4\n"))
    module = load(build_script(tmp_path, HUMAN))
    result = module.run(db=":memory:", human="terminal")
    shown = capsys.readouterr().out
    assert "tonight's victim (wolf_pick.@you):\n  1. @you\n  2. @Eve" in shown
    assert "tonight's victim (wolf_pick.@you) [1-3]: " in shown
    assert "d[7] (int): " in shown
    assert "wolf_pick.@wolf" not in shown
    assert result.variables["wolf_pick"] == {"@you": "@Eve"}
    assert result.variables["d"] == {"7": 4}


def test_human_answers_file_keyed_by_out_label(tmp_path: Path) -> None:
    answers = tmp_path / "answers.json"
    vars_ = {"wolf_pick.@wolf": "@Bob", "d[i]": 9}
    answers.write_text(json.dumps({"kill": [{"text": "ok", "vars": vars_}]}), encoding="utf-8")
    result, _ = run_script(tmp_path, HUMAN, human=str(answers))
    assert result.variables["wolf_pick"] == {"@you": "@Bob"}
    assert result.variables["d"] == {"7": 9}


def test_an_answers_file_value_that_does_not_fit_is_a_run_error(tmp_path: Path) -> None:
    """§10.8: a terminal asks again; a file cannot, so the run stops naming action, out and
    value (a model's bad signal is only a warning)."""
    answers = tmp_path / "answers.json"
    vars_ = {"wolf_pick.@wolf": "@Nobody", "d[i]": 9}
    answers.write_text(json.dumps({"kill": [{"text": "ok", "vars": vars_}]}), encoding="utf-8")
    with pytest.raises(fr.RunError) as raised:
        run_script(tmp_path, HUMAN, human=str(answers))
    assert raised.value.line == 9  # the action's line
    assert raised.value.message.startswith(
        f"action kill: {answers} answers out wolf_pick.@wolf with @Nobody, which does not fit: "
    )


def test_a_func_out_whose_key_variable_is_null_is_a_located_run_error(tmp_path: Path) -> None:
    """``out: e[k]`` with ``k = null`` would otherwise replace the whole dict ``e``."""
    source = """
    vars:
        e = {"keep": 1}
        k = null
    code:
        g = file:"g.py"
    action fk @func(g.one):
        out: e[k]
    mainflow:
        [START] -> fk -> [END]
    """
    with pytest.raises(fr.RunError, match=r"t\.fems:7: error: out e\[k\]: k has no value"):
        run_script(tmp_path, source, FILES)
