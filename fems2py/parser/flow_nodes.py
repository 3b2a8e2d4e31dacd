"""The elements of a flow's chains: its nodes (§12.1) — ``[X]``, ``[X]:action``,
``&Module(args)``, anonymous action nodes and standalone binding lines ``[X]: target``,
collected in a graph builder — and the arrows between them, with their conditions (§12.2)."""

from __future__ import annotations

import dataclasses
from typing import NoReturn

from fems_runtime.words import RESERVED_NODE_NAMES

from fems2py.lexer import Token, TokenKind, comment_start
from fems2py.nodes import Binding, Edge, Expr, FlowNode, Graph, Loop, ModuleCall, Span
from fems2py.parser.base import Abort, Declaration, ParserBase
from fems2py.parser.definitions import RESERVED
from fems2py.parser.fields import FieldsParser, unclosed_bracket
from fems2py.parser.text import CLOSERS, bracket_depth, closing_bracket


class GraphBuilder:
    """Collects the nodes and edges of one flow graph (or loop body)."""

    def __init__(self, parser: ParserBase) -> None:
        self.parser = parser
        self.nodes: dict[str, FlowNode] = {}
        self.edges: list[Edge] = []

    def add(self, name: str, span: Span, binding: Binding = None, anonymous: bool = False) -> str:
        existing = self.nodes.get(name)
        bound_at = span if binding is not None else None
        if existing is None:
            self.nodes[name] = FlowNode(name, binding, anonymous, span, bound_at)
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


class FlowNodesParser(FieldsParser):
    """Adds flow nodes, their bindings and binding lines."""

    @staticmethod
    def is_declaration(tokens: list[Token]) -> bool:
        """``[X]: target`` or ``[X]:`` alone on its line (§12.1)."""
        return (
            len(tokens) >= 4
            and tokens[0].text == "["
            and tokens[1].kind == TokenKind.NAME
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
            self.declarations[name] = Declaration(binding, span)
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
        unused = sorted(
            (
                FlowNode(name, declaration.binding, False, declaration.span)
                for name, declaration in self.declarations.items()
                if name not in used
            ),
            key=_position,
        )
        if not unused:
            return graph
        # Each unused one goes before the first node that appears after it (order of
        # appearance, like every node); that index only grows with the position, so one pass.
        nodes: list[FlowNode] = []
        rest = iter(graph.nodes)
        pending = next(rest, None)
        for node in unused:
            while pending is not None and _position(pending) <= _position(node):
                nodes.append(pending)
                pending = next(rest, None)
            nodes.append(node)
        nodes.extend([pending, *rest] if pending is not None else [])
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

    def bind_node(self, node: FlowNode, declaration: Declaration) -> FlowNode:
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

    def parse_element(self, tokens: list[Token], pos: int, graph: GraphBuilder) -> tuple[str, int]:
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
                or tokens[pos + 1].kind != TokenKind.NAME
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
        self.reject_misplaced(tokens, pos)
        if token.text == "&" or token.kind == TokenKind.NAME:
            binding, after = self.parse_binding(tokens, pos)
            label = f"&{binding.module}" if isinstance(binding, ModuleCall) else binding
            name = f"{label}@{token.line}:{token.col + 1}"
            return graph.add(name, self.tok_span(token, tokens[after - 1]), binding, True), after
        self.fail(
            f"expected a node, an action or &Module, found '{token.text}'",
            self.tok_span(token),
        )

    def reject_misplaced(self, tokens: list[Token], pos: int) -> None:
        """Where a node belongs: a construct missing its ':' or written inline, and a call
        without '&', each with how to write it."""
        token = tokens[pos]
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
        if token.kind == TokenKind.NAME and pos + 1 < len(tokens) and tokens[pos + 1].text == "(":
            if token.text == "join":  # a join is a block of its own, never a node of a chain
                self.fail(
                    "join(…) cannot stand in a chain",
                    self.tok_span(token),
                    "write it on a line of its own: 'join(all):', the nodes that arrive "
                    "indented under it ('[B] ->'), then 'to [Next]' (§12.6)",
                )
            self.fail(
                f"unexpected '(' after '{token.text}'",
                self.tok_span(tokens[pos + 1]),
                f"actions take no arguments; a module call starts with '&': &{token.text}(…)",
            )

    def parse_binding(self, tokens: list[Token], pos: int) -> tuple[str | ModuleCall, int]:
        token = tokens[pos]
        if token.text == "&":
            return self.parse_module_call(tokens, pos)
        if token.kind != TokenKind.NAME:
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
        if pos + 1 >= len(tokens) or tokens[pos + 1].kind != TokenKind.NAME:
            self.fail("expected a module name after '&'", self.tok_span(amp))
        name = tokens[pos + 1]
        pos += 2
        args: list[Expr] = []
        if pos < len(tokens) and tokens[pos].text == "(":
            pieces, close = self.bracketed(tokens, pos)
            for piece in pieces:
                if not piece:
                    self.fail("empty module argument", self.tok_span(tokens[pos]))
                expr = self.expression(piece, value=True)
                if expr is None:
                    raise Abort
                args.append(expr)
            pos = close + 1
        return ModuleCall(name.text, tuple(args), self.tok_span(amp, tokens[pos - 1])), pos

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


def _describe_node(tokens: list[Token], pos: int) -> str:
    """``[Name]`` when the tokens at ``pos`` spell one, else just ``'['``."""
    if (
        pos + 2 < len(tokens)
        and tokens[pos + 1].kind == TokenKind.NAME
        and tokens[pos + 2].text == "]"
    ):
        return f"[{tokens[pos + 1].text}]"
    return "'['"


def _position(node: FlowNode) -> tuple[int, int]:
    return node.span.line, node.span.col
