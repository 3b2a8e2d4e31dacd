"""A Pygments lexer for FEM scripts, so the site highlights ```fems blocks (§1–§12).

It colours what a reader scans for — block headers, action kinds, actors, nodes, arrows,
placeholders, signals, comments and strings — and leaves prompt text plain. It is a
highlighter, not a parser: `fems2py check` is what knows the language.
"""

from __future__ import annotations

from pygments.lexer import RegexLexer, bygroups, words
from pygments.token import (
    Comment,
    Keyword,
    Name,
    Number,
    Operator,
    Punctuation,
    String,
    Text,
    Whitespace,
)

__all__ = ["FemsLexer"]

IDENTIFIER = r"[^\W\d]\w*"


class FemsLexer(RegexLexer):
    """FEM scripts: the multi-agent workflow language fems2py compiles."""

    name = "FEM"
    aliases = ["fems", "fem"]
    filenames = ["*.fems"]
    mimetypes = ["text/x-fems"]

    tokens = {
        "root": [
            (r"\n", Whitespace),
            # comments: at the start of a line or after whitespace (§1.3)
            (r"(?<![^\s])(#|//).*?$", Comment.Single),
            (
                r"(SET\s*VARIABLE|设定变量|设置变量)(\s*[:：])",
                bygroups(Keyword.Pseudo, Punctuation),
            ),
            (r"<<|>>|《《|》》|《|》|〈|〉", Punctuation),
            (
                r"^([ \t]*)(meta|vars|code|actors|mainflow|flow|sketch|in|out|fork|join)(\s*[:：(])",
                bygroups(Whitespace, Keyword, Punctuation),
            ),
            (
                rf"^([ \t]*)(action|module|memory|context|blueprint)(\s+)({IDENTIFIER})",
                bygroups(Whitespace, Keyword.Declaration, Whitespace, Name.Function),
            ),
            (r"^([ \t]*)(ai|human)([ \t]+)", bygroups(Whitespace, Keyword.Type, Whitespace)),
            (
                rf"^([ \t]*)({IDENTIFIER})([ \t]*[:：])",
                bygroups(Whitespace, Name.Attribute, Punctuation),
            ),
            (r"[ \t]+", Whitespace),
            (r"@(ai|human|mind|assign|func)\b", Keyword.Type),
            (
                words(
                    ("for", "par", "if", "in", "not", "and", "or", "as", "to", "all", "any"),
                    suffix=r"\b",
                ),
                Keyword,
            ),
            (
                words(
                    ("true", "false", "True", "False", "TRUE", "FALSE", "null", "None"),
                    suffix=r"\b",
                ),
                Keyword.Constant,
            ),
            (r"[\[【](START|END|IN|OUT|BREAK)[\]】]", Name.Builtin),
            (rf"[\[【]{IDENTIFIER}[\]】]", Name.Label),
            (r"@\w+", Name.Variable.Class),
            (rf"&{IDENTIFIER}", Name.Function),
            (r"\{\{|\}\}|\{[@\w.\[\]]+\}", String.Interpol),
            (r'"(\\\\|\\"|[^"])*"|\'(\\\\|\\\'|[^\'])*\'|“[^”]*”', String),
            (r"-?\d+(\.\d+)?([eE][-+]?\d+)?\b", Number),
            (r"->|--|\+=|-=|==|!=|<=|>=|[=<>+\-*/|｜]", Operator),
            (r"[:：,，()（）\[\]{}.]", Punctuation),
            (r"\w+", Text),
            (r".", Text),
        ],
    }
