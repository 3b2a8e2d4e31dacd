"""Tools an actor's model may call (§15.5): ``code:`` functions, built-ins and MCP tools.

A ``code:`` function is described by pydantic: its JSON schema comes from the signature, type
hints and docstring (``TypeAdapter(function).json_schema()``), and the same adapter validates
the model's arguments before the call. The built-ins (:mod:`fems_runtime.builtin_tools`:
read, list, glob, grep, write, edit) are methods described the same way, confined to one root
folder. A tool of an MCP server (:mod:`fems_runtime.mcp`, named ``server.tool`` or
``server.*``) is described by the server: its schema is passed to the model as given and
validates the arguments (jsonschema) before the ``tools/call``.

Other names in ``tools:`` are not tools: ``deep_think`` asks the model to reason (§15.7, see
:func:`asks_reasoning`), and a host's tool name (``web_search``, ``shell``…) was a build
warning; neither is offered.

A tool never crashes the run: invalid JSON, arguments the schema rejects, a path outside the
root and any exception the function raises become the tool's result text, which goes back to
the model. pydantic is imported only when a turn offers tools.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from fems_runtime.builtin_tools import Workspace
from fems_runtime.mcp import McpServers, ServerTool
from fems_runtime.project import ServerConfig
from fems_runtime.records import RunError
from fems_runtime.values import valid_text

BUILTIN_TOOLS = ("read", "list", "glob", "grep", "write", "edit")
"""The built-in tools; ``write`` and ``edit`` are offered only when an actor names them
(``true`` leaves them out)."""
DEFAULT_TOOLS = ("read", "list", "glob", "grep")
"""What ``tools: true`` offers besides the script's own: the built-ins that change nothing."""
REASONING = "deep_think"
"""Not a tool: in ``tools:`` it asks the actor's model to reason before answering (§15.7)."""
HOST_TOOLS = ("web_search", "code_interpreter", "shell")
"""Tools of the hosts real scripts were written for: a build warning, never offered (§6.4)."""
ALL_TOOLS = "*"
"""``server.*``: every tool an MCP server lists."""
DEFAULT_MAX_TOOL_ROUNDS = 8
RESULT_LIMIT = 60_000
"""Characters of a tool result sent back to the model (and stored)."""
DESCRIPTION_LIMIT = 1_000
_WIRE_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


@dataclass(frozen=True)
class ToolCall:
    """One call a model asked for: its id, the tool's name as the model wrote it, and the
    arguments as JSON text (exactly as received, so a bad JSON can be reported back)."""

    id: str
    name: str
    arguments: str

    def as_message(self) -> dict[str, Any]:
        """The OpenAI-protocol form, as it appears in an assistant message's ``tool_calls``."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass(frozen=True)
class ToolOutcome:
    """A finished call: the call, the tool's FEM name and the result text the model gets."""

    call: ToolCall
    tool: str
    result: str

    def as_message(self) -> dict[str, Any]:
        """The ``tool`` role message that answers the call."""
        return {"role": "tool", "tool_call_id": self.call.id, "content": self.result}


@dataclass(frozen=True)
class Tool:
    """A described callable: ``name`` as the script writes it, the schema the model sees."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    invoke: Callable[[Mapping[str, Any]], Any]
    threaded: bool = True
    """Whether ``invoke`` runs in a worker thread (a Python function) or in the run's loop
    (an MCP call, which returns an awaitable)."""
    read_only: bool | None = None
    """Whether a call changes nothing: True for the built-ins that read and an MCP tool its
    server marks read-only, False for ``write``, ``edit`` and any other MCP tool, None for a
    ``code:`` function (the script's own, which the run cannot judge). An offline model calls
    no tool that is False (§15.3)."""

    @property
    def wire_name(self) -> str:
        """The name on the wire: providers allow ``[A-Za-z0-9_-]`` (at most 64), so
        ``notes.lookup`` is offered as ``notes_lookup``."""
        return _WIRE_UNSAFE.sub("_", self.name)[:64]

    def schema(self) -> dict[str, Any]:
        """The entry of the ``tools`` request parameter (OpenAI protocol)."""
        return {
            "type": "function",
            "function": {
                "name": self.wire_name,
                "description": self.description,
                "parameters": dict(self.parameters),
            },
        }


class ToolSchemaError(Exception):
    """A function whose parameters pydantic cannot describe as a JSON schema object."""


def describe(name: str, function: Callable[..., Any], read_only: bool | None = None) -> Tool:
    """The tool for ``function``: schema and validation from pydantic's ``TypeAdapter``.

    Raises :class:`ToolSchemaError` when the parameters cannot be described (a type without a
    JSON schema, ``*args``, positional-only parameters).
    """
    from pydantic import TypeAdapter
    from pydantic.errors import PydanticUserError

    try:
        # pydantic reads a function's parameters as the schema of its arguments
        adapter: TypeAdapter[Any] = TypeAdapter(cast(Any, function))
        parameters = adapter.json_schema()
    except (PydanticUserError, TypeError, ValueError, NameError) as error:
        reason = str(error).split("\n\n", 1)[0].strip()
        raise ToolSchemaError(
            f"tool {name}: its parameters cannot be described: {reason}"
        ) from None
    if parameters.get("type") != "object":
        raise ToolSchemaError(
            f"tool {name}: its parameters cannot be described as named arguments "
            "(positional-only or *args parameters)"
        )
    doc = inspect.getdoc(function) or f"The function {name}."
    description = _cut(doc, DESCRIPTION_LIMIT)
    return Tool(name, description, parameters, adapter.validate_python, read_only=read_only)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n[cut: {len(text)} characters]"


def is_offered(name: str) -> bool:
    """Whether a ``tools:`` name is a tool the run offers: a built-in or ``alias.name``
    (a ``code:`` function or an MCP tool); ``deep_think`` and host names are not."""
    if name in BUILTIN_TOOLS:
        return True
    alias, dot, function = name.partition(".")
    return bool(dot and alias and function)


def asks_reasoning(tools: Sequence[str] | bool) -> bool:
    """Whether an actor's ``tools:`` asks its model to reason before answering (§15.7)."""
    return not isinstance(tools, bool) and REASONING in tools


def offered_names(tools: Sequence[str] | bool, everything: Iterable[str]) -> tuple[str, ...]:
    """The tool names an actor's ``tools:`` offers: a list as written, ``true`` every tool the
    script names anywhere plus the read-only built-ins (never ``write`` or ``edit``, §15.5),
    ``false`` none. A host's name (``web_search``) is left out: the build warned about it
    (§6.4). ``deep_think`` stays where the list names it, for the turn to see (§15.7);
    :meth:`Toolbox.tools` offers no tool for it."""
    if tools is True:
        named = [n for n in everything if n not in ("write", "edit")]
        return tuple(n for n in dict.fromkeys([*DEFAULT_TOOLS, *named]) if is_offered(n))
    if tools is False:
        return ()
    return tuple(n for n in dict.fromkeys(tools) if is_offered(n) or n == REASONING)


class Toolbox:
    """The tools of one run, described once each, and their calls (§15.5).

    ``servers`` are the MCP servers the project's ``fems.toml`` declares (started when a
    turn first offers one of their tools); the run ends with :meth:`aclose`, which stops them.
    """

    def __init__(
        self,
        root: str | Path,
        code: Callable[[str], Any] | None,
        servers: Mapping[str, ServerConfig] | None = None,
    ) -> None:
        self.workspace = Workspace(root)
        self._code = code
        self._tools: dict[str, Tool] = {}
        self.servers = McpServers(servers or {})

    async def tools(self, names: Iterable[str]) -> list[Tool]:
        """The described tools ``names`` (``server.*`` stands for all of a server's tools);
        an unknown or undescribable one is a run error."""
        offered: list[Tool] = []
        for name in names:
            alias, _, function = name.partition(".")
            if name == REASONING:
                continue  # a request to reason, not a tool (§15.7)
            if function and alias in self.servers:
                offered += await self._server_tools(alias, function)
            else:
                offered.append(self._tool(name))
        return list({tool.name: tool for tool in offered}.values())

    async def aclose(self) -> None:
        """Stop the MCP servers this run started."""
        await self.servers.aclose()

    def _tool(self, name: str) -> Tool:
        tool = self._tools.get(name)
        if tool is not None:
            return tool
        try:
            if name in BUILTIN_TOOLS:
                tool = describe(name, self.workspace.tool(name), name in DEFAULT_TOOLS)
            else:
                tool = describe(name, self._function(name))
        except ToolSchemaError as error:
            raise RunError(str(error)) from None
        self._tools[name] = tool
        return tool

    def _function(self, name: str) -> Callable[..., Any]:
        alias, _, function = name.partition(".")
        if not function or self._code is None:
            raise RunError(
                f"unknown tool '{name}' (built-ins: {', '.join(BUILTIN_TOOLS)}; or alias.fn)"
            )
        found = getattr(self._code(alias), function, None)
        if not callable(found):
            raise RunError(f"tool {name}: {alias}.{function} is not a function")
        return found

    async def _server_tools(self, server: str, wanted: str) -> list[Tool]:
        """The tools of an MCP server that ``server.wanted`` names (``*``: all of them)."""
        listed = await self.servers.tools(server)
        if wanted == ALL_TOOLS:
            return [self._server_tool(server, tool) for tool in listed]
        found = next((tool for tool in listed if tool.name == wanted), None)
        if found is None:
            names = ", ".join(tool.name for tool in listed) or "none"
            raise RunError(
                f"tool {server}.{wanted}: MCP server '{server}' has no tool '{wanted}' "
                f"(its tools: {names})"
            )
        return [self._server_tool(server, found)]

    def _server_tool(self, server: str, listed: ServerTool) -> Tool:
        name = f"{server}.{listed.name}"
        tool = self._tools.get(name)
        if tool is None:
            validate = _schema_validator(listed.input_schema)

            def invoke(arguments: Mapping[str, Any]) -> Any:
                validate(arguments)
                return self.servers.call(server, listed.name, arguments)

            description = _cut(listed.description, DESCRIPTION_LIMIT)
            tool = Tool(
                name,
                description,
                listed.input_schema,
                invoke,
                threaded=False,
                read_only=listed.read_only,
            )
            self._tools[name] = tool
        return tool

    @staticmethod
    def find(tools: Sequence[Tool], name: str) -> Tool | None:
        """The offered tool a model (wire name) or a replies file (either name) calls."""
        return next((t for t in tools if name in (t.wire_name, t.name)), None)

    async def call(self, tools: Sequence[Tool], call: ToolCall) -> ToolOutcome:
        """Run one call (a Python tool in a worker thread); every failure becomes the result
        text."""
        tool = self.find(tools, call.name)
        if tool is None:
            offered = ", ".join(t.wire_name for t in tools)
            return ToolOutcome(call, call.name, f"error: no tool '{call.name}' (tools: {offered})")
        try:
            arguments = json.loads(call.arguments or "{}")
        except json.JSONDecodeError as error:
            return ToolOutcome(call, tool.name, f"error: the arguments are not JSON: {error}")
        if not isinstance(arguments, dict):
            return ToolOutcome(call, tool.name, "error: the arguments must be a JSON object")
        return ToolOutcome(call, tool.name, await _invoke(tool, arguments))


class InvalidArguments(ValueError):
    """Arguments an MCP tool's input schema rejects; the message lists the problems."""


def _schema_validator(schema: Mapping[str, Any]) -> Callable[[Mapping[str, Any]], None]:
    """A check of arguments against an MCP tool's JSON schema (jsonschema comes with the
    ``mcp`` SDK); an invalid schema from the server checks nothing rather than everything."""
    import jsonschema

    schema = dict(schema)
    try:
        cls = jsonschema.validators.validator_for(schema)
        cls.check_schema(schema)
    except jsonschema.SchemaError:
        return lambda arguments: None
    validator = cls(schema)

    def validate(arguments: Mapping[str, Any]) -> None:
        problems = [
            f"{'.'.join(str(p) for p in error.absolute_path) or 'arguments'}: {error.message}"
            for error in sorted(validator.iter_errors(dict(arguments)), key=str)
        ]
        if problems:
            raise InvalidArguments("; ".join(problems))

    return validate


async def _invoke(tool: Tool, arguments: Mapping[str, Any]) -> str:
    from pydantic import ValidationError

    try:
        if tool.threaded:
            value = await asyncio.to_thread(tool.invoke, arguments)
        else:
            value = tool.invoke(arguments)
        if inspect.isawaitable(value):
            value = await value
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}"
            for e in error.errors()
        )
        return f"error: invalid arguments for {tool.wire_name}: {problems}"
    except InvalidArguments as error:
        return f"error: invalid arguments for {tool.wire_name}: {error}"
    except Exception as error:  # the tool failed: the model is told, the run goes on
        return f"error: {type(error).__name__}: {error}"
    return _cut(valid_text(result_text(value)), RESULT_LIMIT)


def result_text(value: Any) -> str:
    """A tool's return value as the text the model reads: a string as is, anything else JSON."""
    if isinstance(value, str):
        return value
    from pydantic_core import to_json

    return to_json(value, fallback=str).decode("utf-8")
