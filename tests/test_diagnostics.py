"""How a diagnostic is printed: location, source excerpt, caret under the mistake, hint."""

from __future__ import annotations

import pytest

from fems2py.diagnostics import EXCERPT_WIDTH, Diagnostic, suggest
from fems2py.nodes import Span


def _printed(source: str, line: int, col: int, end_col: int, hint: str | None = None) -> str:
    span = Span("t.fems", line, col, line, end_col)
    return Diagnostic("error", "undeclared variable 'x'", span, hint).format(source)


def test_caret_under_the_span_with_hint():
    text = _printed("vars:\n    a = b + c\n", 2, 13, 14, "did you mean 'a'?")
    assert text.splitlines() == [
        "t.fems:2:13: error: undeclared variable 'x'",
        "    2 |     a = b + c",
        "      |             ^",
        "hint: did you mean 'a'?",
    ]


@pytest.mark.parametrize(
    ("line", "col", "end_col", "caret"),
    [
        ("    prompt: 你好 {名字}", 17, 19, "                  ^^^^"),  # after two wide chars
        ("    【START】 -> x", 5, 12, "    ^^^^^^^^^"),  # full-width brackets are wide too
        ("\t-> if (x) -> [A]", 8, 9, "       ^"),  # a tab is one character, one column here
    ],
)
def test_caret_is_placed_by_display_width(line, col, end_col, caret):
    assert _printed(line + "\n", 1, col, end_col).splitlines()[2] == "      | " + caret


def test_a_long_line_is_cut_around_the_mistake():
    source = "x = " + "a + " * 5000 + "oops + " + "b + " * 5000 + "c\n"
    col = source.index("oops") + 1
    shown, marks = _printed(source, 1, col, col + 4).splitlines()[1:3]
    body = shown.split("| ", 1)[1]
    assert body.startswith("…") and body.endswith("…")
    assert len(body) <= EXCERPT_WIDTH + 2
    assert body[marks.index("^") - len("      | ")] == "o"
    assert marks.endswith("^^^^")


def test_lines_are_counted_like_the_lexer():
    # a form feed is not a line end in FEM (§1.1), so line 2 is still the second \n line
    text = _printed("a\x0cb\nc = d\n", 2, 5, 6)
    assert text.splitlines()[1] == "    2 | c = d"


def test_suggest_finds_close_names_only():
    assert suggest("scroe", ["score", "day"]) == "did you mean 'score'?"
    assert suggest("zzz", ["score", "day"]) is None
