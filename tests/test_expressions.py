"""Embedded expressions (§12.2): FEM paths, rewrites, errors and positions in the .fems file."""

from __future__ import annotations

from pathlib import Path

import pytest

from fems2py.diagnostics import Diagnostics
from fems2py.expressions import compile_expression, compile_value
from fems2py.nodes import Span
from fems2py.parser import parse

ALIASES = {"game"}


def at(text: str, line: int = 3, col: int = 11) -> Span:
    return Span("s.fems", line, col, line, col + len(text))


def compile_ok(text: str, aliases: set[str] | None = ALIASES) -> tuple[str, list[tuple]]:
    diagnostics = Diagnostics()
    expr = compile_expression(text, at(text), diagnostics, aliases)
    assert expr is not None, [d.format() for d in diagnostics]
    assert not diagnostics.has_errors
    return expr.python, [(r.name, r.attr, r.span.col, r.span.end_col) for r in expr.reads]


@pytest.mark.parametrize(
    ("text", "python"),
    [
        ("alive", 'ctx["alive"]'),
        ("玩家1 > 0", 'ctx["玩家1"] > 0'),
        ("@speaker", 'ctx["@speaker"]'),
        ("@上帝 in alive", 'ctx["@上帝"] in ctx["alive"]'),
        ("@x.type == ai", 'ctx.attr("@x", "type") == "ai"'),
        ("type.@x == human", 'ctx.attr("@x", "type") == "human"'),
        ("hp.@x >= 100", 'ctx.attr("@x", "hp") >= 100'),
        ("@x.hp", 'ctx.attr("@x", "hp")'),
        ("alive.@m", 'ctx.attr("@m", "alive")'),
        ("votes[@x] != null", 'ctx["votes"][ctx["@x"]] != None'),
        ("finish == true and not false", 'ctx["finish"] == True and not False'),
        ("True or None", "True or None"),
        ("len(alive[1:]) > 2", 'len(ctx["alive"][1:]) > 2'),
        ("range(3)", "range(3)"),
        ("max(a, key=b)", 'max(ctx["a"], key=ctx["b"])'),
        ("game.is_over(alive)", 'ctx.code("game").is_over(ctx["alive"])'),
        ('"@a" + x', '"@a" + ctx["x"]'),
        ("[@a, @b]", '[ctx["@a"], ctx["@b"]]'),
        ("{@a: 1}", '{ctx["@a"]: 1}'),
        ("a  if  b else c", 'ctx["a"] if ctx["b"] else ctx["c"]'),
        ("x not in y", 'ctx["x"] not in ctx["y"]'),
        ("(x == 1)", 'ctx["x"] == 1'),
        ("(1, 2)", "(1, 2)"),
    ],
)
def test_rewrites_follow_the_naming_convention(text: str, python: str) -> None:
    result, _ = compile_ok(text)
    assert result.replace("'", '"') == python


def test_reads_point_at_the_users_characters() -> None:
    _, reads = compile_ok("hp.@x >= limit and votes[@y]")
    assert reads == [
        ("@x", "hp", 11, 16),
        ("limit", None, 20, 25),
        ("votes", None, 30, 35),
        ("@y", None, 36, 38),
    ]


def test_code_alias_is_not_a_read() -> None:
    _, reads = compile_ok("game.is_over(alive)")
    assert [r[0] for r in reads] == ["alive"]


def test_unknown_aliases_treat_dotted_calls_as_code() -> None:
    result, _ = compile_ok("util.f(x)", aliases=None)
    assert result == "ctx.code('util').f(ctx['x'])"


def test_in_chain_compared_with_boolean_is_rewritten_with_a_warning() -> None:
    diagnostics = Diagnostics()
    text = "@x in alive == false"
    expr = compile_expression(text, at(text), diagnostics)
    assert expr is not None
    assert expr.python == "(ctx['@x'] in ctx['alive']) == False"
    [warning] = list(diagnostics)
    assert warning.severity == "warning"
    assert warning.span.col == 11


@pytest.mark.parametrize(
    ("text", "message", "col"),
    [
        ("a && b", "'&&' is not an operator", 13),
        ("a || b", "'||' is not an operator", 13),
        ("x +", "invalid expression", 14),
        ("a b", "unexpected 'b'", 13),
        ("open(1)", "cannot call 'open'", 11),
        ("@x(1)", "cannot call '@x'", 11),
        ("[y for y in z]", "comprehensions", 14),
        ("lambda: 1", "lambdas are not allowed", 11),
        ("day.__class__", "'.__class__' is not allowed", 14),
        ('"".join(x)', "'.join' is not allowed", 13),
        ("hp[@a].real", "'.real' is not allowed", 17),
        ("alive.count(@a)", "cannot call 'alive.count'", 11),
        ("gmae.f(x)", "'gmae' is not a code: alias", 11),
        ("@a.@b", "one actor side", 11),
        ("1(2)", "not callable", 11),
        ("x is 1", "literal", 11),
        ("", "expected an expression", 11),
    ],
)
def test_errors_point_at_the_user_character(text: str, message: str, col: int) -> None:
    diagnostics = Diagnostics()
    assert compile_expression(text, at(text), diagnostics, ALIASES) is None
    errors = [d for d in diagnostics if d.severity == "error"]
    assert errors and message in errors[0].message
    assert errors[0].span.col == col


def test_and_and_error_hints_at_and() -> None:
    diagnostics = Diagnostics()
    compile_expression("a && b", at("a && b"), diagnostics)
    assert [d.hint for d in diagnostics] == ["use 'and' / 'or'"]


def test_multi_line_positions_map_to_later_lines() -> None:
    diagnostics = Diagnostics()
    text = "[1,\n      zz]"
    expr = compile_expression(text, at(text, line=5, col=9), diagnostics)
    assert expr is not None
    [read] = expr.reads
    assert (read.span.line, read.span.col) == (6, 7)


@pytest.mark.parametrize(
    ("text", "python"),
    [
        ("hello world", "'hello world'"),
        ("测试 剧本", "'测试 剧本'"),
        ('"酒馆"', '"酒馆"'),
        ("3", "3"),
        ("@Alice", "ctx['@Alice']"),
        ("hp[@x]", "ctx['hp'][ctx['@x']]"),
        ("if", "'if'"),
        ("1.5e3", "1.5e3"),
        ("[@a, 2]", "[ctx['@a'], 2]"),
    ],
)
def test_values_accept_bare_text(text: str, python: str) -> None:
    expr = compile_value(text, at(text), Diagnostics())
    assert expr is not None
    assert expr.python == python


def test_values_with_syntax_errors_are_reported() -> None:
    diagnostics = Diagnostics()
    assert compile_value("x +* (", at("x +* ("), diagnostics) is None
    assert diagnostics.has_errors


def test_strings_are_never_rebuilt_from_user_text() -> None:
    result, _ = compile_ok("x == 'it\\'s \"q\"'")
    assert eval(result.replace("ctx['x']", "1"), {}) is False  # the literal survived intact


def test_misspelled_alias_call_suggests_the_alias() -> None:
    diagnostics = Diagnostics()
    compile_expression("gmae.f(x)", at("gmae.f(x)"), diagnostics, ALIASES)
    assert [d.hint for d in diagnostics] == ["did you mean 'game'?"]


def test_a_python_keyword_as_a_name_gets_a_hint() -> None:
    diagnostics = Diagnostics()
    compile_expression("pass == true", at("pass == true"), diagnostics)
    assert [d.hint for d in diagnostics] == [
        "'pass' is a Python keyword: a variable used here needs another name"
    ]


@pytest.mark.parametrize("text", ["alive", "@speaker", "玩家1", "alive ", "@上帝", "true", "ai"])
def test_lone_names_compile_as_the_general_path_does(
    text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = compile_expression(text, at(text), Diagnostics())
    monkeypatch.setattr("fems2py.expressions._Compiler._lone_name", lambda self: None)
    assert compile_expression(text, at(text), Diagnostics()) == fast


# The stdlib fast path (fems2py/expressions.py's module docstring) must emit, read and report
# exactly what the parso walk does: each expression is compiled both ways and compared.

TRICKY = [
    "x ** 2",
    "2 ** len(x) ** 2",
    "(x)",
    "((x))",
    "( (x) )",
    "(a, b)",
    "((a, b))",
    "(a,)",
    "()",
    "  (  x   ==   1  )  ",
    "(a or b) and (c)",
    "(a) if b else c",
    "a . b",
    "x[1:2]",
    "x[::2]",
    "x[a:b:c]",
    "x[1, 2]",
    "{1: a, 'k': [b, {c}]}",
    "{**d}",
    "[a, *b]",
    "-x + ~y ^ z",
    "not (a or b)",
    "a < b <= c",
    "x is 1",
    "1if x else 2",
    "@x.role == 'wolf'",
    "role.@x",
    "role . @x",
    "@x.@y",
    "(@x).role",
    "@x.items[0]",
    "@x.f(1)",
    "@f(x)",
    "votes.@x + 1",
    "game.deal(players, 3)",
    "game.deal (players)",
    "game.table[0]",
    "game.a.b",
    "gmae.f(x)",
    "(game.f)(x)",
    "(len)(x)",
    "len(x)(y)",
    "len (alive) > 2 and @x.hp >= 1",
    "round(x, ndigits=2)",
    "sum(x for x in y)",
    "foo(x)",
    "x.y",
    '"a" "b"',
    "'it\\'s'",
    "r'raw\\d' + b'x'",
    "'''long'''",
    "f'{x}'",
    "x in alive == false",
    "x not in alive != TRUE",
    "x in alive == y",
    "TRUE or False and null == None",
    "ai == human",
    "...",
    "@玩家.hp > 0",
    "玩家 == '狼人' and '测试' in 名单",
    "ｘ + 1",
    "ｌｅｎ(x)",
    "a @ b",
    "await x",
    "lambda: 1",
    "(x := 1)",
    "a ==\n  b",
    "(a ==\n  @b.hp)",
    "(a ==\n    @玩家.hp)",
    "a \\\n + b",
    "day +",
    "x if y",
    "pass == true",
]


def _both_ways(
    text: str, span: Span, aliases: set[str] | None, monkeypatch: pytest.MonkeyPatch
) -> list[tuple]:
    results = []
    for fast in (True, False):
        with monkeypatch.context() as patch:
            if not fast:
                patch.setattr("fems2py.expressions._Compiler._emit_with_ast", lambda *_: None)
            diagnostics = Diagnostics()
            expr = compile_expression(text, span, diagnostics, aliases)
        results.append((expr, [(d.severity, d.message, d.span, d.hint) for d in diagnostics]))
    return results


@pytest.mark.parametrize("aliases", [None, ALIASES])
@pytest.mark.parametrize("text", TRICKY)
def test_the_fast_path_compiles_as_parso_does(
    text: str, aliases: set[str] | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast, parso = _both_ways(text, at(text), aliases, monkeypatch)
    assert fast == parso


def test_every_expression_of_the_repository_compiles_the_same_both_ways(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every condition, value and argument of the examples, goldens, error cases and docs."""
    from pathlib import Path

    from fems2py import expressions
    from fems2py.frontend import analyze_source

    seen: list[tuple[str, Span, set[str] | None]] = []
    compile_one = expressions._Compiler.compile

    def remember(self: expressions._Compiler) -> object:
        seen.append((self.text, self.span, self.code_aliases))
        return compile_one(self)

    root = Path(__file__).resolve().parent.parent
    scripts = [
        path
        for folder in ("examples", "golden", "tests", "docs")
        for path in sorted((root / folder).rglob("*.fems"))
    ]
    with monkeypatch.context() as patch:
        patch.setattr(expressions._Compiler, "compile", remember)
        for script in scripts:
            analyze_source(script.read_text(encoding="utf-8"), str(script), script.parent)
    assert len(scripts) > 100 and len(seen) > 300
    for text, span, aliases in seen:
        fast, parso = _both_ways(text, span, aliases, monkeypatch)
        assert fast == parso, text


@pytest.mark.parametrize("fast", [True, False])
def test_the_power_operator_after_a_name_compiles(
    fast: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """parso reads ``hp ** 2`` as a power whose first child is the name, not as the name's
    trailers (its walk used to crash on it)."""
    if not fast:
        monkeypatch.setattr("fems2py.expressions._Compiler._emit_with_ast", lambda *_: None)
    assert compile_ok("hp ** 2 > 10") == ("ctx['hp'] ** 2 > 10", [("hp", None, 11, 13)])


@pytest.mark.parametrize(
    ("text", "negated"),
    [("!tired", "tired"), ("! tired", "tired"), ("!@ann", "@ann")],
)
def test_a_bang_value_is_bare_text_with_a_warning(text: str, negated: str) -> None:
    """§9.6: ``done = !tired`` stores the string "!tired"; it says so and how to negate."""
    diagnostics = Diagnostics()
    expr = compile_value(text, at(text), diagnostics)
    assert expr is not None and expr.python == repr(text)
    (warning,) = list(diagnostics)
    assert warning.severity == "warning"
    assert warning.message == f"'{text}' is bare text, the string \"{text}\", not a negation"
    assert warning.hint == f"write 'not {negated}' to negate it, or \"{text}\" in quotes (§9.6)"
    assert warning.span == at(text)


@pytest.mark.parametrize("text", ["!important notice", "hello!", "wow"])
def test_other_bare_text_has_no_bang_warning(text: str) -> None:
    diagnostics = Diagnostics()
    assert compile_value(text, at(text), diagnostics) is not None
    assert list(diagnostics) == []


def test_an_assign_of_a_bang_value_warns_at_check(tmp_path: Path) -> None:
    source = (
        "vars:\n    done = false\n    tired = true\nactors:\n    ai @a\n"
        "action rest @assign:\n    out: done = !tired\nmainflow:\n    [START] -> rest -> [END]\n"
    )
    _, diagnostics = parse(source, "t.fems", tmp_path)
    assert [(d.severity, d.span.line, d.span.col, d.message) for d in diagnostics] == [
        ("warning", 7, 17, "'!tired' is bare text, the string \"!tired\", not a negation")
    ]
