"""Flows (§12): ``mainflow:``/``flow:`` lines, chains, conditions, forks, ``for``/``par``
loops and joins, built into :class:`~fems2py.nodes.Graph` values."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NoReturn

from fems2py.lexer import Token, TokenKind, comment_start
from fems2py.nodes import Expr, Join, Loop, Span
from fems2py.parser.base import Abort, Definitions
from fems2py.parser.fields import unclosed_bracket
from fems2py.parser.flow_nodes import FlowNodesParser, GraphBuilder
from fems2py.parser.text import CLOSERS, INTEGER, bracket_depth, closing_bracket


@dataclass
class _Pending:
    """The node a line's trailing ``->`` leaves open, waiting for the next line."""

    node: str
    span: Span
    loop_exit: bool = False


@dataclass
class _LoopBody:
    """The loop whose body is being parsed: where iteration ends are recorded."""

    ends: list[str] = field(default_factory=list)


def _arrow_hint(found: str) -> str | None:
    if found in ("-", "=", ">", "→", "—", "－"):
        return "the flow arrow is '->' (or '--')"
    if found in ("/", "#"):
        return "a comment starts with '#' or '//' after a space (§1.3)"
    return None


def is_flow_line(tokens: list[Token]) -> bool:
    """``[A] …``, ``-> …``, ``&M …`` or ``name -> …``: a line that belongs in a flow."""
    head = tokens[0]
    return head.text in ("[", "->", "&") or (
        head.kind == TokenKind.NAME and len(tokens) > 1 and tokens[1].text == "->"
    )


def _describe_node(tokens: list[Token], pos: int) -> str:
    """``[Name]`` when the tokens at ``pos`` spell one, else just ``'['``."""
    if (
        pos + 2 < len(tokens)
        and tokens[pos + 1].kind == TokenKind.NAME
        and tokens[pos + 2].text == "]"
    ):
        return f"[{tokens[pos + 1].text}]"
    return "'['"


def _describe(tokens: list[Token], pos: int) -> str:
    token = tokens[pos]
    if token.text == "]" and pos >= 1:
        return f"[{tokens[pos - 1].text}]"
    return f"'{token.text}'"


class FlowsParser(FlowNodesParser):
    """Adds flows: lines, chains, forks, loops and joins."""

    def parse_flow_block(self, index: int, end: int, defs: Definitions) -> None:
        graph = GraphBuilder(self)
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
        if not module and (after is None or not is_flow_line(self.tokens(after))):
            header = self.tokens(index)[0]
            self.error(
                f"'{header.text}:' has no lines",
                self.tok_span(header),
                "indent the flow under it, e.g. [START] -> first_action -> [END]",
            )

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
        graph: GraphBuilder,
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
            except Abort:
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
        if head.kind != TokenKind.NAME or head.text not in ("fork", "for", "par"):
            return False
        after = tokens[pos + 1] if pos + 1 < len(tokens) else None
        if head.text == "fork":
            return after is not None and after.text == ":"
        return after is not None and after.kind in (TokenKind.NAME, TokenKind.ACTOR)

    def parse_chain(
        self,
        tokens: list[Token],
        pos: int,
        index: int,
        end: int,
        graph: GraphBuilder,
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
                tokens[stop].text == "->" and bracket_depth(tokens[pos + 1 : stop]) == 0
            ):
                stop += 1
            if stop == pos + 1:
                self.fail("expected a condition after 'if'", self.tok_span(tokens[pos]))
            if stop == len(tokens):
                self.missing_condition_arrow(tokens, pos + 1)
            condition = self.expression(tokens[pos + 1 : stop])
            if condition is None:
                raise Abort
            return condition, stop + 1
        if pos + 1 < len(tokens) and tokens[pos].text == "(" and tokens[pos + 1].text == "if":
            close = closing_bracket(tokens, pos)
            if close < 0:
                self.fail("'(' is never closed", self.tok_span(tokens[pos]))
            if close == pos + 2:
                self.fail("expected a condition after 'if'", self.tok_span(tokens[pos + 1]))
            condition = self.expression(tokens[pos + 2 : close])
            if condition is None:
                raise Abort
            pos = close + 1
            if pos < len(tokens) and tokens[pos].text == "->":
                pos += 1
            return condition, pos
        return None, pos

    def missing_condition_arrow(self, tokens: list[Token], start: int) -> NoReturn:
        """``-> if (c) [B]`` or ``-> if (c -> [B]``: say which of the two went wrong."""
        opener = unclosed_bracket(tokens[start:])
        if opener is not None:
            raw = self.lines[opener.line - 1].raw
            comment = raw[comment_start(raw) :]
            hint = f"close it with '{CLOSERS[opener.text]}'"
            if CLOSERS[opener.text] in comment:
                hint = (
                    f"'{comment[:2].strip()}' after a space starts a comment (§1.3) and hides the "
                    "rest of the line; for floor division write day//2"
                )
            self.fail(f"'{opener.text}' is never closed", self.tok_span(opener), hint)
        hint = "write -> if (condition) -> [Node], or -> (if condition) [Node]"
        for at in range(start + 1, len(tokens)):
            if tokens[at].text == "[" and bracket_depth(tokens[start:at]) == 0:
                self.fail(
                    f"expected '->' before {_describe_node(tokens, at)}",
                    self.tok_span(tokens[at]),
                    hint,
                )
        self.fail("expected '->' after the condition", self.eol_token_span(tokens[-1]), hint)

    def parse_construct(
        self,
        tokens: list[Token],
        pos: int,
        index: int,
        end: int,
        graph: GraphBuilder,
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
        graph: GraphBuilder,
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
            raise Abort
        name = f"{head.text}@{head.line}:{head.col + 1}"
        body = GraphBuilder(self)
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
        graph: GraphBuilder,
        loop: _LoopBody | None,
    ) -> str:
        """``join(all|N|any):`` with input lines ending in ``->``; ``to [X]`` follows (§12.6)."""
        head = tokens[0]
        close = closing_bracket(tokens, 1)
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
        elif INTEGER.match(arg.text) and int(arg.text) >= 1:
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
            except Abort:
                continue
        return name
