"""Tools an actor's model may call (§15.5): ``code:`` functions and the built-ins read/list/write.

Every tool is a Python callable described by pydantic: its JSON schema comes from the
signature, type hints and docstring (``TypeAdapter(function).json_schema()``), and the same
adapter validates the model's arguments before the call. The built-ins are methods of
:class:`Workspace` described the same way, confined to one root folder (the script's folder or
``--root``) by :func:`fems_runtime.paths.inside_root`.

A tool never crashes the run: invalid JSON, arguments the schema rejects, a path outside the
root and any exception the function raises become the tool's result text, which goes back to
the model. pydantic is imported only when a turn offers tools.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from fems_runtime.paths import OutsideRoot, inside_root
from fems_runtime.records import RunError
from fems_runtime.values import valid_text

BUILTIN_TOOLS = ("read", "list", "write")
"""The built-in tools; ``write`` is offered only when an actor names it (``true`` leaves it out)."""
DEFAULT_TOOLS = ("read", "list")
DEFAULT_MAX_TOOL_ROUNDS = 8
READ_LIMIT = 50_000
"""Bytes of a file ``read`` returns; the rest is cut with a note saying so."""
LIST_LIMIT = 500
WRITE_LIMIT = 1_000_000
RESULT_LIMIT = 60_000
"""Characters of a tool result sent back to the model (and stored)."""
DESCRIPTION_LIMIT = 1_000


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

    @property
    def wire_name(self) -> str:
        """The name on the wire: providers allow ``[A-Za-z0-9_-]``, so ``notes.lookup`` is
        offered as ``notes_lookup``."""
        return self.name.replace(".", "_")

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


def describe(name: str, function: Callable[..., Any]) -> Tool:
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
    return Tool(name, _cut(doc, DESCRIPTION_LIMIT), parameters, adapter.validate_python)


class Workspace:
    """The built-in tools, confined to ``root``: every path is relative to it (§15.5)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).resolve()

    def read(self, path: str) -> str:
        """Read a text file inside the project folder and return its content.

        `path` is relative to the project folder. Files larger than 50000 bytes are cut,
        with a note saying so.
        """
        target = self._inside(path)
        if not target.is_file():
            raise FileNotFoundError(f"no file '{path}'")
        with open(target, "rb") as fh:
            data = fh.read(READ_LIMIT + 1)
        cut = len(data) > READ_LIMIT
        text = _text(data[:READ_LIMIT], path, partial=cut)
        if cut:
            size = target.stat().st_size
            text += f"\n[cut: '{path}' has {size} bytes; the first {READ_LIMIT} are shown]"
        return text

    def list(self, path: str = ".") -> str:
        """List a folder inside the project folder (folders end with '/', links with '@').

        `path` is relative to the project folder; '.' is the project folder itself.
        """
        target = self._inside(path)
        if not target.is_dir():
            raise NotADirectoryError(f"no folder '{path}'")
        entries = sorted(target.iterdir(), key=lambda entry: entry.name)
        lines = []
        for entry in entries[:LIST_LIMIT]:
            if entry.is_symlink():  # never followed here: its target may lie outside
                lines.append(f"{entry.name}@ (link)")
            elif entry.is_dir():
                lines.append(f"{entry.name}/")
            else:
                size = entry.stat().st_size if entry.is_file() else 0
                lines.append(f"{entry.name} ({size} bytes)")
        if len(entries) > LIST_LIMIT:
            lines.append(f"[… and {len(entries) - LIST_LIMIT} more entries]")
        return "\n".join(lines) if lines else f"'{path}' is empty"

    def write(self, path: str, content: str) -> str:
        """Write a text file inside the project folder, replacing it if it exists.

        `path` is relative to the project folder; missing folders are created. At most
        1000000 bytes.
        """
        data = content.encode("utf-8")
        if len(data) > WRITE_LIMIT:
            raise ValueError(f"content has {len(data)} bytes; at most {WRITE_LIMIT} may be written")
        target = self._inside(path)
        if target.is_dir():
            raise IsADirectoryError(f"'{path}' is a folder")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        return f"wrote {len(data)} bytes to {target.relative_to(self.root).as_posix()}"

    def _inside(self, path: str) -> Path:
        try:
            return inside_root(self.root, path)
        except OutsideRoot:
            raise PermissionError(f"'{path}' is outside the project folder") from None

    def tool(self, name: str) -> Tool:
        """The built-in ``name`` as a described tool."""
        return describe(name, getattr(self, name))


def _text(data: bytes, path: str, *, partial: bool) -> str:
    """``data`` as UTF-8 text; a file that is not text is an error the model is told."""
    if b"\x00" in data:
        raise ValueError(f"'{path}' is not a text file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        if partial and error.start >= len(data) - 3:  # a character cut at the limit
            return data[: error.start].decode("utf-8")
        raise ValueError(f"'{path}' is not UTF-8 text") from None


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n[cut: {len(text)} characters]"


def offered_names(tools: Sequence[str] | bool, everything: Iterable[str]) -> tuple[str, ...]:
    """The tool names an actor's ``tools:`` offers: a list as written, ``true`` every tool the
    script names anywhere plus read and list (never ``write``, §15.5), ``false`` none."""
    if tools is True:
        named = [n for n in everything if n != "write"]
        return tuple(dict.fromkeys([*DEFAULT_TOOLS, *named]))
    if tools is False:
        return ()
    return tuple(dict.fromkeys(tools))


class Toolbox:
    """The tools of one run, described once each, and their calls (§15.5)."""

    def __init__(self, root: str | Path, code: Callable[[str], Any] | None) -> None:
        self.workspace = Workspace(root)
        self._code = code
        self._tools: dict[str, Tool] = {}

    def tools(self, names: Iterable[str]) -> list[Tool]:
        """The described tools ``names``; an unknown or undescribable one is a run error."""
        return [self._tool(name) for name in names]

    def _tool(self, name: str) -> Tool:
        tool = self._tools.get(name)
        if tool is not None:
            return tool
        try:
            if name in BUILTIN_TOOLS:
                tool = self.workspace.tool(name)
            else:
                tool = describe(name, self._function(name))
        except ToolSchemaError as error:
            raise RunError(str(error)) from None
        self._tools[name] = tool
        return tool

    def _function(self, name: str) -> Callable[..., Any]:
        alias, _, function = name.partition(".")
        if not function or self._code is None:
            raise RunError(f"unknown tool '{name}' (built-ins: read, list, write; or alias.fn)")
        found = getattr(self._code(alias), function, None)
        if not callable(found):
            raise RunError(f"tool {name}: {alias}.{function} is not a function")
        return found

    @staticmethod
    def find(tools: Sequence[Tool], name: str) -> Tool | None:
        """The offered tool a model (wire name) or a replies file (either name) calls."""
        return next((t for t in tools if name in (t.wire_name, t.name)), None)

    async def call(self, tools: Sequence[Tool], call: ToolCall) -> ToolOutcome:
        """Run one call in a worker thread; every failure becomes the result text."""
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


async def _invoke(tool: Tool, arguments: Mapping[str, Any]) -> str:
    from pydantic import ValidationError

    try:
        value = await asyncio.to_thread(tool.invoke, arguments)
        if inspect.isawaitable(value):
            value = await value
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}"
            for e in error.errors()
        )
        return f"error: invalid arguments for {tool.wire_name}: {problems}"
    except Exception as error:  # the tool failed: the model is told, the run goes on
        return f"error: {type(error).__name__}: {error}"
    return _cut(valid_text(result_text(value)), RESULT_LIMIT)


def result_text(value: Any) -> str:
    """A tool's return value as the text the model reads: a string as is, anything else JSON."""
    if isinstance(value, str):
        return value
    from pydantic_core import to_json

    return to_json(value, fallback=str).decode("utf-8")
