"""Recursive-descent parser: ``.fems`` text → :class:`fems2py.nodes.Script` plus diagnostics.

One ``parse_<construct>`` method per construct; every syntax error goes through :meth:`fail`
(report and abandon the current line) or :meth:`error` (report and go on). Recovery is per
top-level block and per line, so one run reports every error of a file. Indentation only
decides ownership (a line owns the deeper lines after it); its width never matters (§1.2).
"""

from __future__ import annotations

import bisect
import dataclasses
import difflib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn, TypeVar

from fems2py.diagnostics import Diagnostic, Diagnostics, suggest
from fems2py.expressions import compile_expression, compile_value
from fems2py.kinds import ACTION_KINDS, FIELD_KINDS, TEXT_FIELDS
from fems2py.lexer import (
    SourceLine,
    Token,
    block_text,
    comment_start,
    quote_end,
    split_lines,
    text_indent,
    tokenize,
    unquote,
)
from fems2py.nodes import (
    MAX_DEPTH,
    Action,
    ActionBlock,
    ActorDef,
    ActorValue,
    Assignment,
    Blueprint,
    BoolValue,
    CodeAlias,
    DictValue,
    Edge,
    Expr,
    FlowNode,
    FuncRef,
    Graph,
    Input,
    Interrupt,
    Join,
    ListValue,
    Loop,
    MetaEntry,
    Method,
    Module,
    ModuleCall,
    NullValue,
    NumberValue,
    Out,
    OutType,
    PathRef,
    Placeholder,
    Resolve,
    Scope,
    ScopeItem,
    Script,
    Span,
    StringValue,
    Target,
    Text,
    Value,
    VarDecl,
)

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
        "START",
        "END",
        "IN",
        "OUT",
        "BREAK",
    ]
)
DEFINITIONS = frozenset({"action", "module", "memory", "context", "blueprint"})
RESERVED_NODE_NAMES = frozenset({"START", "END", "IN", "OUT", "BREAK"})
TEXT_META_KEYS = frozenset({"name", "version", "id", "system_safety", "output_style"})
OUT_TYPES = ("int", "float", "bool", "string", "actor", "enum", "dropdown")
ACTOR_PROPS = ("soul", "source", "tools")
_PATH = re.compile(r"^\s*(@?[^\W\d]\w*)(?:\.(@?[^\W\d]\w*))?(?:\[([^\[\]]+)\])?\s*$")
_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([^{}\n]*)\}")
_ASSIGN_CALL = re.compile(r"^\s*(add|remove)\s*\((.*)\)\s*$", re.DOTALL)
_INT = re.compile(r"^-?\d+$")
_NOT_NAME = re.compile(r"[^\w@]+")
_FLOAT = re.compile(r"^-?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?$")
_CLOSERS = {"[": "]", "(": ")", "{": "}"}
_Item = TypeVar("_Item")


class _Abort(Exception):
    """Abandons the current line or block after its error was reported."""


@dataclass
class _Definitions:
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
    sketch: list[tuple[str, str]] = field(default_factory=list)
    seen_blocks: dict[str, int] = field(default_factory=dict)
    seen_names: dict[tuple[str, str], int] = field(default_factory=dict)
    module: bool = False


@dataclass
class _Pending:
    """The node a line's trailing ``->`` leaves open, waiting for the next line."""

    node: str
    span: Span
    loop_exit: bool = False


@dataclass(frozen=True)
class _Declaration:
    """A binding line ``[X]: target`` (or ``[X]:``) standing alone: it names what ``[X]`` runs
    wherever the flow uses it, and creates no edge (§12.1)."""

    binding: str | ModuleCall | None
    span: Span


@dataclass
class _LoopBody:
    """The loop whose body is being parsed: where iteration ends are recorded."""

    ends: list[str] = field(default_factory=list)


class _GraphBuilder:
    """Collects the nodes and edges of one flow graph (or loop body)."""

    def __init__(self, parser: Parser) -> None:
        self.parser = parser
        self.nodes: dict[str, FlowNode] = {}
        self.edges: list[Edge] = []

    def add(self, name: str, span: Span, binding: object = None, anonymous: bool = False) -> str:
        existing = self.nodes.get(name)
        bound_at = span if binding is not None else None
        if existing is None:
            self.nodes[name] = FlowNode(name, binding, anonymous, span, bound_at)  # type: ignore[arg-type]
        elif binding is not None:
            if existing.binding is None:
                self.nodes[name] = dataclasses.replace(existing, binding=binding, bound_at=span)
            elif _binding_key(existing.binding) != _binding_key(binding):
                self.parser.error(
                    f"node [{name}] is bound twice",
                    span,
                    f"it is already bound at line {existing.span.line}; a node holds one binding",
                )
        return name

    def edge(self, source: str, target: str, condition: Expr | None, span: Span) -> None:
        self.edges.append(Edge(source, target, condition, span))

    def build(self, span: Span, complete: bool = True) -> Graph:
        return Graph(tuple(self.nodes.values()), tuple(self.edges), span, complete)


def _binding_key(binding: object) -> object:
    if isinstance(binding, ModuleCall):
        return ("&", binding.module, tuple(arg.text.strip() for arg in binding.args))
    return binding


class Parser:
    """Parses one ``.fems`` file; see :func:`parse`."""

    def __init__(self, source: str, path: str, base_dir: Path | None = None) -> None:
        self.source = source
        self.path = path
        self.base_dir = base_dir if base_dir is not None else Path(path).parent
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
        self.declarations: dict[str, _Declaration] = {}
        self.namespace = "main"  # the checker's key of the script or module being parsed
        self.action_blocks: list[ActionBlock] = []

    # ------------------------------------------------------------------ errors and spans

    def error(self, message: str, span: Span, hint: str | None = None) -> None:
        self.diagnostics.error(message, span, hint)

    def warning(self, message: str, span: Span, hint: str | None = None) -> None:
        self.diagnostics.warning(message, span, hint)

    def fail(self, message: str, span: Span, hint: str | None = None) -> NoReturn:
        """Report a syntax error and abandon the current line."""
        self.error(message, span, hint)
        raise _Abort

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

    # ------------------------------------------------------------------ line structure

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

    # ------------------------------------------------------------------ script

    def parse(self) -> Script:
        defs = _Definitions()
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

    def parse_definitions(self, start: int, stop: int, defs: _Definitions, module: bool) -> None:
        """Top-level blocks (§2.1), or the blocks of a module body (§11)."""
        allowed = MODULE_BLOCKS if module else TOP_LEVEL_BLOCKS
        stray = False
        for index, end in self.items(start, stop):
            tokens = self.tokens(index)
            header = tokens[-1].text == ":"  # a block of its own, even if misspelled
            known = tokens[0].kind == "name" and tokens[0].text in TOP_LEVEL_BLOCKS
            if stray and not known and not header:
                continue  # more of the lines the previous error is about
            stray = False
            try:
                self.parse_block(index, end, defs, allowed)
            except _Abort:
                stray = not (known or header)
            except RecursionError:
                self.error("this block is nested too deeply to parse", self.line_span(index))

    def parse_block(
        self, index: int, end: int, defs: _Definitions, allowed: tuple[str, ...]
    ) -> None:
        tokens = self.tokens(index)
        head = tokens[0]
        word = head.text
        if head.kind != "name" or word not in allowed:
            where = "inside a module" if "mainflow" not in allowed else "at the top level"
            flow = "flow" if "mainflow" not in allowed else "mainflow"
            if _is_flow_line(tokens):
                if defs.flow is not None:  # most likely its own line: its shape is unknown
                    defs.flow = dataclasses.replace(defs.flow, complete=False)
                self.fail(
                    f"this flow line is not indented under '{flow}:'",
                    self.tok_span(head),
                    f"indent the flow's lines under '{flow}:'",
                )
            if (
                head.kind == "name"
                and word in FIELD_KINDS
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
                word = "flow"
            elif head.kind == "name" and word in TOP_LEVEL_BLOCKS:
                self.fail(
                    f"'{word}:' is not allowed {where}",
                    self.tok_span(head),
                    "a module holds meta:, vars:, actions, modules, memory/context methods "
                    f"and flow:; write '{word}:' at the top level",
                )
            else:
                meant = difflib.get_close_matches(word, allowed, n=1, cutoff=0.6)
                if meant and meant[0] in DEFINITIONS and len(tokens) > 1:
                    self.note_broken(tokens[1])  # 'actoin talk …': talk is still defined
                self.fail(
                    f"unknown block '{head.text}' {where}",
                    self.tok_span(head),
                    suggest(word, allowed) or "blocks are: " + ", ".join(allowed),
                )
        definitions = {
            "memory": self.parse_method,
            "context": self.parse_method,
            "action": self.parse_action,
            "module": self.parse_module,
        }
        if word == "action" and len(tokens) > 1 and tokens[1].kind == "name":
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
            except _Abort:
                if len(tokens) > 1 and tokens[1].kind == "name":
                    self.broken_names.add(tokens[1].text)
                raise
        elif word == "blueprint":
            self.parse_blueprint(index, end, tokens, defs)
        else:
            self.expect_header(tokens, 1)
            if word != "sketch":  # §2.1: any number of sketch: blocks
                self.once(word if word != "mainflow" else "flow", tokens[0], defs)
            parse = getattr(self, f"parse_{'flow' if word == 'mainflow' else word}_block")
            parse(index, end, defs)

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

    def once(self, block: str, token: Token, defs: _Definitions) -> None:
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

    def unique(self, kind: str, name: str, span: Span, defs: _Definitions) -> None:
        """§2.2: two actions/modules/methods with one name are an error."""
        group = "method" if kind in ("memory", "context") else kind
        first = defs.seen_names.get((group, name))
        if first is not None:
            self.error(f"{group} '{name}' is defined twice", span, f"first defined at line {first}")
        else:
            defs.seen_names[(group, name)] = span.line

    # ------------------------------------------------------------------ meta / vars / code

    def split_key(self, index: int, seps: tuple[str, ...]) -> tuple[Token, int]:
        """``key = value`` (or ``key: value``): the key token and the column after the separator."""
        tokens = self.tokens(index)
        key = tokens[0]
        if key.kind not in ("name", "actor") or len(tokens) < 2 or tokens[1].text not in seps:
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
            at = tokens[1] if len(tokens) > 1 and key.kind in ("name", "actor") else key
            self.fail(
                f"expected 'name {seps[0]} value' here, found '{at.text}'",
                self.tok_span(at),
                f"write the name, then {expected}, then the value",
            )
        return key, tokens[1].end

    def parse_meta_block(self, index: int, end: int, defs: _Definitions) -> None:
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
            except _Abort:
                continue

    def parse_vars_block(self, index: int, end: int, defs: _Definitions) -> None:
        for item, item_end in self.items(index + 1, end):
            try:
                key, col = self.split_key(item, ("=",))
                self.check_name(key, "variable", allow_all=True)
                value = self.parse_value_field(item, col, item_end, key.text)
                span = self.span(key.line, key.col, len(self.lines[item].code()))
                defs.variables.append(VarDecl(key.text, value, span))
            except _Abort:
                self.note_broken(self.tokens(item)[0])

    def note_broken(self, token: Token, actor: bool = False) -> None:
        """Remember the name a broken definition was about to define (see Script.broken_names)."""
        if token.kind == "name":
            self.broken_names.add("@" + token.text if actor else token.text)
        elif token.kind == "actor" and token.text != "@":
            self.broken_names.add(token.text)

    def check_name(self, token: Token, what: str, allow_all: bool = False) -> None:
        """§2.3: reserved words are not names."""
        if token.text in RESERVED and not (allow_all and token.text == "all"):
            article = "an" if what[0] in "aeiou" else "a"
            self.error(
                f"'{token.text}' is reserved and cannot name {article} {what}",
                self.tok_span(token),
            )

    def parse_code_block(self, index: int, end: int, defs: _Definitions) -> None:
        for item, item_end in self.items(index + 1, end):
            try:
                key, col = self.split_key(item, ("=",))
                if key.kind != "name":
                    self.fail("a code alias is an identifier", self.tok_span(key))
                self.check_name(key, "code alias")
                value = self.parse_text_value(item, col, item_end, key.text, read_file=False)
                if value.style != "file" or value.path is None:
                    self.fail(
                        f"expected file:\"path.py\" for code alias '{key.text}'",
                        value.span,
                        'write alias = file:"utils/game.py"',
                    )
                defs.code.append(CodeAlias(key.text, value.path, self.line_span(item)))
            except _Abort:
                self.note_broken(self.tokens(item)[0])

    # ------------------------------------------------------------------ text values (§1.5)

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
            deeper = next(sub for sub in range(index + 1, end) if not self.lines[sub].blank)
            words = self.tokens(deeper)
            looks_like_field = (
                len(words) > 1 and words[0].text in FIELD_KINDS and words[1].text == ":"
            )
            self.error(
                f"unexpected indented line under '{what}'",
                self.line_span(deeper),
                f"indent '{words[0].text}:' like '{what}:'"
                if looks_like_field
                else "end the line with '|' to start a text block",
            )
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
            self.warning(
                f"'{text}' is read as text, not as the file's content",
                span,
                f'write file:"{path}" to read the file',
            )
        if text[0] in "\"'“":
            closed_at = quote_end(text, 0)
            if closed_at == len(text):
                value = StringValue(unquote(text), "quoted", span)
                return value, lambda offset: (line.number, start + 2 + offset)
            if closed_at is None:
                self.fail("unterminated string", span, "close the quote")
        value = StringValue(text, "bare", span)
        return value, lambda offset: (line.number, start + 1 + offset)

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
            file_path = (self.base_dir / path).resolve()
            try:
                content = file_path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                reason = "not found" if isinstance(exc, FileNotFoundError) else str(exc)
                self.error(f"cannot read file '{path}': {reason}", span, f"looked for {file_path}")
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

    # ------------------------------------------------------------------ value literals (§4.2)

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
        sub = index + 1
        while _depth(tokens) > 0 and sub < end:
            if not self.lines[sub].blank:
                tokens += self.tokens(sub)
            sub += 1
        if sub < end:
            self.no_body(sub - 1, end, f"'{what}'")
        return self.parse_value(tokens, owner=owner)

    def parse_value(self, tokens: list[Token], owner: bool = False) -> Value:
        """A whole value from its tokens; anything that is not a literal is bare text."""
        if not tokens:
            raise _Abort
        deepest, opener = _max_depth(tokens)
        if deepest > MAX_DEPTH and opener is not None:
            self.fail(
                f"lists and dicts nest {deepest} levels deep here; at most {MAX_DEPTH} are allowed",
                self.tok_span(opener),
                "flatten the value, or build it in a code: function (§5)",
            )
        if tokens[0].text in ("[", "{"):
            close = _match(tokens, 0)
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
        if token.kind == "string":
            return StringValue(token.value, "quoted", span)
        if token.kind == "number":
            if owner:
                return StringValue(token.text, "bare", span)
            if _INT.match(token.text):
                return NumberValue(int(token.text), span)
            return NumberValue(float(token.text), span)
        if token.kind == "actor":
            if token.text == "@":
                self.fail("expected an actor name after '@'", span)
            return ActorValue(token.text, span)
        if token.text.lower() in ("true", "false"):  # any case: TRUE, False (§4.2, §12.2)
            return BoolValue(token.text.lower() == "true", span)
        if token.text in ("null", "None"):
            return NullValue(span)
        return StringValue(token.text, "bare", span)

    def parse_literal(
        self, tokens: list[Token], pos: int, owner: bool = False
    ) -> tuple[Value, int]:
        """A list or dict literal at ``tokens[pos]``; returns it and the position after it."""
        opener = tokens[pos]
        close = _match(tokens, pos)
        if close < 0:
            self.fail(f"'{opener.text}' is never closed", self.tok_span(opener))
        items: list[Value] = []
        pairs: list[tuple[Value, Value]] = []
        pieces = _split(tokens[pos + 1 : close])
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
                        if tok.text == ":" and _depth(piece[:i]) == 0
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
        if piece[0].text in ("[", "{") and _match(piece, 0) == len(piece) - 1:
            return self.parse_literal(piece, 0, owner)[0]
        if len(piece) == 1:
            return self.scalar(piece[0], owner)
        return self.bare(piece)

    # ------------------------------------------------------------------ actors (§6)

    def parse_actors_block(self, index: int, end: int, defs: _Definitions) -> None:
        for item, item_end in self.items(index + 1, end):
            try:
                tokens = self.tokens(item)
                if tokens[0].text == "blueprint":
                    self.parse_blueprint(item, item_end, tokens, defs)
                    continue
                self.no_body(item, item_end, "an actor definition")
                defs.actors.append(self.parse_actor(tokens))
            except _Abort:
                tokens = self.tokens(item)
                if len(tokens) > 1:
                    self.note_broken(tokens[1], actor=True)

    def parse_actor(self, tokens: list[Token]) -> ActorDef:
        kind = tokens[0]
        if kind.text not in ("ai", "human"):
            self.fail(
                f"an actor definition starts with 'ai' or 'human', found '{kind.text}'",
                self.tok_span(kind),
                suggest(kind.text, ("ai", "human")),
            )
        if len(tokens) < 2 or tokens[1].kind not in ("name", "actor") or tokens[1].text == "@":
            self.fail(f"expected an actor name after '{kind.text}'", self.tok_span(tokens[-1]))
        name_token = tokens[1]
        name = name_token.text if name_token.kind == "actor" else "@" + name_token.text
        props: dict[str, tuple[Token, list[Token]]] = {}
        if len(tokens) > 2:
            if tokens[2].text != "=":
                self.fail(
                    f"expected '=' after {name}", self.tok_span(tokens[2]), "write ai @x = soul:1"
                )
            pieces = _split(tokens[3:])
            if len(pieces) > 1 and not pieces[-1]:
                pieces.pop()  # a trailing comma
            for piece in pieces:
                glued = next(
                    (
                        at
                        for at in range(3, len(piece) - 1)
                        if piece[at].text in ACTOR_PROPS and piece[at + 1].text == ":"
                    ),
                    None,
                )
                if glued is not None:
                    self.fail(
                        f"expected ',' before '{piece[glued].text}'",
                        self.tok_span(piece[glued]),
                        "separate properties with ',': soul:1, source:fast",
                    )
                if len(piece) >= 2 and piece[0].text in ACTOR_PROPS and piece[1].text != ":":
                    self.fail(
                        f"expected ':' after '{piece[0].text}'",
                        self.tok_span(piece[1]),
                        f"write {piece[0].text}:{piece[1].text}",
                    )
                if len(piece) < 2 or piece[0].kind != "name" or piece[1].text != ":":
                    at = piece[0] if piece else tokens[2]
                    self.fail(
                        "expected 'key:value'", self.tok_span(at), "keys: soul, source, tools"
                    )
                key = piece[0]
                if key.text not in ACTOR_PROPS:
                    self.error(
                        f"unknown actor property '{key.text}'",
                        self.tok_span(key),
                        suggest(key.text, ACTOR_PROPS) or "properties: soul, source, tools",
                    )
                    continue
                if key.text in props:
                    self.error(f"'{key.text}' is given twice", self.tok_span(key))
                props[key.text] = (key, piece[2:])
        soul = name[1:]
        source = None
        tools: tuple[str, ...] | bool = ()
        if "soul" in props:
            soul = self.prop_text(props["soul"]) or soul
        if "source" in props:
            source = self.prop_text(props["source"])
        if "tools" in props:
            tools = self.parse_tools(props["tools"])
        span = self.span(kind.line, kind.col, tokens[-1].end)
        return ActorDef(kind.text, name, soul, source, tools, span)  # type: ignore[arg-type]

    def prop_text(self, prop: tuple[Token, list[Token]]) -> str:
        key, value = prop
        if not value:
            self.fail(f"expected a value after '{key.text}:'", self.tok_span(key))
        if len(value) == 1 and value[0].kind == "string":
            return value[0].value
        return self.lines[value[0].line - 1].code()[value[0].col : value[-1].end].strip()

    def parse_tools(self, prop: tuple[Token, list[Token]]) -> tuple[str, ...] | bool:
        key, value = prop
        parsed = self.parse_value(value) if value else None
        if isinstance(parsed, BoolValue):
            return parsed.value
        if isinstance(parsed, ListValue):
            names = []
            for item in parsed.items:
                if not isinstance(item, StringValue):
                    self.fail("a tool is named by a word or a string", item.span)
                names.append(item.value)
            return tuple(names)
        self.fail("tools: expects a list of tool names, true or false", self.tok_span(key))

    def parse_blueprint(
        self, index: int, end: int, tokens: list[Token], defs: _Definitions
    ) -> None:
        if len(tokens) < 2 or tokens[1].kind != "name":
            self.fail("expected a blueprint name", self.tok_span(tokens[-1]))
        self.expect_header(tokens, 2)
        source: str | None = None
        tools: tuple[str, ...] | bool = ()
        for item, item_end in self.items(index + 1, end):
            try:
                self.no_body(item, item_end, "a blueprint line")
                line_tokens = self.tokens(item)
                key = self.keyed_line(
                    line_tokens, ("source", "tools"), "blueprint line", "use source: and tools:"
                )
                if key.text == "source":
                    source = self.prop_text((key, line_tokens[2:]))
                else:
                    tools = self.parse_tools((key, line_tokens[2:]))
            except _Abort:
                continue
        span = self.tok_span(tokens[0], tokens[1])
        self.unique("blueprint", tokens[1].text, span, defs)
        defs.blueprints.append(Blueprint(tokens[1].text, source, tools, span))

    def keyed_line(
        self, line_tokens: list[Token], keys: tuple[str, ...], what: str, hint: str
    ) -> Token:
        """The key token of a ``key: value`` line in a block that allows only ``keys``."""
        key = line_tokens[0]
        if key.text not in keys or len(line_tokens) < 2:
            self.fail(
                f"unknown {what} '{key.text}'", self.tok_span(key), suggest(key.text, keys) or hint
            )
        if line_tokens[1].text != ":":
            self.fail(f"expected ':' after '{key.text}'", self.tok_span(line_tokens[1]))
        return key

    # ------------------------------------------------------------------ methods (§8)

    def parse_func_ref(self, tokens: list[Token], pos: int) -> tuple[FuncRef, int]:
        """``alias.fn`` at ``tokens[pos]``."""
        if (
            len(tokens) < pos + 3
            or tokens[pos].kind != "name"
            or tokens[pos + 1].text != "."
            or tokens[pos + 2].kind != "name"
        ):
            at = tokens[min(pos, len(tokens) - 1)]
            self.fail("expected 'alias.function'", self.tok_span(at), "e.g. game.resolve_night")
        first, last = tokens[pos], tokens[pos + 2]
        return FuncRef(first.text, last.text, self.tok_span(first, last)), pos + 3

    def parse_method(self, index: int, end: int, tokens: list[Token], defs: _Definitions) -> None:
        kind = tokens[0].text
        if len(tokens) < 2 or tokens[1].kind != "name":
            self.fail(f"expected a {kind} method name", self.tok_span(tokens[-1]))
        name = tokens[1]
        if len(tokens) < 3 or tokens[2].text != "(":
            self.fail(
                f"expected '(alias.function)' after {kind} {name.text}",
                self.tok_span(tokens[-1]),
                f"write {kind} {name.text}(alias.function):",
            )
        func, pos = self.parse_func_ref(tokens, 3)
        if len(tokens) <= pos or tokens[pos].text != ")":
            self.fail("expected ')'", self.tok_span(tokens[min(pos, len(tokens) - 1)]))
        self.expect_header(tokens, pos + 1)
        inputs: tuple[Input, ...] = ()
        outputs: tuple[str, ...] = ()
        seen: set[str] = set()
        for item, item_end in self.items(index + 1, end):
            try:
                field_tokens = self.tokens(item)
                key = self.keyed_line(
                    field_tokens, ("in", "out"), f"{kind} field", "fields: in, out"
                )
                if key.text in seen:
                    self.error(f"field '{key.text}' is given twice", self.tok_span(key))
                seen.add(key.text)
                if key.text == "in":
                    inputs = self.parse_inputs(item, field_tokens[1].end, item_end)
                else:
                    outputs = tuple(
                        out.target.name
                        for out in self.parse_outs(item, field_tokens[1].end, item_end)
                    )
            except _Abort:
                continue
        span = self.tok_span(tokens[0], name)
        self.unique(kind, name.text, span, defs)
        defs.methods.append(
            Method(kind, name.text, func, inputs, outputs, span)  # type: ignore[arg-type]
        )

    # ------------------------------------------------------------------ actions (§9)

    def parse_action(self, index: int, end: int, tokens: list[Token], defs: _Definitions) -> None:
        if len(tokens) < 2 or tokens[1].kind != "name":
            self.fail(
                "expected an action name after 'action'",
                self.tok_span(tokens[1] if len(tokens) > 1 else tokens[0]),
                "write action NAME @ai(@x): (or @human, @mind, @assign, @func)",
            )
        name = tokens[1]
        self.check_name(name, "action")
        if len(tokens) < 3 or tokens[2].kind != "actor":
            at = tokens[2] if len(tokens) > 2 else name
            self.fail(
                f"expected the action kind after 'action {name.text}'",
                self.tok_span(at),
                "kinds: " + ", ".join(kind.written for kind in ACTION_KINDS.values()),
            )
        kind_token = tokens[2]
        kind = kind_token.text[1:]
        if kind not in ACTION_KINDS:
            self.fail(
                f"unknown action kind '{kind_token.text}'",
                self.tok_span(kind_token),
                suggest(kind, ACTION_KINDS) or "kinds: " + ", ".join("@" + k for k in ACTION_KINDS),
            )
        pos = 3
        executor: str | None = None
        role: str | None = None
        func: FuncRef | None = None
        # Where the executor and the role were written, for the checker's messages about them.
        header_spans: list[tuple[str, Span]] = []
        header = ACTION_KINDS[kind].header
        if header == "executor":
            executor, pos = self.parse_executor(tokens, pos, kind_token)
            header_spans.append(("executor", self.tok_span(tokens[pos - 2])))
            if pos < len(tokens) and tokens[pos].text == "as":
                start = pos
                role, pos = self.parse_role(tokens, pos)
                role_token = next(t for t in tokens[start:pos] if t.kind == "actor")
                header_spans.append(("role", self.tok_span(role_token)))
        elif header == "func":
            if pos >= len(tokens) or tokens[pos].text != "(":
                self.fail("expected '(alias.function)' after @func", self.tok_span(tokens[pos - 1]))
            func, pos = self.parse_func_ref(tokens, pos + 1)
            if pos >= len(tokens) or tokens[pos].text != ")":
                self.fail("expected ')'", self.tok_span(tokens[min(pos, len(tokens) - 1)]))
            pos += 1
        if pos >= len(tokens):
            self.warning(
                "action header should end with ':'",
                self.eol_span(index),
                "add ':' at the end of the line",
            )
        else:
            self.expect_header(tokens, pos)
        span = self.tok_span(tokens[0], name)
        self.unique("action", name.text, span, defs)
        fields = self.parse_fields(index, end, kind)
        fields["field_spans"] = (*header_spans, *fields["field_spans"])  # type: ignore[misc]
        defs.actions.append(
            Action(
                name=name.text,
                kind=kind,  # type: ignore[arg-type]
                span=span,
                executor=executor,
                role=role,
                func=func,
                **fields,
            )
        )

    def parse_executor(self, tokens: list[Token], pos: int, kind: Token) -> tuple[str, int]:
        if pos + 2 >= len(tokens) or tokens[pos].text != "(":
            self.fail(
                f"expected '(@actor)' after {kind.text}",
                self.tok_span(tokens[min(pos, len(tokens) - 1)]),
                f"write {kind.text}(@name)",
            )
        who = tokens[pos + 1]
        if who.kind == "name":
            self.warning(
                f"actor references carry '@': '{who.text}' is read as '@{who.text}'",
                self.tok_span(who),
                f"write {kind.text}(@{who.text})",
            )
            executor = "@" + who.text
        elif who.kind == "actor" and who.text != "@":
            executor = who.text
        else:
            self.fail("expected an actor such as @eve", self.tok_span(who))
        if pos + 2 >= len(tokens) or tokens[pos + 2].text != ")":
            at = tokens[pos + 2] if pos + 2 < len(tokens) else tokens[-1]
            self.fail(
                "expected ')' after the executor",
                self.tok_span(at),
                "an action has one executor; put the others in scope:",
            )
        return executor, pos + 3

    def parse_role(self, tokens: list[Token], pos: int) -> tuple[str, int]:
        """``as (@role)`` (parentheses optional)."""
        pos += 1
        parens = pos < len(tokens) and tokens[pos].text == "("
        if parens:
            pos += 1
        if pos >= len(tokens) or tokens[pos].kind != "actor" or tokens[pos].text == "@":
            self.fail("expected 'as (@role)'", self.tok_span(tokens[min(pos, len(tokens) - 1)]))
        role = tokens[pos].text
        pos += 1
        if parens:
            if pos >= len(tokens) or tokens[pos].text != ")":
                self.fail("expected ')' after the role", self.tok_span(tokens[pos - 1]))
            pos += 1
        return role, pos

    def parse_fields(self, index: int, end: int, kind: str) -> dict[str, object]:
        """The indented fields of an action (§9.2)."""
        result: dict[str, object] = {}
        spans: list[tuple[str, Span]] = []
        for item, item_end in self.items(index + 1, end):
            try:
                tokens = self.tokens(item)
                key = tokens[0]
                if key.kind != "name" or key.text not in FIELD_KINDS:
                    self.fail(
                        f"unknown action field '{key.text}'",
                        self.tok_span(key),
                        suggest(key.text, FIELD_KINDS) or "fields: " + ", ".join(FIELD_KINDS),
                    )
                if len(tokens) < 2 or tokens[1].text != ":":
                    at = tokens[1] if len(tokens) > 1 else key
                    self.fail(f"expected ':' after '{key.text}'", self.tok_span(at))
                if any(name == key.text for name, _ in spans):
                    self.fail(f"field '{key.text}' is given twice", self.tok_span(key))
                if kind not in FIELD_KINDS[key.text]:
                    self.fail(
                        f"'{key.text}:' does not apply to @{kind} actions",
                        self.tok_span(key),
                        "it is used by "
                        + ", ".join(f"@{k}" for k in sorted(FIELD_KINDS[key.text])),
                    )
                spans.append((key.text, self.tok_span(key)))
                col = tokens[1].end
                if key.text not in TEXT_FIELDS and [t.text for t in tokens[2:]] == ["|"]:
                    col = tokens[2].end  # ``out: |``: the statements are the indented lines
                parse_field = getattr(self, f"parse_field_{key.text}")
                result.update(parse_field(item, col, item_end, kind))
            except _Abort:
                continue
        result["field_spans"] = tuple(spans)
        return result

    def parse_field_prompt(self, index: int, col: int, end: int, kind: str) -> dict[str, object]:
        return {"prompt": self.parse_text_field(index, col, end, "prompt")}

    def parse_field_showprompt(
        self, index: int, col: int, end: int, kind: str
    ) -> dict[str, object]:
        return {"showprompt": self.parse_text_field(index, col, end, "showprompt")}

    def field_tokens(self, index: int, col: int, end: int, what: str) -> list[Token]:
        """The tokens of a field value: on the field's line, continued on deeper lines while a
        bracket is open; or, when the line holds nothing, the deeper lines."""
        tokens = self.tokens(index, start=col)
        sub = index + 1
        if not tokens:
            for sub in range(index + 1, end):
                if not self.lines[sub].blank:
                    tokens += self.tokens(sub)
            sub = end
        while _depth(tokens) > 0 and sub < end:
            if not self.lines[sub].blank:
                tokens += self.tokens(sub)
            sub += 1
        if sub < end:
            self.no_body(sub - 1, end, f"'{what}:'")
        if not tokens:
            self.fail(f"expected a value after '{what}:'", self.eol_span(index))
        self.closed_strings(tokens)
        return tokens

    def closed_strings(self, tokens: list[Token]) -> None:
        """An unterminated quote swallows the rest of its line: say so before anything else
        (otherwise the error is about a bracket or an arrow the string swallowed)."""
        for token in tokens:
            if token.kind == "string" and quote_end(token.text, 0) != len(token.text):
                self.fail("unterminated string", self.tok_span(token), "close the quote")

    def parse_field_scope(self, index: int, col: int, end: int, kind: str) -> dict[str, object]:
        tokens = self.field_tokens(index, col, end, "scope")
        return {"scope": self.parse_scope(tokens)}

    def parse_scope(self, tokens: list[Token]) -> Scope:
        """§9.3: ``[@a, {alive}] + wolves``, ``@a, @b``, ``all``, a variable."""
        items: list[ScopeItem] = []
        pos = 0
        expect_item = True
        while pos < len(tokens):
            token = tokens[pos]
            if not expect_item:
                if token.text not in ("+", ","):
                    self.fail(
                        f"expected '+' or ',' in scope, found '{token.text}'", self.tok_span(token)
                    )
                expect_item = True
                pos += 1
                continue
            if token.text == "[":
                close = _match(tokens, pos)
                if close < 0:
                    opener = _unclosed(tokens[pos:]) or token
                    self.fail(
                        f"'{opener.text}' is never closed",
                        self.tok_span(opener),
                        f"close it with '{_CLOSERS[opener.text]}'",
                    )
                for piece in _split(tokens[pos + 1 : close]):
                    items.append(self.scope_item(piece, token))
                pos = close + 1
            else:
                stop = pos + 1
                if token.text == "{":
                    stop = _match(tokens, pos) + 1
                    if stop <= 0:
                        self.fail("'{' is never closed", self.tok_span(token))
                items.append(self.scope_item(tokens[pos:stop], token))
                pos = stop
            expect_item = False
        if expect_item:
            self.fail("expected a scope item", self.tok_span(tokens[-1]))
        return Scope(tuple(items), self.tok_span(tokens[0], tokens[-1]))

    def scope_item(self, piece: list[Token], near: Token) -> ScopeItem:
        if not piece:
            self.fail("empty scope item", self.tok_span(near))
        span = self.tok_span(piece[0], piece[-1])
        if (
            len(piece) == 3
            and piece[0].text == "{"
            and piece[2].text == "}"
            and piece[1].kind in ("name", "actor")
        ):
            return ScopeItem("expand", piece[1].text, span)
        if len(piece) >= 2 and all(t.kind in ("name", "actor") for t in piece[:2]):
            self.fail(
                f"expected ',' between '{piece[0].text}' and '{piece[1].text}'",
                self.tok_span(piece[1]),
                "separate scope items with ',': [@a, @b]",
            )
        if len(piece) == 1:
            token = piece[0]
            if token.kind == "actor" and token.text != "@":
                return ScopeItem("actor", token.text, span)
            if token.kind == "name":
                return ScopeItem("all" if token.text == "all" else "var", token.text, span)
        self.fail(
            "a scope item is @actor, a variable, {variable} or all",
            span,
            "e.g. scope: [@host] + wolves",
        )

    def field_items(
        self,
        index: int,
        col: int,
        end: int,
        pieces_of: Callable[[list[Token]], list[list[Token]]],
        parse_item: Callable[[list[Token]], _Item],
        missing: str,
    ) -> tuple[_Item, ...]:
        """The items of a comma-separated field value, row by row (:meth:`field_rows`): a broken
        item is noted and skipped, a value without any item is the error ``missing``."""
        items: list[_Item] = []
        attempted = False
        for row, start in self.field_rows(index, col, end):
            for piece in pieces_of(self.tokens(row, start=start)):
                attempted = True
                try:
                    items.append(parse_item(piece))
                except _Abort:
                    self.note_broken(piece[0])
        if not attempted:
            self.fail(missing, self.eol_span(index))
        return tuple(items)

    def field_rows(self, index: int, col: int, end: int) -> list[tuple[int, int]]:
        """(line, start column) of a field's value: the rest of its own line, then every
        non-blank deeper line (``in:``/``out:`` items may continue on following lines)."""
        return [(index, col)] + [
            (sub, 0) for sub in range(index + 1, end) if not self.lines[sub].blank
        ]

    def parse_field_in(self, index: int, col: int, end: int, kind: str) -> dict[str, object]:
        return {"inputs": self.parse_inputs(index, col, end)}

    def parse_inputs(self, index: int, col: int, end: int) -> tuple[Input, ...]:
        """``in: a, b = expr`` on the line and/or one or more per deeper line."""
        return self.field_items(
            index,
            col,
            end,
            lambda tokens: [piece for piece in _split(tokens) if piece],
            self.parse_input,
            "expected at least one name after 'in:'",
        )

    def parse_input(self, piece: list[Token]) -> Input:
        name = piece[0]
        if name.kind not in ("name", "actor") or name.text == "@":
            self.fail(f"expected a parameter name, found '{name.text}'", self.tok_span(name))
        if len(piece) == 1:
            return Input(name.text, None, self.tok_span(name))
        if piece[1].text != "=":
            self.fail(
                f"expected '=' or ',' after '{name.text}'",
                self.tok_span(piece[1]),
                "write name = expression",
            )
        if len(piece) < 3:
            self.fail(
                f"expected an expression after '{name.text} ='",
                self.tok_span(piece[1]),
                f"write {name.text} = variable (or leave out '=' to pass '{name.text}' itself)",
            )
        expr = self.expression(piece[2:], value=True)
        return Input(name.text, expr, self.tok_span(name, piece[-1]))

    def expression(self, tokens: list[Token], value: bool = False) -> Expr | None:
        """Compile the source text covered by ``tokens`` (same line or continued lines)."""
        first, last = tokens[0], tokens[-1]
        if first.line == last.line:
            text = self.lines[first.line - 1].code(flow=False)[first.col : last.end]
        else:
            parts = [self.lines[first.line - 1].code()[first.col :]]
            for number in range(first.line + 1, last.line):
                parts.append(self.lines[number - 1].code())
            parts.append(self.lines[last.line - 1].code()[: last.end])
            text = "\n".join(parts)
        span = Span(self.path, first.line, first.col + 1, last.line, last.end + 1)
        compile_ = compile_value if value else compile_expression
        return compile_(text, span, self.diagnostics, self.code_aliases)

    def parse_field_out(self, index: int, col: int, end: int, kind: str) -> dict[str, object]:
        if kind == "assign":
            return {"assignments": self.parse_assignments(index, col, end)}
        return {"outs": self.parse_outs(index, col, end)}

    def parse_outs(self, index: int, col: int, end: int) -> tuple[Out, ...]:
        """``out: a, b?, c: int, d(enum([x, y]), "label"), e: dropdown, choices={…}``."""
        return self.field_items(
            index,
            col,
            end,
            _out_pieces,
            self.parse_out,
            "expected at least one output after 'out:'",
        )

    def parse_out(self, piece: list[Token]) -> Out:
        pos = 0
        target, pos = self.parse_target(piece, pos)
        optional = False
        if pos < len(piece) and piece[pos].text == "?":
            optional = True
            pos += 1
        out_type: OutType | None = None
        caption: str | None = None
        if pos < len(piece) and piece[pos].text == "(":
            close = _match(piece, pos)
            if close < 0:
                self.fail("'(' is never closed", self.tok_span(piece[pos]), "close it with ')'")
            if close != len(piece) - 1:
                self.fail(
                    "expected the out's (type, …) to end the item",
                    self.tok_span(piece[pos]),
                    "separate outs with ',': out: a(int), b(string)",
                )
            out_type, caption = self.parse_out_type(piece[pos + 1 : close], piece[pos])
            pos = close + 1
        elif pos < len(piece) and piece[pos].text == ":":
            out_type, caption = self.parse_out_type(piece[pos + 1 :], piece[pos])
            pos = len(piece)
        if pos < len(piece):
            self.fail(f"unexpected '{piece[pos].text}' in out", self.tok_span(piece[pos]))
        return Out(target, out_type, optional, self.tok_span(piece[0], piece[-1]), caption)

    def parse_out_type(self, tokens: list[Token], near: Token) -> tuple[OutType | None, str | None]:
        """``type, "label", choices={…}, label="…"``: the type (None if untyped or unknown) and
        the caption, the label a person sees when asked (§10.8; the guide's ``"标签"``)."""
        parts = _split(tokens)
        if not parts or not parts[0]:
            self.fail("expected a type", self.tok_span(near))
        caption: str | None = None
        for part in parts:
            if len(part) == 1 and part[0].kind == "string":
                caption = part[0].value
            elif len(part) == 3 and part[0].text == "label" and part[1].text == "=":
                if part[2].kind != "string":
                    self.fail(
                        "expected a quoted label after 'label='",
                        self.tok_span(part[2]),
                        'write label="…"',
                    )
                caption = part[2].value
        type_tokens = parts[0]
        name = type_tokens[0]
        if name.kind == "string" or (name.text == "label" and len(type_tokens) > 1):
            return None, caption
        if name.text not in OUT_TYPES:
            self.warning(
                f"unknown out type '{name.text}' is ignored",
                self.tok_span(name),
                suggest(name.text, OUT_TYPES) or "types: " + ", ".join(OUT_TYPES),
            )
            return None, caption
        choices: tuple[Value, ...] = ()
        choices_from: Target | None = None
        if name.text == "enum":
            inner = type_tokens[1:]
            if len(inner) >= 2 and inner[0].text == "(" and inner[-1].text == ")":
                inner = inner[1:-1]
            if not inner or inner[0].text != "[" or _match(inner, 0) != len(inner) - 1:
                self.fail("expected enum([a, b, …])", self.tok_span(name))
            choices = self.parse_literal(inner, 0)[0].items  # type: ignore[union-attr]
        elif len(type_tokens) > 1:
            self.fail(
                f"unexpected '{type_tokens[1].text}' after the type", self.tok_span(type_tokens[1])
            )
        for part in parts[1:]:
            if _is_choices_variable(part):
                choices_from = Target(part[3].text, self.tok_span(part[3]))
            elif len(part) >= 3 and part[0].text == "choices" and part[1].text == "=":
                choices = self.parse_choices(part[2:])
            elif (len(part) >= 3 and part[0].text == "label" and part[1].text == "=") or (
                len(part) == 1 and part[0].kind == "string"
            ):
                continue
            elif part:
                self.fail(
                    f"unexpected '{part[0].text}' in the out's type",
                    self.tok_span(part[0]),
                    'write name(type, "label", choices={a, b})',
                )
        return OutType(name.text, choices, choices_from), caption  # type: ignore[arg-type]

    def parse_choices(self, tokens: list[Token]) -> tuple[Value, ...]:
        """``{a, b}`` / ``[a, b]``: literal choices (``{alive}`` names a variable instead)."""
        if tokens[0].text not in ("{", "[") or _match(tokens, 0) != len(tokens) - 1:
            self.fail("expected choices={a, b}", self.tok_span(tokens[0]))
        return tuple(self.item(piece) for piece in _split(tokens[1:-1]) if piece)

    def parse_target(self, tokens: list[Token], pos: int) -> tuple[Target, int]:
        """§9.6 targets: ``name``, ``@var``, ``dict.@x``, ``@x.attr``, ``attr.@x``, ``dict[key]``."""
        first = tokens[pos]
        if first.kind not in ("name", "actor") or first.text == "@":
            self.fail(f"expected a variable name, found '{first.text}'", self.tok_span(first))
        pos += 1
        if pos + 1 < len(tokens) and tokens[pos].text == ".":
            second = tokens[pos + 1]
            if second.kind not in ("name", "actor"):
                self.fail("expected a name after '.'", self.tok_span(second))
            span = self.tok_span(first, second)
            if first.kind == "actor" and second.kind == "actor":
                self.fail("a path has one actor side", span, "write '@x.attr' or 'attr.@x'")
            if first.kind == "actor":
                return Target(second.text, span, key=first.text, key_kind="actor"), pos + 2
            kind = "actor" if second.kind == "actor" else "name"
            return Target(first.text, span, key=second.text, key_kind=kind), pos + 2
        if pos < len(tokens) and tokens[pos].text == "[":
            close = _match(tokens, pos)
            if close < 0 or close == pos + 1:
                self.fail("expected 'name[key]'", self.tok_span(tokens[pos]))
            span = self.tok_span(first, tokens[close])
            inner = tokens[pos + 1 : close]
            if len(inner) == 1 and inner[0].kind == "actor" and inner[0].text != "@":
                return Target(first.text, span, key=inner[0].text, key_kind="actor"), close + 1
            line = self.lines[first.line - 1].code()
            key = line[inner[0].col : inner[-1].end].strip()
            expr = self.expression(inner)
            target = Target(first.text, span, key=key, key_kind="index", key_expr=expr)
            return target, close + 1
        return Target(first.text, self.tok_span(first)), pos

    def parse_assignments(self, index: int, col: int, end: int) -> tuple[Assignment, ...]:
        """§9.6: one statement per line; a statement with an open bracket continues."""
        statements: list[list[Token]] = []
        rows = self.field_rows(index, col, end)
        for row, start in rows:
            tokens = self.tokens(row, start=start)
            if statements and _depth(statements[-1]) > 0:
                statements[-1] += tokens
            elif tokens:
                statements.append(tokens)
        result = []
        for statement in statements:
            try:
                result.append(self.parse_assignment(statement))
            except _Abort:
                continue
        if not statements:
            self.fail("expected an assignment after 'out:'", self.eol_span(index))
        return tuple(result)

    def parse_assignment(self, tokens: list[Token]) -> Assignment:
        target, pos = self.parse_target(tokens, 0)
        if pos >= len(tokens) or tokens[pos].text not in ("=", "+=", "-="):
            at = tokens[pos] if pos < len(tokens) else tokens[-1]
            self.fail("expected '=', '+=' or '-=' after the target", self.tok_span(at))
        op = tokens[pos].text
        value = tokens[pos + 1 :]
        if not value:
            self.fail(f"expected a value after '{op}'", self.tok_span(tokens[pos]))
        pieces = _split(value)
        if len(pieces) > 1 and any(
            token.text in ("=", "+=", "-=") and _depth(piece[:at]) == 0
            for piece in pieces[1:]
            for at, token in enumerate(piece)
        ):
            self.fail(
                "one assignment per line in an @assign out:",
                self.tok_span(value[len(pieces[0])]),
                "put the next assignment on its own line, indented like the first",
            )
        if (
            op == "="
            and value[0].text in ("add", "remove")
            and len(value) > 2
            and value[1].text == "("
            and _match(value, 1) == len(value) - 1
        ):
            op = value[0].text
            inner = value[2:-1]
            if not inner:
                self.fail(f"expected a value inside {op}()", self.tok_span(value[1]))
            value = inner
        expr = self.expression(value, value=True)
        if expr is None:
            raise _Abort
        span = self.tok_span(tokens[0], tokens[-1])
        return Assignment(target, op, expr, span)  # type: ignore[arg-type]

    def parse_field_resolve(self, index: int, col: int, end: int, kind: str) -> dict[str, object]:
        tokens = self.field_tokens(index, col, end, "resolve")
        func, pos = self.parse_func_ref(tokens, 0)
        args: tuple[str, ...] | None = None
        if pos < len(tokens):
            if tokens[pos].text != "(" or _match(tokens, pos) != len(tokens) - 1:
                self.fail("expected '(arg, …)' or the end of the line", self.tok_span(tokens[pos]))
            names = []
            for piece in _split(tokens[pos + 1 : -1]):
                if len(piece) != 1 or piece[0].kind not in ("name", "actor"):
                    at = piece[0] if piece else tokens[pos]
                    self.fail("resolve arguments are names", self.tok_span(at))
                names.append(piece[0].text)
            args = tuple(names)
        return {"resolve": Resolve(func, args, self.tok_span(tokens[0], tokens[-1]))}

    def parse_field_max_retries(
        self, index: int, col: int, end: int, kind: str
    ) -> dict[str, object]:
        tokens = self.field_tokens(index, col, end, "max_retries")
        if len(tokens) != 1 or not _INT.match(tokens[0].text) or tokens[0].text.startswith("-"):
            self.fail("max_retries: expects a whole number ≥ 0", self.tok_span(tokens[0]))
        return {"max_retries": int(tokens[0].text)}

    def parse_field_fallback(self, index: int, col: int, end: int, kind: str) -> dict[str, object]:
        tokens = self.field_tokens(index, col, end, "fallback")
        if tokens[0].text == "&":
            call, pos = self.parse_module_call(tokens, 0)
            if pos != len(tokens):
                self.fail(f"unexpected '{tokens[pos].text}'", self.tok_span(tokens[pos]))
            return {"fallback": call}
        if len(tokens) != 1 or tokens[0].kind != "name":
            self.fail("fallback: expects an action name or &Module", self.tok_span(tokens[0]))
        return {"fallback": tokens[0].text}

    def single_name(self, index: int, col: int, end: int, what: str) -> str:
        tokens = self.field_tokens(index, col, end, what)
        if len(tokens) != 1 or tokens[0].kind != "name":
            self.fail(f"{what}: expects one method name", self.tok_span(tokens[0]))
        return tokens[0].text

    def parse_field_memory(self, index: int, col: int, end: int, kind: str) -> dict[str, object]:
        return {"memory": self.single_name(index, col, end, "memory")}

    def parse_field_context(self, index: int, col: int, end: int, kind: str) -> dict[str, object]:
        return {"context": self.single_name(index, col, end, "context")}

    def parse_field_model(self, index: int, col: int, end: int, kind: str) -> dict[str, object]:
        return {"model": self.parse_text_value(index, col, end, "model").value}

    def parse_field_interrupt(self, index: int, col: int, end: int, kind: str) -> dict[str, object]:
        """§10.7: ``HUMAN``, ``HUMAN_EXCEPT(@a, …)``, ``alias.fn`` or a condition."""
        tokens = self.field_tokens(index, col, end, "interrupt")
        span = self.tok_span(tokens[0], tokens[-1])
        head = tokens[0].text
        if head == "HUMAN" and len(tokens) == 1:
            return {"interrupt": Interrupt("human", span=span)}
        if head == "HUMAN_EXCEPT":
            actors: list[str] = []
            if len(tokens) > 1:
                if tokens[1].text != "(" or _match(tokens, 1) != len(tokens) - 1:
                    self.fail("expected HUMAN_EXCEPT(@a, @b)", self.tok_span(tokens[1]))
                for piece in _split(tokens[2:-1]):
                    if len(piece) != 1 or piece[0].kind != "actor":
                        at = piece[0] if piece else tokens[1]
                        self.fail("HUMAN_EXCEPT lists actors such as @eve", self.tok_span(at))
                    actors.append(piece[0].text)
            return {"interrupt": Interrupt("human_except", actors=tuple(actors), span=span)}
        if (
            len(tokens) == 3
            and tokens[0].kind == "name"
            and tokens[1].text == "."
            and tokens[2].kind == "name"
            and tokens[0].text in self.code_aliases
        ):
            func, _ = self.parse_func_ref(tokens, 0)
            return {"interrupt": Interrupt("func", func=func, span=span)}
        condition = self.expression(tokens)
        if condition is None:
            raise _Abort
        return {"interrupt": Interrupt("condition", condition=condition, span=span)}

    # ------------------------------------------------------------------ modules (§11)

    def parse_module(self, index: int, end: int, tokens: list[Token], defs: _Definitions) -> None:
        if len(tokens) < 2 or tokens[1].kind != "name":
            self.fail("expected a module name after 'module'", self.tok_span(tokens[-1]))
        name = tokens[1]
        self.check_name(name, "module")
        pos = 2
        params: list[str] = []
        if pos < len(tokens) and tokens[pos].text == "(":
            close = _match(tokens, pos)
            if close < 0:
                self.fail("'(' is never closed", self.tok_span(tokens[pos]))
            for piece in _split(tokens[pos + 1 : close]):
                if len(piece) != 1 or piece[0].kind not in ("name", "actor"):
                    at = piece[0] if piece else tokens[pos]
                    self.fail("module parameters are names", self.tok_span(at))
                self.check_name(piece[0], "parameter")
                if piece[0].text in params:
                    self.error(
                        f"parameter '{piece[0].text}' is listed twice", self.tok_span(piece[0])
                    )
                params.append(piece[0].text)
            pos = close + 1
        self.expect_header(tokens, pos)
        span = self.tok_span(tokens[0], name)
        self.unique("module", name.text, span, defs)
        inner = _Definitions(module=True)
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

    def parse_sketch_block(self, index: int, end: int, defs: _Definitions) -> None:
        """Editor layout hints ``[Node] = x, y``: kept, never interpreted (§2.1)."""
        for item, _item_end in self.items(index + 1, end):
            text = self.lines[item].code().strip()
            match = re.match(r"^\[([^\]]+)\]\s*=\s*(.*)$", text)
            if match is None:
                self.error("expected '[Node] = x, y' in sketch:", self.line_span(item))
                continue
            defs.sketch.append((match.group(1).strip(), match.group(2).strip()))

    # ------------------------------------------------------------------ flows (§12)

    def parse_flow_block(self, index: int, end: int, defs: _Definitions) -> None:
        graph = _GraphBuilder(self)
        errors = self.diagnostics.error_count
        has_lines = any(not self.lines[sub].blank for sub in range(index + 1, end))
        if not has_lines:
            self.empty_flow(index, end, defs.module)
        outer_declarations, self.declarations = self.declarations, {}
        try:
            pending = self.parse_flow_lines(index + 1, end, graph, start_from=None, loop=None)
            self.drop_pending(pending, None)
            last = max(index, end - 1)
            span = Span(self.path, index + 1, 1, last + 1, len(self.lines[last].raw) + 1)
            if defs.flow is None:  # a second flow was reported by once(); the first one counts
                # A module's empty flow is a stub (§12.11): complete, no nodes; the checker
                # warns about it and a call runs nothing.
                complete = (has_lines or defs.module) and self.diagnostics.error_count == errors
                defs.flow = self.apply_declarations(graph.build(span, complete))
        finally:
            self.declarations = outer_declarations

    def empty_flow(self, index: int, end: int, module: bool) -> None:
        """A flow header with nothing under it; unindented flow lines after it get their own
        error (parse_block), which says what to do. In a module it is a stub, which the checker
        reports as a warning."""
        after = next(
            (sub for sub in range(end, len(self.lines)) if not self.lines[sub].blank), None
        )
        if not module and (after is None or not _is_flow_line(self.tokens(after))):
            header = self.tokens(index)[0]
            self.error(
                f"'{header.text}:' has no lines",
                self.tok_span(header),
                "indent the flow under it, e.g. [START] -> first_action -> [END]",
            )

    @staticmethod
    def is_declaration(tokens: list[Token]) -> bool:
        """``[X]: target`` or ``[X]:`` alone on its line (§12.1)."""
        return (
            len(tokens) >= 4
            and tokens[0].text == "["
            and tokens[1].kind == "name"
            and tokens[2].text == "]"
            and tokens[3].text == ":"
            and all(token.text != "->" for token in tokens[4:])
        )

    def declare(self, tokens: list[Token], index: int, end: int) -> None:
        """Record a binding line; :meth:`apply_declarations` binds the node where it is used."""
        self.no_body(
            index,
            end,
            "a binding line",
            "'[X]: target' only says what [X] runs; connect [X] on lines like '[X] -> …'",
        )
        name = tokens[1].text
        binding: str | ModuleCall | None = None
        if len(tokens) > 4:
            binding, pos = self.parse_binding(tokens, 4)
            if pos < len(tokens):
                self.fail(
                    f"unexpected '{tokens[pos].text}' after '[{name}]: {tokens[4].text}'",
                    self.tok_span(tokens[pos]),
                    "a binding line is '[X]: action' or '[X]: &Module(args)'; "
                    "chain nodes with '->'",
                )
        span = self.tok_span(tokens[0], tokens[-1])
        earlier = self.declarations.get(name)
        if earlier is None or earlier.binding is None:
            self.declarations[name] = _Declaration(binding, span)
        elif binding is not None and _binding_key(binding) != _binding_key(earlier.binding):
            self.error(
                f"node [{name}] is bound twice",
                span,
                f"it is already bound at line {earlier.span.line}; a node holds one binding",
            )

    def apply_declarations(self, graph: Graph) -> Graph:
        """Bind the declared nodes wherever the flow uses them, loop bodies included; a
        declared node the flow never uses stays in it as a node of its own."""
        used: set[str] = set()
        graph = self.bind_declared(graph, used)
        nodes = list(graph.nodes)
        for name, declaration in self.declarations.items():
            if name not in used:  # kept in order of appearance, like every node
                where = (declaration.span.line, declaration.span.col)
                at = next(
                    (i for i, n in enumerate(nodes) if (n.span.line, n.span.col) > where),
                    len(nodes),
                )
                nodes.insert(at, FlowNode(name, declaration.binding, False, declaration.span))
        return dataclasses.replace(graph, nodes=tuple(nodes))

    def bind_declared(self, graph: Graph, used: set[str]) -> Graph:
        nodes = []
        for node in graph.nodes:
            if isinstance(node.binding, Loop):
                body = self.bind_declared(node.binding.body, used)
                node = dataclasses.replace(
                    node, binding=dataclasses.replace(node.binding, body=body)
                )
            elif not node.anonymous and node.name in self.declarations:
                used.add(node.name)
                node = self.bind_node(node, self.declarations[node.name])
            nodes.append(node)
        return dataclasses.replace(graph, nodes=tuple(nodes))

    def bind_node(self, node: FlowNode, declaration: _Declaration) -> FlowNode:
        """The node's binding from its declaration; the declaration's line is where it is
        defined, so diagnostics about what it runs point there."""
        if declaration.binding is None:
            return node
        if node.binding is None:
            return dataclasses.replace(node, binding=declaration.binding, span=declaration.span)
        if _binding_key(node.binding) != _binding_key(declaration.binding):
            first, second = sorted(
                (node.span, declaration.span), key=lambda span: (span.line, span.col)
            )
            self.error(
                f"node [{node.name}] is bound twice",
                second,
                f"it is already bound at line {first.line}; a node holds one binding",
            )
        return node

    def drop_pending(self, pending: _Pending | None, loop: _LoopBody | None) -> None:
        """A trailing ``->`` nothing continued: an iteration end in a loop body, else an error."""
        if pending is None or pending.loop_exit:
            return
        if loop is not None:
            if pending.node not in loop.ends:
                loop.ends.append(pending.node)
            return
        self.error(
            "'->' at the end of the line leads nowhere",
            pending.span,
            "continue on the next line with '-> …', 'fork:', 'for …:' or 'par …:'",
        )

    def parse_flow_lines(
        self,
        start: int,
        stop: int,
        graph: _GraphBuilder,
        start_from: str | None,
        loop: _LoopBody | None,
        pending: _Pending | None = None,
    ) -> _Pending | None:
        """Flow lines of one level. ``start_from`` is where a line starting with ``->`` starts
        (a fork's node, a loop's head); at the top of a flow such a line continues the
        previous line's trailing ``->``."""
        join_node: tuple[str, Token] | None = None
        # After a broken line, lines that would continue it are skipped quietly: their
        # "needs a node before it" would only repeat the first error.
        after_error = False
        # Consecutive '->' lines after a loop body are all exit lines of that loop (like the
        # out-edges of one node, §12.3): ``-> if (won) -> [END]`` / ``-> if (not won) -> [P]``.
        loop_exit: str | None = None
        for index, end in self.items(start, stop):
            tokens = self.tokens(index, flow=True)
            continues = tokens[0].text == "->" or self.is_construct(tokens, 0)
            if tokens[0].text != "->":
                loop_exit = None
            if after_error and continues and pending is None and start_from is None:
                continue
            if after_error and tokens[0].text == "to":
                continue  # the 'to' of a join whose header was broken
            after_error = False
            try:
                self.closed_strings(tokens)
                if self.is_declaration(tokens):  # declares a node, creates no edge (§12.1)
                    self.declare(tokens, index, end)
                    continue
                if join_node is not None:
                    node, join_token = join_node
                    join_node = None
                    if tokens[0].text != "to":
                        self.error(
                            "expected 'to [node]' after the join's inputs",
                            self.tok_span(tokens[0]),
                            "a join ends with a line 'to [next]' at the join's indentation",
                        )
                    else:
                        pending = self.parse_chain(
                            tokens, 1, index, end, graph, node, loop, None, arrow_done=True
                        )
                        continue
                head = tokens[0]
                if head.text == "join":
                    self.drop_pending(pending, loop)
                    pending = None
                    join_node = (self.parse_join(tokens, index, end, graph, loop), head)
                    continue
                if head.text == "to":
                    self.fail("'to' without a join before it", self.tok_span(head))
                if head.text == "->":
                    if pending is not None and (pending.loop_exit or start_from is None):
                        source: str | None = pending.node
                        if pending.loop_exit and start_from is None:
                            loop_exit = pending.node
                    elif pending is None and loop_exit is not None:
                        source = loop_exit
                    else:
                        self.drop_pending(pending, loop)
                        source = start_from
                    pending = None
                    if source is None:
                        self.fail(
                            "a line starting with '->' needs a node before it",
                            self.tok_span(head),
                            "end the previous line with '->' or start this line with a node",
                        )
                    pending = self.parse_chain(tokens, 0, index, end, graph, source, loop, None)
                elif self.is_construct(tokens, 0):
                    if pending is None or pending.loop_exit:
                        self.fail(
                            f"'{head.text}' needs a node before it",
                            self.tok_span(head),
                            f"end the previous line with '->', or write 'X -> {head.text} …'",
                        )
                    source = pending.node
                    pending = self.parse_construct(tokens, 0, index, end, graph, source, None, loop)
                else:
                    self.drop_pending(pending, loop)
                    pending = self.parse_chain(tokens, 0, index, end, graph, None, loop, None)
            except _Abort:
                pending = None
                after_error = True
        if join_node is not None:
            self.error(
                "join has no 'to [node]' line",
                self.tok_span(join_node[1]),
                "add a line 'to [next]' after the join's inputs",
            )
        return pending

    @staticmethod
    def is_construct(tokens: list[Token], pos: int) -> bool:
        head = tokens[pos]
        if head.kind != "name" or head.text not in ("fork", "for", "par"):
            return False
        after = tokens[pos + 1] if pos + 1 < len(tokens) else None
        if head.text == "fork":
            return after is not None and after.text == ":"
        return after is not None and after.kind in ("name", "actor")

    def parse_chain(
        self,
        tokens: list[Token],
        pos: int,
        index: int,
        end: int,
        graph: _GraphBuilder,
        source: str | None,
        loop: _LoopBody | None,
        condition: Expr | None,
        arrow_done: bool = False,
    ) -> _Pending | None:
        """``[A]:x -> y -> if (c) -> [B] ->`` and what a line ending in a construct owns."""
        prev = source
        if prev is None:
            prev, pos = self.parse_element(tokens, pos, graph)
        while True:
            if not arrow_done:
                if pos == len(tokens):
                    hint = "end the line above with '->' to continue it on the indented lines"
                    deeper = next(
                        (i for i in range(index + 1, end) if not self.lines[i].blank), None
                    )
                    if deeper is not None and self.tokens(deeper, flow=True)[0].text == "->":
                        hint = "align it with the line above to make it another branch, or " + hint
                    self.no_body(index, end, "a flow line", hint)
                    return None
                if tokens[pos].text != "->":
                    self.fail(
                        f"expected '->' after {_describe(tokens, pos - 1)}, "
                        f"found '{tokens[pos].text}'",
                        self.tok_span(tokens[pos]),
                        _arrow_hint(tokens[pos].text),
                    )
                arrow = tokens[pos]
                condition, pos = self.parse_arrow(tokens, pos)
            else:
                arrow = tokens[pos - 1]
                arrow_done = False
            if pos == len(tokens):
                if condition is not None:
                    self.fail(
                        "a condition must lead to a node",
                        self.tok_span(tokens[-1]),
                        "write -> if (condition) -> [Node] on one line",
                    )
                trailing = _Pending(prev, self.tok_span(arrow))
                if end > index + 1:
                    return self.parse_flow_lines(
                        index + 1, end, graph, start_from=None, loop=loop, pending=trailing
                    )
                return trailing
            if self.is_construct(tokens, pos):
                return self.parse_construct(tokens, pos, index, end, graph, prev, condition, loop)
            node, pos = self.parse_element(tokens, pos, graph)
            graph.edge(prev, node, condition, self.tok_span(arrow, tokens[pos - 1]))
            prev = node
            condition = None

    def parse_arrow(self, tokens: list[Token], pos: int) -> tuple[Expr | None, int]:
        """``->`` then optionally ``if EXPR ->`` or ``(if EXPR)`` (§12.2)."""
        pos += 1
        if pos < len(tokens) and tokens[pos].text == "if":
            stop = pos + 1
            while stop < len(tokens) and not (
                tokens[stop].text == "->" and _depth(tokens[pos + 1 : stop]) == 0
            ):
                stop += 1
            if stop == pos + 1:
                self.fail("expected a condition after 'if'", self.tok_span(tokens[pos]))
            if stop == len(tokens):
                self.missing_condition_arrow(tokens, pos + 1)
            condition = self.expression(tokens[pos + 1 : stop])
            if condition is None:
                raise _Abort
            return condition, stop + 1
        if pos + 1 < len(tokens) and tokens[pos].text == "(" and tokens[pos + 1].text == "if":
            close = _match(tokens, pos)
            if close < 0:
                self.fail("'(' is never closed", self.tok_span(tokens[pos]))
            if close == pos + 2:
                self.fail("expected a condition after 'if'", self.tok_span(tokens[pos + 1]))
            condition = self.expression(tokens[pos + 2 : close])
            if condition is None:
                raise _Abort
            pos = close + 1
            if pos < len(tokens) and tokens[pos].text == "->":
                pos += 1
            return condition, pos
        return None, pos

    def missing_condition_arrow(self, tokens: list[Token], start: int) -> NoReturn:
        """``-> if (c) [B]`` or ``-> if (c -> [B]``: say which of the two went wrong."""
        opener = _unclosed(tokens[start:])
        if opener is not None:
            raw = self.lines[opener.line - 1].raw
            comment = raw[comment_start(raw) :]
            hint = f"close it with '{_CLOSERS[opener.text]}'"
            if _CLOSERS[opener.text] in comment:
                hint = (
                    f"'{comment[:2].strip()}' after a space starts a comment (§1.3) and hides the "
                    "rest of the line; for floor division write day//2"
                )
            self.fail(f"'{opener.text}' is never closed", self.tok_span(opener), hint)
        hint = "write -> if (condition) -> [Node], or -> (if condition) [Node]"
        for at in range(start + 1, len(tokens)):
            if tokens[at].text == "[" and _depth(tokens[start:at]) == 0:
                self.fail(
                    f"expected '->' before {_describe_node(tokens, at)}",
                    self.tok_span(tokens[at]),
                    hint,
                )
        self.fail("expected '->' after the condition", self.eol_token_span(tokens[-1]), hint)

    def eol_token_span(self, token: Token) -> Span:
        """Just past ``token``: where something missing at the end of a line belongs."""
        return self.span(token.line, token.end, token.end + 1)

    def parse_element(self, tokens: list[Token], pos: int, graph: _GraphBuilder) -> tuple[str, int]:
        """``[Name]``, ``[Name]: target``, a bare action or ``&Module(args)``."""
        if pos >= len(tokens):
            self.fail(
                "expected a node after '->'",
                self.tok_span(tokens[-1]),
                "e.g. -> [Next] or -> action_name",
            )
        token = tokens[pos]
        if token.text == "[":
            if (
                pos + 2 >= len(tokens)
                or tokens[pos + 1].kind != "name"
                or tokens[pos + 2].text != "]"
            ):
                self.fail("expected '[Name]'", self.tok_span(token), "node names are words: [A]")
            name = tokens[pos + 1].text
            span = self.tok_span(token, tokens[pos + 2])
            pos += 3
            binding: str | ModuleCall | None = None
            if pos < len(tokens) and tokens[pos].text == ":":
                if pos + 1 >= len(tokens) or tokens[pos + 1].text == "->":
                    pos += 1  # '[B1]:' as the original editor writes it: unbound (§12.1)
                else:
                    binding, pos = self.parse_binding(tokens, pos + 1)
                span = self.tok_span(token, tokens[pos - 1])  # what it runs is part of it
            return graph.add(name, span, binding), pos
        if token.text == "fork":  # a construct whose ':' (or VAR in EXPR:) is missing
            self.fail(
                "expected ':' after 'fork'",
                self.eol_token_span(token),
                "write '-> fork:' and indent the branches ('-> …' lines) under it",
            )
        if token.text in ("for", "par"):
            self.fail(
                f"expected '{token.text} VAR in EXPR:'",
                self.eol_token_span(token),
                f"e.g. {token.text} @speaker in alive:",
            )
        if token.kind == "name" and pos + 1 < len(tokens) and tokens[pos + 1].text == "(":
            self.fail(
                f"unexpected '(' after '{token.text}'",
                self.tok_span(tokens[pos + 1]),
                f"actions take no arguments; a module call starts with '&': &{token.text}(…)",
            )
        if token.text == "&" or token.kind == "name":
            binding, after = self.parse_binding(tokens, pos)
            label = f"&{binding.module}" if isinstance(binding, ModuleCall) else binding
            name = f"{label}@{token.line}:{token.col + 1}"
            return graph.add(name, self.tok_span(token, tokens[after - 1]), binding, True), after
        self.fail(
            f"expected a node, an action or &Module, found '{token.text}'",
            self.tok_span(token),
        )

    def parse_binding(self, tokens: list[Token], pos: int) -> tuple[str | ModuleCall, int]:
        token = tokens[pos]
        if token.text == "&":
            return self.parse_module_call(tokens, pos)
        if token.kind != "name":
            self.fail(f"expected an action name, found '{token.text}'", self.tok_span(token))
        if token.text in RESERVED_NODE_NAMES:
            self.fail(
                f"'{token.text}' is a reserved node and is written in brackets",
                self.tok_span(token),
                f"write [{token.text}]",
            )
        if token.text in RESERVED:
            self.fail(
                f"'{token.text}' is reserved and cannot name an action",
                self.tok_span(token),
                "rename the action (§2.3)",
            )
        return token.text, pos + 1

    def parse_module_call(self, tokens: list[Token], pos: int) -> tuple[ModuleCall, int]:
        amp = tokens[pos]
        if pos + 1 >= len(tokens) or tokens[pos + 1].kind != "name":
            self.fail("expected a module name after '&'", self.tok_span(amp))
        name = tokens[pos + 1]
        pos += 2
        args: list[Expr] = []
        if pos < len(tokens) and tokens[pos].text == "(":
            close = _match(tokens, pos)
            if close < 0:
                self.fail("'(' is never closed", self.tok_span(tokens[pos]))
            for piece in _split(tokens[pos + 1 : close]):
                if not piece:
                    self.fail("empty module argument", self.tok_span(tokens[pos]))
                expr = self.expression(piece, value=True)
                if expr is None:
                    raise _Abort
                args.append(expr)
            pos = close + 1
        return ModuleCall(name.text, tuple(args), self.tok_span(amp, tokens[pos - 1])), pos

    def parse_construct(
        self,
        tokens: list[Token],
        pos: int,
        index: int,
        end: int,
        graph: _GraphBuilder,
        source: str,
        condition: Expr | None,
        loop: _LoopBody | None,
    ) -> _Pending | None:
        """``fork:`` / ``for``/``par VAR in EXPR:`` after ``source`` (same line or next)."""
        head = tokens[pos]
        if head.text == "fork":
            if condition is not None:
                self.fail(
                    "a condition cannot lead to 'fork:'",
                    self.tok_span(head),
                    "lead the condition to a node, then fork there: -> if (c) -> [F] and "
                    "[F] -> fork:",
                )
            if pos + 2 != len(tokens):
                self.fail("unexpected text after 'fork:'", self.tok_span(tokens[pos + 2]))
            if not any(not self.lines[sub].blank for sub in range(index + 1, end)):
                self.fail(
                    "fork: has no branches", self.tok_span(head), "indent '-> …' lines under it"
                )
            pending = self.parse_flow_lines(index + 1, end, graph, start_from=source, loop=loop)
            self.drop_pending(pending, loop)
            return None
        return self.parse_loop(tokens, pos, index, end, graph, source, condition)

    def parse_loop(
        self,
        tokens: list[Token],
        pos: int,
        index: int,
        end: int,
        graph: _GraphBuilder,
        source: str,
        condition: Expr | None,
    ) -> _Pending:
        head = tokens[pos]
        var = tokens[pos + 1]
        if var.text == "@" or pos + 2 >= len(tokens) or tokens[pos + 2].text != "in":
            at = var if var.text == "@" or pos + 2 >= len(tokens) else tokens[pos + 2]
            self.fail(
                f"expected '{head.text} VAR in EXPR:'",
                self.tok_span(at),
                f"e.g. {head.text} @speaker in alive:",
            )
        if tokens[-1].text != ":":
            self.fail(
                f"expected ':' at the end of the {head.text} line",
                self.eol_token_span(tokens[-1]),
                f"e.g. {head.text} @speaker in alive:",
            )
        if len(tokens) - 1 == pos + 3:
            self.fail("expected what to loop over after 'in'", self.tok_span(tokens[pos + 2]))
        iterable = self.expression(tokens[pos + 3 : -1])
        if iterable is None:
            raise _Abort
        name = f"{head.text}@{head.line}:{head.col + 1}"
        body = _GraphBuilder(self)
        body.add(name, self.tok_span(head), None, True)
        body_loop = _LoopBody()
        if not any(not self.lines[sub].blank for sub in range(index + 1, end)):
            self.fail(
                f"{head.text} has no body", self.tok_span(head), "indent '-> …' lines under it"
            )
        errors = self.diagnostics.error_count
        pending = self.parse_flow_lines(index + 1, end, body, start_from=name, loop=body_loop)
        self.drop_pending(pending, body_loop)
        if self.diagnostics.error_count == errors and not any(e.source == name for e in body.edges):
            first = next(sub for sub in range(index + 1, end) if not self.lines[sub].blank)
            self.error(
                f"the {head.text} body has no line starting with '->'",
                self.line_span(first),
                "start the line where each iteration begins with '->' (§12.7)",
            )
        last = self.lines[end - 1]
        span = Span(self.path, head.line, head.col + 1, last.number, len(last.raw) + 1)
        loop_node = Loop(
            head.text,  # type: ignore[arg-type]
            var.text,
            iterable,
            body.build(span),
            name,
            tuple(body_loop.ends),
            span,
        )
        graph.add(name, self.tok_span(head, tokens[-1]), loop_node, True)
        graph.edge(source, name, condition, self.tok_span(head))
        return _Pending(name, self.tok_span(head), loop_exit=True)

    def parse_join(
        self,
        tokens: list[Token],
        index: int,
        end: int,
        graph: _GraphBuilder,
        loop: _LoopBody | None,
    ) -> str:
        """``join(all|N|any):`` with input lines ending in ``->``; ``to [X]`` follows (§12.6)."""
        head = tokens[0]
        close = _match(tokens, 1)
        if close != 3 or len(tokens) != 5 or tokens[4].text != ":":
            self.fail(
                "expected 'join(all):', 'join(any):' or 'join(N):'",
                self.tok_span(head),
                "the nodes it waits for go on the indented lines ('[B] ->'), "
                "then 'to [next]' at the join's indentation (§12.6)",
            )
        arg = tokens[2]
        count: int | None
        if arg.text == "all":
            count = None
        elif arg.text == "any":
            count = 1
        elif _INT.match(arg.text) and int(arg.text) >= 1:
            count = int(arg.text)
        else:
            self.fail("join counts are 'all', 'any' or a number ≥ 1", self.tok_span(arg))
        name = f"join@{head.line}:{head.col + 1}"
        span = self.tok_span(head, tokens[-1])
        graph.add(name, span, Join(count, span), True)
        for item, item_end in self.items(index + 1, end):
            try:
                item_tokens = self.tokens(item, flow=True)
                if item_tokens[0].text == "->":
                    self.fail(
                        "a join input names the node that arrives",
                        self.tok_span(item_tokens[0]),
                        "write '[B] ->'",
                    )
                pending = self.parse_chain(item_tokens, 0, item, item_end, graph, None, loop, None)
                if pending is None or pending.loop_exit:
                    self.fail(
                        "a join input line ends with '->'",
                        self.line_span(item),
                        f"write '{self.lines[item].code(flow=True).strip()} ->'",
                    )
                graph.edge(pending.node, name, None, pending.span)
            except _Abort:
                continue
        return name


# --------------------------------------------------------------------------- helpers


def _path_ref(match: re.Match[str], span: Span) -> PathRef:
    first, second = match.group(1), match.group(2)
    if second is not None and second.startswith("@") and not first.startswith("@"):
        return PathRef(second, span, attr=first)
    if second is not None and first.startswith("@"):
        return PathRef(first, span, attr=second)
    return PathRef(first, span)


def _arrow_hint(found: str) -> str | None:
    if found in ("-", "=", ">", "→", "—", "－"):
        return "the flow arrow is '->' (or '--')"
    if found in ("/", "#"):
        return "a comment starts with '#' or '//' after a space (§1.3)"
    return None


def _is_flow_line(tokens: list[Token]) -> bool:
    """``[A] …``, ``-> …``, ``&M …`` or ``name -> …``: a line that belongs in a flow."""
    head = tokens[0]
    return head.text in ("[", "->", "&") or (
        head.kind == "name" and len(tokens) > 1 and tokens[1].text == "->"
    )


def _describe_node(tokens: list[Token], pos: int) -> str:
    """``[Name]`` when the tokens at ``pos`` spell one, else just ``'['``."""
    if pos + 2 < len(tokens) and tokens[pos + 1].kind == "name" and tokens[pos + 2].text == "]":
        return f"[{tokens[pos + 1].text}]"
    return "'['"


def _unclosed(tokens: list[Token]) -> Token | None:
    """The first bracket that is never closed, or None."""
    stack: list[Token] = []
    for token in tokens:
        if token.text in _CLOSERS:
            stack.append(token)
        elif token.text in (")", "]", "}") and stack:
            if _CLOSERS[stack[-1].text] != token.text:
                return stack[-1]  # ``[a, {b]``: the ``{`` is the one left open
            stack.pop()
    return stack[0] if stack else None


def _describe(tokens: list[Token], pos: int) -> str:
    token = tokens[pos]
    if token.text == "]" and pos >= 1:
        return f"[{tokens[pos - 1].text}]"
    return f"'{token.text}'"


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


def _max_depth(tokens: list[Token]) -> tuple[int, Token | None]:
    """The deepest bracket nesting of ``tokens`` and the first bracket opened that deep."""
    depth = deepest = 0
    deepest_at: Token | None = None
    for token in tokens:
        if token.text in _CLOSERS:
            depth += 1
            if depth > deepest:
                deepest, deepest_at = depth, token
        elif token.text in (")", "]", "}"):
            depth -= 1
    return deepest, deepest_at


def _depth(tokens: list[Token]) -> int:
    depth = 0
    for token in tokens:
        if token.text in _CLOSERS:
            depth += 1
        elif token.text in (")", "]", "}"):
            depth -= 1
    return depth


def _match(tokens: list[Token], pos: int) -> int:
    """Index of the bracket closing ``tokens[pos]``, or -1."""
    depth = 0
    for i in range(pos, len(tokens)):
        if tokens[i].text in _CLOSERS:
            depth += 1
        elif tokens[i].text in (")", "]", "}"):
            depth -= 1
            if depth == 0:
                return i
    return -1


def _out_pieces(tokens: list[Token]) -> list[list[Token]]:
    """The outputs of one ``out:`` row: a ``choices=…``/``label=…`` or a string piece belongs
    to the output before it (the comma between them is kept)."""
    merged: list[list[Token]] = []
    for piece in _split(tokens):
        if not piece:
            continue
        attaches = (len(piece) > 1 and piece[0].text in ("choices", "label")) or (
            piece[0].kind == "string"
        )
        if merged and attaches:
            comma = Token("op", ",", piece[0].line, piece[0].col, piece[0].col)
            merged[-1] = [*merged[-1], comma, *piece]
        else:
            merged.append(piece)
    return merged


def _split(tokens: list[Token]) -> list[list[Token]]:
    """Split at commas outside brackets; ``[]`` for no tokens."""
    if not tokens:
        return []
    pieces: list[list[Token]] = [[]]
    depth = 0
    for token in tokens:
        if token.text in _CLOSERS:
            depth += 1
        elif token.text in (")", "]", "}"):
            depth -= 1
        if token.text == "," and depth == 0:
            pieces.append([])
        else:
            pieces[-1].append(token)
    return pieces


def parse(source: str, path: str, base_dir: Path | None = None) -> tuple[Script, list[Diagnostic]]:
    """Parse a ``.fems`` file. Never raises on user input: problems come back as diagnostics.

    ``base_dir`` is where ``file:"…"`` paths are read from (default: the script's directory).
    """
    parser = Parser(source, path, base_dir)
    script = parser.parse()
    return script, list(parser.diagnostics)


def _is_choices_variable(part: list[Token]) -> bool:
    """``choices={alive}``: braces around one bare name take the choices from that variable,
    like ``{alive}`` in a scope (§9.3); two or more items are literal choices."""
    return (
        len(part) == 5
        and part[0].text == "choices"
        and part[1].text == "="
        and part[2].text == "{"
        and part[3].kind == "name"
        and part[4].text == "}"
    )
