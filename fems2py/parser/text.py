"""Text values (§1.5: bare, quoted, ``|`` blocks, ``file:"…"``) and value literals (§4.2)."""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Callable

from fems2py.kinds import FIELD_NAMES
from fems2py.lexer import (
    Token,
    TokenKind,
    block_text,
    comment_start,
    quote_end,
    text_indent,
    unquote,
)
from fems2py.nodes import (
    MAX_DEPTH,
    ActorValue,
    BoolValue,
    DictValue,
    ListValue,
    NullValue,
    NumberValue,
    PathRef,
    Placeholder,
    Span,
    StringValue,
    Text,
    Value,
)
from fems2py.parser.base import Abort, ParserBase
from fems2py.sources import SourceFileError, read_source_file

MAX_INT_DIGITS = 4000  # §10.3: the limit of any value, a script's literals included

_PATH = re.compile(r"^\s*(@?[^\W\d]\w*)(?:\.(@?[^\W\d]\w*))?(?:\[([^\[\]]+)\])?\s*$")
_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([^{}\n]*)\}")


INTEGER = re.compile(r"^-?\d+$")
LEADING_ZERO = re.compile(r"^-?0\d")  # 001, 01.5: written as ids are, so text (§4.2)
CLOSERS = {"[": "]", "(": ")", "{": "}"}


def _path_ref(match: re.Match[str], span: Span) -> PathRef:
    first, second = match.group(1), match.group(2)
    if second is not None and second.startswith("@") and not first.startswith("@"):
        return PathRef(second, span, attr=first)
    if second is not None and first.startswith("@"):
        return PathRef(first, span, attr=second)
    return PathRef(first, span)


def _max_depth(tokens: list[Token]) -> tuple[int, Token | None]:
    """The deepest bracket nesting of ``tokens`` and the first bracket opened that deep."""
    depth = deepest = 0
    deepest_at: Token | None = None
    for token in tokens:
        if token.text in CLOSERS:
            depth += 1
            if depth > deepest:
                deepest, deepest_at = depth, token
        elif token.text in (")", "]", "}"):
            depth -= 1
    return deepest, deepest_at


def bracket_depth(tokens: list[Token]) -> int:
    depth = 0
    for token in tokens:
        if token.text in CLOSERS:
            depth += 1
        elif token.text in (")", "]", "}"):
            depth -= 1
    return depth


def closing_bracket(tokens: list[Token], pos: int) -> int:
    """Index of the bracket closing ``tokens[pos]``, or -1."""
    depth = 0
    for i in range(pos, len(tokens)):
        if tokens[i].text in CLOSERS:
            depth += 1
        elif tokens[i].text in (")", "]", "}"):
            depth -= 1
            if depth == 0:
                return i
    return -1


def split_commas(tokens: list[Token]) -> list[list[Token]]:
    """Split at commas outside brackets; ``[]`` for no tokens."""
    if not tokens:
        return []
    pieces: list[list[Token]] = [[]]
    depth = 0
    for token in tokens:
        if token.text in CLOSERS:
            depth += 1
        elif token.text in (")", "]", "}"):
            depth -= 1
        if token.text == "," and depth == 0:
            pieces.append([])
        else:
            pieces[-1].append(token)
    return pieces


class TextParser(ParserBase):
    """Adds text values and value literals."""

    def parse_text_value(
        self,
        index: int,
        col: int,
        end: int,
        what: str,
        read_file: bool = True,
    ) -> StringValue:
        """A text value starting at column ``col`` of line ``index`` (its block ends at ``end``)."""
        return self.parse_text_located(index, col, end, what, read_file)[0]

    def parse_text_located(
        self, index: int, col: int, end: int, what: str, read_file: bool = True
    ) -> tuple[StringValue, Callable[[int], tuple[int, int]]]:
        """The text value and a map from offsets in it to (line, 1-based col) in the file."""
        line = self.lines[index]
        cut = comment_start(line.raw)
        raw = line.raw[col:cut]
        lead = len(raw) - len(raw.lstrip())
        text = raw.strip()
        start = col + lead
        span = self.span(line.number, start, start + len(text))
        has_body = any(not self.lines[sub].blank for sub in range(index + 1, end))
        if text in ("|", "｜") or (not text and has_body):
            if not text:
                self.warning(
                    f"indented text under '{what}' without '|'",
                    self.eol_span(index),
                    "end the line with '|' to start a text block",
                )
            return self.parse_block_text(index, end, what)
        if has_body:
            self.indented_under_value(index, end, what)
        if not text:
            comment = line.raw[cut:].strip()
            self.fail(
                f"expected a value after '{what}'",
                self.eol_span(index),
                f"'{comment[:1]}' after a space starts a comment; quote the value to keep it: "
                f'"{comment}"'
                if comment
                else None,
            )
        file_match = re.match(r"^file\s*[:：]\s*", text)
        if file_match and text[file_match.end() :][:1] in ('"', "'", "“"):
            return self.parse_file_text(text, file_match.end(), start, line.number, read_file)
        if file_match and file_match.end() < len(text) and " " not in text:
            path = text[file_match.end() :]
            if read_file:
                message = f"'{text}' is read as text, not as the file's content"
                hint = f'write file:"{path}" to read the file'
            else:  # meta database: a path, never read
                message = f"'{text}' is taken as a path named '{text}'"
                hint = f'write file:"{path}" (or {path}) for the database file {path}'
            self.warning(message, span, hint)
        if text[0] in "\"'“":
            closed_at = quote_end(text, 0)
            if closed_at == len(text):
                value = StringValue(unquote(text), "quoted", span)
                return value, lambda offset: (line.number, start + 2 + offset)
            if closed_at is None:
                self.fail("unterminated string", span, "close the quote")
        value = StringValue(text, "bare", span)
        return value, lambda offset: (line.number, start + 1 + offset)

    def indented_under_value(self, index: int, end: int, what: str) -> None:
        """Lines indented under a one-line value: most likely a field indented too deep, or a
        text block whose ``|`` was left out."""
        deeper = next(sub for sub in range(index + 1, end) if not self.lines[sub].blank)
        words = self.tokens(deeper)
        looks_like_field = len(words) > 1 and words[0].text in FIELD_NAMES and words[1].text == ":"
        self.error(
            f"unexpected indented line under '{what}'",
            self.line_span(deeper),
            f"indent '{words[0].text}:' like '{what}:'"
            if looks_like_field
            else "end the line with '|' to start a text block",
        )

    def parse_file_text(
        self, text: str, quote_at: int, start: int, number: int, read_file: bool
    ) -> tuple[StringValue, Callable[[int], tuple[int, int]]]:
        quoted = text[quote_at:]
        span = self.span(number, start, start + len(text))
        length = quote_end(quoted, 0)
        if length is None:
            self.fail("unterminated string", span, "close the quote of the path")
        if length != len(quoted):
            rest = quoted[length:]
            extra_at = start + quote_at + length + len(rest) - len(rest.lstrip())
            extra = self.span(number, extra_at, start + len(text))
            self.fail(
                f"unexpected text after file:{quoted[:length]}",
                extra,
                "a file value is only file:\"path\" (use a '|' block to write text)",
            )
        path = unquote(quoted)
        content = path
        if read_file:
            try:
                content = read_source_file(self.base_dir, path, self.files_root)[1].decode("utf-8")
            except SourceFileError as problem:
                self.error(f"file '{path}' {problem.reason}", span, problem.hint)
                content = ""
            except UnicodeDecodeError as error:
                message = f"file '{path}' is not valid UTF-8 (byte {error.start})"
                self.error(message, span, "save it with UTF-8 encoding")
                content = ""
        return StringValue(content, "file", span, path=path), lambda _offset: (number, start + 1)

    def parse_block_text(
        self, index: int, end: int, what: str
    ) -> tuple[StringValue, Callable[[int], tuple[int, int]]]:
        # Inside a block nothing is a comment (§1.3), so a ``# heading`` line belongs to the
        # text and a comment line that is not deeper than the ``|`` line ends it.
        holder = self.lines[index].indent
        block_end = index + 1
        for sub in range(index + 1, len(self.lines)):
            line = self.lines[sub]
            if line.raw.strip():
                if line.indent <= holder:
                    break
                block_end = sub + 1
        self.no_body(block_end - 1, end, f"'{what}: |'")
        body = self.lines[index + 1 : block_end]
        if not any(line.raw.strip() for line in body):
            self.claim_unindented_text(block_end)
            self.fail(
                f"expected the text of '{what}' on the lines after '|', indented deeper",
                self.eol_span(index),
                f"indent the text's lines deeper than '{what}'",
            )
        value = block_text(body)
        common = min(text_indent(line)[0] for line in body if line.raw.strip())
        starts = [0]
        for piece in value.split("\n"):
            starts.append(starts[-1] + len(piece) + 1)
        first = body[0]
        last_line = body[len(value.split("\n")) - 1]
        span = Span(self.path, first.number, common + 1, last_line.number, len(last_line.raw) + 1)

        def locate(offset: int) -> tuple[int, int]:
            row = min(bisect.bisect_right(starts, offset) - 1, len(body) - 1)
            return body[row].number, common + 1 + offset - starts[row]

        return StringValue(value, "block", span), locate

    def claim_unindented_text(self, start: int) -> None:
        """The guide writes ``key = |`` with the text at the key's own indentation. That is
        an error (§1.5), reported once: the text lines that follow (those that are not
        ``name = …`` / ``name: …``) are skipped instead of each failing as a key."""
        indent = self.lines[start].indent if start < len(self.lines) else 0
        for sub in range(start, len(self.lines)):
            line = self.lines[sub]
            if line.blank:
                continue
            tokens = self.tokens(sub)
            if line.indent != indent or (len(tokens) > 1 and tokens[1].text in ("=", ":")):
                return
            self.claimed.add(sub)

    def parse_text_field(self, index: int, col: int, end: int, what: str) -> Text:
        """A prompt-like text with its ``{path}`` placeholders (§9.4)."""
        value, locate = self.parse_text_located(index, col, end, what)
        placeholders = []
        for match in _PLACEHOLDER.finditer(value.value):
            inner = match.group(1)
            path = _PATH.match(inner) if inner is not None else None
            if inner is None or path is None:
                continue
            if value.style == "file":
                span = value.span  # the text lives in another file: point at file:"…"
            else:
                line, first_col = locate(match.start())
                span = Span(self.path, line, first_col, line, first_col + len(match.group()))
            placeholders.append(Placeholder(inner.strip(), _path_ref(path, span), span))
        return Text(value, tuple(placeholders))

    def parse_value_field(
        self, index: int, col: int, end: int, what: str, owner: bool = False
    ) -> Value:
        """A ``vars:``/``meta:`` value: literal, bare text, ``file:``, ``|`` block or a bracketed
        literal continued on the following lines."""
        line = self.lines[index]
        rest = line.code()[col:].strip()
        if rest in ("|",) or rest.startswith("file") or not rest:
            return self.parse_text_value(index, col, end, what)
        tokens = self.tokens(index, start=col)
        sub = self.continue_open_brackets(tokens, index + 1, end)
        if sub < end:
            self.no_body(sub - 1, end, f"'{what}'")
        return self.parse_value(tokens, owner=owner)

    def continue_open_brackets(self, tokens: list[Token], sub: int, end: int) -> int:
        """Append to ``tokens`` the lines from ``sub`` on while a bracket of them stays open
        (a value continued on the following lines); return the first line not taken. The
        depth is counted per line added, not again over all the tokens."""
        depth = bracket_depth(tokens)
        while depth > 0 and sub < end:
            if not self.lines[sub].blank:
                more = self.tokens(sub)
                tokens += more
                depth += bracket_depth(more)
            sub += 1
        return sub

    def parse_value(self, tokens: list[Token], owner: bool = False) -> Value:
        """A whole value from its tokens; anything that is not a literal is bare text."""
        if not tokens:
            raise Abort
        deepest, opener = _max_depth(tokens)
        if deepest > MAX_DEPTH and opener is not None:
            self.fail(
                f"lists and dicts nest {deepest} levels deep here; at most {MAX_DEPTH} are allowed",
                self.tok_span(opener),
                "flatten the value, or build it in a code: function (§5)",
            )
        if tokens[0].text in ("[", "{"):
            close = closing_bracket(tokens, 0)
            if close < 0:
                self.fail(f"'{tokens[0].text}' is never closed", self.tok_span(tokens[0]))
            if close == len(tokens) - 1:
                return self.parse_literal(tokens, 0, owner)[0]
        if len(tokens) == 1:
            return self.scalar(tokens[0], owner)
        return self.bare(tokens)

    def bare(self, tokens: list[Token]) -> StringValue:
        first, last = tokens[0], tokens[-1]
        if first.line == last.line:
            text = self.lines[first.line - 1].raw[first.col : last.end]
        else:
            text = " ".join(token.text for token in tokens)
        return StringValue(text.strip(), "bare", self.tok_span(first, last))

    def scalar(self, token: Token, owner: bool = False) -> Value:
        span = self.tok_span(token)
        if token.kind == TokenKind.STRING:
            if quote_end(token.text, 0) != len(token.text):  # it ran to the end of the line
                self.fail("unterminated string", span, "close the quote")
            return StringValue(token.value, "quoted", span)
        if token.kind == TokenKind.NUMBER:
            if owner or LEADING_ZERO.match(token.text):
                return StringValue(token.text, "bare", span)
            if INTEGER.match(token.text):
                if len(token.text.lstrip("-")) > MAX_INT_DIGITS:
                    self.fail(f"an integer of more than {MAX_INT_DIGITS:,} digits", span)
                return NumberValue(int(token.text), span)
            number = float(token.text)
            if not math.isfinite(number):
                self.fail(f"{token.text[:40]} is too large to be a finite number", span)
            return NumberValue(number, span)
        if token.kind == TokenKind.ACTOR:
            if token.text == "@":
                self.fail("expected an actor name after '@'", span)
            return ActorValue(token.text, span)
        if token.text.lower() in ("true", "false"):  # any case: TRUE, False (§4.2, §12.2)
            return BoolValue(token.text.lower() == "true", span)
        if token.text in ("null", "None"):
            return NullValue(span)
        return StringValue(token.text, "bare", span)

    def bracketed(self, tokens: list[Token], pos: int) -> tuple[list[list[Token]], int]:
        """The comma-separated pieces inside the bracket opened at ``tokens[pos]`` and the index
        of the bracket closing it; an error when it is never closed."""
        close = closing_bracket(tokens, pos)
        if close < 0:
            self.fail(f"'{tokens[pos].text}' is never closed", self.tok_span(tokens[pos]))
        return split_commas(tokens[pos + 1 : close]), close

    def parse_literal(
        self, tokens: list[Token], pos: int, owner: bool = False
    ) -> tuple[Value, int]:
        """A list or dict literal at ``tokens[pos]``; returns it and the position after it."""
        opener = tokens[pos]
        pieces, close = self.bracketed(tokens, pos)
        items: list[Value] = []
        pairs: list[tuple[Value, Value]] = []
        if len(pieces) > 1 and not pieces[-1]:
            pieces.pop()  # a trailing comma, as in Python
        for piece in pieces:
            if not piece:
                self.fail("empty item in a literal", self.tok_span(opener, tokens[close]))
            if opener.text == "{":
                colon = next(
                    (
                        i
                        for i, tok in enumerate(piece)
                        if tok.text == ":" and bracket_depth(piece[:i]) == 0
                    ),
                    -1,
                )
                if colon <= 0 or colon == len(piece) - 1:
                    self.fail(
                        "expected 'key: value' in a dict",
                        self.tok_span(piece[0], piece[-1]),
                    )
                pairs.append(
                    (self.item(piece[:colon], owner), self.item(piece[colon + 1 :], owner))
                )
            else:
                items.append(self.item(piece, owner))
        span = self.tok_span(opener, tokens[close])
        if opener.text == "{":
            return DictValue(tuple(pairs), span), close + 1
        return ListValue(tuple(items), span), close + 1

    def item(self, piece: list[Token], owner: bool = False) -> Value:
        if piece[0].text in ("[", "{") and closing_bracket(piece, 0) == len(piece) - 1:
            return self.parse_literal(piece, 0, owner)[0]
        if len(piece) == 1:
            return self.scalar(piece[0], owner)
        return self.bare(piece)
