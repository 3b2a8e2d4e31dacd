"""Actions (§9): the header ``action NAME @KIND(…)``, the fields each kind accepts (from
:mod:`fems2py.kinds`) and their parsers, found through :data:`FIELD_PARSERS`; and the
``memory``/``context`` methods (§8)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fems2py.diagnostics import suggest
from fems2py.kinds import ACTION_KINDS, FIELD_NAMES, TEXT_FIELDS, kinds_with
from fems2py.lexer import Token, TokenKind
from fems2py.nodes import Action, FuncRef, Input, Interrupt, Method, Resolve, Span, Target
from fems2py.parser.base import Abort, Definitions
from fems2py.parser.flows import FlowsParser
from fems2py.parser.text import INTEGER, closing_bracket, split_commas


@dataclass
class _Header:
    """What an action's header says after its kind (§9.1)."""

    executor: str | None = None
    role: str | None = None
    func: FuncRef | None = None
    # Where the executor and the role were written, for the checker's messages about them.
    spans: list[tuple[str, Span]] = field(default_factory=list)


class ActionsParser(FlowsParser):
    """Adds actions and methods."""

    def parse_method(self, index: int, end: int, tokens: list[Token], defs: Definitions) -> None:
        kind = tokens[0].text
        if len(tokens) < 2 or tokens[1].kind != TokenKind.NAME:
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
        targets: tuple[Target, ...] = ()
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
                    outs = self.parse_outs(item, field_tokens[1].end, item_end)
                    targets = tuple(out.target for out in outs)
            except Abort:
                continue
        span = self.tok_span(tokens[0], name)
        self.unique(kind, name.text, span, defs)
        defs.methods.append(
            Method(kind, name.text, func, inputs, targets, span)  # type: ignore[arg-type]
        )

    def parse_action(self, index: int, end: int, tokens: list[Token], defs: Definitions) -> None:
        name, kind_token = self.parse_action_name_and_kind(tokens)
        kind = kind_token.text[1:]
        header, pos = self.parse_action_header(tokens, kind_token)
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
        fields["field_spans"] = (*header.spans, *fields["field_spans"])
        defs.actions.append(
            Action(
                name=name.text,
                kind=kind,  # type: ignore[arg-type]
                span=span,
                executor=header.executor,
                role=header.role,
                func=header.func,
                **fields,
            )
        )

    def parse_action_name_and_kind(self, tokens: list[Token]) -> tuple[Token, Token]:
        """``action NAME @KIND``: the name and the kind, a row of the kinds table."""
        if len(tokens) < 2 or tokens[1].kind != TokenKind.NAME:
            self.fail(
                "expected an action name after 'action'",
                self.tok_span(tokens[1] if len(tokens) > 1 else tokens[0]),
                "write action NAME @ai(@x): (or @human, @mind, @assign, @func)",
            )
        name = tokens[1]
        self.check_name(name, "action")
        if len(tokens) < 3 or tokens[2].kind != TokenKind.ACTOR:
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
        return name, kind_token

    def parse_action_header(self, tokens: list[Token], kind_token: Token) -> tuple[_Header, int]:
        """What the kind's header takes after ``@KIND`` (:attr:`ActionKind.header`): the
        executor and role, ``(@x) as (@r)``, or the function, ``(alias.fn)``; and where the
        header goes on."""
        header = _Header()
        pos = 3
        kind = ACTION_KINDS[kind_token.text[1:]]
        if kind.has_executor:
            header.executor, pos = self.parse_executor(tokens, pos, kind_token)
            header.spans.append(("executor", self.tok_span(tokens[pos - 2])))
            if pos < len(tokens) and tokens[pos].text == "as":
                start = pos
                header.role, pos = self.parse_role(tokens, pos)
                role_token = next(t for t in tokens[start:pos] if t.kind == TokenKind.ACTOR)
                header.spans.append(("role", self.tok_span(role_token)))
        elif kind.calls_function:
            if pos >= len(tokens) or tokens[pos].text != "(":
                self.fail("expected '(alias.function)' after @func", self.tok_span(tokens[pos - 1]))
            header.func, pos = self.parse_func_ref(tokens, pos + 1)
            if pos >= len(tokens) or tokens[pos].text != ")":
                self.fail("expected ')'", self.tok_span(tokens[min(pos, len(tokens) - 1)]))
            pos += 1
        return header, pos

    def parse_executor(self, tokens: list[Token], pos: int, kind: Token) -> tuple[str, int]:
        if pos + 2 >= len(tokens) or tokens[pos].text != "(":
            self.fail(
                f"expected '(@actor)' after {kind.text}",
                self.tok_span(tokens[min(pos, len(tokens) - 1)]),
                f"write {kind.text}(@name)",
            )
        who = tokens[pos + 1]
        if who.kind == TokenKind.NAME:
            self.warning(
                f"actor references carry '@': '{who.text}' is read as '@{who.text}'",
                self.tok_span(who),
                f"write {kind.text}(@{who.text})",
            )
            executor = "@" + who.text
        elif who.kind == TokenKind.ACTOR and who.text != "@":
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
        if pos >= len(tokens) or tokens[pos].kind != TokenKind.ACTOR or tokens[pos].text == "@":
            self.fail("expected 'as (@role)'", self.tok_span(tokens[min(pos, len(tokens) - 1)]))
        role = tokens[pos].text
        pos += 1
        if parens:
            if pos >= len(tokens) or tokens[pos].text != ")":
                self.fail("expected ')' after the role", self.tok_span(tokens[pos - 1]))
            pos += 1
        return role, pos

    def parse_fields(self, index: int, end: int, kind: str) -> dict[str, Any]:
        """The indented fields of an action (§9.2), as keyword arguments of :class:`Action`."""
        result: dict[str, Any] = {}
        spans: list[tuple[str, Span]] = []
        for item, item_end in self.items(index + 1, end):
            try:
                tokens = self.tokens(item)
                key = tokens[0]
                if key.kind != TokenKind.NAME or key.text not in FIELD_NAMES:
                    self.fail(
                        f"unknown action field '{key.text}'",
                        self.tok_span(key),
                        suggest(key.text, FIELD_NAMES) or "fields: " + ", ".join(FIELD_NAMES),
                    )
                if len(tokens) < 2 or tokens[1].text != ":":
                    at = tokens[1] if len(tokens) > 1 else key
                    self.fail(f"expected ':' after '{key.text}'", self.tok_span(at))
                if any(name == key.text for name, _ in spans):
                    self.fail(f"field '{key.text}' is given twice", self.tok_span(key))
                if key.text not in ACTION_KINDS[kind].fields:
                    self.fail(
                        f"'{key.text}:' does not apply to @{kind} actions",
                        self.tok_span(key),
                        "it is used by " + ", ".join(f"@{k}" for k in sorted(kinds_with(key.text))),
                    )
                spans.append((key.text, self.tok_span(key)))
                col = tokens[1].end
                if key.text not in TEXT_FIELDS and [t.text for t in tokens[2:]] == ["|"]:
                    col = tokens[2].end  # ``out: |``: the statements are the indented lines
                result.update(FIELD_PARSERS[key.text](self, item, col, item_end, kind))
            except Abort:
                continue
        result["field_spans"] = tuple(spans)
        return result

    def parse_field_prompt(self, index: int, col: int, end: int, kind: str) -> dict[str, object]:
        return {"prompt": self.parse_text_field(index, col, end, "prompt")}

    def parse_field_showprompt(
        self, index: int, col: int, end: int, kind: str
    ) -> dict[str, object]:
        return {"showprompt": self.parse_text_field(index, col, end, "showprompt")}

    def parse_field_scope(self, index: int, col: int, end: int, kind: str) -> dict[str, object]:
        tokens = self.field_tokens(index, col, end, "scope")
        return {"scope": self.parse_scope(tokens)}

    def parse_field_in(self, index: int, col: int, end: int, kind: str) -> dict[str, object]:
        return {"inputs": self.parse_inputs(index, col, end)}

    def parse_field_out(self, index: int, col: int, end: int, kind: str) -> dict[str, object]:
        if ACTION_KINDS[kind].assigns:
            return {"assignments": self.parse_assignments(index, col, end)}
        return {"outs": self.parse_outs(index, col, end)}

    def parse_field_resolve(self, index: int, col: int, end: int, kind: str) -> dict[str, object]:
        tokens = self.field_tokens(index, col, end, "resolve")
        func, pos = self.parse_func_ref(tokens, 0)
        args: tuple[str, ...] | None = None
        if pos < len(tokens):
            if tokens[pos].text != "(" or closing_bracket(tokens, pos) != len(tokens) - 1:
                self.fail("expected '(arg, …)' or the end of the line", self.tok_span(tokens[pos]))
            names = []
            for piece in split_commas(tokens[pos + 1 : -1]):
                if len(piece) != 1 or piece[0].kind not in (TokenKind.NAME, TokenKind.ACTOR):
                    at = piece[0] if piece else tokens[pos]
                    self.fail("resolve arguments are names", self.tok_span(at))
                names.append(piece[0].text)
            args = tuple(names)
        return {"resolve": Resolve(func, args, self.tok_span(tokens[0], tokens[-1]))}

    def parse_field_max_retries(
        self, index: int, col: int, end: int, kind: str
    ) -> dict[str, object]:
        return {"max_retries": self.whole_number_field(index, col, end, "max_retries")}

    def parse_field_max_tool_rounds(
        self, index: int, col: int, end: int, kind: str
    ) -> dict[str, object]:
        return {"max_tool_rounds": self.whole_number_field(index, col, end, "max_tool_rounds")}

    def parse_field_max_tokens(
        self, index: int, col: int, end: int, kind: str
    ) -> dict[str, object]:
        hint = "e.g. max_tokens: 400 (the most tokens one reply may have, §9.2)"
        return {"max_tokens": self.whole_number_field(index, col, end, "max_tokens", 1, hint)}

    def whole_number_field(
        self, index: int, col: int, end: int, name: str, minimum: int = 0, hint: str | None = None
    ) -> int:
        tokens = self.field_tokens(index, col, end, name)
        if (
            len(tokens) != 1
            or not INTEGER.match(tokens[0].text)
            or tokens[0].text.startswith("-")
            or int(tokens[0].text) < minimum
        ):
            self.fail(f"{name}: expects a whole number ≥ {minimum}", self.tok_span(tokens[0]), hint)
        return int(tokens[0].text)

    def parse_field_fallback(self, index: int, col: int, end: int, kind: str) -> dict[str, object]:
        tokens = self.field_tokens(index, col, end, "fallback")
        if tokens[0].text == "&":
            call, pos = self.parse_module_call(tokens, 0)
            if pos != len(tokens):
                self.fail(f"unexpected '{tokens[pos].text}'", self.tok_span(tokens[pos]))
            return {"fallback": call}
        if len(tokens) != 1 or tokens[0].kind != TokenKind.NAME:
            self.fail("fallback: expects an action name or &Module", self.tok_span(tokens[0]))
        return {"fallback": tokens[0].text}

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
                if tokens[1].text != "(" or closing_bracket(tokens, 1) != len(tokens) - 1:
                    self.fail("expected HUMAN_EXCEPT(@a, @b)", self.tok_span(tokens[1]))
                for piece in split_commas(tokens[2:-1]):
                    if len(piece) != 1 or piece[0].kind != TokenKind.ACTOR:
                        at = piece[0] if piece else tokens[1]
                        self.fail("HUMAN_EXCEPT lists actors such as @eve", self.tok_span(at))
                    actors.append(piece[0].text)
            return {"interrupt": Interrupt("human_except", actors=tuple(actors), span=span)}
        if (  # name.name is no condition (§12.2): an unknown alias is reported as one
            len(tokens) == 3
            and tokens[0].kind == TokenKind.NAME
            and tokens[1].text == "."
            and tokens[2].kind == TokenKind.NAME
        ):
            func, _ = self.parse_func_ref(tokens, 0)
            return {"interrupt": Interrupt("func", func=func, span=span)}
        condition = self.expression(tokens)
        if condition is None:
            raise Abort
        return {"interrupt": Interrupt("condition", condition=condition, span=span)}


FieldParser = Callable[[ActionsParser, int, int, int, str], dict[str, object]]
#: The parser of each action field (§9.2), by name: ``(parser, line index, column after the
#: ':', end of the field's lines, action kind)`` → the :class:`~fems2py.nodes.Action` fields it
#: sets. Every name of :data:`fems2py.kinds.FIELD_NAMES` has one (tests/test_kinds.py).
FIELD_PARSERS: dict[str, FieldParser] = {
    "prompt": ActionsParser.parse_field_prompt,
    "showprompt": ActionsParser.parse_field_showprompt,
    "scope": ActionsParser.parse_field_scope,
    "in": ActionsParser.parse_field_in,
    "out": ActionsParser.parse_field_out,
    "resolve": ActionsParser.parse_field_resolve,
    "max_retries": ActionsParser.parse_field_max_retries,
    "fallback": ActionsParser.parse_field_fallback,
    "memory": ActionsParser.parse_field_memory,
    "context": ActionsParser.parse_field_context,
    "interrupt": ActionsParser.parse_field_interrupt,
    "model": ActionsParser.parse_field_model,
    "max_tool_rounds": ActionsParser.parse_field_max_tool_rounds,
    "max_tokens": ActionsParser.parse_field_max_tokens,
}
