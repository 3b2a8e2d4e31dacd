"""The symbol index behind the language server: definitions, uses and what fits where."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from fems2py.lsp import complete
from fems2py.symbols import Symbol, SymbolIndex, build_index

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

SCRIPT = textwrap.dedent(
    """\
    vars:
        winner = ""
        dead = ""       # a global and a module local of the same name
        @speaker = ""
        hp = {@ann: 3}
    code:
        game = file:"game.py"
    actors:
        ai ann
        ai @ben = soul:2
    action speak @ai(@speaker):
        prompt: |
            You are {@speaker}; you have {@speaker.hp} points. # not a comment
            SET VARIABLE: <<winner = ...>>
        scope: [@ann, @ben]
        out: winner(dropdown, choices={"ann", "ben"}, label="who wins")
    action judge @func(game.judge):
        in: winner, dead
        out: winner
    module Night(@victim):
        vars:
            dead = ""
        action kill @assign:
            out: dead = @victim
        flow:
            [IN] -> kill -> [OUT]
    mainflow:
        [START] -> [Talk]
        [Talk] -> for @speaker in [@ann, @ben]:
            -> speak ->
        -> &Night(@ann) -> judge -> [Check]
        [Check] -> if (winner == "" and hp.@ann > 0) -> [Talk]
        [Check] -> if (winner != "") -> [END]
    """
)


@pytest.fixture(scope="module")
def index() -> SymbolIndex:
    return build_index(SCRIPT)


def where(index: SymbolIndex, symbol: Symbol) -> list[tuple[int, str]]:
    """(line, text) of each occurrence, to compare against the script by eye."""
    lines = SCRIPT.split("\n")
    return [(o.line, lines[o.line - 1][o.col : o.end]) for o in index.references(symbol)]


def test_a_variable_is_found_in_every_place_it_is_written(index: SymbolIndex) -> None:
    assert where(index, Symbol("variable", "winner")) == [
        (2, "winner"),  # vars:
        (16, "winner"),  # out:
        (18, "winner"),  # in:
        (19, "winner"),  # out: of the func
        (32, "winner"),  # conditions
        (33, "winner"),
    ]
    # prompt text is text: the signal example inside it is no use of the variable
    assert index.definition(Symbol("variable", "winner")).line == 2


def test_placeholders_and_attributes_are_uses(index: SymbolIndex) -> None:
    speaker = where(index, Symbol("variable", "@speaker"))
    assert (
        (13, "@speaker") in speaker and (11, "@speaker") in speaker and (29, "@speaker") in speaker
    )
    # {@speaker.hp} and hp.@ann read the dict variable hp (§7.3)
    assert [line for line, _ in where(index, Symbol("variable", "hp"))] == [5, 13, 32]


def test_a_module_local_shadows_the_global_of_the_same_name(index: SymbolIndex) -> None:
    local = Symbol("variable", "dead", "module:Night")
    assert [line for line, _ in where(index, local)] == [22, 24]
    assert [line for line, _ in where(index, Symbol("variable", "dead"))] == [3, 18]
    # a module parameter is a local too
    assert [line for line, _ in where(index, Symbol("variable", "@victim", "module:Night"))] == [
        20,
        24,
    ]


def test_an_actor_defined_without_its_at_is_the_same_actor(index: SymbolIndex) -> None:
    ann = where(index, Symbol("actor", "@ann"))
    assert ann[0] == (5, "@ann") and (9, "ann") in ann
    assert index.definition(Symbol("actor", "@ann")).line == 9
    assert len(ann) == 6  # vars, actors, scope, loop list, module argument, condition


def test_actions_modules_nodes_and_code_functions(index: SymbolIndex) -> None:
    assert [line for line, _ in where(index, Symbol("action", "speak"))] == [11, 30]
    assert [line for line, _ in where(index, Symbol("action", "kill", "module:Night"))] == [23, 26]
    assert [line for line, _ in where(index, Symbol("module", "Night"))] == [20, 31]
    assert [line for line, _ in where(index, Symbol("node", "Talk"))] == [28, 29, 32]
    assert [line for line, _ in where(index, Symbol("node", "IN", "module:Night"))] == [26]
    assert where(index, Symbol("function", "game.judge")) == [(17, "judge")]
    assert [line for line, _ in where(index, Symbol("code", "game"))] == [7, 17]


def test_the_occurrence_under_the_cursor(index: SymbolIndex) -> None:
    line = SCRIPT.split("\n")[30]  # -> &Night(@ann) -> judge -> [Check]
    col = line.index("judge") + 2
    found = index.at(31, col)
    assert found is not None and found.symbol == Symbol("action", "judge")
    assert index.at(31, line.index("->")) is None


@pytest.mark.parametrize(
    ("line", "before", "expected", "absent"),
    [
        (31, "    -> &Night(@ann) -> ", {"speak", "judge", "&Night"}, {"kill", "winner"}),
        (26, "        [IN] -> ", {"kill", "speak"}, set()),
        (13, "        You are {", {"winner", "hp"}, {"@speaker", "speak"}),
        (32, "    [Check] -> if (win", {"winner", "dead"}, {"@ann"}),
        (31, "    -> &Night(@", {"@ann", "@ben", "@speaker"}, {"winner"}),
        (31, "    -> &Ni", {"Night"}, {"speak"}),
        (32, "    [Check] -> [", {"Talk", "Check", "START"}, {"IN"}),
        (16, "        ", {"prompt", "scope", "out", "max_retries"}, set()),
        (18, "        ", {"in", "out"}, {"prompt"}),
    ],
)
def test_completion_offers_what_fits_there(
    index: SymbolIndex, line: int, before: str, expected: set[str], absent: set[str]
) -> None:
    labels = {item.label for item in complete(index, line, before)}
    assert expected <= labels
    assert not labels & absent


@pytest.mark.parametrize("example", sorted(EXAMPLES.glob("*/*.fems")), ids=lambda p: p.name)
def test_every_defined_name_of_the_examples_is_indexed(example: Path) -> None:
    """Each action header, module header and vars: line of the examples is a definition."""
    source = example.read_text(encoding="utf-8")
    index = build_index(source)
    defined = {(o.symbol.kind, o.line) for o in index.occurrences if o.definition}
    for number, line in enumerate(source.split("\n"), start=1):
        words = line.split()
        if words[:1] == ["action"]:
            assert ("action", number) in defined, line
        if words[:1] == ["module"]:
            assert ("module", number) in defined, line
    assert all(o.symbol.namespace for o in index.occurrences)
