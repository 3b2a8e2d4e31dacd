"""Lines, indentation, comments, Chinese punctuation and value literals of FEM (§1, §4.2).

The lexer never shifts a column: Chinese punctuation is replaced one character for one and
``--`` by ``->`` two for two, so every index into a normalized line is also an index into the
user's own line and every diagnostic points at the character the user typed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from functools import cached_property

TAB_WIDTH = 4

_PUNCTUATION = str.maketrans(
    {
        "：": ":",
        "，": ",",
        "“": '"',
        "”": '"',
        "（": "(",
        "）": ")",
        "【": "[",
        "】": "]",
        "｜": "|",
    }
)
_OPEN_QUOTES = {'"': '"', "'": "'", "“": "”"}
_FSTRING_PREFIX = re.compile(r"(?<!\w)(?:[fF][rR]?|[rR][fF])$")


@dataclass(frozen=True)
class SourceLine:
    """One physical line: ``raw`` is as written (no newline), ``indent`` its width (§1.2)."""

    number: int
    raw: str
    indent: int
    start: int
    uses_tabs: bool
    uses_spaces: bool
    uses_wide_spaces: bool = False

    @cached_property
    def blank(self) -> bool:
        """Empty or comment-only: such lines never open or close a block."""
        return not self._uncommented.strip()

    def code(self, flow: bool = False) -> str:
        """The line normalized (§1.4) with its comment removed, same columns as ``raw``."""
        return self._flow_code if flow else self._code

    # The parser asks for the same line many times (ownership, tokens, spans): each form is
    # computed once per line.
    @cached_property
    def _uncommented(self) -> str:
        return self.raw[: comment_start(self.raw)]

    @cached_property
    def _code(self) -> str:
        return normalize(self._uncommented).rstrip()

    @cached_property
    def _flow_code(self) -> str:
        return normalize(self._uncommented, flow=True).rstrip()


def split_lines(source: str) -> list[SourceLine]:
    """Split ``source`` into lines (``\\r\\n`` or ``\\n``) and measure their indentation."""
    lines = []
    # A byte order mark (Windows editors write one) is not part of the first line.
    text = source.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    for number, raw in enumerate(text.split("\n"), start=1):
        width = 0
        start = 0
        for ch in raw:
            if ch == " ":
                width += 1
            elif ch == "\t":
                width = (width // TAB_WIDTH + 1) * TAB_WIDTH
            elif ch == "\u3000":  # a full-width space, typed by Chinese input methods
                width += 2
            else:
                break
            start += 1
        leading = raw[:start]
        lines.append(
            SourceLine(
                number, raw, width, start, "\t" in leading, " " in leading, "\u3000" in leading
            )
        )
    return lines


def opens_quote(text: str, index: int) -> bool:
    """Whether ``text[index]`` opens a quoted string; an apostrophe inside a word
    (``don't``) does not, unless the word is an f-string prefix and the quote closes
    (``f'{x}'``, which the expression checker then rejects as an f-string)."""
    ch = text[index]
    if ch == "'" and index > 0:
        before = text[index - 1]
        if before.isalnum() or before == "_":
            prefixed = _FSTRING_PREFIX.search(text, 0, index) is not None
            return prefixed and quote_end(text, index) is not None
        return True
    return ch in _OPEN_QUOTES


def _quote_end(text: str, start: int) -> int:
    """Like :func:`quote_end`, with an unclosed string running to the end of ``text``."""
    end = quote_end(text, start)
    return len(text) if end is None else end


def quote_end(text: str, start: int) -> int | None:
    """Index just past the quoted string opening at ``start``, or None when it is not closed."""
    opener = text[start]
    closers = {_OPEN_QUOTES[opener], '"'} if opener == "“" else {_OPEN_QUOTES[opener]}
    if opener == '"':
        closers.add("”")
    i = start + 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] in closers:
            return i + 1
        i += 1
    return None


_COMMENT_OR_QUOTE = re.compile("[#/\"'“]")


def comment_start(text: str) -> int:
    """Where a ``#``/``//`` comment starts (§1.3), or ``len(text)``; quotes are respected."""
    match = _COMMENT_OR_QUOTE.search(text)
    while match is not None:
        i = match.start()
        if opens_quote(text, i):
            match = _COMMENT_OR_QUOTE.search(text, _quote_end(text, i))
            continue
        if (text[i] == "#" or text.startswith("//", i)) and (i == 0 or text[i - 1] in " \t\u3000"):
            return i
        match = _COMMENT_OR_QUOTE.search(text, i + 1)
    return len(text)


_NEEDS_NORMALIZING = re.compile("[：，“”（）【】｜]|--")


def normalize(text: str, flow: bool = False) -> str:
    """Map Chinese punctuation to ASCII outside quotes (§1.4); in flow lines ``--`` → ``->``
    outside quotes and parentheses (so ``x--1`` inside a condition stays Python)."""
    if _NEEDS_NORMALIZING.search(text) is None:
        return text
    out: list[str] = []
    depth = 0
    i = 0
    while i < len(text):
        ch = text[i]
        if opens_quote(text, i):
            end = _quote_end(text, i)
            segment = list(text[i:end])
            if segment[0] == "“":
                segment[0] = '"'
            if len(segment) >= 2 and segment[-1] == "”" and segment[-2] != "\\":
                segment[-1] = '"'
            out.extend(segment)
            i = end
            continue
        mapped = ch.translate(_PUNCTUATION)
        if mapped == "(":
            depth += 1
        elif mapped == ")":
            depth = max(0, depth - 1)
        if flow and depth == 0 and text.startswith("--", i) and not text.startswith("-->", i):
            out.append("->")
            i += 2
            continue
        out.append(mapped)
        i += 1
    return "".join(out)


# --------------------------------------------------------------------------- tokens


class TokenKind(StrEnum):
    """What a token is; each value is also the name of its group in the token pattern."""

    NAME = "name"
    ACTOR = "actor"  # ``@name``, or a lone ``@``
    NUMBER = "number"
    STRING = "string"  # quoted, ``value`` holding its content
    OP = "op"
    OTHER = "other"  # a character no other kind takes, or digits run into letters


_GROUP_KINDS = {kind.value: kind for kind in TokenKind}


@dataclass(slots=True)
class Token:
    """A token of a syntax line; ``col`` is 0-based in the line, ``end`` one past the end.

    Never changed once made, but not a frozen dataclass: a frozen one sets each field through
    ``object.__setattr__``, which made making the tokens of a script half of tokenizing it."""

    kind: TokenKind
    text: str
    line: int
    col: int
    end: int
    value: str = ""


_TOKEN = re.compile(
    r"""
    (?P<actor>@[^\W]\w*|@)
  | (?P<number>-?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?(?![\w]))
  | (?P<other>\d\w*)  # digits run into letters (``9code``): one token, not one per digit
  | (?P<name>[^\W\d]\w*)
  | (?P<op>->|\+=|-=|==|!=|<=|>=|&&|\|\||[\[\](){}:,=+\-&.?|<>*/%!;])
    """,
    re.VERBOSE,
)
_OPERANDS = (TokenKind.NAME, TokenKind.NUMBER, TokenKind.ACTOR)  # a ``-`` after one subtracts
_ESCAPES = {"n": "\n", "t": "\t", '"': '"', "'": "'", "\\": "\\", "”": "”", "“": "“"}


def unquote(text: str) -> str:
    """The content of a quoted string (``"…"``, ``'…'``, ``“…”``) with §1.5 escapes applied."""
    closed = len(text) >= 2 and _quote_end(text, 0) == len(text) and text[-1] in "\"'”"
    inner = text[1:-1] if closed else text[1:]
    out = []
    i = 0
    while i < len(inner):
        ch = inner[i]
        if ch == "\\" and i + 1 < len(inner):
            nxt = inner[i + 1]
            out.append(_ESCAPES.get(nxt, "\\" + nxt))
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def tokenize(text: str, line: int, start: int = 0, end: int | None = None) -> list[Token]:
    """Tokens of ``text[start:end]`` (a normalized line); whitespace is skipped."""
    stop = len(text) if end is None else end
    tokens: list[Token] = []
    i = start
    while i < stop:
        ch = text[i]
        if ch.isspace():
            i += 1
            continue
        if ch in _OPEN_QUOTES and opens_quote(text, i):
            j = min(_quote_end(text, i), stop)
            raw = text[i:j]
            tokens.append(Token(TokenKind.STRING, raw, line, i, j, unquote(raw)))
            i = j
            continue
        match = _TOKEN.match(text, i, stop)
        if match is None:
            tokens.append(Token(TokenKind.OTHER, ch, line, i, i + 1))
            i += 1
            continue
        kind = _GROUP_KINDS[match.lastgroup or "other"]
        if (
            kind is TokenKind.NUMBER
            and ch == "-"
            and tokens
            and (tokens[-1].kind in _OPERANDS or tokens[-1].text in ")]}")
        ):
            # ``a-1`` is an operator and a number, not a name followed by ``-1``.
            tokens.append(Token(TokenKind.OP, "-", line, i, i + 1))
            i += 1
            continue
        tokens.append(Token(kind, match.group(), line, i, match.end()))
        i = match.end()
    return tokens


def text_indent(line: SourceLine) -> tuple[int, int]:
    """Width and length of a text line's leading spaces and tabs. Inside a ``|`` block a
    full-width space is text (Chinese paragraphs start with two), not indentation."""
    width = 0
    for count, ch in enumerate(line.raw):
        if ch == " ":
            width += 1
        elif ch == "\t":
            width = (width // TAB_WIDTH + 1) * TAB_WIDTH
        else:
            return width, count
    return width, len(line.raw)


def block_text(lines: list[SourceLine]) -> str:
    """A ``|`` block (§1.5): dedented by the common indentation, blank lines kept, verbatim."""
    indents = [text_indent(line) for line in lines]
    widths = [width for (width, _), line in zip(indents, lines, strict=True) if line.raw.strip()]
    common = min(widths) if widths else 0
    out = []
    for line, (width, start) in zip(lines, indents, strict=True):
        expanded = " " * width + line.raw[start:]
        out.append(expanded[common:].rstrip() if expanded.strip() else "")
    while out and not out[-1]:
        out.pop()
    return "\n".join(out)
