"""A whole script: its top-level blocks (§2.1), module bodies (§11), and :func:`parse`.

Definitions (``action``, ``module``, ``memory``/``context``, ``blueprint``) are parsed from
their header line; the other blocks are found in :data:`BLOCK_PARSERS`.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable
from pathlib import Path

from fems2py.diagnostics import Diagnostic, suggest
from fems2py.kinds import FIELD_NAMES
from fems2py.lexer import Token, TokenKind
from fems2py.nodes import ActionBlock, Graph, Module, Script, Span
from fems2py.parser.actions import ActionsParser
from fems2py.parser.base import Abort, Definitions
from fems2py.parser.flows import is_flow_line

TOP_LEVEL_BLOCKS = (
    "meta",
    "vars",
    "code",
    "actors",
    "memory",
    "context",
    "action",
    "module",
    "mainflow",
    "flow",
    "sketch",
    "blueprint",
)
MODULE_BLOCKS = ("meta", "vars", "memory", "context", "action", "module", "flow", "sketch")


FLOW_BLOCKS = frozenset({"mainflow", "flow"})
DEFINITIONS = frozenset({"action", "module", "memory", "context", "blueprint"})


class Parser(ActionsParser):
    """Parses one ``.fems`` file; see :func:`parse`."""

    def parse(self) -> Script:
        defs = Definitions()
        self.parse_definitions(0, len(self.lines), defs, module=False)
        return Script(
            path=self.path,
            source=self.source,
            meta=tuple(defs.meta),
            variables=tuple(defs.variables),
            code=tuple(defs.code),
            actors=tuple(defs.actors),
            blueprints=tuple(defs.blueprints),
            methods=tuple(defs.methods),
            actions=tuple(defs.actions),
            modules=tuple(defs.modules),
            flow=defs.flow,
            sketch=tuple(defs.sketch),
            broken_names=frozenset(self.broken_names),
            action_blocks=tuple(self.action_blocks),
        )

    def parse_definitions(self, start: int, stop: int, defs: Definitions, module: bool) -> None:
        """Top-level blocks (§2.1), or the blocks of a module body (§11)."""
        allowed = MODULE_BLOCKS if module else TOP_LEVEL_BLOCKS
        stray = False
        for index, end in self.items(start, stop):
            tokens = self.tokens(index)
            header = tokens[-1].text == ":"  # a block of its own, even if misspelled
            known = tokens[0].kind == TokenKind.NAME and tokens[0].text in TOP_LEVEL_BLOCKS
            if stray and not known and not header:
                continue  # more of the lines the previous error is about
            stray = False
            try:
                self.parse_block(index, end, defs, allowed)
            except Abort:
                stray = not (known or header)
            except RecursionError:
                self.error("this block is nested too deeply to parse", self.line_span(index))

    def parse_block(
        self, index: int, end: int, defs: Definitions, allowed: tuple[str, ...]
    ) -> None:
        tokens = self.tokens(index)
        head = tokens[0]
        word = head.text
        if head.kind != TokenKind.NAME or word not in allowed:
            word = self.misplaced_block(tokens, defs, allowed)
        definitions = {
            "memory": self.parse_method,
            "context": self.parse_method,
            "action": self.parse_action,
            "module": self.parse_module,
        }
        if word == "action" and len(tokens) > 1 and tokens[1].kind == TokenKind.NAME:
            last = self.lines[end - 1]
            self.action_blocks.append(
                ActionBlock(
                    tokens[1].text,
                    self.namespace,
                    Span(self.path, index + 1, 1, last.number, len(last.raw) + 1),
                )
            )
        if word in definitions:
            try:
                definitions[word](index, end, tokens, defs)
            except Abort:
                if len(tokens) > 1 and tokens[1].kind == TokenKind.NAME:
                    self.broken_names.add(tokens[1].text)
                raise
        elif word == "blueprint":
            self.parse_blueprint(index, end, tokens, defs)
        else:
            try:
                self.expect_header(tokens, 1)
            except Abort:
                if word in FLOW_BLOCKS:
                    self.flow_unread(defs, head)
                raise
            if word != "sketch":  # §2.1: any number of sketch: blocks
                self.once(word if word != "mainflow" else "flow", tokens[0], defs)
            BLOCK_PARSERS[word](self, index, end, defs)

    def misplaced_block(
        self, tokens: list[Token], defs: Definitions, allowed: tuple[str, ...]
    ) -> str:
        """A line that starts no block allowed here: a flow line or an action field out of
        place, a top-level block inside a module, a misspelling. Reported; only ``mainflow:``
        in a module is read on, as the module's ``flow:`` (its word is returned)."""
        head = tokens[0]
        word = head.text
        where = "inside a module" if "mainflow" not in allowed else "at the top level"
        flow = "flow" if "mainflow" not in allowed else "mainflow"
        if is_flow_line(tokens):
            if defs.flow is not None:  # most likely its own line: its shape is unknown
                defs.flow = dataclasses.replace(defs.flow, complete=False)
            self.fail(
                f"this flow line is not indented under '{flow}:'",
                self.tok_span(head),
                f"indent the flow's lines under '{flow}:'",
            )
        if (
            head.kind == TokenKind.NAME
            and word in FIELD_NAMES
            and len(tokens) > 1
            and tokens[1].text == ":"
        ):
            self.fail(
                f"'{word}:' is an action field, found {where}",
                self.tok_span(head),
                "indent it under its 'action …:' line",
            )
        if word == "mainflow":
            # Most likely meant as the module's flow: report once, then read it as one.
            self.error(
                f"'mainflow:' is not allowed {where}",
                self.tok_span(head),
                "a module's own flow is 'flow:'",
            )
            return "flow"
        if head.kind == TokenKind.NAME and word in TOP_LEVEL_BLOCKS:
            self.fail(
                f"'{word}:' is not allowed {where}",
                self.tok_span(head),
                "a module holds meta:, vars:, actions, modules, memory/context methods "
                f"and flow:; write '{word}:' at the top level",
            )
        meant = difflib.get_close_matches(word, allowed, n=1, cutoff=0.6)
        if meant and meant[0] in DEFINITIONS and len(tokens) > 1:
            self.note_broken(tokens[1])  # 'actoin talk …': talk is still defined
        if meant and meant[0] in FLOW_BLOCKS:
            self.flow_unread(defs, head)  # 'main_flow:'
        self.fail(
            f"unknown block '{head.text}' {where}",
            self.tok_span(head),
            suggest(word, allowed) or "blocks are: " + ", ".join(allowed),
        )

    def flow_unread(self, defs: Definitions, head: Token) -> None:
        """A flow block whose header is broken ('main_flow:', 'flow' without ':'): the flow is
        there but unread, so "the script has no mainflow:" (or a module's "has no flow:") would
        only echo that error; an incomplete graph stands for it (nothing runs, §12.11)."""
        if defs.flow is None:
            defs.flow = Graph((), (), self.tok_span(head), complete=False)
            defs.flow_unread = True

    def parse_module(self, index: int, end: int, tokens: list[Token], defs: Definitions) -> None:
        if len(tokens) < 2 or tokens[1].kind != TokenKind.NAME:
            self.fail("expected a module name after 'module'", self.tok_span(tokens[-1]))
        name = tokens[1]
        self.check_name(name, "module")
        pos = 2
        params: list[str] = []
        if pos < len(tokens) and tokens[pos].text == "(":
            pieces, close = self.bracketed(tokens, pos)
            for piece in pieces:
                if len(piece) != 1 or piece[0].kind not in (TokenKind.NAME, TokenKind.ACTOR):
                    at = piece[0] if piece else tokens[pos]
                    self.fail("module parameters are names", self.tok_span(at))
                self.check_name(piece[0], "parameter")
                self.check_readable(piece[0], "parameter")
                if piece[0].text in params:
                    self.error(
                        f"parameter '{piece[0].text}' is listed twice", self.tok_span(piece[0])
                    )
                params.append(piece[0].text)
            pos = close + 1
        self.expect_header(tokens, pos)
        span = self.tok_span(tokens[0], name)
        self.unique("module", name.text, span, defs)
        inner = Definitions(module=True)
        outer = self.namespace
        self.namespace = f"module:{name.text}" if outer == "main" else f"{outer}/{name.text}"
        try:
            self.parse_definitions(index + 1, end, inner, module=True)
        finally:
            self.namespace = outer
        defs.modules.append(
            Module(
                name=name.text,
                params=tuple(params),
                meta=tuple(inner.meta),
                variables=tuple(inner.variables),
                actions=tuple(inner.actions),
                modules=tuple(inner.modules),
                methods=tuple(inner.methods),
                flow=inner.flow,
                span=span,
            )
        )


BlockParser = Callable[[Parser, int, int, Definitions], None]
#: The parser of each block that holds lines rather than one definition (§2.1), by its word:
#: ``(parser, header line index, end of its lines, what the script or module defines)``.
BLOCK_PARSERS: dict[str, BlockParser] = {
    "meta": Parser.parse_meta_block,
    "vars": Parser.parse_vars_block,
    "code": Parser.parse_code_block,
    "actors": Parser.parse_actors_block,
    "flow": Parser.parse_flow_block,
    "mainflow": Parser.parse_flow_block,
    "sketch": Parser.parse_sketch_block,
}


def parse(
    source: str, path: str, base_dir: Path | None = None, root: Path | None = None
) -> tuple[Script, list[Diagnostic]]:
    """Parse a ``.fems`` file. Never raises on user input: problems come back as diagnostics.

    ``base_dir`` is where ``file:"…"`` paths are read from (default: the script's directory);
    they must stay inside ``root`` (default: ``base_dir``, see :mod:`fems2py.sources`).
    """
    parser = Parser(source, path, base_dir, root)
    script = parser.parse()
    return script, list(parser.diagnostics)
