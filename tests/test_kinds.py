"""The tables of the language's words are what the parser, the checker, the LSP, the templates
and the runtime go by: the action kinds (fems2py/kinds.py), and the node names, out types,
actor types and attributes and message kinds of fems_runtime/words.py."""

from __future__ import annotations

import ast
import io
import random
from pathlib import Path
from typing import get_args, get_type_hints

import pytest
from fems_runtime import words
from fems_runtime.context import format_lines
from fems_runtime.flow import Context
from fems_runtime.human import menu, typed_value
from fems_runtime.offline import mock_value, offline_out
from fems_runtime.out_types import OUT_TYPE_ROWS, SignalError
from fems_runtime.out_types import OutType as OutTypeRow
from fems_runtime.signals import OutSpec, apply_signals
from fems_runtime.specs import TURN_KINDS
from fems_runtime.store import NewMessage, Store
from fems_runtime.transcript import Transcript
from fems_runtime.variables import ActorSpec, Frame, Variables
from fems_runtime.words import (
    ACTOR_TYPES,
    FIXED_ACTOR_ATTRIBUTES,
    MAIN_ONLY_NODES,
    MESSAGE_KINDS,
    MODULE_ONLY_NODES,
    NARRATOR,
    OUT_TYPES,
    RESERVED_NODE_NAMES,
    TERMINAL_NODES,
    VISIBLE_KINDS,
    TranscriptShow,
)

from fems2py.frontend import analyze_source
from fems2py.kinds import ACTION_KINDS, FIELD_NAMES, ActionKind, ActionKindName
from fems2py.lexer import TokenKind, tokenize
from fems2py.lsp import _can_rename
from fems2py.nodes import ActorDef, OutType
from fems2py.parser import parse
from fems2py.parser.actions import FIELD_PARSERS
from fems2py.symbols import Symbol

ROOT = Path(__file__).resolve().parent.parent
TEMPLATES = ROOT / "fems2py" / "templates"


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


#: Comparisons with the same words that are about something else: actor types (§6.1), the
#: kinds of an ``interrupt:`` (§9.2), of a ``scope:`` item and of a target's key.
_OTHER_VOCABULARIES = {
    "a.kind",
    "actor.kind",
    "owner.kind",
    "kind",
    "self.type",
    "room.executor_spec.type",
    "interrupt.kind",
    "item.kind",
    "target.key_kind",
    "symbol.kind",
    "name.text",
}


def _compared_with(words: frozenset[str], tables: set[str]) -> set[tuple[str, str]]:
    """Each comparison with one of ``words`` in the compiler and the runtime, outside the
    ``tables`` that bind them to what they do: (file, what the words are compared with)."""
    found = set()
    for folder in (ROOT / "fems2py", ROOT / "runtime" / "fems_runtime"):
        for path in sorted(folder.rglob("*.py")):
            where = path.relative_to(ROOT).as_posix()
            if where in tables:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(node, ast.Compare):
                    continue
                named: set[object] = set()
                others = []
                for side in (node.left, *node.comparators):
                    if isinstance(side, ast.Tuple | ast.List | ast.Set | ast.Constant):
                        members = side.elts if not isinstance(side, ast.Constant) else [side]
                        named |= {m.value for m in members if isinstance(m, ast.Constant)}
                    else:
                        others.append(ast.unparse(side))
                if named & words:
                    found |= {(where, other) for other in others}
    return {(where, other) for where, other in found if other not in _OTHER_VOCABULARIES}


def test_no_action_kind_is_told_apart_by_its_name() -> None:
    """The stages ask the kind's row (``has_executor``, ``calls_function``, ``assigns``)."""
    assert _compared_with(frozenset(ACTION_KINDS), {"fems2py/kinds.py"}) == set()


def test_no_out_type_is_told_apart_by_its_name() -> None:
    """Signals, the offline models, the terminal and the stage ask the type's row."""
    tables = {"runtime/fems_runtime/words.py", "runtime/fems_runtime/out_types.py"}
    assert _compared_with(frozenset(OUT_TYPES), tables) == set()


def test_the_action_kind_properties_follow_the_header() -> None:
    for kind in ACTION_KINDS.values():
        asked = (kind.has_executor, kind.calls_function, kind.assigns)
        assert asked.count(True) == 1, kind.name
        assert kind.written.startswith(f"@{kind.name}")


# --------------------------------------------------------------------------- fems_runtime/words.py

#: Each table of words.py, by name, as the set of words a copy of it would hold.
_TABLES = {
    "TERMINAL_NODES": TERMINAL_NODES,
    "RESERVED_NODE_NAMES": RESERVED_NODE_NAMES,
    "OUT_TYPES": frozenset(OUT_TYPES),
    "FIXED_ACTOR_ATTRIBUTES": FIXED_ACTOR_ATTRIBUTES,
    "VISIBLE_KINDS": frozenset(VISIBLE_KINDS),
}
#: The one copy that is kept on purpose: the type of ``OutType.name``, held to the table below.
_TYPED_COPIES = {("fems2py/nodes.py", "OUT_TYPES")}


def _literal_collections(path: Path) -> list[frozenset[str]]:
    """The string members of every tuple, list and set written in ``path`` (a ``Literal[...]``
    subscript too)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            members = [e.value for e in node.elts if isinstance(e, ast.Constant)]
            found.append(frozenset(m for m in members if isinstance(m, str)))
    return found


def test_no_table_of_words_is_written_out_again() -> None:
    """A collection holding every word of a table, outside words.py, is a copy of it."""
    copies = set()
    for folder in (ROOT / "fems2py", ROOT / "runtime" / "fems_runtime"):
        for path in sorted(folder.rglob("*.py")):
            if path.name == "words.py":
                continue
            where = path.relative_to(ROOT).as_posix()
            for members in _literal_collections(path):
                copies |= {(where, name) for name, table in _TABLES.items() if table <= members}
    assert copies == _TYPED_COPIES


def test_the_node_names_fit_together() -> None:
    assert MAIN_ONLY_NODES | MODULE_ONLY_NODES == RESERVED_NODE_NAMES
    assert MAIN_ONLY_NODES.isdisjoint(MODULE_ONLY_NODES)
    assert TERMINAL_NODES <= RESERVED_NODE_NAMES


_NODE_CANDIDATES = sorted(RESERVED_NODE_NAMES | {"Start", "LOOP", "EXIT", "go"})


@pytest.mark.parametrize("name", _NODE_CANDIDATES)
def test_the_parser_refuses_exactly_the_reserved_nodes_as_action_names(name: str) -> None:
    _script, diagnostics = parse(f"mainflow:\n    [START] -> {name} -> [END]\n", "kinds.fems")
    refused = [d.message for d in diagnostics if "is a reserved node" in d.message]
    expected = [f"'{name}' is a reserved node and is written in brackets"]
    assert refused == (expected if name in RESERVED_NODE_NAMES else [])


@pytest.mark.parametrize("name", sorted(RESERVED_NODE_NAMES))
def test_the_checker_keeps_each_reserved_node_to_its_flow(name: str, tmp_path: Path) -> None:
    source = (
        'vars:\n    x = 1\naction go @assign:\n    out: x = "2"\n'
        f"module M:\n    flow:\n        [IN] -> go -> [{name}] -> [OUT]\n"
        f"mainflow:\n    [START] -> &M -> [{name}] -> [END]\n"
    )
    _checked, diagnostics = analyze_source(source, "kinds.fems", tmp_path)
    messages = {d.message for d in diagnostics}
    assert (f"[{name}] may not appear in a module" in messages) == (name in MAIN_ONLY_NODES)
    assert (f"[{name}] is only allowed in a module flow" in messages) == (name in MODULE_ONLY_NODES)


@pytest.mark.parametrize("name", _NODE_CANDIDATES)
def test_the_lsp_renames_every_node_but_the_reserved_ones(name: str) -> None:
    assert _can_rename(Symbol("node", name)) == (name not in RESERVED_NODE_NAMES)


def test_the_out_type_names_the_table_s_types() -> None:
    assert get_args(get_type_hints(OutType)["name"]) == OUT_TYPES


_OUT_FORMS = {"enum": "enum([a, b])", "dropdown": "dropdown, choices={a, b}"}


@pytest.mark.parametrize("name", [*OUT_TYPES, "integer", "list"])
def test_the_parser_and_the_runtime_accept_exactly_the_out_types(name: str) -> None:
    form = _OUT_FORMS.get(name, name)
    source = f"vars:\n    v = 1\naction a @ai(@eve):\n    prompt: hi\n    out: v({form})\n"
    script, diagnostics = parse(source, "kinds.fems")
    (out,) = script.actions[0].outs
    if name in OUT_TYPES:
        assert (out.type and out.type.name, diagnostics) == (name, [])
        assert OutSpec("v", type=name).type == name
    else:
        assert out.type is None
        assert [d.message for d in diagnostics] == [f"unknown out type '{name}' is ignored"]
        with pytest.raises(ValueError, match="unknown out type"):
            OutSpec("v", type=name)


def test_the_actor_types_are_the_table_s() -> None:
    assert get_args(get_type_hints(ActorDef)["kind"]) == ACTOR_TYPES
    assert get_args(get_type_hints(ActorSpec)["type"]) == ACTOR_TYPES


@pytest.mark.parametrize("kind", [*ACTOR_TYPES, "bot"])
def test_the_parser_and_the_runtime_accept_exactly_the_actor_types(kind: str) -> None:
    script, diagnostics = parse(f"actors:\n    {kind} @eve\n", "kinds.fems")
    if kind in ACTOR_TYPES:
        assert ([a.kind for a in script.actors], diagnostics) == ([kind], [])
        assert ActorSpec("@eve", type=kind).type == kind
    else:
        assert script.actors == ()
        assert "an actor definition starts with 'ai' or 'human'" in diagnostics[0].message
        with pytest.raises(ValueError, match="actor type"):
            ActorSpec("@eve", type=kind)


_ATTRIBUTE_CANDIDATES = sorted(FIXED_ACTOR_ATTRIBUTES | {"hp", "user", "votes"})


@pytest.mark.parametrize("attr", _ATTRIBUTE_CANDIDATES)
def test_the_checker_knows_exactly_the_fixed_attributes(attr: str, tmp_path: Path) -> None:
    source = (
        "actors:\n    ai @eve\n"
        f"action a @ai(@eve):\n    prompt: {{@eve.{attr}}}\n"
        "mainflow:\n    [START] -> a -> [END]\n"
    )
    _checked, diagnostics = analyze_source(source, "kinds.fems", tmp_path)
    unknown = [d.message for d in diagnostics if "unknown attribute" in d.message]
    assert unknown == (
        [] if attr in FIXED_ACTOR_ATTRIBUTES else [f"unknown attribute '{attr}' of @eve"]
    )


def test_the_runtime_reads_exactly_the_fixed_attributes_from_the_actor() -> None:
    """A dict declared under an attribute's name gives it to actors, except for the fixed ones."""
    variables = Variables(
        {a: {"@eve": "from vars"} for a in _ATTRIBUTE_CANDIDATES}, [ActorSpec("@eve")]
    )
    from_vars = {a for a in _ATTRIBUTE_CANDIDATES if variables.root.attr("@eve", a) == "from vars"}
    assert from_vars == set(_ATTRIBUTE_CANDIDATES) - FIXED_ACTOR_ATTRIBUTES


def test_every_message_kind_row_is_whole() -> None:
    assert all(name == kind.name for name, kind in MESSAGE_KINDS.items())
    assert {kind.transcript for kind in MESSAGE_KINDS.values()} <= set(get_args(TranscriptShow))
    assert tuple(n for n, k in MESSAGE_KINDS.items() if k.in_context) == VISIBLE_KINDS
    assert not MESSAGE_KINDS["reasoning"].in_context  # §13.1: in nobody's context
    assert MESSAGE_KINDS["narration"].label == NARRATOR


def test_the_store_keeps_exactly_the_message_kinds_and_shows_the_visible_ones() -> None:
    with Store(":memory:") as store:
        session = store.open_session()
        store.add_messages(session, [NewMessage(kind, kind, souls=["1"]) for kind in MESSAGE_KINDS])
        assert [line[0] for line in store.visible_lines(session, soul="1")] == list(VISIBLE_KINDS)
        with pytest.raises(ValueError, match="message kind must be one of"):
            store.add_messages(session, [NewMessage("shout", "x", souls=["1"])])


def test_the_context_shows_each_kind_as_its_row_says() -> None:
    text = format_lines((kind, "@eve", "1", f"a {kind}") for kind in MESSAGE_KINDS)
    assert text.split("\n\n") == [
        f"[{row.label.format(who='@eve', name='@eve')}]: a {kind}"
        for kind, row in MESSAGE_KINDS.items()
        if row.in_context
    ]
    assert "[narrator]: a narration" in text and "[@eve → tool]: a tool_call" in text


def test_the_transcript_shows_every_kind_but_the_hidden_ones() -> None:
    assert set(Transcript._SHOWS) == set(get_args(TranscriptShow)) - {"hidden"}
    for kind, row in MESSAGE_KINDS.items():
        stream = io.StringIO()
        Transcript(everyone=["@eve"], stream=stream).message(kind, "@eve", ["@eve"], "words")
        assert (stream.getvalue() != "") == (row.transcript != "hidden"), kind


def test_the_lexer_makes_every_kind_of_token() -> None:
    kinds = [token.kind for token in tokenize('name @eve 1.5 "text" -> 9lives $', 1)]
    assert kinds == [
        TokenKind.NAME,
        TokenKind.ACTOR,
        TokenKind.NUMBER,
        TokenKind.STRING,
        TokenKind.OP,
        TokenKind.OTHER,
        TokenKind.OTHER,
    ]
    assert set(kinds) == set(TokenKind)


def test_words_says_what_it_exports() -> None:
    public = {n for n in vars(words) if n.isupper() or n in ("MessageKind", "TranscriptShow")}
    assert set(words.__all__) == public


# --------------------------------------------------------------------------- fems_runtime/out_types.py


def test_every_out_type_has_its_row() -> None:
    assert tuple(OUT_TYPE_ROWS) == OUT_TYPES
    assert all(name == row.name for name, row in OUT_TYPE_ROWS.items())


@pytest.mark.parametrize("name", OUT_TYPES)
def test_a_person_picks_from_a_menu_exactly_for_the_menu_types(name: str) -> None:
    offered = menu(OutSpec("v", type=name, choices=("a", "b")))
    assert offered == (["a", "b"] if OUT_TYPE_ROWS[name].menu else None)


def _percent(value: object, spec: OutSpec, frame: Frame) -> int:
    number = int(str(value))
    if not 0 <= number <= 100:
        raise SignalError(f"{number} is not a percentage")
    return number


def test_a_new_out_type_needs_only_its_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """Signals, the offline answerers and a person's answer go by the row alone. A fixture
    type ``percent`` (a whole number from 0 to 100, the mock says 50) is added as a row."""
    monkeypatch.setitem(
        OUT_TYPE_ROWS, "percent", OutTypeRow("percent", _percent, lambda actors, rng: 50)
    )
    variables = Variables({"share": 0}, [ActorSpec("@eve")])
    frame = variables.root
    out = OutSpec("share", type="percent")
    outcome = apply_signals("SET VARIABLE: <<share = 400>>", frame, [out])
    assert [r.reason for r in outcome.rejected] == ["400 is not a percentage"]
    apply_signals("SET VARIABLE: <<share = 40>>", frame, [out])
    assert frame.get("share") == 40
    assert mock_value(offline_out(out, frame), ("@eve",), random.Random(0)) == 50
    assert (menu(out), typed_value(out, "30", frame)) == (None, 30)
