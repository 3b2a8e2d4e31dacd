"""Embedded Python in FEM (§12.2): validate, rewrite FEM paths into ``ctx`` calls.

FEM paths (``@x.type``, ``hp.@x``, ``alive.@m``) are not Python, so ``@name`` is first replaced
by a same-length placeholder identifier (``_name``) whose start position is remembered; the
text is then parsed, the tree is walked, and ``Expr.python`` is emitted leaf by leaf following
the naming convention of docs/ARCHITECTURE.md. Columns never move, so every position maps
straight back to the user's character in the ``.fems`` file.

Two parsers, one result. parso is the reference: its error recovery and positions make the
diagnostics, and its tree is walked to emit the Python. But loading it (its import, its grammar,
its tokenizer's regexes) is a good part of a cold build, so an expression made only of the
common forms (names, paths, literals, operators, comparisons, subscripts, calls of the allowed
builtins and of ``code:`` functions) is first parsed by Python's own :mod:`ast`, and emitted
from that tree to exactly the text the parso walk would give (``tests/test_expressions.py``
compares both on every expression of the examples, the goldens and the tests). Anything else,
and every expression Python rejects, goes to parso, which then reports the errors as before: a
script whose expressions are all common never imports parso.
"""

from __future__ import annotations

import ast
import keyword
import re
import sys
import warnings
from collections.abc import Iterable
from typing import TYPE_CHECKING

from fems_runtime.words import ACTOR_TYPES

from fems2py.cache import pickled
from fems2py.diagnostics import Diagnostics, suggest
from fems2py.nodes import MAX_DEPTH, Expr, PathRef, Span

if TYPE_CHECKING:
    import parso
    from parso.tree import BaseNode, Leaf, NodeOrLeaf

ALLOWED_CALLS = frozenset(
    [
        "len",
        "min",
        "max",
        "abs",
        "int",
        "float",
        "str",
        "bool",
        "sum",
        "any",
        "all",
        "sorted",
        "range",
        "round",
    ]
)
_BOOLEANS = {"true": "True", "false": "False"}
_CONSTANTS = {**_BOOLEANS, "null": "None"}
_TYPE_WORDS = frozenset(ACTOR_TYPES)
_ALLOWED_KEYWORDS = frozenset(
    {"in", "not", "and", "or", "is", "if", "else", "True", "False", "None"}
)
_FORBIDDEN_NODES = {
    "lambdef": "lambdas are",
    "lambdef_nocond": "lambdas are",
    "comp_for": "comprehensions are",
    "sync_comp_for": "comprehensions are",
    "namedexpr_test": "':=' assignments are",
    "fstring": "f-strings are",
    "star_expr": "'*' unpacking is",
    "yield_expr": "'yield' is",
}
_ACTOR = re.compile(r"@\w+")
_BAD_LOGIC = re.compile(r"&&|\|\|")
_BANG = re.compile(r"!(?!=)")
"""C's negation, which FEM writes ``not`` (``!=`` stays an operator)."""
_NEGATED_NAME = re.compile(r"[ \t]*(@?\w+(?:\.\w+)*)")
_BARE_TEXT_FORBIDDEN = set("()[]{}=<>+-*/%&|\"'.,:")
_NUMBER = re.compile(r"\d+(?:\.\d*)?(?:[eE][-+]?\d+)?")

_SPACE = re.compile(r"[ \t\f\r\n]+")
"""Whitespace between tokens; parso's walk emits any run of it as one space."""
_DOTTED = re.compile(r"[ \t\f\r\n]*\.[ \t\f\r\n]*(\w+)")
"""What follows ``name`` in ``name.attribute`` (the attribute's name is not an :mod:`ast` node)."""
_STRING = re.compile(
    r"""[rRbBuU]{0,2}(?:'[^'\\\r\n]*(?:\\.[^'\\\r\n]*)*'|"[^"\\\r\n]*(?:\\.[^"\\\r\n]*)*")"""
)
"""One string literal on one line: what parso keeps as one leaf, the fast path as is."""
_GENERIC_NODES = (
    ast.BoolOp,
    ast.BinOp,
    ast.UnaryOp,
    ast.IfExp,
    ast.Dict,
    ast.Set,
    ast.List,
    ast.Tuple,
    ast.Subscript,
    ast.Slice,
)
"""Nodes whose Python is their children's with the text between them, whitespace collapsed."""

_grammar: parso.Grammar | None = None


def _load_grammar() -> parso.Grammar:
    """Python's grammar for parso, kept in the user's cache: parso builds it from its text in
    every process, a good part of the first build."""
    global _grammar
    if _grammar is None:
        import parso
        from parso.python.token import PythonTokenTypes

        version = f"{sys.version_info[0]}.{sys.version_info[1]}"
        _grammar = pickled(
            f"parso-{parso.__version__}-python-{version}-grammar",
            parso.load_grammar,
            # token types are enum members whose values are objects: restore them by name
            {PythonTokenTypes: lambda member: (getattr, (PythonTokenTypes, member.name))},
        )
    return _grammar


def _too_deep(masked: str) -> int | None:
    """The offset of the first bracket opened deeper than MAX_DEPTH (strings masked), if any."""
    depth = 0
    for offset, char in enumerate(masked):
        if char in "([{":
            depth += 1
            if depth > MAX_DEPTH:
                return offset
        elif char in ")]}":
            depth -= 1
    return None


def mask_strings(text: str) -> str:
    """``text`` with the inside of Python string literals blanked (same length)."""
    out = list(text)
    quote: str | None = None
    i = 0
    while i < len(text):
        ch = text[i]
        if quote is None:
            if ch in "\"'":
                triple = text[i : i + 3] == ch * 3
                quote = ch * 3 if triple else ch
                i += len(quote)
                continue
        elif text.startswith(quote, i):
            i += len(quote)
            quote = None
            continue
        else:
            if ch == "\\" and i + 1 < len(text):
                out[i] = out[i + 1] = " "
                i += 2
                continue
            out[i] = " "
        i += 1
    return "".join(out)


class _Compiler:
    """Compiles one expression: its text, what it reads and its diagnostics, with the
    pre-tokenizing and the names and paths both emitters write; :class:`_AstEmitter` (the
    fast path) or else :class:`_ParsoEmitter` writes the rest of its Python. Positions are
    parso's (line 1 is the span's line)."""

    def __init__(
        self,
        text: str,
        span: Span,
        diagnostics: Diagnostics,
        code_aliases: set[str] | None,
    ) -> None:
        self.text = text
        self.span = span
        self.diagnostics = diagnostics
        self.code_aliases = code_aliases
        self.actor_starts: set[tuple[int, int]] = set()
        self.reads: list[PathRef] = []
        self.ok = True
        self.masked = ""  # the text with the inside of its strings blanked (_pretokenize)

    # ------------------------------------------------------------------ positions

    def at(self, line: int, col: int, end_line: int, end_col: int) -> Span:
        """A span for parso positions (1-based line, 0-based col) in the ``.fems`` file."""

        def map_pos(ln: int, c: int) -> tuple[int, int]:
            if ln == 1:
                return self.span.line, self.span.col + c
            return self.span.line + ln - 1, c + 1

        start = map_pos(line, col)
        end = map_pos(end_line, end_col)
        return Span(self.span.file, start[0], start[1], end[0], end[1])

    def error(self, message: str, span: Span, hint: str | None = None) -> None:
        self.ok = False
        self.diagnostics.error(message, span, hint)

    # ------------------------------------------------------------------ pre-tokenizing

    def _pretokenize(self) -> str | None:
        masked = self.masked = mask_strings(self.text)
        too_deep = _too_deep(masked)
        if too_deep is not None:  # refused before parso recurses into it
            line, col = self._offset_pos(too_deep)
            self.error(
                f"brackets nest more than {MAX_DEPTH} levels deep here",
                self.at(line, col, line, col + 1),
                "split the expression, or compute a part of it in a code: function (§5)",
            )
            return None
        for match in _BAD_LOGIC.finditer(masked):
            pos = self._offset_pos(match.start())
            self.error(
                f"'{match.group()}' is not an operator in FEM expressions",
                self.at(pos[0], pos[1], pos[0], pos[1] + 2),
                "use 'and' / 'or'",
            )
        for match in _BANG.finditer(masked):
            pos = self._offset_pos(match.start())
            self.error(
                "'!' is not an operator in FEM expressions",
                self.at(pos[0], pos[1], pos[0], pos[1] + 1),
                f"write 'not {self._negated(match.end())}'",
            )
        chars = list(self.text)
        for match in _ACTOR.finditer(masked):
            start = match.start()
            if start > 0 and (masked[start - 1].isalnum() or masked[start - 1] == "_"):
                continue
            chars[start] = "_"
            self.actor_starts.add(self._offset_pos(start))
        return "".join(chars) if self.ok else None

    def _negated(self, offset: int) -> str:
        """What a ``!`` at ``offset - 1`` negates, for the hint: a name or a bracketed group;
        ``…`` when it is neither."""
        name = _NEGATED_NAME.match(self.masked, offset)
        if name is not None:
            return name.group(1)
        start = len(self.masked) - len(self.masked[offset:].lstrip(" \t"))
        if self.masked[start : start + 1] != "(":
            return "…"
        depth = 0
        for end in range(start, len(self.masked)):
            depth += {"(": 1, ")": -1}.get(self.masked[end], 0)
            if depth == 0:
                group = self.text[start : end + 1]
                return group if "\n" not in group else "(…)"
        return "(…)"

    def _offset_pos(self, offset: int) -> tuple[int, int]:
        before = self.text[:offset]
        line = before.count("\n") + 1
        col = offset - (before.rfind("\n") + 1)
        return line, col

    # ------------------------------------------------------------------ compile

    def compile(self) -> Expr | None:
        lone = self._lone_name()
        if lone is not None:
            return lone
        source = self._pretokenize()
        if source is None:
            return None
        if not source.strip():
            self.error("expected an expression", self.span)
            return None
        python = self._emit_with_ast(source)
        if python is None:
            python = self._emit_with_parso(source)
        if python is None:
            return None
        try:
            # Python's own warnings (``1(2)``, ``x is 1``) are mistakes the author should fix
            # at build time, and must not depend on the interpreter's warning filters.
            with warnings.catch_warnings():
                warnings.simplefilter("error", SyntaxWarning)
                compile(python, "<fems expression>", "eval")
        except (SyntaxError, SyntaxWarning, ValueError) as exc:
            reason = exc.msg if isinstance(exc, SyntaxError) else str(exc)
            self.error(f"invalid expression: {reason}", self.span)
            return None
        return Expr(self.text, python, tuple(self.reads), self.span)

    def _emit_with_parso(self, source: str) -> str | None:
        """The Python for ``source`` from parso's tree; None after reporting an error."""
        import parso

        grammar = _load_grammar()
        try:
            tree = grammar.parse(source, error_recovery=False, start_symbol="eval_input")
        except parso.ParserSyntaxError as exc:
            leaf = exc.error_leaf
            found = f"unexpected '{leaf.value}'" if leaf.value.strip() else "incomplete"
            hint = None
            if keyword.iskeyword(leaf.value) and leaf.value not in _ALLOWED_KEYWORDS:
                hint = (
                    f"'{leaf.value}' is a Python keyword: a variable used here needs another name"
                )
            elif leaf.value == "=":
                hint = "to compare, write '=='; an expression assigns nothing"
            self.error(
                f"invalid expression: {found}", self.at(*leaf.start_pos, *leaf.end_pos), hint
            )
            return None
        body = tree.children[0]
        if (
            body.type == "atom"
            and len(body.children) == 3
            and body.children[0].value == "("
            and body.children[1].type != "testlist_comp"
        ):
            body = body.children[1]  # ``if (x == 1)``: the parentheses only delimit
        python = _ParsoEmitter(self).emit(body).strip()
        return python if self.ok else None

    def _lone_name(self) -> Expr | None:
        """A single variable or actor (``alive``, ``@speaker``), the most common expression
        (loop iterables, arguments): the same result as the general path, without parso."""
        stripped = self.text.strip()
        name = stripped[1:] if stripped.startswith("@") else stripped
        if (
            "\n" in self.text
            or not name.isidentifier()
            or keyword.iskeyword(name)
            or (
                name == stripped
                and (name in _CONSTANTS or name.lower() in _BOOLEANS or name in _TYPE_WORDS)
            )
        ):
            return None
        lead = len(self.text) - len(self.text.lstrip())
        span = self.at(1, lead, 1, lead + len(stripped))
        return Expr(self.text, f"ctx[{stripped!r}]", (PathRef(stripped, span),), self.span)

    def _emit_with_ast(self, source: str) -> str | None:
        """The Python for ``source`` from :mod:`ast`'s tree, exactly as :meth:`_emit_with_parso`
        would emit it; None leaves it to parso: a form this path does not emit, a comment or a
        line continuation (parso keeps them as whitespace), or an expression Python rejects
        (parso reports it). Nothing is reported here."""
        if "\r" in source or "#" in self.masked or "\\" in self.masked:
            return None
        tree = _ast_tree(source)  # its warnings: the compile() after the emission reports them
        if tree is None:
            return None
        try:
            return _AstEmitter(self, source).emit(tree.body)
        except _NotCommon:
            self.reads.clear()
            return None

    # ------------------------------------------------------------------ what both emitters write

    def free_name(self, value: str, start: tuple[int, int], end: tuple[int, int]) -> str:
        """A free name: a variable, an actor, a FEM constant or a type word (``start`` and
        ``end``: parso positions)."""
        if start in self.actor_starts:
            name = "@" + value[1:]
            self.reads.append(PathRef(name, self.at(*start, *end)))
            return f"ctx[{name!r}]"
        if value.lower() in _BOOLEANS:  # any case, as in vars: (§12.2)
            return _BOOLEANS[value.lower()]
        if value in _CONSTANTS:
            return _CONSTANTS[value]
        if value in _TYPE_WORDS:
            return repr(value)
        self.reads.append(PathRef(value, self.at(*start, *end)))
        return f"ctx[{value!r}]"

    def path(self, actor: str, attr: str, start: tuple[int, int], end: tuple[int, int]) -> str:
        """A FEM path (``@x.attr`` or ``attr.@x``) from ``start`` to ``end`` (parso positions);
        ``actor`` is the actor's placeholder name (``_x``)."""
        name = "@" + actor[1:]
        self.reads.append(PathRef(name, self.at(*start, *end), attr=attr))
        return f"ctx.attr({name!r}, {attr!r})"

    def is_code_alias(self, name: str, is_call: bool) -> bool:
        if self.code_aliases is None:
            return is_call
        return name in self.code_aliases


class _AstEmitter:
    """The stdlib fast path of one :class:`_Compiler`: the Python of an :mod:`ast` tree of the
    common forms, exactly as :class:`_ParsoEmitter` would write it (see the module docs); a
    form it does not write raises :class:`_NotCommon`, and parso takes over."""

    def __init__(self, compiler: _Compiler, source: str) -> None:
        self.compiler = compiler
        self._source = source
        self._ascii = source.isascii()
        self._line_starts = [0, 0]  # offsets of lines 1, 2, … (ast counts lines from 1)
        self._line_starts += [at + 1 for at, char in enumerate(source) if char == "\n"]

    def emit(self, body: ast.expr) -> str:
        """The Python of the whole expression ``body`` (the tree's body)."""
        source = self._source
        before, after = source[: self._offset(body)], source[self._end_offset(body) :]
        if before.lstrip().startswith("("):  # ``if (x == 1)``: parso drops one pair
            before = before.replace("(", "", 1)
            after = after[: after.rindex(")")] + after[after.rindex(")") + 1 :]
        python = _SPACE.sub(" ", before) + self._fast(body) + _SPACE.sub(" ", after)
        return python.strip()

    def _position(self, line: int, byte_col: int) -> tuple[int, int]:
        """parso's position (1-based line, column in characters) of an ast position."""
        if self._ascii:
            return line, byte_col
        start = self._line_starts[line]
        text = self._source[start : start + byte_col]  # at least the byte_col characters
        return line, len(text.encode("utf-8")[:byte_col].decode("utf-8"))

    def _start(self, node: ast.expr) -> tuple[int, int]:
        """parso's position of the start of ``node``."""
        return self._position(node.lineno, node.col_offset)

    def _end(self, node: ast.expr) -> tuple[int, int]:
        """parso's position of the end of ``node``."""
        assert node.end_lineno is not None and node.end_col_offset is not None
        return self._position(node.end_lineno, node.end_col_offset)

    def _offset(self, node: ast.expr) -> int:
        line, col = self._start(node)
        return self._line_starts[line] + col

    def _end_offset(self, node: ast.expr) -> int:
        line, col = self._end(node)
        return self._line_starts[line] + col

    def _text(self, node: ast.expr) -> str:
        return self._source[self._offset(node) : self._end_offset(node)]

    def _fast(self, node: ast.expr) -> str:
        if isinstance(node, ast.Name):
            line, col = self._start(node)
            text = self._text(node)
            return self.compiler.free_name(text, (line, col), (line, col + len(text)))
        if isinstance(node, ast.Constant):
            text = self._text(node)
            if isinstance(node.value, str | bytes) and not _STRING.fullmatch(text):
                raise _NotCommon  # several literals in a row, or a long string
            return text
        if isinstance(node, ast.Attribute):
            return self._fast_attribute(node, is_call=False)
        if isinstance(node, ast.Call):
            return self._fast_call(node)
        if isinstance(node, ast.Compare):
            if len(node.ops) == 2 and isinstance(node.ops[0], ast.In | ast.NotIn):
                raise _NotCommon  # maybe §12.2's reading of a chained 'in', with its warning
            return self._fast_between(node, node, [node.left, *node.comparators])
        if isinstance(node, _GENERIC_NODES):
            if isinstance(node, ast.Dict) and None in node.keys:
                raise _NotCommon  # ``**mapping``
            children = [
                child for child in ast.iter_child_nodes(node) if isinstance(child, ast.expr)
            ]
            children.sort(key=lambda child: (child.lineno, child.col_offset))
            return self._fast_between(node, node, children)
        raise _NotCommon

    def _fast_between(self, node: ast.expr, start: ast.expr, children: list[ast.expr]) -> str:
        """``children``'s Python with the text between them, from the end of ``start`` (itself
        when it is ``node``: from its start) to the end of ``node``."""
        at = self._offset(node) if start is node else self._end_offset(start)
        out = []
        for child in children:
            out.append(_SPACE.sub(" ", self._source[at : self._offset(child)]))
            out.append(self._fast(child))
            at = self._end_offset(child)
        out.append(_SPACE.sub(" ", self._source[at : self._end_offset(node)]))
        return "".join(out)

    def _fast_call(self, node: ast.Call) -> str:
        """A call of an allowed builtin or of a ``code:`` function (or on a FEM path, as parso's
        walk allows); anything else is an error parso reports."""
        function = node.func
        if node.keywords or self._offset(function) != self._offset(node):
            raise _NotCommon  # keyword arguments, or ``(f)(x)``
        if isinstance(function, ast.Name):
            name = self._text(function)
            if name not in ALLOWED_CALLS or self._start(function) in self.compiler.actor_starts:
                raise _NotCommon
            head = name
        elif isinstance(function, ast.Attribute):
            head = self._fast_attribute(function, is_call=True)
        else:
            raise _NotCommon
        return head + self._fast_between(node, function, node.args)

    def _fast_attribute(self, node: ast.Attribute, is_call: bool) -> str:
        """``name.attribute``: a FEM path (one side an actor) or a ``code:`` alias's member,
        as :meth:`_emit_trailers` emits them; any other attribute is an error parso reports."""
        head = node.value
        if not isinstance(head, ast.Name) or self._offset(head) != self._offset(node):
            raise _NotCommon  # ``a.b.c``, ``f(x).a``, ``(a).b``
        dotted = _DOTTED.fullmatch(self._source, self._end_offset(head), self._end_offset(node))
        if dotted is None:
            raise _NotCommon
        name, attribute = self._text(head), dotted.group(1)
        start, end = self._start(head), self._end(node)
        head_actor = start in self.compiler.actor_starts
        attribute_actor = (end[0], end[1] - len(attribute)) in self.compiler.actor_starts
        if head_actor and attribute_actor:
            raise _NotCommon
        if head_actor or attribute_actor:
            actor, attr = (name, attribute) if head_actor else (attribute, name)
            return self.compiler.path(actor, attr, start, end)
        if self.compiler.is_code_alias(name, is_call):
            return _code_member(name, attribute)
        raise _NotCommon


class _ParsoEmitter:
    """The parso walk of one :class:`_Compiler`: the Python of every expression parso parses,
    and the diagnostics of what FEM does not allow in one."""

    def __init__(self, compiler: _Compiler) -> None:
        self.compiler = compiler

    def _leaf_span(self, node: NodeOrLeaf) -> Span:
        return self.compiler.at(*node.start_pos, *node.end_pos)

    def emit(self, node: NodeOrLeaf) -> str:
        """Python for ``node``, including the whitespace before it (collapsed to one space)."""
        from parso.tree import BaseNode, Leaf

        if isinstance(node, Leaf):
            return _prefix(node) + self._emit_leaf(node)
        assert isinstance(node, BaseNode)
        return self._emit_body(node)

    def _emit_children(self, children: Iterable[NodeOrLeaf]) -> str:
        return "".join(self.emit(child) for child in children)

    def _emit_body(self, node: BaseNode) -> str:
        if node.type in _FORBIDDEN_NODES:
            self.compiler.error(
                f"{_FORBIDDEN_NODES[node.type]} not allowed in FEM expressions",
                self._leaf_span(node),
            )
            return ""
        if node.type == "trailer" and node.children[0].value == ".":
            # Python attribute access would reach into the values' Python objects; FEM has
            # its own paths (§7.3) and code calls instead.
            self.compiler.error(
                f"'.{node.children[1].value}' is not allowed in FEM expressions",
                self._leaf_span(node),
                "FEM paths are @x.attr and attr.@x; a dict entry is d[key]; "
                "code is called as alias.function(…)",
            )
            return ""
        if node.type in ("atom_expr", "power") and node.children[0].type == "name":
            if node.children[1].type != "trailer":  # ``x ** 2``: a power, not a name's trailers
                return self._emit_children(node.children)
            return _prefix(node) + self._emit_trailers(node)
        if node.type == "comparison":
            return self._emit_comparison(node)
        if node.type == "argument" and node.children[1].type == "operator":
            name, op, *rest = node.children
            if op.value == "=":
                return _prefix(node) + name.value + "=" + self._emit_children(rest).lstrip()
        return self._emit_children(node.children)

    def _emit_leaf(self, leaf: Leaf) -> str:
        if leaf.type == "name":
            return self._emit_name(leaf)
        if leaf.type == "keyword" and leaf.value not in _ALLOWED_KEYWORDS:
            self.compiler.error(
                f"'{leaf.value}' is not allowed in FEM expressions", self._leaf_span(leaf)
            )
        if leaf.type == "fstring_start":
            self.compiler.error(
                "f-strings are not allowed in FEM expressions", self._leaf_span(leaf)
            )
        return leaf.value

    def _is_actor(self, leaf: Leaf) -> bool:
        return leaf.start_pos in self.compiler.actor_starts

    def _fem_name(self, leaf: Leaf) -> str:
        return "@" + leaf.value[1:] if self._is_actor(leaf) else leaf.value

    def _emit_name(self, leaf: Leaf) -> str:
        return self.compiler.free_name(leaf.value, leaf.start_pos, leaf.end_pos)

    def _emit_trailers(self, node: BaseNode) -> str:
        """``name trailer*``: FEM paths, code calls, builtin calls, subscripts."""
        first = node.children[0]
        trailers = list(node.children[1:])
        if node.children[0].type != "name":
            return self._emit_children(node.children)
        head_actor = self._is_actor(first)
        second = trailers[0] if trailers else None
        dotted = (
            second is not None
            and second.type == "trailer"
            and second.children[0].value == "."
            and second.children[1].type == "name"
        )
        if dotted:
            assert second is not None
            attr_leaf = second.children[1]
            attr_actor = self._is_actor(attr_leaf)
            if head_actor or attr_actor:
                if head_actor and attr_actor:
                    self.compiler.error(
                        "a path has one actor side and one attribute side",
                        self._leaf_span(node),
                        "write '@x.attr' or 'attr.@x'",
                    )
                    return ""
                actor, attr = (first, attr_leaf) if head_actor else (attr_leaf, first)
                head = self.compiler.path(
                    actor.value, attr.value, first.start_pos, attr_leaf.end_pos
                )
                return head + self._emit_children(trailers[1:])
            is_call = len(trailers) > 1 and trailers[1].children[0].value == "("
            if self.compiler.is_code_alias(first.value, is_call):
                head = _code_member(first.value, attr_leaf.value)
                return head + self._emit_children(trailers[1:])
            if is_call:
                self.compiler.error(
                    f"cannot call '{first.value}.{attr_leaf.value}': "
                    f"'{first.value}' is not a code: alias",
                    self.compiler.at(*first.start_pos, *attr_leaf.end_pos),
                    suggest(first.value, self.compiler.code_aliases or ())
                    or "only functions of code: files (alias.function(…)) and a few builtins "
                    "(len, min, max, …) can be called; put other logic in a code: file",
                )
                return ""
        is_call = second is not None and second.children[0].value == "("
        if is_call:
            if first.value in ALLOWED_CALLS and not head_actor:
                return first.value + self._emit_children(trailers)
            self.compiler.error(
                f"cannot call '{self._fem_name(first)}' in a FEM expression",
                self._leaf_span(first),
                "only " + ", ".join(sorted(ALLOWED_CALLS)) + " and functions of code: aliases",
            )
            return ""
        return self._emit_name(first) + self._emit_children(trailers)

    def _emit_comparison(self, node: BaseNode) -> str:
        """§12.2 Decision: ``x in alive == false`` means ``(x in alive) == False``."""
        children = node.children
        if len(children) == 5:
            first_op = _op_text(children[1])
            second_op = _op_text(children[3])
            last = children[4]
            if (
                first_op in ("in", "not in")
                and second_op in ("==", "!=", "is", "is not")
                and last.type in ("name", "keyword")
                and last.value.lower() in _BOOLEANS
            ):
                self.compiler.diagnostics.warning(
                    f"'{first_op}' chained with '{second_op}' is read as "
                    f"'(… {first_op} …) {second_op} {last.value}'",
                    self._leaf_span(node),
                    "add parentheses to say so explicitly",
                )
                inner = self._emit_children(children[:3]).strip()
                return f"{_prefix(node)}({inner})" + self._emit_children(children[3:])
        return self._emit_children(children)


def _code_member(alias: str, member: str) -> str:
    """``alias.member`` of a ``code:`` file."""
    return f"ctx.code({alias!r}).{member}"


def _prefix(node: NodeOrLeaf) -> str:
    """Whitespace before ``node``, collapsed to one space (comments were removed earlier)."""
    return " " if node.get_first_leaf().prefix else ""


def _op_text(node: NodeOrLeaf) -> str:
    from parso.tree import BaseNode, Leaf

    if isinstance(node, Leaf):
        return node.value
    assert isinstance(node, BaseNode)
    return " ".join(leaf.get_code(include_prefix=False) for leaf in node.children)


def not_a_variable_here(name: str) -> str | None:
    """What an expression reads a bare ``name`` as when it is never the variable of that name
    (§12.2), or None: a declaration of such a variable could never be read in a condition."""
    if name.lower() in _BOOLEANS:  # any case (§12.2)
        return f"the literal {name.lower()}"
    if name in ("null", "None"):
        return "the literal null"
    if name in _TYPE_WORDS:
        return f"the string {name!r} (an actor's type)"
    if keyword.iskeyword(name):
        return f"the Python keyword {name!r}"
    return None


def compile_expression(
    text: str,
    span: Span,
    diagnostics: Diagnostics,
    code_aliases: set[str] | None = None,
) -> Expr | None:
    """Validate and rewrite a condition / loop iterable / argument (§12.2).

    ``span`` is where ``text`` starts in the ``.fems`` file (its ``col`` is the column of the
    first character of ``text``). Returns None after reporting an error.
    """
    compiler = _Compiler(text, span, diagnostics, code_aliases)
    try:
        return compiler.compile()
    except RecursionError:
        diagnostics.error("expression nested too deeply", span)
        return None


def compile_value(
    text: str,
    span: Span,
    diagnostics: Diagnostics,
    code_aliases: set[str] | None = None,
) -> Expr | None:
    """An ``@assign`` right-hand side, ``in:`` value or module argument.

    These are literals (§4.2) or paths; bare text that is not Python (``hello world``,
    ``测试 剧本``) is a string, as in ``vars:``.
    """
    stripped = text.strip()
    if (
        stripped
        and not (_BARE_TEXT_FORBIDDEN & set(stripped))
        and not _is_simple_python(stripped)
        and not _is_python(stripped)
    ):
        negated = stripped[1:].strip()
        if stripped[0] == "!" and (_is_simple_python(negated) or _is_python(negated)):
            diagnostics.warning(  # C's negation: bare text by §9.6, which the author hardly meant
                f"'{stripped}' is bare text, the string \"{stripped}\", not a negation",
                span,
                f"write 'not {negated}' to negate it, or \"{stripped}\" in quotes (§9.6)",
            )
        return Expr(text, repr(stripped), (), span)
    return compile_expression(text, span, diagnostics, code_aliases)


def _is_simple_python(text: str) -> bool:
    """A lone name, actor or number: Python without asking parso (it is parsed next anyway)."""
    name = text[1:] if text.startswith("@") else text
    return (name.isidentifier() and not keyword.iskeyword(name)) or bool(_NUMBER.fullmatch(text))


def _is_python(text: str) -> bool:
    """Whether parso parses ``text`` (its actors made names) as an expression. What Python's
    own parser accepts, parso accepts too (this text holds no brackets, quotes or operators
    where parso's grammar is the looser), so parso is asked only about the rest."""
    source = _ACTOR.sub(lambda m: "_" + m.group()[1:], text)
    if _ast_tree(source) is not None:
        return True
    import parso

    try:
        _load_grammar().parse(source, error_recovery=False, start_symbol="eval_input")
    except (parso.ParserSyntaxError, RecursionError):
        return False
    return True


def _ast_tree(source: str) -> ast.Expression | None:
    """:mod:`ast`'s tree of expression ``source``, its warnings silenced; None where Python
    rejects it."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ast.parse(source, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


class _NotCommon(Exception):
    """The fast path leaves this expression to parso."""
