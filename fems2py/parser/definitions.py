"""The ``meta:``, ``vars:``, ``code:`` and ``sketch:`` blocks (§3, §4, §5) and names."""

from __future__ import annotations

import keyword
import re

from fems_runtime.words import RESERVED_NODE_NAMES

from fems2py.expressions import not_a_variable_here
from fems2py.lexer import Token, TokenKind
from fems2py.nodes import CodeAlias, FuncRef, MetaEntry, Value, VarDecl
from fems2py.parser.base import Abort, Definitions
from fems2py.parser.text import TextParser

RESERVED = frozenset(
    [
        "meta",
        "vars",
        "code",
        "actors",
        "action",
        "module",
        "flow",
        "mainflow",
        "memory",
        "context",
        "sketch",
        "fork",
        "join",
        "for",
        "par",
        "to",
        "if",
        "in",
        "all",
        "any",
        *RESERVED_NODE_NAMES,
    ]
)
TEXT_META_KEYS = frozenset({"name", "version", "id", "system_safety", "output_style"})


_NOT_NAME = re.compile(r"[^\w@]+")


class DefinitionsParser(TextParser):
    """Adds the ``meta:``, ``vars:``, ``code:`` and ``sketch:`` blocks."""

    def split_key(self, index: int, seps: tuple[str, ...]) -> tuple[Token, int]:
        """``key = value`` (or ``key: value``): the key token and the column after the separator."""
        tokens = self.tokens(index)
        key = tokens[0]
        if (
            key.kind not in (TokenKind.NAME, TokenKind.ACTOR)
            or len(tokens) < 2
            or tokens[1].text not in seps
        ):
            sep = next((i for i, token in enumerate(tokens) if token.text in seps), None)
            if sep is not None and sep > 0 and tokens[0].text not in ("[", "{", "-", "->"):
                written = self.lines[index].raw[key.col : tokens[sep - 1].end]
                example = _NOT_NAME.sub("_", written).lstrip("_0123456789") or "name"
                self.fail(
                    f"'{written}' is not a name",
                    self.tok_span(key, tokens[sep - 1]),
                    "names are letters, digits and '_', not starting with a digit (§1.6), "
                    f"e.g. {example}",
                )
            expected = " or ".join(f"'{sep}'" for sep in seps)
            at = (
                tokens[1]
                if len(tokens) > 1 and key.kind in (TokenKind.NAME, TokenKind.ACTOR)
                else key
            )
            self.fail(
                f"expected 'name {seps[0]} value' here, found '{at.text}'",
                self.tok_span(at),
                f"write the name, then {expected}, then the value",
            )
        return key, tokens[1].end

    def parse_meta_block(self, index: int, end: int, defs: Definitions) -> None:
        for item, item_end in self.items(index + 1, end):
            try:
                key, col = self.split_key(item, ("=", ":"))
                if key.text in TEXT_META_KEYS:
                    value: Value = self.parse_text_value(item, col, item_end, key.text)
                elif key.text == "database":
                    # A path to open at run time, not text to embed (§3): never read here.
                    value = self.parse_text_value(item, col, item_end, key.text, read_file=False)
                else:
                    value = self.parse_value_field(
                        item, col, item_end, key.text, owner=key.text == "owner"
                    )
                span = self.span(key.line, key.col, len(self.lines[item].code()))
                defs.meta.append(MetaEntry(key.text, value, span))
            except Abort:
                continue

    def parse_vars_block(self, index: int, end: int, defs: Definitions) -> None:
        for item, item_end in self.items(index + 1, end):
            try:
                key, col = self.split_key(item, ("=",))
                self.check_name(key, "variable", allow_all=True)
                value = self.parse_value_field(item, col, item_end, key.text)
                span = self.span(key.line, key.col, len(self.lines[item].code()))
                defs.variables.append(VarDecl(key.text, value, span))
            except Abort:
                self.note_broken(self.tokens(item)[0])

    def note_broken(self, token: Token, actor: bool = False) -> None:
        """Remember the name a broken definition was about to define (see Script.broken_names)."""
        if token.kind == TokenKind.NAME:
            self.broken_names.add("@" + token.text if actor else token.text)
        elif token.kind == TokenKind.ACTOR and token.text != "@":
            self.broken_names.add(token.text)

    def check_name(self, token: Token, what: str, allow_all: bool = False) -> None:
        """§2.3: reserved words are not names."""
        if token.text in RESERVED and not (allow_all and token.text == "all"):
            article = "an" if what[0] in "aeiou" else "a"
            self.error(
                f"'{token.text}' is reserved and cannot name {article} {what}",
                self.tok_span(token),
            )

    def check_readable(self, token: Token, what: str) -> None:
        """§4.1: a parameter or loop variable named like a literal, a type word or a Python
        keyword (``true``, ``None``, ``human``, ``class``) could never be read by a condition."""
        read_as = not_a_variable_here(token.text)
        if read_as is not None and token.text not in RESERVED:  # check_name reports those
            self.error(
                f"'{token.text}' cannot name a {what}: a condition reads it as {read_as}",
                self.tok_span(token),
                f"choose another name, e.g. my_{token.text} (§12.2)",
            )

    def parse_code_block(self, index: int, end: int, defs: Definitions) -> None:
        for item, item_end in self.items(index + 1, end):
            try:
                key, col = self.split_key(item, ("=",))
                if key.kind != TokenKind.NAME:
                    self.fail("a code alias is an identifier", self.tok_span(key))
                self.check_name(key, "code alias")
                if keyword.iskeyword(key.text):  # True, None, class: Python's own, never a name
                    self.error(
                        f"'{key.text}' cannot name a code alias: an expression reads it as the "
                        f"Python keyword '{key.text}'",
                        self.tok_span(key),
                        f"choose another name, e.g. my_{key.text.lower()} (§12.2)",
                    )
                value = self.parse_text_value(item, col, item_end, key.text, read_file=False)
                if value.style != "file" or value.path is None:
                    self.fail(
                        f"expected file:\"path.py\" for code alias '{key.text}'",
                        value.span,
                        'write alias = file:"utils/game.py"',
                    )
                defs.code.append(CodeAlias(key.text, value.path, self.line_span(item)))
            except Abort:
                self.note_broken(self.tokens(item)[0])

    def parse_func_ref(self, tokens: list[Token], pos: int) -> tuple[FuncRef, int]:
        """``alias.fn`` at ``tokens[pos]``."""
        if (
            len(tokens) < pos + 3
            or tokens[pos].kind != TokenKind.NAME
            or tokens[pos + 1].text != "."
            or tokens[pos + 2].kind != TokenKind.NAME
        ):
            at = tokens[min(pos, len(tokens) - 1)]
            self.fail("expected 'alias.function'", self.tok_span(at), "e.g. game.resolve_night")
        first, last = tokens[pos], tokens[pos + 2]
        return FuncRef(first.text, last.text, self.tok_span(first, last)), pos + 3

    def parse_sketch_block(self, index: int, end: int, defs: Definitions) -> None:
        """Editor layout hints ``[Node] = x, y``: kept, never interpreted (§2.1)."""
        for item, _item_end in self.items(index + 1, end):
            text = self.lines[item].code().strip()
            match = re.match(r"^\[([^\]]+)\]\s*=\s*(.*)$", text)
            if match is None:
                self.error("expected '[Node] = x, y' in sketch:", self.line_span(item))
                continue
            defs.sketch.append((match.group(1).strip(), match.group(2).strip()))
