"""The build-time checks of ``tools:`` (§6.4, §15.5): what each name an actor offers is.

A name is a built-in (``read``, ``list``, ``glob``, ``grep``, ``write``, ``edit``), a ``code:``
function ``alias.fn`` that a JSON schema can describe, or a tool of an MCP server that the
script's ``fems.toml`` declares (``server.tool``, ``server.*``; which tools the server has is
known only when it runs). ``deep_think`` is no tool: it asks for reasoning (§15.7). A bare name
close to a built-in's is a misspelling of it, an error; any other bare name — a tool of the host
the script was written for, such as ``web_search`` — is a warning (an error under
``--strict``): the actor runs without it.
"""

from __future__ import annotations

from pathlib import Path

from fems2py.checks.references import References
from fems2py.diagnostics import suggest
from fems2py.nodes import ActorDef, Blueprint, FuncRef, Span


def check_tools(references: References, base_dir: Path) -> None:
    """§15.5: every actor's and blueprint's ``tools:``; tools are offered to models only (a
    human's turns call no tools). The script's ``fems.toml`` is in ``base_dir``."""
    script, report = references.script, references.report
    owners: list[ActorDef | Blueprint] = [*script.actors, *script.blueprints]
    names = [name for owner in owners if not isinstance(owner.tools, bool) for name in owner.tools]
    if not names:
        return
    # Here, not at the top: the project's file is read only by a script that names tools.
    from fems_runtime.project import FILE_NAME, ConfigError, ProjectConfig

    try:
        servers: set[str] | str = set(ProjectConfig.read(base_dir / FILE_NAME).servers)
    except ConfigError as error:  # reported where a server's tool is named
        servers = f"{error.location}: {error.message}"
    tools = _ToolNames(references, servers)
    for owner in owners:
        human = isinstance(owner, ActorDef) and owner.kind == "human"
        if human and owner.tools not in (False, ()):
            report.error(
                f"human actor {owner.name} cannot have tools",
                owner.tool_spans[0] if owner.tool_spans else owner.span,
                "tools are offered to models on @ai turns (§15.5); remove tools: here",
            )
            continue
        if isinstance(owner.tools, bool):
            continue
        who = owner.name if isinstance(owner, ActorDef) else f"blueprint {owner.name}"
        for name, span in zip(owner.tools, owner.tool_spans, strict=False):
            tools.check(name, span, who)


class _ToolNames:
    """The checks of single names; ``servers`` the MCP servers of ``fems.toml`` (or why that
    file could not be read)."""

    def __init__(self, references: References, servers: set[str] | str) -> None:
        self.references = references
        self.report = references.report
        self.servers = servers

    def check(self, name: str, span: Span, who: str) -> None:
        from fems_runtime.tools import ALL_TOOLS, BUILTIN_TOOLS, HOST_TOOLS, REASONING

        if name in BUILTIN_TOOLS or name == REASONING:
            return
        alias, dot, function = name.partition(".")
        if not dot:
            meant = suggest(name, [*BUILTIN_TOOLS, REASONING])
            if meant is not None and name not in HOST_TOOLS:  # a misspelt built-in: no host's
                self.report.error(f"unknown tool '{name}'", span, meant)
                return
            self.report.warning(
                f"tool {name} is not available: {who} runs without it",
                span,
                f"the built-ins are {', '.join(BUILTIN_TOOLS)}; a code: function is "
                "alias.fn, an MCP server's tool server.tool (§15.5)",
            )
            return
        if not alias or not function:
            self.report.error(
                f"unknown tool '{name}'", span, "write alias.fn or server.tool (§15.5)"
            )
            return
        is_code = alias in self.references.signatures or alias in self.references.broken_aliases
        is_server = isinstance(self.servers, set) and alias in self.servers
        if is_code and is_server:
            self.report.error(
                f"'{alias}' is both a code: alias and an MCP server of fems.toml",
                span,
                "rename one of them, so that the tool says which it is",
            )
        elif is_server:
            return  # its tools are known when it runs (a name it lacks is a run error)
        elif is_code and function == ALL_TOOLS:
            self.report.error(
                f"'{name}': '*' names every tool of an MCP server, and '{alias}' is a code: alias",
                span,
                f"name the functions one by one: {alias}.fn",
            )
        elif is_code:
            self.check_code_tool(name, FuncRef(alias, function, span))
        elif isinstance(self.servers, str):
            self.report.error(f"tool {name}: {self.servers}", span)
        else:
            known = [*self.references.signatures, *self.servers]
            self.report.error(
                f"unknown tool '{name}': no code: alias and no MCP server '{alias}'",
                span,
                suggest(alias, known)
                or f"declare the server in fems.toml ([mcp.{alias}] command = …, §15.5) or "
                f'the file in code: ({alias} = file:"{alias}.py")',
            )

    def check_code_tool(self, name: str, ref: FuncRef) -> None:
        signature = self.references.check_func(ref, builtin_ok=False)
        if signature is not None and signature.tool_problem is not None:
            self.report.error(
                f"{name} cannot be offered as a tool: {signature.tool_problem}",
                ref.span,
                "give its parameters types such as str, int, float, bool, list[str], "
                "Literal[...] or a pydantic model or dataclass defined in the file"
                if signature.tool_problem.startswith("parameter")
                else "offer a function whose parameters are named: def lookup(word: str)",
            )
