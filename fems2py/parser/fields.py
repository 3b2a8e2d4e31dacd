"""The action fields that hold items or statements: ``scope:`` (§9.3), ``in:`` (§9.4),
``out:`` (§10.4) and ``@assign`` statements (§9.6), with their targets and expressions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, TypeVar

from fems_runtime.words import OUT_TYPES

from fems2py.diagnostics import suggest
from fems2py.expressions import compile_expression, compile_value
from fems2py.lexer import Token, TokenKind, quote_end
from fems2py.nodes import (
    Assignment,
    Expr,
    Input,
    ListValue,
    Out,
    OutType,
    Scope,
    ScopeItem,
    Span,
    Target,
    Value,
)
from fems2py.parser.actors import ActorsParser
from fems2py.parser.base import Abort
from fems2py.parser.text import CLOSERS, bracket_depth, closing_bracket, split_commas

_Item = TypeVar("_Item")


def unclosed_bracket(tokens: list[Token]) -> Token | None:
    """The first bracket that is never closed, or None."""
    stack: list[Token] = []
    for token in tokens:
        if token.text in CLOSERS:
            stack.append(token)
        elif token.text in (")", "]", "}") and stack:
            if CLOSERS[stack[-1].text] != token.text:
                return stack[-1]  # ``[a, {b]``: the ``{`` is the one left open
            stack.pop()
    return stack[0] if stack else None


def _out_pieces(tokens: list[Token]) -> list[list[Token]]:
    """The outputs of one ``out:`` row: a ``choices=…``/``label=…`` or a string piece belongs
    to the output before it (the comma between them is kept)."""
    merged: list[list[Token]] = []
    for piece in split_commas(tokens):
        if not piece:
            continue
        attaches = (len(piece) > 1 and piece[0].text in ("choices", "label")) or (
            piece[0].kind == TokenKind.STRING
        )
        if merged and attaches:
            comma = Token(TokenKind.OP, ",", piece[0].line, piece[0].col, piece[0].col)
            merged[-1] = [*merged[-1], comma, *piece]
        else:
            merged.append(piece)
    return merged


def _is_choices_variable(part: list[Token]) -> bool:
    """``choices={alive}``: braces around one bare name take the choices from that variable,
    like ``{alive}`` in a scope (§9.3); two or more items are literal choices."""
    return (
        len(part) == 5
        and part[0].text == "choices"
        and part[1].text == "="
        and part[2].text == "{"
        and part[3].kind == TokenKind.NAME
        and part[4].text == "}"
    )


class FieldsParser(ActorsParser):
    """Adds the fields ``scope:``, ``in:`` and ``out:`` and ``@assign`` statements."""

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
        sub = self.continue_open_brackets(tokens, sub, end)
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
            if token.kind == TokenKind.STRING and quote_end(token.text, 0) != len(token.text):
                self.fail("unterminated string", self.tok_span(token), "close the quote")

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
                close = closing_bracket(tokens, pos)
                if close < 0:
                    opener = unclosed_bracket(tokens[pos:]) or token
                    self.fail(
                        f"'{opener.text}' is never closed",
                        self.tok_span(opener),
                        f"close it with '{CLOSERS[opener.text]}'",
                    )
                for piece in split_commas(tokens[pos + 1 : close]):
                    items.append(self.scope_item(piece, token))
                pos = close + 1
            else:
                stop = pos + 1
                if token.text == "{":
                    stop = closing_bracket(tokens, pos) + 1
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
            and piece[1].kind in (TokenKind.NAME, TokenKind.ACTOR)
        ):
            return ScopeItem("expand", piece[1].text, span)
        if len(piece) >= 2 and all(t.kind in (TokenKind.NAME, TokenKind.ACTOR) for t in piece[:2]):
            self.fail(
                f"expected ',' between '{piece[0].text}' and '{piece[1].text}'",
                self.tok_span(piece[1]),
                "separate scope items with ',': [@a, @b]",
            )
        if len(piece) == 1:
            token = piece[0]
            if token.kind == TokenKind.ACTOR and token.text != "@":
                return ScopeItem("actor", token.text, span)
            if token.kind == TokenKind.NAME:
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
                except Abort:
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

    def parse_inputs(self, index: int, col: int, end: int) -> tuple[Input, ...]:
        """``in: a, b = expr`` on the line and/or one or more per deeper line."""
        inputs = self.field_items(
            index,
            col,
            end,
            lambda tokens: [piece for piece in split_commas(tokens) if piece],
            self.parse_input,
            "expected at least one name after 'in:'",
        )
        self.report_repeats("in:", [(item.name, item.span) for item in inputs])
        return inputs

    def report_repeats(self, field: str, names: list[tuple[str, Span]]) -> None:
        """A name an ``in:`` or ``out:`` lists twice: one value would silently replace the
        other (the last ``in:`` value, the last signal), so it is an error."""
        first: dict[str, int] = {}
        for name, span in names:
            if name in first:
                where = "" if first[name] == span.line else f" (first at line {first[name]})"
                self.error(f"{field} lists '{name}' twice", span, f"list each name once{where}")
            first.setdefault(name, span.line)

    def parse_input(self, piece: list[Token]) -> Input:
        name = piece[0]
        if name.kind not in (TokenKind.NAME, TokenKind.ACTOR) or name.text == "@":
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

    def parse_outs(self, index: int, col: int, end: int) -> tuple[Out, ...]:
        """``out: a, b?, c: int, d(enum([x, y]), "label"), e: dropdown, choices={…}``."""
        outs = self.field_items(
            index,
            col,
            end,
            _out_pieces,
            self.parse_out,
            "expected at least one output after 'out:'",
        )
        self.report_repeats("out:", [(out.target.written, out.target.span) for out in outs])
        return outs

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
            close = closing_bracket(piece, pos)
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
        parts = split_commas(tokens)
        if not parts or not parts[0]:
            self.fail("expected a type", self.tok_span(near))
        caption: str | None = None
        for part in parts:
            if len(part) == 1 and part[0].kind == TokenKind.STRING:
                caption = part[0].value
            elif len(part) == 3 and part[0].text == "label" and part[1].text == "=":
                if part[2].kind != TokenKind.STRING:
                    self.fail(
                        "expected a quoted label after 'label='",
                        self.tok_span(part[2]),
                        'write label="…"',
                    )
                caption = part[2].value
        type_tokens = parts[0]
        name = type_tokens[0]
        if name.kind == TokenKind.STRING or (name.text == "label" and len(type_tokens) > 1):
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
            if not inner or inner[0].text != "[" or closing_bracket(inner, 0) != len(inner) - 1:
                self.fail("expected enum([a, b, …])", self.tok_span(name))
            literal = self.parse_literal(inner, 0)[0]
            assert isinstance(literal, ListValue)  # the brackets were checked above
            choices = literal.items
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
                len(part) == 1 and part[0].kind == TokenKind.STRING
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
        if tokens[0].text not in ("{", "[") or closing_bracket(tokens, 0) != len(tokens) - 1:
            self.fail("expected choices={a, b}", self.tok_span(tokens[0]))
        return tuple(self.item(piece) for piece in split_commas(tokens[1:-1]) if piece)

    def parse_target(self, tokens: list[Token], pos: int) -> tuple[Target, int]:
        """§9.6 targets: ``name``, ``@var``, ``dict.@x``, ``@x.attr``, ``attr.@x``, ``dict[key]``."""
        first = tokens[pos]
        if first.kind not in (TokenKind.NAME, TokenKind.ACTOR) or first.text == "@":
            self.fail(f"expected a variable name, found '{first.text}'", self.tok_span(first))
        pos += 1
        if pos + 1 < len(tokens) and tokens[pos].text == ".":
            second = tokens[pos + 1]
            if second.kind not in (TokenKind.NAME, TokenKind.ACTOR):
                self.fail("expected a name after '.'", self.tok_span(second))
            span = self.tok_span(first, second)
            if first.kind == TokenKind.ACTOR and second.kind == TokenKind.ACTOR:
                self.fail("a path has one actor side", span, "write '@x.attr' or 'attr.@x'")
            if first.kind == TokenKind.ACTOR:
                return Target(second.text, span, key=first.text, key_kind="actor"), pos + 2
            kind: Literal["actor", "name"] = "actor" if second.kind == TokenKind.ACTOR else "name"
            return Target(first.text, span, key=second.text, key_kind=kind), pos + 2
        if pos < len(tokens) and tokens[pos].text == "[":
            close = closing_bracket(tokens, pos)
            if close < 0 or close == pos + 1:
                self.fail("expected 'name[key]'", self.tok_span(tokens[pos]))
            span = self.tok_span(first, tokens[close])
            inner = tokens[pos + 1 : close]
            if len(inner) == 1 and inner[0].kind == TokenKind.ACTOR and inner[0].text != "@":
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
            if statements and bracket_depth(statements[-1]) > 0:
                statements[-1] += tokens
            elif tokens:
                statements.append(tokens)
        result = []
        for statement in statements:
            try:
                result.append(self.parse_assignment(statement))
            except Abort:
                continue
        if not statements:
            self.fail("expected an assignment after 'out:'", self.eol_span(index))
        return tuple(result)

    def parse_assignment(self, tokens: list[Token]) -> Assignment:
        target, pos = self.parse_target(tokens, 0)
        if pos >= len(tokens) or tokens[pos].text not in ("=", "+=", "-="):
            at = tokens[pos] if pos < len(tokens) else tokens[-1]
            self.fail(
                "expected '=', '+=' or '-=' after the target",
                self.tok_span(at),
                list_verb_hint(tokens, pos),
            )
        op = tokens[pos].text
        value = tokens[pos + 1 :]
        if not value:
            self.fail(f"expected a value after '{op}'", self.tok_span(tokens[pos]))
        pieces = split_commas(value)
        if len(pieces) > 1 and any(
            token.text in ("=", "+=", "-=") and bracket_depth(piece[:at]) == 0
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
            and closing_bracket(value, 1) == len(value) - 1
        ):
            op = value[0].text
            inner = value[2:-1]
            if not inner:
                self.fail(f"expected a value inside {op}()", self.tok_span(value[1]))
            value = inner
        expr = self.expression(value, value=True)
        if expr is None:
            raise Abort
        span = self.tok_span(tokens[0], tokens[-1])
        return Assignment(target, op, expr, span)  # type: ignore[arg-type]

    def single_name(self, index: int, col: int, end: int, what: str) -> str:
        tokens = self.field_tokens(index, col, end, what)
        if len(tokens) != 1 or tokens[0].kind != TokenKind.NAME:
            self.fail(f"{what}: expects one method name", self.tok_span(tokens[0]))
        return tokens[0].text


#: Words an author may write for §9.6's ``add(…)`` / ``remove(…)`` between target and value.
LIST_VERBS = {"add": "add", "append": "add", "push": "add", "remove": "remove", "del": "remove"}


def list_verb_hint(tokens: list[Token], pos: int) -> str | None:
    """``log add "x"``: show the §9.6 form, ``log = add("x")``."""
    if pos >= len(tokens) or tokens[pos].text not in LIST_VERBS:
        return None
    verb = LIST_VERBS[tokens[pos].text]
    target = "".join(token.text for token in tokens[:pos])
    item = " ".join(token.text for token in tokens[pos + 1 :]) or "…"
    where = "to" if verb == "add" else "from"
    return f"to {verb} an item {where} a list, write '{target} = {verb}({item})' (§9.6)"
