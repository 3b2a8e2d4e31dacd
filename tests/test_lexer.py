"""Lexer: lines, indentation, comments, Chinese punctuation, tokens and text blocks (§1)."""

from __future__ import annotations

import pytest

from fems2py.lexer import (
    block_text,
    comment_start,
    normalize,
    split_lines,
    tokenize,
    unquote,
)


@pytest.mark.parametrize(
    ("source", "raws"),
    [
        ("a\nb", ["a", "b"]),
        ("a\r\nb\r\n", ["a", "b", ""]),
        ("a\rb", ["a", "b"]),
    ],
)
def test_split_lines_accepts_both_line_ends(source: str, raws: list[str]) -> None:
    assert [line.raw for line in split_lines(source)] == raws


@pytest.mark.parametrize(
    ("raw", "indent", "tabs", "spaces"),
    [
        ("    x", 4, False, True),
        ("  x", 2, False, True),
        ("\tx", 4, True, False),
        ("  \tx", 4, True, True),
        ("\t  x", 6, True, True),
        ("x", 0, False, False),
    ],
)
def test_indentation_width(raw: str, indent: int, tabs: bool, spaces: bool) -> None:
    line = split_lines(raw)[0]
    assert (line.indent, line.uses_tabs, line.uses_spaces) == (indent, tabs, spaces)


@pytest.mark.parametrize(
    ("text", "start"),
    [
        ("a # c", 2),
        ("# whole line", 0),
        ("a // c", 2),
        ("url = http://x", 14),
        ("a#b", 3),
        ('"a # b" # c', 8),
        ("“a // b” // c", 9),
        ("a\t# tab", 2),
        ("don't panic # note", 12),
        ("x = 'it # is' # c", 14),
    ],
)
def test_comment_start(text: str, start: int) -> None:
    assert comment_start(text) == start


@pytest.mark.parametrize(
    ("text", "flow", "expected"),
    [
        ("scope：【@a，@b】", False, "scope:[@a,@b]"),
        ("prompt：“你好，世界”", False, 'prompt:"你好，世界"'),
        ("（x）｜", False, "(x)|"),
        ("[A] -- b -- [C]", True, "[A] -> b -> [C]"),
        ("[A] -- b", False, "[A] -- b"),
        ("-> if (x--1) -- [B]", True, "-> if (x--1) -> [B]"),
        ('"a--b" -- [B]', True, '"a--b" -> [B]'),
    ],
)
def test_normalize_keeps_columns(text: str, flow: bool, expected: str) -> None:
    result = normalize(text, flow)
    assert result == expected
    assert len(result) == len(text)


def test_source_line_code_strips_comment_and_normalizes() -> None:
    line = split_lines("  scope：[@a]  # who")[0]
    assert line.code() == "  scope:[@a]"
    assert split_lines("   # only a comment")[0].blank


@pytest.mark.parametrize(
    ("text", "kinds"),
    [
        (
            "[A]:x -> &M(a)",
            ["op", "name", "op", "op", "name", "op", "op", "name", "op", "name", "op"],
        ),
        ("@上帝 玩家1, -2 1.5e3", ["actor", "name", "op", "number", "number"]),
        ("a-1", ["name", "op", "number"]),
        ('"a\\"b" x', ["string", "name"]),
    ],
)
def test_tokenize_kinds(text: str, kinds: list[str]) -> None:
    assert [token.kind for token in tokenize(text, 1)] == kinds


def test_tokens_carry_columns() -> None:
    tokens = tokenize("  [A] -> b", 7)
    assert [(t.text, t.line, t.col, t.end) for t in tokens] == [
        ("[", 7, 2, 3),
        ("A", 7, 3, 4),
        ("]", 7, 4, 5),
        ("->", 7, 6, 8),
        ("b", 7, 9, 10),
    ]


@pytest.mark.parametrize(
    ("quoted", "value"),
    [
        ('"a\\"b"', 'a"b'),
        ("'x\\ny'", "x\ny"),
        ('"t\\tz\\\\"', "t\tz\\"),
        ("“中文”", "中文"),
        ('"unterminated', "unterminated"),
    ],
)
def test_unquote_applies_escapes(quoted: str, value: str) -> None:
    assert unquote(quoted) == value


def test_block_text_dedents_and_keeps_blank_lines() -> None:
    lines = split_lines("      # Title\n\n        indented http://x\n      end\n\n")
    assert block_text(lines) == "# Title\n\n  indented http://x\nend"


def test_block_text_expands_only_leading_tabs() -> None:
    lines = split_lines("\ta\tb\n\t  c")
    assert block_text(lines) == "a\tb\n  c"


def test_a_byte_order_mark_is_not_part_of_the_first_line() -> None:
    assert [line.raw for line in split_lines("\ufeffvars:\n  x = 1")] == ["vars:", "  x = 1"]


def test_full_width_spaces_indent_by_two_columns() -> None:
    [line] = split_lines("\u3000\u3000x = 1")
    assert (line.indent, line.start, line.uses_wide_spaces) == (4, 2, True)


def test_full_width_spaces_in_a_text_block_are_text() -> None:
    lines = split_lines("    \u3000\u3000第一段。\n    第二段。\n    \u3000\u3000第三段。")
    assert block_text(lines) == "\u3000\u3000第一段。\n第二段。\n\u3000\u3000第三段。"
    every = split_lines("    \u3000\u3000一。\n    \u3000\u3000二。")
    assert block_text(every) == "\u3000\u3000一。\n\u3000\u3000二。"
