"""The table of action kinds (fems2py/kinds.py) is what the parser, the checker, the templates
and the runtime go by."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import pytest
from fems_runtime.flow import Context
from fems_runtime.specs import TURN_KINDS

from fems2py.frontend import analyze_source
from fems2py.kinds import ACTION_KINDS, FIELD_NAMES, ActionKind, ActionKindName
from fems2py.parser import parse
from fems2py.parser.actions import FIELD_PARSERS

TEMPLATES = Path(__file__).resolve().parent.parent / "fems2py" / "templates"


def test_the_table_and_the_type_name_the_same_kinds() -> None:
    assert tuple(ACTION_KINDS) == get_args(ActionKindName)
    assert all(name == kind.name for name, kind in ACTION_KINDS.items())


def test_the_runtime_runs_every_executor_kind_as_a_turn() -> None:
    executor_kinds = {name for name, kind in ACTION_KINDS.items() if kind.has_executor}
    assert set(TURN_KINDS) == executor_kinds
    for kind in TURN_KINDS:
        assert callable(getattr(Context, kind)), f"Context has no method for @{kind} turns"


def test_every_kind_has_its_template() -> None:
    for kind in ACTION_KINDS.values():
        assert (TEMPLATES / f"action_{kind.template}.py.jinja").is_file()


def _header(kind: str) -> str:
    return {"executor": f"@{kind}(@Eve)", "func": "@func(game.step)", "none": "@assign"}[
        ACTION_KINDS[kind].header
    ]


@pytest.mark.parametrize("kind", list(ACTION_KINDS))
@pytest.mark.parametrize("field", FIELD_NAMES)
def test_the_parser_accepts_exactly_the_fields_of_the_table(kind: str, field: str) -> None:
    source = f"action A {_header(kind)}:\n    {field}: x\n"
    _script, diagnostics = parse(source, "kinds.fems")
    refused = [d for d in diagnostics if "does not apply to" in d.message]
    if field in ACTION_KINDS[kind].fields:
        assert refused == []
    else:
        assert [d.message for d in refused] == [f"'{field}:' does not apply to @{kind} actions"]


@pytest.mark.parametrize("kind", list(ACTION_KINDS))
def test_the_parser_reads_each_header_as_the_table_says(kind: str) -> None:
    source = f"action A {_header(kind)}:\n    out: x\n"
    script, _diagnostics = parse(source, "kinds.fems")
    (action,) = script.actions
    assert action.kind == kind
    header = ACTION_KINDS[kind].header
    assert (action.executor == "@Eve") == (header == "executor")
    assert (action.func is not None) == (header == "func")


def test_every_field_has_its_parser() -> None:
    assert set(FIELD_PARSERS) == set(FIELD_NAMES)


def test_a_new_kind_needs_only_its_row_to_be_parsed_and_checked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """CONTRIBUTING.md "Adding an action kind": the parser and the checker go by the table
    alone. A fixture kind ``@note`` (no header argument, only ``prompt:``) is added as a row."""
    monkeypatch.setitem(
        ACTION_KINDS, "note", ActionKind("note", "none", frozenset({"prompt"}), "assign")
    )
    source = (
        "vars:\n    topic = 1\n"
        "action jot @note:\n    prompt: about {topic}\n"
        "action wrong @note:\n    scope: [@a]\n"
        "mainflow:\n    [START] -> jot -> wrong -> [END]\n"
    )
    checked, diagnostics = analyze_source(source, "note.fems", tmp_path)
    jot = checked.script.actions[0]
    assert (jot.kind, jot.executor, jot.prompt and jot.prompt.value.value) == (
        "note",
        None,
        "about {topic}",
    )
    assert [(d.message, d.hint) for d in diagnostics] == [
        ("'scope:' does not apply to @note actions", "it is used by @ai, @human, @mind")
    ]
    _script, diagnostics = parse("action x @nope:\n    prompt: hi\n", "kinds.fems")
    assert diagnostics[0].hint == "did you mean 'note'?"
