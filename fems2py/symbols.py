"""Where each name of a ``.fems`` file is defined and used: the editor's view of a script.

The language server (:mod:`fems2py.lsp`) answers "go to definition", "find references",
"rename" and "complete" from one :class:`SymbolIndex`. It reads the file line by line with the
lexer, like the parser does, so it also works on a file that is half typed and does not parse;
the checker's tree is used only for what a name *is* (hover).

A name's identity is its :class:`Symbol`: its kind, the name as written and the namespace it
is defined in (``"main"``, ``"module:Name"``, ``"module:Outer/Inner"``; a node's namespace is
its flow's). A use inside a module finds the module's own definition first, then the outer
ones (§11.3, §11.4), so renaming a module's local ``dead_tonight`` leaves a global of the same
name alone.
"""

from __future__ import annotations

import bisect
import keyword
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from fems_runtime.words import ACTOR_TYPES

from fems2py.expressions import ALLOWED_CALLS
from fems2py.kinds import FIELD_NAMES
from fems2py.lexer import SourceLine, Token, split_lines, tokenize
from fems2py.parser.text import closing_bracket, split_commas

SymbolKind = Literal["action", "module", "variable", "actor", "node", "code", "function", "method"]

#: How an occurrence is read before names are resolved. ``at`` is an ``@name`` (an actor or an
#: actor-typed variable); ``maybe_variable`` is a bare word that is a variable only if one of
#: that name is declared (an argument of ``resolve:``, a builtin such as ``len``, a choice).
_Category = Literal[
    "action", "module", "variable", "maybe_variable", "at", "node", "code", "function", "method"
]

_TOP_HEADERS = frozenset({"meta", "vars", "code", "actors", "sketch", "mainflow", "flow"})
_TEXT_FIELDS = frozenset({"prompt", "showprompt"})
_FLOW_WORDS = frozenset({"fork", "join", "for", "par", "to", "if", "in", "all", "any"})
_BOOLEAN_WORDS = frozenset({"true", "false", "null", "none"})
_PLACEHOLDER = re.compile(r"\{(?!\{)([^{}\n]*)\}")


@dataclass(frozen=True)
class Symbol:
    kind: SymbolKind
    name: str
    namespace: str = "main"


@dataclass(frozen=True)
class Occurrence:
    """One place a symbol is written: ``line`` 1-based, ``col``/``end`` 0-based characters."""

    symbol: Symbol
    line: int
    col: int
    end: int
    definition: bool = False


@dataclass(frozen=True)
class _Raw:
    category: _Category
    name: str
    line: int
    col: int
    end: int
    chain: tuple[str, ...]  # namespaces to look in, innermost first
    definition: bool = False


@dataclass
class _Frame:
    """An open block: ``kind`` is a header (``vars``, ``action``, ``flow`` …), a ``field`` of
    an action or method, or ``text`` (a ``|`` block: nothing in it is syntax)."""

    indent: int
    kind: str
    namespace: str
    name: str = ""


@dataclass
class SymbolIndex:
    """Every occurrence of every name in one file, sorted by position, and for each line the
    namespace it belongs to, the flow it is part of and the action whose fields it holds."""

    occurrences: list[Occurrence]
    line_namespaces: dict[int, str]
    flow_lines: dict[int, str]
    action_lines: dict[int, str]
    #: The kind (``ai``, ``func`` …) of each action, by (name, namespace).
    action_kinds: dict[tuple[str, str], str]
    #: The header line of each flow (``mainflow:``, a module's ``flow:``) and its namespace.
    flow_starts: dict[int, str]
    _starts: list[tuple[int, int]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.occurrences.sort(key=lambda o: (o.line, o.col))
        self._starts = [(o.line, o.col) for o in self.occurrences]

    def at(self, line: int, col: int) -> Occurrence | None:
        """The occurrence under the cursor (``col`` may be just past its last character)."""
        index = bisect.bisect_right(self._starts, (line, col)) - 1
        if index >= 0:
            found = self.occurrences[index]
            if found.line == line and found.col <= col <= found.end:
                return found
        return None

    def references(self, symbol: Symbol) -> list[Occurrence]:
        return [o for o in self.occurrences if o.symbol == symbol]

    def definition(self, symbol: Symbol) -> Occurrence | None:
        return next((o for o in self.references(symbol) if o.definition), None)

    def visible(self, kinds: Iterable[SymbolKind], line: int) -> list[Symbol]:
        """The symbols of ``kinds`` defined in this file that a use on ``line`` can name:
        the globals, the enclosing modules' own, and the nodes of the line's flow."""
        wanted = set(kinds)
        namespaces = set(_namespace_chain(self.line_namespaces.get(line, "main")))
        flow = self.flow_lines.get(line)
        found = set()
        for o in self.occurrences:
            symbol = o.symbol
            if symbol.kind not in wanted:
                continue
            if symbol.kind == "node":  # a node exists where it is written (§12.1)
                visible = symbol.namespace == flow
            else:
                visible = o.definition and symbol.namespace in namespaces
            if visible:
                found.add(symbol)
        return sorted(found, key=lambda s: (s.name, s.namespace))


def _namespace_chain(namespace: str) -> tuple[str, ...]:
    """``module:A/B`` looks in ``module:A/B``, ``module:A``, then ``main``."""
    if namespace == "main":
        return ("main",)
    modules = namespace.removeprefix("module:").split("/")
    chain = ["module:" + "/".join(modules[:depth]) for depth in range(len(modules), 0, -1)]
    return (*chain, "main")


def build_index(source: str) -> SymbolIndex:
    """Read ``source`` (a whole ``.fems`` file) and index every name in it."""
    scanner = _Scanner()
    scanner.scan(split_lines(source))
    return SymbolIndex(
        scanner.resolve(),
        scanner.namespace_lines,
        scanner.flow_lines,
        scanner.action_lines,
        scanner.action_kinds,
        scanner.flow_starts,
    )


class _Scanner:
    """One pass over the lines, keeping the stack of open blocks (indentation shows
    ownership, §1.2), recording raw occurrences; :meth:`resolve` then names them."""

    def __init__(self) -> None:
        self.raw: list[_Raw] = []
        self.stack: list[_Frame] = []
        self.namespace_lines: dict[int, str] = {}
        self.flow_lines: dict[int, str] = {}
        self.action_lines: dict[int, str] = {}
        self.action_kinds: dict[tuple[str, str], str] = {}
        self.flow_starts: dict[int, str] = {}

    # ------------------------------------------------------------------ lines and blocks

    def scan(self, lines: list[SourceLine]) -> None:
        for line in lines:
            top = self.stack[-1] if self.stack else None
            if top is not None and top.kind == "text":
                if not line.raw.strip() or line.indent > top.indent:
                    self._placeholders(line.number, line.raw, 0, top.name == "placeholders")
                    self._note(line.number)
                    continue
                self.stack.pop()
            if line.blank:
                continue
            while self.stack and self.stack[-1].indent >= line.indent:
                self.stack.pop()
            self._note(line.number)
            self._line(line)

    def _note(self, number: int) -> None:
        namespace = self.namespace
        self.namespace_lines[number] = namespace
        for frame in reversed(self.stack):
            if frame.kind == "flow":
                self.flow_lines[number] = frame.namespace
                break
            if frame.kind in ("action", "module"):
                if frame.kind == "action":
                    self.action_lines[number] = frame.name
                break

    @property
    def namespace(self) -> str:
        return self.stack[-1].namespace if self.stack else "main"

    @property
    def chain(self) -> tuple[str, ...]:
        return _namespace_chain(self.namespace)

    def _owner(self) -> _Frame | None:
        """The innermost block that is not a field: what a line belongs to."""
        return next((f for f in reversed(self.stack) if f.kind != "field"), None)

    def _line(self, line: SourceLine) -> None:
        owner = self._owner()
        in_flow = owner is not None and owner.kind == "flow"
        code = line.code(flow=in_flow)
        tokens = tokenize(code, line.number)
        if not tokens:
            return
        if (owner is None or owner.kind == "module") and self._header(line, code, tokens):
            return
        if owner is None:
            return
        field_frame = self.stack[-1] if self.stack[-1].kind == "field" else None
        if owner.kind == "flow":
            self._flow_line(tokens)
        elif owner.kind == "vars":
            self._vars_line(line, code, tokens)
        elif owner.kind == "actors":
            self._actors_line(tokens)
        elif owner.kind == "code":
            self._code_line(tokens)
        elif owner.kind in ("action", "method"):
            if field_frame is not None:
                self._field_value(field_frame.name, line, code, tokens, 0)
            else:
                self._field_line(owner, line, code, tokens)

    def _header(self, line: SourceLine, code: str, tokens: list[Token]) -> bool:
        """A block header (``vars:``, ``action x @ai(@a):``, ``module M(p):`` …); pushes its
        frame and returns True, or returns False for any other line."""
        first = tokens[0]
        if first.kind != "name" or not code.rstrip().endswith(":"):
            return False
        namespace = self.namespace
        word = first.text
        if word in _TOP_HEADERS and len(tokens) == 2:
            kind = "flow" if word in ("mainflow", "flow") else word
            if kind == "flow":
                self.flow_starts[line.number] = namespace
            self.stack.append(_Frame(line.indent, kind, namespace))
            return True
        name = tokens[1] if len(tokens) > 1 and tokens[1].kind == "name" else None
        if word == "action" and name is not None:
            self._add("action", name, definition=True)
            if len(tokens) > 2 and tokens[2].kind == "actor":
                self.action_kinds[(name.text, namespace)] = tokens[2].text[1:]
            self._action_header(tokens[2:])
            self.stack.append(_Frame(line.indent, "action", namespace, name.text))
            return True
        if word == "module" and name is not None:
            self._add("module", name, definition=True)
            inner = name.text if namespace == "main" else f"{namespace}/{name.text}"
            inner = inner if inner.startswith("module:") else "module:" + inner
            self.stack.append(_Frame(line.indent, "module", inner, name.text))
            for param in tokens[2:]:
                if param.kind in ("name", "actor"):
                    self._add("variable", param, definition=True)
            return True
        if word in ("memory", "context") and name is not None:
            self._add("method", name, definition=True)
            self._expression(tokens[2:])
            self.stack.append(_Frame(line.indent, "method", namespace, name.text))
            return True
        return False

    def _action_header(self, tokens: list[Token]) -> None:
        """``@ai(@x) as (@role)`` or ``@func(alias.fn)`` after the action's name."""
        for i, token in enumerate(tokens[1:], start=1):
            if token.kind == "actor":
                self._add("at", token)
            elif token.kind == "name" and token.text != "as":
                if _follows(tokens, i, ".") and tokens[i - 2].kind == "name":
                    continue
                if _precedes(tokens, i, "."):
                    self._code_call(tokens, i)

    # ------------------------------------------------------------------ sections

    def _vars_line(self, line: SourceLine, code: str, tokens: list[Token]) -> None:
        """``name = value``: the name is defined; in the value only ``@x`` are names (bare
        words are strings, §4.2)."""
        if len(tokens) < 2 or tokens[1].text not in ("=", ":"):
            return
        self._add("variable", tokens[0], definition=True)
        for token in tokens[2:]:
            if token.kind == "actor":
                self._add("at", token)
        if code.rstrip().endswith("|"):
            self.stack.append(_Frame(line.indent, "text", self.namespace, "verbatim"))

    def _actors_line(self, tokens: list[Token]) -> None:
        """``ai|human [@]name = …``; a definition written without ``@`` still defines
        ``@name`` (§6.1)."""
        if len(tokens) >= 2 and tokens[0].text in ACTOR_TYPES:
            name = tokens[1]
            if name.kind == "name":
                self.raw.append(
                    _Raw("at", "@" + name.text, name.line, name.col, name.end, ("main",), True)
                )
            elif name.kind == "actor":
                self._add("at", name, definition=True)

    def _code_line(self, tokens: list[Token]) -> None:
        if len(tokens) >= 2 and tokens[1].text == "=" and tokens[0].kind == "name":
            self._add("code", tokens[0], definition=True)

    def _field_line(self, owner: _Frame, line: SourceLine, code: str, tokens: list[Token]) -> None:
        """``key: value`` inside an action or a method; the value may go on below."""
        key = tokens[0].text
        if key not in FIELD_NAMES or len(tokens) < 2 or tokens[1].text != ":":
            return
        self.stack.append(_Frame(line.indent, "field", self.namespace, key))
        self._field_value(key, line, code, tokens, 2)

    def _field_value(
        self, key: str, line: SourceLine, code: str, tokens: list[Token], start: int
    ) -> None:
        """The names in one line of a field's value (§9.2)."""
        rest = tokens[start:]
        if key in _TEXT_FIELDS:
            value_col = rest[0].col if rest else len(code)
            if code.rstrip().endswith("|") and code[value_col:].strip() == "|":
                self.stack.append(_Frame(line.indent, "text", self.namespace, "placeholders"))
            elif not code[value_col:].lstrip().startswith("file:"):
                self._placeholders(line.number, line.raw, value_col, True)
        elif key == "scope":
            for token in rest:
                if token.kind == "actor":
                    self._add("at", token)
                elif token.kind == "name" and token.text != "all":
                    self._add("variable", token)
                elif token.kind == "name":
                    self._add("maybe_variable", token)
        elif key == "in":
            for item in _items(rest):
                equals = next((i for i, t in enumerate(item) if t.text == "="), None)
                self._expression(item if equals is None else item[equals + 1 :])
        elif key == "out":
            self._outs(rest)
        elif key == "resolve":
            self._expression(rest, arguments="maybe_variable")
        elif key == "fallback":
            self._binding(rest)
        elif key in ("memory", "context") and rest and rest[0].kind == "name":
            self._add("method", rest[0])
        elif key == "interrupt":
            self._expression([t for t in rest if t.text not in ("HUMAN", "HUMAN_EXCEPT")])

    def _outs(self, tokens: list[Token]) -> None:
        """``out:`` items: a target (``x``, ``d.@x``, ``@x.attr``, ``d[k]``) then a type, a
        caption or an assignment; ``choices={alive}`` may name a list variable."""
        for item in _items(tokens):
            depth = 0
            for i, token in enumerate(item):
                if token.text in "([{" and token.kind == "op":
                    depth += 1
                elif token.text in ")]}" and token.kind == "op":
                    depth -= 1
                if token.text in ("=", "+=", "-=") and depth == 0:
                    self._target(item[:i])
                    self._expression(item[i + 1 :])
                    break
            else:
                head = next((i for i, t in enumerate(item) if t.text in ("(", ":", "?")), None)
                self._target(item if head is None else item[:head])
                if head is not None:
                    self._expression(item[head:], arguments="maybe_variable")

    def _target(self, tokens: list[Token]) -> None:
        self._expression(tokens, attribute_keys=True)

    # ------------------------------------------------------------------ flows

    def _flow_line(self, tokens: list[Token]) -> None:
        """A chain: ``[A]: act -> &M(x) -> if (c) -> b -> for @v in xs:`` (§12)."""
        i = 0
        while i < len(tokens):
            token = tokens[i]
            text = token.text
            if text == "[" and i + 2 < len(tokens) and tokens[i + 2].text == "]":
                name = tokens[i + 1]
                binds = i + 3 < len(tokens) and tokens[i + 3].text == ":"
                self._add("node", name, definition=binds)
                i += 3
                continue
            if text == "&" and i + 1 < len(tokens) and tokens[i + 1].kind == "name":
                self._add("module", tokens[i + 1])
                i += 2
                if i < len(tokens) and tokens[i].text == "(":
                    close = _closing(tokens, i)
                    self._expression(tokens[i + 1 : close])
                    i = close + 1
                continue
            if text == "(":
                close = _closing(tokens, i)
                self._expression(tokens[i + 1 : close])
                i = close + 1
                continue
            if text in ("for", "par") and token.kind == "name" and i + 2 < len(tokens):
                loop_var = tokens[i + 1]
                if loop_var.kind == "actor":
                    self._add("at", loop_var)
                colon = next(
                    (j for j in range(len(tokens) - 1, i, -1) if tokens[j].text == ":"), None
                )
                self._expression(tokens[i + 3 : colon])
                i = len(tokens) if colon is None else colon + 1
                continue
            if token.kind == "name" and text not in _FLOW_WORDS:
                self._add("action", token)
            i += 1

    def _binding(self, tokens: list[Token]) -> None:
        """``fallback:``: an action name or ``&Module(args)``."""
        if len(tokens) >= 2 and tokens[0].text == "&":
            self._add("module", tokens[1])
            self._expression(tokens[2:])
        elif tokens and tokens[0].kind == "name":
            self._add("action", tokens[0])

    # ------------------------------------------------------------------ expressions

    def _expression(
        self,
        tokens: list[Token],
        arguments: _Category = "variable",
        attribute_keys: bool = False,
    ) -> None:
        """Names read by an embedded Python expression or a FEM path (§12.2, §7.3):
        ``@x.attr`` and ``attr.@x`` read the dict variable ``attr``; ``alias.fn(…)`` calls
        a ``code:`` function; ``d.key`` is a literal key; keywords, booleans in any case
        and builtins are no names."""
        for i, token in enumerate(tokens):
            if token.kind == "actor":
                self._add("at", token)
                continue
            if token.kind != "name" or _follows(tokens, i, "."):
                if token.kind == "name" and i >= 2 and tokens[i - 2].kind == "actor":
                    self._add("variable", token)  # @x.attr
                continue
            word = token.text
            if keyword.iskeyword(word) or word.lower() in _BOOLEAN_WORDS:
                continue
            if _precedes(tokens, i, "."):
                after = tokens[i + 2] if i + 2 < len(tokens) else None
                if after is not None and after.kind == "actor":
                    self._add("variable", token)  # attr.@x
                elif after is not None and after.kind == "name" and not attribute_keys:
                    self._code_call(tokens, i)
                else:
                    self._add("variable", token)  # d.key, a literal key
                continue
            builtin = word in ALLOWED_CALLS or word in (*ACTOR_TYPES, "add", "remove")
            self._add("maybe_variable" if builtin else arguments, token)

    def _code_call(self, tokens: list[Token], i: int) -> None:
        """``alias.fn``: the alias, and the function as ``alias.fn`` (its definition is in
        the Python file, found by the language server)."""
        alias, function = tokens[i], tokens[i + 2]
        self._add("code", alias)
        qualified = f"{alias.text}.{function.text}"
        self.raw.append(
            _Raw("function", qualified, function.line, function.col, function.end, ("main",))
        )

    def _placeholders(self, number: int, raw: str, start: int, active: bool) -> None:
        """``{path}`` in prompt text (§9.4); other text holds no names."""
        if not active:
            return
        for match in _PLACEHOLDER.finditer(raw, start):
            if raw[max(0, match.start() - 1) : match.start()] == "{":
                continue
            inner = tokenize(raw, number, match.start(1), match.end(1))
            if inner and all(t.kind in ("name", "actor") or t.text in ".[]" for t in inner):
                self._expression(inner)

    # ------------------------------------------------------------------ recording

    def _add(self, category: _Category, token: Token, definition: bool = False) -> None:
        chain = (self.namespace,) if definition else self.chain
        self.raw.append(
            _Raw(category, token.text, token.line, token.col, token.end, chain, definition)
        )

    def resolve(self) -> list[Occurrence]:
        """Name every raw occurrence: a use takes the innermost definition of its kind."""
        defined: dict[tuple[str, str, str], Symbol] = {}
        for raw in self.raw:
            if raw.definition:
                kind = _definition_kind(raw)
                defined[(kind, raw.name, raw.chain[0])] = Symbol(kind, raw.name, raw.chain[0])
        occurrences = []
        for raw in self.raw:
            symbol = self._symbol(raw, defined)
            if symbol is not None:
                occurrences.append(Occurrence(symbol, raw.line, raw.col, raw.end, raw.definition))
        return occurrences

    def _symbol(self, raw: _Raw, defined: dict[tuple[str, str, str], Symbol]) -> Symbol | None:
        if raw.category == "node":
            flow = self.flow_lines.get(raw.line, "main")
            return Symbol("node", raw.name, flow)
        if raw.definition:
            return defined[(_definition_kind(raw), raw.name, raw.chain[0])]
        kinds = _USE_KINDS[raw.category]
        for namespace in raw.chain:
            for kind in kinds:
                if (kind, raw.name, namespace) in defined:
                    return defined[(kind, raw.name, namespace)]
        if raw.category == "maybe_variable":
            return None
        fallback: SymbolKind = "actor" if raw.category == "at" else kinds[0]
        return Symbol(fallback, raw.name, "main")


#: What a use of each category may name, in order of preference.
_USE_KINDS: dict[_Category, tuple[SymbolKind, ...]] = {
    "at": ("variable", "actor"),
    "variable": ("variable",),
    "maybe_variable": ("variable",),
    "action": ("action",),
    "module": ("module",),
    "node": ("node",),
    "code": ("code",),
    "function": ("function",),
    "method": ("method",),
}


def _definition_kind(raw: _Raw) -> SymbolKind:
    if raw.category == "at":
        return "actor"
    if raw.category == "maybe_variable":
        return "variable"
    return raw.category


def _follows(tokens: list[Token], i: int, text: str) -> bool:
    return i > 0 and tokens[i - 1].text == text


def _precedes(tokens: list[Token], i: int, text: str) -> bool:
    return i + 2 < len(tokens) and tokens[i + 1].text == text


def _closing(tokens: list[Token], i: int) -> int:
    """The index of the bracket closing ``tokens[i]`` (or the last token: the line may be
    half typed)."""
    close = closing_bracket(tokens, i)
    return close if close >= 0 else len(tokens) - 1


def _items(tokens: list[Token]) -> list[list[Token]]:
    """Comma-separated items at bracket depth 0, empty ones left out."""
    return [item for item in split_commas(tokens) if item]
