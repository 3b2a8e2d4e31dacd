"""The ``actors:`` block: ``ai``/``human`` actors and blueprints (§6)."""

from __future__ import annotations

from fems_runtime.words import ACTOR_TYPES

from fems2py.diagnostics import suggest
from fems2py.lexer import Token
from fems2py.nodes import ActorDef, Blueprint, BoolValue, ListValue, Span, StringValue
from fems2py.parser.base import Abort, Definitions
from fems2py.parser.definitions import DefinitionsParser
from fems2py.parser.text import split_commas

ACTOR_PROPS = ("soul", "source", "tools")


class ActorsParser(DefinitionsParser):
    """Adds the ``actors:`` block."""

    def parse_actors_block(self, index: int, end: int, defs: Definitions) -> None:
        for item, item_end in self.items(index + 1, end):
            try:
                tokens = self.tokens(item)
                if tokens[0].text == "blueprint":
                    self.parse_blueprint(item, item_end, tokens, defs)
                    continue
                self.no_body(item, item_end, "an actor definition")
                defs.actors.append(self.parse_actor(tokens))
            except Abort:
                tokens = self.tokens(item)
                if len(tokens) > 1:
                    self.note_broken(tokens[1], actor=True)

    def parse_actor(self, tokens: list[Token]) -> ActorDef:
        kind = tokens[0]
        if kind.text not in ACTOR_TYPES:
            self.fail(
                f"an actor definition starts with 'ai' or 'human', found '{kind.text}'",
                self.tok_span(kind),
                suggest(kind.text, ACTOR_TYPES),
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
            pieces = split_commas(tokens[3:])
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
        tool_spans: tuple[Span, ...] = ()
        if "soul" in props:
            soul = self.prop_text(props["soul"]) or soul
        if "source" in props:
            source = self.prop_text(props["source"])
        if "tools" in props:
            tools, tool_spans = self.parse_tools(props["tools"])
        span = self.span(kind.line, kind.col, tokens[-1].end)
        return ActorDef(kind.text, name, soul, source, tools, span, tool_spans)  # type: ignore[arg-type]

    def prop_text(self, prop: tuple[Token, list[Token]]) -> str:
        key, value = prop
        if not value:
            self.fail(f"expected a value after '{key.text}:'", self.tok_span(key))
        if len(value) == 1 and value[0].kind == "string":
            return value[0].value
        return self.lines[value[0].line - 1].code()[value[0].col : value[-1].end].strip()

    def parse_tools(
        self, prop: tuple[Token, list[Token]]
    ) -> tuple[tuple[str, ...] | bool, tuple[Span, ...]]:
        """The tool names (or true/false) and where each was written (the value's span for
        true/false), so the checker can point at a wrong one (§15.5)."""
        key, value = prop
        parsed = self.parse_value(value) if value else None
        if isinstance(parsed, BoolValue):
            return parsed.value, (parsed.span,)
        if isinstance(parsed, ListValue):
            names = []
            for item in parsed.items:
                if not isinstance(item, StringValue):
                    self.fail("a tool is named by a word or a string", item.span)
                names.append(item.value)
            return tuple(names), tuple(item.span for item in parsed.items)
        self.fail("tools: expects a list of tool names, true or false", self.tok_span(key))

    def parse_blueprint(self, index: int, end: int, tokens: list[Token], defs: Definitions) -> None:
        if len(tokens) < 2 or tokens[1].kind != "name":
            self.fail("expected a blueprint name", self.tok_span(tokens[-1]))
        self.expect_header(tokens, 2)
        source: str | None = None
        tools: tuple[str, ...] | bool = ()
        tool_spans: tuple[Span, ...] = ()
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
                    tools, tool_spans = self.parse_tools((key, line_tokens[2:]))
            except Abort:
                continue
        span = self.tok_span(tokens[0], tokens[1])
        self.unique("blueprint", tokens[1].text, span, defs)
        defs.blueprints.append(Blueprint(tokens[1].text, source, tools, span, tool_spans))

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
