"""Flows (§12): ``mainflow:``/``flow:`` lines, chains, forks, ``for``/``par`` loops and joins,
built into :class:`~fems2py.nodes.Graph` values (the nodes and arrows of a chain:
:mod:`fems2py.parser.flow_nodes`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from fems2py.lexer import Token, TokenKind
from fems2py.nodes import Expr, Join, Loop, Span
from fems2py.parser.base import Abort, Definitions
from fems2py.parser.flow_nodes import FlowNodesParser, GraphBuilder
from fems2py.parser.text import INTEGER, closing_bracket


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


@dataclass
class _Level:
    """One level of flow lines being read (a flow, a fork's branches, a loop body)."""

    graph: GraphBuilder
    start_from: str | None  # where a line starting with '->' starts; None at a flow's top
    loop: _LoopBody | None
    pending: _Pending | None = None
    join: tuple[str, Token] | None = None  # a join whose 'to [node]' line comes next
    after_error: bool = False  # the line before was broken
    # Consecutive '->' lines after a loop body are all exit lines of that loop (like the
    # out-edges of one node, §12.3): ``-> if (won) -> [END]`` / ``-> if (not won) -> [P]``.
    loop_exit: str | None = None

    def repeats_error(self, tokens: list[Token]) -> bool:
        """Whether a line after a broken one would only repeat its error: a line continuing it
        ("needs a node before it"), or the ``to`` of a join whose header was broken."""
        continues = tokens[0].text == "->" or is_construct(tokens, 0)
        if continues and self.pending is None and self.start_from is None:
            return True
        return tokens[0].text == "to"


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


def is_construct(tokens: list[Token], pos: int) -> bool:
    """Whether ``tokens[pos]`` starts ``fork:`` or ``for``/``par VAR in …:``."""
    head = tokens[pos]
    if head.kind != TokenKind.NAME or head.text not in ("fork", "for", "par"):
        return False
    after = tokens[pos + 1] if pos + 1 < len(tokens) else None
    if head.text == "fork":
        return after is not None and after.text == ":"
    return after is not None and after.kind in (TokenKind.NAME, TokenKind.ACTOR)


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
            # a second flow was reported by once(); the first one counts
            if defs.flow is None or defs.flow_unread:
                defs.flow_unread = False
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
        level = _Level(graph, start_from, loop, pending)
        for index, end in self.items(start, stop):
            tokens = self.tokens(index, flow=True)
            if tokens[0].text != "->":
                level.loop_exit = None
            if level.after_error and level.repeats_error(tokens):
                continue
            level.after_error = False
            try:
                self.parse_flow_line(level, tokens, index, end)
            except Abort:
                level.pending = None
                level.after_error = True
        if level.join is not None:
            self.error(
                "join has no 'to [node]' line",
                self.tok_span(level.join[1]),
                "add a line 'to [next]' after the join's inputs",
            )
        return level.pending

    def parse_flow_line(self, level: _Level, tokens: list[Token], index: int, end: int) -> None:
        """One flow line (and the lines indented under it) into ``level``."""
        self.closed_strings(tokens)
        if self.is_declaration(tokens):  # declares a node, creates no edge (§12.1)
            self.declare(tokens, index, end)
            return
        if level.join is not None:
            joined, level.join = level.join[0], None
            if self.parse_join_exit(level, joined, tokens, index, end):
                return
        head = tokens[0]
        if head.text == "join":
            self.drop_pending(level.pending, level.loop)
            level.pending = None
            level.join = (self.parse_join(tokens, index, end, level.graph, level.loop), head)
        elif head.text == "to":
            self.fail("'to' without a join before it", self.tok_span(head))
        elif head.text == "->":
            level.pending = self.parse_arrow_line(level, tokens, index, end)
        elif is_construct(tokens, 0):
            pending = level.pending
            if pending is None or pending.loop_exit:
                self.fail(
                    f"'{head.text}' needs a node before it",
                    self.tok_span(head),
                    f"end the previous line with '->', or write 'X -> {head.text} …'",
                )
            level.pending = self.parse_construct(
                tokens, 0, index, end, level.graph, pending.node, None, level.loop
            )
        else:
            self.drop_pending(level.pending, level.loop)
            level.pending = self.parse_chain(
                tokens, 0, index, end, level.graph, None, level.loop, None
            )

    def parse_join_exit(
        self, level: _Level, joined: str, tokens: list[Token], index: int, end: int
    ) -> bool:
        """The line after the inputs of join ``joined``: ``to [X] …`` goes on from the join
        (True); any other line is reported as missing it, then read as a line of its own."""
        if tokens[0].text != "to":
            self.error(
                "expected 'to [node]' after the join's inputs",
                self.tok_span(tokens[0]),
                "a join ends with a line 'to [next]' at the join's indentation",
            )
            return False
        level.pending = self.parse_chain(
            tokens, 1, index, end, level.graph, joined, level.loop, None, arrow_done=True
        )
        return True

    def parse_arrow_line(
        self, level: _Level, tokens: list[Token], index: int, end: int
    ) -> _Pending | None:
        """A line starting with ``->``: it goes on from the previous line's trailing ``->``,
        from the loop whose exit lines these are, or from the level's own node (a fork's,
        a loop head)."""
        pending = level.pending
        source: str | None
        if pending is not None and (pending.loop_exit or level.start_from is None):
            source = pending.node
            if pending.loop_exit and level.start_from is None:
                level.loop_exit = pending.node
        elif pending is None and level.loop_exit is not None:
            source = level.loop_exit
        else:
            self.drop_pending(pending, level.loop)
            source = level.start_from
        level.pending = None
        if source is None:
            self.fail(
                "a line starting with '->' needs a node before it",
                self.tok_span(tokens[0]),
                "end the previous line with '->' or start this line with a node",
            )
        return self.parse_chain(tokens, 0, index, end, level.graph, source, level.loop, None)

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
            if is_construct(tokens, pos):
                return self.parse_construct(tokens, pos, index, end, graph, prev, condition, loop)
            node, pos = self.parse_element(tokens, pos, graph)
            graph.edge(prev, node, condition, self.tok_span(arrow, tokens[pos - 1]))
            prev = node
            condition = None

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
        """``for``/``par VAR in EXPR:`` and its body, one node of ``graph`` after ``source``;
        the lines after it that start with ``->`` are its exit lines."""
        head = tokens[pos]
        var, iterable = self.parse_loop_header(tokens, pos)
        name = f"{head.text}@{head.line}:{head.col + 1}"
        body, body_loop = self.parse_loop_body(head, name, index, end)
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

    def parse_loop_header(self, tokens: list[Token], pos: int) -> tuple[Token, Expr]:
        """The loop variable and what it goes over, of the ``for``/``par`` at ``pos``."""
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
        self.check_name(var, "loop variable", allow_all=True)
        self.check_readable(var, "loop variable")
        iterable = self.expression(tokens[pos + 3 : -1])
        if iterable is None:
            raise Abort
        return var, iterable

    def parse_loop_body(
        self, head: Token, name: str, index: int, end: int
    ) -> tuple[GraphBuilder, _LoopBody]:
        """The lines under loop header ``head``: a graph of their own that each iteration
        enters at node ``name`` (§12.7), and the nodes where an iteration ends."""
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
        return body, body_loop

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
