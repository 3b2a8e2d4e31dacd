"""The parser's foundation: diagnostics, spans, the line structure and tokens (§1.2).

Every syntax error goes through :meth:`ParserBase.fail` (report and abandon the current line)
or :meth:`ParserBase.error` (report and go on). Indentation only decides ownership (a line owns
the deeper lines after it); its width never matters (§1.2). The other modules of this package
each add the constructs of one part of a script, one class on top of the other, up to
:class:`fems2py.parser.blocks.Parser`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

from fems2py.diagnostics import Diagnostics
from fems2py.lexer import SourceLine, Token, split_lines, tokenize
from fems2py.nodes import (
    MAX_DEPTH,
    Action,
    ActionBlock,
    ActorDef,
    Blueprint,
    CodeAlias,
    Graph,
    MetaEntry,
    Method,
    Module,
    ModuleCall,
    Span,
    VarDecl,
)


class Abort(Exception):
    """Abandons the current line or block after its error was reported."""


@dataclass
class Definitions:
    """What one scope (the script or a module) defines, gathered while parsing."""

    meta: list[MetaEntry] = field(default_factory=list)
    variables: list[VarDecl] = field(default_factory=list)
    code: list[CodeAlias] = field(default_factory=list)
    actors: list[ActorDef] = field(default_factory=list)
    blueprints: list[Blueprint] = field(default_factory=list)
    methods: list[Method] = field(default_factory=list)
    actions: list[Action] = field(default_factory=list)
    modules: list[Module] = field(default_factory=list)
    flow: Graph | None = None
    #: ``flow`` only stands for a flow block whose header was broken (a readable one replaces it)
    flow_unread: bool = False
    sketch: list[tuple[str, str]] = field(default_factory=list)
    seen_blocks: dict[str, int] = field(default_factory=dict)
    seen_names: dict[tuple[str, str], int] = field(default_factory=dict)
    module: bool = False


@dataclass(frozen=True)
class Declaration:
    """A binding line ``[X]: target`` (or ``[X]:``) standing alone: it names what ``[X]`` runs
    wherever the flow uses it, and creates no edge (§12.1)."""

    binding: str | ModuleCall | None
    span: Span


def _nesting_levels(lines: list[SourceLine]) -> list[int]:
    """How many non-blank lines with a smaller indent own each line (§1.2); blanks get 0."""
    levels = [0] * len(lines)
    owners: list[int] = []  # the indents of the lines that own the current one
    for index, line in enumerate(lines):
        if line.blank:
            continue
        while owners and owners[-1] >= line.indent:
            owners.pop()
        levels[index] = len(owners)
        owners.append(line.indent)
    return levels


class ParserBase:
    """Diagnostics, spans, line structure and tokens shared by every part of the parser."""

    def __init__(
        self, source: str, path: str, base_dir: Path | None = None, root: Path | None = None
    ) -> None:
        self.source = source
        self.path = path
        self.base_dir = base_dir if base_dir is not None else Path(path).parent
        self.files_root = root
        self.lines: list[SourceLine] = split_lines(source)
        #: How many lines own each line (its nesting level; 0 for a top-level line).
        self.levels = _nesting_levels(self.lines)
        self.diagnostics = Diagnostics()
        self.code_aliases: set[str] = self._find_code_aliases()
        self.broken_names: set[str] = set()
        self.claimed: set[int] = set()
        self.token_cache: dict[tuple[int, bool, int], list[Token]] = {}
        #: Top-level blocks (by line index) with a line nested too deeply, reported once.
        self.too_deep_blocks: set[int] = set()
        self.wide_space_reported = False
        self.declarations: dict[str, Declaration] = {}
        self.namespace = "main"  # the checker's key of the script or module being parsed
        self.action_blocks: list[ActionBlock] = []

    def error(self, message: str, span: Span, hint: str | None = None) -> None:
        self.diagnostics.error(message, span, hint)

    def warning(self, message: str, span: Span, hint: str | None = None) -> None:
        self.diagnostics.warning(message, span, hint)

    def fail(self, message: str, span: Span, hint: str | None = None) -> NoReturn:
        """Report a syntax error and abandon the current line."""
        self.error(message, span, hint)
        raise Abort

    def span(self, line: int, col: int, end_col: int | None = None) -> Span:
        """A span on one line from 0-based columns."""
        end = col + 1 if end_col is None else max(end_col, col + 1)
        return Span(self.path, line, col + 1, line, end + 1)

    def tok_span(self, first: Token, last: Token | None = None) -> Span:
        last = last or first
        if last.line != first.line:
            return Span(self.path, first.line, first.col + 1, last.line, last.end + 1)
        return self.span(first.line, first.col, last.end)

    def line_span(self, index: int) -> Span:
        line = self.lines[index]
        return self.span(line.number, line.start, len(line.raw.rstrip()))

    def eol_span(self, index: int) -> Span:
        line = self.lines[index]
        end = len(line.code())
        return self.span(line.number, end, end + 1)

    def body_end(self, index: int, stop: int) -> int:
        """Index past the lines owned by line ``index``: deeper lines and blanks among them,
        and a line that starts by closing a bracket (``}`` under ``hp = {``, Python style)."""
        indent = self.lines[index].indent
        end = index + 1
        last = index + 1
        while end < stop:
            line = self.lines[end]
            if not line.blank:
                if line.indent <= indent and not line.code().lstrip().startswith((")", "]", "}")):
                    break
                last = end + 1
            end += 1
        return last

    def items(self, start: int, stop: int) -> Iterator[tuple[int, int]]:
        """``(line index, end of its body)`` for each line of a block at its own level."""
        index = start
        kinds: set[str] = set()
        while index < stop:
            line = self.lines[index]
            if line.blank or index in self.claimed:
                index += 1
                continue
            if self.levels[index] > MAX_DEPTH:
                # Refused before its lines are parsed, so that no stage recurses that deep.
                self.too_deep(index)
                index = self.body_end(index, stop)
                continue
            if line.uses_wide_spaces and not self.wide_space_reported:
                self.wide_space_reported = True
                self.warning(
                    "full-width spaces (U+3000) in the indentation count as 2 columns",
                    self.span(line.number, 0, line.start),
                    "indent with ordinary spaces",
                )
            if line.uses_tabs:
                kinds.add("tab")
            if line.uses_spaces:
                kinds.add("space")
            if len(kinds) == 2:
                self.warning(
                    "this block mixes tabs and spaces in its indentation",
                    self.line_span(index),
                    "a tab counts as advancing to the next multiple of 4 columns",
                )
                kinds = {"reported"}
            end = self.body_end(index, stop)
            yield index, end
            index = end

    def tokens(self, index: int, flow: bool = False, start: int = 0) -> list[Token]:
        """The tokens of line ``index`` from column ``start`` (a new list: callers may change
        it). Each line is tokenized once however often a block asks for it."""
        key = (index, flow, start)
        tokens = self.token_cache.get(key)
        if tokens is None:
            line = self.lines[index]
            tokens = self.token_cache[key] = tokenize(line.code(flow), line.number, start)
        return list(tokens)

    def too_deep(self, index: int) -> None:
        """Report line ``index`` as nested too deeply, once per top-level block."""
        top = next(sub for sub in range(index, -1, -1) if self.levels[sub] == 0)
        if top in self.too_deep_blocks:
            return
        self.too_deep_blocks.add(top)
        self.error(
            f"this line is nested {self.levels[index]} levels deep; at most {MAX_DEPTH} are allowed",
            self.line_span(index),
            "move the inner part into a module (§11) or a code: function",
        )

    def no_body(self, index: int, end: int, what: str, hint: str | None = None) -> None:
        """Report lines indented under a line that owns none."""
        for sub in range(index + 1, end):
            if not self.lines[sub].blank:
                self.error(f"unexpected indented line under {what}", self.line_span(sub), hint)
                return

    def _find_code_aliases(self) -> set[str]:
        """Code aliases, known before any expression is compiled (blocks come in any order)."""
        aliases: set[str] = set()
        in_code = False
        top = next((line.indent for line in self.lines if not line.blank), 0)
        for line in self.lines:
            if line.blank:
                continue
            text = line.code().strip()
            if line.indent <= top:
                in_code = text == "code:"
            elif in_code:
                name = text.split("=", 1)[0].strip()
                if name.isidentifier():
                    aliases.add(name)
        return aliases

    def expect_header(self, tokens: list[Token], colon_at: int) -> None:
        """The header's ``:`` is at ``tokens[colon_at]`` and nothing follows it."""
        if len(tokens) <= colon_at or tokens[colon_at].text != ":":
            where = tokens[colon_at] if len(tokens) > colon_at else tokens[-1]
            self.fail(
                f"expected ':' after '{tokens[colon_at - 1].text}'",
                self.tok_span(where),
                "a block header ends with ':' and its content is indented below it",
            )
        if len(tokens) > colon_at + 1:
            self.fail(
                f"unexpected '{tokens[colon_at + 1].text}' after '{tokens[0].text}:'",
                self.tok_span(tokens[colon_at + 1]),
                "the block's content goes on the following, more indented lines",
            )

    def once(self, block: str, token: Token, defs: Definitions) -> None:
        """§2.2: a second ``meta:``/``vars:``/… block is an error."""
        first = defs.seen_blocks.get(block)
        if first is not None:
            same = " ('flow:' and 'mainflow:' are the same block)" if block == "flow" else ""
            self.error(
                f"second '{token.text}:' block",
                self.tok_span(token),
                f"merge it into the first one (line {first}){same}",
            )
        else:
            defs.seen_blocks[block] = token.line

    def unique(self, kind: str, name: str, span: Span, defs: Definitions) -> None:
        """§2.2: two actions/modules/methods with one name are an error."""
        group = "method" if kind in ("memory", "context") else kind
        first = defs.seen_names.get((group, name))
        if first is not None:
            self.error(f"{group} '{name}' is defined twice", span, f"first defined at line {first}")
        else:
            defs.seen_names[(group, name)] = span.line

    def eol_token_span(self, token: Token) -> Span:
        """Just past ``token``: where something missing at the end of a line belongs."""
        return self.span(token.line, token.end, token.end + 1)
