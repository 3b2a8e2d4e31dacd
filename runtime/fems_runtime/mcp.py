"""Tools from MCP servers (§15.5): the servers a project's ``fems.toml`` declares
(:class:`~fems_runtime.project.ServerConfig`, read by :mod:`fems_runtime.project`).

Talking to a server goes through the official ``mcp`` SDK, the optional extra
``fems-runtime[mcp]``, imported on the first turn that offers an MCP tool.

One :class:`McpServers` per run holds one connection per server, opened by the first turn that
offers one of its tools and shared by every turn after it (concurrent turns included); the run
closes them all when it ends, however it ends (:meth:`McpServers.aclose`). The SDK's transports
are anyio context managers that must be left by the task that entered them, so each connection
lives in a task of its own, which the turns talk to through the session and which the run's
end stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import IO, Any

from fems_runtime.project import ServerConfig
from fems_runtime.records import RunError

STDERR_LINES = 10
"""Lines of a failed server's stderr a run error quotes."""
INSTALL_HINT = "pip install 'fems-runtime[mcp]'"


@dataclass(frozen=True)
class ServerTool:
    """A tool as its server lists it (``tools/list``): passed to the model as given."""

    name: str
    description: str
    input_schema: Mapping[str, Any]
    read_only: bool = False
    """Whether the server marks it read-only (the annotation ``readOnlyHint: true``); a tool
    without the mark may change something, as the MCP specification's default says, and an
    offline model never calls it (§15.3)."""


class McpServers:
    """The MCP servers of one run: their configs, and a connection per server once used."""

    def __init__(self, configs: Mapping[str, ServerConfig]) -> None:
        self.configs = dict(configs)
        self._connections: dict[str, _Connection] = {}
        self._opening = asyncio.Lock()

    def __contains__(self, name: object) -> bool:
        return name in self.configs

    async def tools(self, server: str) -> list[ServerTool]:
        """The server's tools, starting it on first use; a server that cannot start is a
        :class:`RunError` with the last lines of its stderr."""
        async with self._opening:  # concurrent first turns start one server, not two
            connection = self._connections.get(server)
            if connection is None:
                connection = _Connection(self.configs[server])
                self._connections[server] = connection
        return await connection.started()

    async def call(self, server: str, tool: str, arguments: Mapping[str, Any]) -> str:
        """The text of one ``tools/call``; a tool that fails says so in the text."""
        return await self._connections[server].call(tool, arguments)

    async def aclose(self) -> None:
        """Stop every server this run started (stdio: its process is gone when this returns)."""
        connections, self._connections = list(self._connections.values()), {}
        for connection in connections:
            await connection.close()


class _Connection:
    """One server's session, owned by a task of its own (see the module docstring)."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.stderr: IO[str] | None = None
        self._task: asyncio.Task[None] | None = None
        self._ready: asyncio.Future[list[ServerTool]] = asyncio.get_running_loop().create_future()
        self._stop = asyncio.Event()
        self._session: Any = None
        import anyio

        self._scope = anyio.CancelScope()

    async def started(self) -> list[ServerTool]:
        if self._task is None:
            self._task = asyncio.create_task(self._serve(), name=f"mcp server {self.config.name}")
        try:
            return await asyncio.shield(self._ready)
        except TimeoutError:
            raise RunError(
                self._failed(f"did not start within {self.config.timeout:g} s")
            ) from None
        except RunError:
            raise
        except Exception as error:  # the SDK's and the transport's, as one message
            raise RunError(self._failed(f"failed to start: {_reason(error)}")) from None

    async def _serve(self) -> None:
        import anyio

        try:
            with self._scope:  # cancelled by close() while the server is still starting
                async with contextlib.AsyncExitStack() as stack:
                    # the deadline bounds the handshake only: the process is spawned outside
                    # it (a cancelled spawn would leave the process behind), and the scope
                    # closes before the transport's own scopes do
                    session = await self._open(stack)
                    with anyio.fail_after(self.config.timeout):
                        await session.initialize()
                        listed = await _list_tools(session)
                    self._session = session
                    self._ready.set_result(listed)
                    await self._stop.wait()
        except Exception as error:
            if not self._ready.done():
                self._ready.set_exception(_first(error))
        if not self._ready.done():
            self._ready.set_exception(RunError(self._failed("was stopped while it started")))

    async def _open(self, stack: contextlib.AsyncExitStack) -> Any:
        try:
            from mcp import ClientSession
        except ImportError:
            raise RunError(
                f"MCP server '{self.config.name}' needs the mcp package: {INSTALL_HINT}"
            ) from None
        config = self.config
        if config.command:
            import tempfile

            from mcp import StdioServerParameters
            from mcp.client.stdio import stdio_client

            # a real file (the child writes to its descriptor), kept until the run closes the
            # connection so that a failure can quote it
            self.stderr = tempfile.TemporaryFile("w+", encoding="utf-8")  # noqa: SIM115
            parameters = StdioServerParameters(
                command=config.command,
                args=list(config.args),
                env=dict(config.env) or None,
                cwd=config.cwd or None,
            )
            streams = stdio_client(parameters, errlog=self.stderr)
        else:
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client

            client = create_mcp_http_client(headers=self._headers())
            await stack.enter_async_context(client)
            streams = streamable_http_client(config.url, http_client=client)
        read, write = await stack.enter_async_context(streams)
        return await stack.enter_async_context(ClientSession(read, write))

    def _headers(self) -> dict[str, str]:
        headers = {}
        for header, variable in self.config.headers_env.items():
            value = os.environ.get(variable)
            if value is None:
                raise RunError(
                    f"MCP server '{self.config.name}': header {header} reads the environment "
                    f"variable {variable}, which is not set"
                )
            headers[header] = value
        return headers

    async def call(self, tool: str, arguments: Mapping[str, Any]) -> str:
        session = self._session
        if self._task is None or self._task.done() or session is None:
            return f"error: {self._failed('is not running')}"
        try:
            result = await session.call_tool(
                tool, dict(arguments), read_timeout_seconds=self.config.timeout
            )
        except Exception as error:  # a protocol error, a timeout, a server gone
            return f"error: {_reason(error)}"
        text = content_text(
            getattr(result, "content", ()), getattr(result, "structured_content", None)
        )
        return f"error: {text}" if getattr(result, "is_error", False) else text

    async def close(self) -> None:
        self._stop.set()
        if not self._ready.done():
            self._scope.cancel()
        if self._task is not None:
            with contextlib.suppress(Exception):
                await self._task
        if not self._ready.done():
            self._ready.cancel()
        elif not self._ready.cancelled():
            self._ready.exception()  # a failed start was reported by started(): mark it so
        if self.stderr is not None:
            self.stderr.close()

    def _failed(self, what: str) -> str:
        """A run error's text for a server that ``what``, with its stderr's last lines."""
        config = self.config
        how = f"{config.command} {' '.join(config.args)}".strip() if config.command else config.url
        message = f"MCP server '{config.name}' ({how}) {what}"
        tail = self._stderr_tail()
        return f"{message}; its stderr ends:\n{tail}" if tail else message

    def _stderr_tail(self) -> str:
        if self.stderr is None or self.stderr.closed:
            return ""
        with contextlib.suppress(OSError, ValueError):
            self.stderr.flush()
            self.stderr.seek(0)
            lines = [line.rstrip() for line in self.stderr.read().splitlines() if line.strip()]
            return "\n".join(f"  {line}" for line in lines[-STDERR_LINES:])
        return ""


async def _list_tools(session: Any) -> list[ServerTool]:
    """Every page of ``tools/list``."""
    listed: list[ServerTool] = []
    cursor = None
    while True:
        if cursor is None:
            page = await session.list_tools()
        else:
            from mcp.types import PaginatedRequestParams

            page = await session.list_tools(params=PaginatedRequestParams(cursor=cursor))
        for tool in page.tools:
            schema = tool.input_schema or {"type": "object", "properties": {}}
            read_only = getattr(tool.annotations, "read_only_hint", None) is True
            listed.append(ServerTool(tool.name, tool.description or tool.name, schema, read_only))
        cursor = page.next_cursor
        if not cursor:
            return listed


def content_text(content: Iterable[Any], structured: Any = None) -> str:
    """A ``tools/call`` result as text for the model: its text blocks, a note for each block
    that is not text (an image, audio, a resource without text), and the structured content as
    JSON when there is nothing else."""
    parts: list[str] = []
    for block in content:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(str(block.text))
        elif kind == "resource" and isinstance(getattr(block.resource, "text", None), str):
            parts.append(block.resource.text)
        elif kind == "resource_link":
            parts.append(f"[a link to the resource {block.uri}]")
        else:
            mime = getattr(block, "mime_type", None) or getattr(
                getattr(block, "resource", None), "mime_type", None
            )
            parts.append(f"[{kind or 'unknown'} content{f' ({mime})' if mime else ''} not shown]")
    if not parts and structured is not None:
        import json

        return json.dumps(structured, ensure_ascii=False)
    return "\n".join(parts)


def _first(error: BaseException) -> BaseException:
    """The first real exception inside anyio's exception groups."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return error


def _reason(error: BaseException) -> str:
    error = _first(error)
    if isinstance(error, FileNotFoundError) and error.filename:  # the command, not on PATH
        return f"no command {error.filename!r} (give its full path, or put it on PATH)"
    text = str(error).strip()
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
