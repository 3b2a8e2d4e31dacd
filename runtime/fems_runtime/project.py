"""A project's ``fems.toml``: read and checked in this one place (§15.2, §15.5).

```toml
[models]                         # aliases for model strings or tables (§15.2)
fast = "openai/gpt-4o-mini"
[mcp.clock]                      # stdio: started on first use, stopped at the end of the run
command = "python"
args = ["-m", "mcp_server_time", "--local-timezone", "UTC"]
env = { TZ = "UTC" }
[mcp.tracker]                    # streamable HTTP
url = "http://127.0.0.1:9000/mcp"
headers_env = { Authorization = "TRACKER_TOKEN" }
```

A folder without the file has no models and no servers. Every problem is a
:class:`ConfigError`, a run error located in the file and shown as the compiler shows its
diagnostics: ``fems.toml:LINE: error: …``. Reading needs nothing beyond the standard library
(the compiler reads the file too, to know which ``server.`` names exist).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fems_runtime.records import RunError, why_unreadable

FILE_NAME = "fems.toml"
DEFAULT_TIMEOUT = 30.0
"""Seconds an MCP server may take to start (and list its tools), and to answer one call."""

ModelEntry = str | dict[str, Any]
"""What a ``[models]`` alias stands for: a model string, or a table with ``model`` (§15.2)."""

_SERVER_KEYS = frozenset({"command", "args", "env", "cwd", "url", "headers_env", "timeout"})
_SERVER_USAGE = 'command = "…" (and args = […]) for a stdio server, or url = "http://…" for HTTP'
_TOML_LINE = re.compile(r"at line (\d+)")


class ConfigError(RunError):
    """A ``fems.toml`` that cannot be read, is not TOML, or holds a table that is not what the
    runtime takes; the message says what to write."""


@dataclass(frozen=True)
class ServerConfig:
    """One ``[mcp.NAME]`` table: a stdio server (``command``) or a streamable HTTP one (``url``)."""

    name: str
    command: str = ""
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str = ""
    url: str = ""
    headers_env: Mapping[str, str] = field(default_factory=dict)
    """HTTP header → the environment variable holding its value (secrets stay out of the file)."""
    timeout: float = DEFAULT_TIMEOUT


@dataclass(frozen=True)
class ProjectConfig:
    """What the ``fems.toml`` files of a project's folders declare, a later folder's alias or
    server winning over an earlier one's; ``folders`` are where they were looked for (and the
    ``.env`` files are, §15.2)."""

    folders: tuple[Path, ...] = ()
    models: Mapping[str, ModelEntry] = field(default_factory=dict)
    servers: Mapping[str, ServerConfig] = field(default_factory=dict)

    @classmethod
    def of_folders(cls, folders: Iterable[str | Path]) -> ProjectConfig:
        """The ``fems.toml`` of each folder, read once, in order."""
        paths = tuple(Path(folder) for folder in folders)
        models: dict[str, ModelEntry] = {}
        servers: dict[str, ServerConfig] = {}
        for folder in paths:
            config = cls.read(folder / FILE_NAME)
            models.update(config.models)
            servers.update(config.servers)
        return cls(paths, models, servers)

    @classmethod
    def read(cls, path: str | Path) -> ProjectConfig:
        """The ``fems.toml`` at ``path``; empty when there is no such file."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8-sig")  # a BOM is dropped, as read_input does
        except (FileNotFoundError, NotADirectoryError):
            return cls((path.parent,))
        except (OSError, UnicodeDecodeError) as error:  # a folder, UTF-16: as --replies says
            raise ConfigError(why_unreadable(error), str(path)) from None
        import tomllib  # only for a project that has the file: ~6 ms of every start otherwise

        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as error:
            at = _TOML_LINE.search(str(error))
            line = int(at.group(1)) if at else None
            raise ConfigError(f"not valid TOML: {error}", str(path), line) from None
        file = _File(path, text)
        models = data.get("models", {})
        if not isinstance(models, dict):
            raise file.error("[models] must be a table of aliases", "models")
        for alias, entry in models.items():
            if not isinstance(entry, str | dict):
                raise file.error(
                    f'[models] {alias}: expected a model string ("openai/gpt-4o-mini") or a '
                    f'table with model = "…", not {type(entry).__name__} {entry!r}',
                    "models",
                    alias,
                )
        tables = data.get("mcp", {})
        if not isinstance(tables, dict):
            raise file.error("'mcp' must be a table of servers, e.g. [mcp.clock]", "mcp")
        servers = {name: file.server(name, table) for name, table in tables.items()}
        return cls((path.parent,), models, servers)


@dataclass(frozen=True)
class _File:
    """One ``fems.toml`` being checked: its path and text, to locate a problem's table."""

    path: Path
    text: str

    def error(self, message: str, *table: str) -> ConfigError:
        """A problem of ``table`` (``"mcp", "clock"``), located at the line that opens it."""
        return ConfigError(message, str(self.path), self._line(table))

    def _line(self, table: tuple[str, ...]) -> int | None:
        names = [rf"[ \t]*[\"']?{re.escape(name)}[\"']?[ \t]*" for name in table]
        header = re.compile(r"^[ \t]*\[" + r"\.".join(names) + r"\]", re.MULTILINE)
        key = re.compile(rf"^{names[-1]}=", re.MULTILINE)
        found = header.search(self.text) or key.search(self.text)
        return self.text.count("\n", 0, found.start()) + 1 if found else None

    def server(self, name: str, table: Any) -> ServerConfig:
        """The ``[mcp.NAME]`` table ``table`` as a server, or the :class:`ConfigError` that
        says what to write."""

        def fail(problem: str) -> ConfigError:
            return self.error(f"[mcp.{name}]: {problem}", "mcp", name)

        if not isinstance(table, dict):
            raise fail(f"expected a table with {_SERVER_USAGE}")
        unknown = sorted(set(table) - _SERVER_KEYS)
        if unknown:
            raise fail(f"unknown key {unknown[0]!r} (keys: {', '.join(sorted(_SERVER_KEYS))})")
        command, url = table.get("command", ""), table.get("url", "")
        if not isinstance(command, str) or not isinstance(url, str) or bool(command) == bool(url):
            raise fail(f"give exactly one of {_SERVER_USAGE}")
        args = table.get("args", [])
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise fail('args must be a list of strings, e.g. ["-m", "server"]')
        env, headers = table.get("env", {}), table.get("headers_env", {})
        for key, value in (("env", env), ("headers_env", headers)):
            if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
                raise fail(f'{key} must be a table of strings, e.g. {{ A = "b" }}')
        if command and headers or url and (args or env):
            raise fail("args and env are for command, headers_env for url")
        timeout = table.get("timeout", DEFAULT_TIMEOUT)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise fail("timeout is a number of seconds > 0")
        cwd = table.get("cwd", "")
        if not isinstance(cwd, str):
            raise fail("cwd must be a folder path")
        if cwd and not Path(cwd).is_absolute():
            cwd = str(self.path.parent / cwd)
        return ServerConfig(name, command, tuple(args), env, cwd, url, headers, float(timeout))
