"""MCP servers without a server (§15.5): the `[mcp.NAME]` tables of fems.toml, how a result's
content becomes the model's text, which listed tools the mock may call (§15.3), and the
compiler's view of a broken file."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path
from types import SimpleNamespace

import mcp.types as mcp_types
import pytest
from fems_runtime.mcp import ServerTool, _list_tools, content_text
from fems_runtime.offline import MockModel, OfflineTurn, safe_tool_names
from fems_runtime.project import ConfigError, ProjectConfig, ServerConfig
from fems_runtime.records import RunError
from fems_runtime.tools import Toolbox

from fems2py.cli import main


def toml(folder: Path, text: str) -> Path:
    path = folder / "fems.toml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def test_both_transports_are_read(tmp_path: Path) -> None:
    path = toml(
        tmp_path,
        """
        [models]
        fast = "openai/gpt-4o-mini"
        [mcp.clock]
        command = "python"
        args = ["-m", "mcp_server_time"]
        env = { TZ = "UTC" }
        cwd = "servers"
        [mcp.tracker]
        url = "http://127.0.0.1:9000/mcp"
        headers_env = { Authorization = "TRACKER_TOKEN" }
        timeout = 5
        """,
    )
    servers = ProjectConfig.read(path).servers
    assert servers["clock"] == ServerConfig(
        "clock", "python", ("-m", "mcp_server_time"), {"TZ": "UTC"}, str(tmp_path / "servers")
    )
    assert servers["tracker"] == ServerConfig(
        "tracker",
        url="http://127.0.0.1:9000/mcp",
        headers_env={"Authorization": "TRACKER_TOKEN"},
        timeout=5.0,
    )
    assert ProjectConfig.read(tmp_path / "missing.toml").servers == {}


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        ('args = ["x"]', "give exactly one of command"),
        ('command = "a"\nurl = "http://b"', "give exactly one of command"),
        ('command = "a"\nargs = "-m x"', "args must be a list of strings"),
        ('command = "a"\nenv = { A = 1 }', "env must be a table of strings"),
        ('command = "a"\nheaders_env = { A = "B" }', "headers_env for url"),
        ('url = "http://b"\nargs = ["x"]', "args and env are for command"),
        ('command = "a"\ntimeout = 0', "timeout is a number of seconds > 0"),
        ('command = "a"\nport = 3', "unknown key 'port'"),
    ],
)
def test_a_table_that_is_no_server_says_what_to_write(
    tmp_path: Path, table: str, problem: str
) -> None:
    path = toml(tmp_path, "[mcp.clock]\n" + table + "\n")
    with pytest.raises(ConfigError, match=problem) as raised:
        ProjectConfig.read(path)
    assert "[mcp.clock]" in str(raised.value)


def test_the_working_directorys_file_wins_and_a_broken_one_is_a_run_error(tmp_path: Path) -> None:
    script_dir, work_dir = tmp_path / "script", tmp_path / "work"
    script_dir.mkdir()
    work_dir.mkdir()
    toml(script_dir, '[mcp.clock]\ncommand = "a"\n[mcp.git]\ncommand = "g"\n')
    toml(work_dir, '[mcp.clock]\ncommand = "b"\n')
    servers = ProjectConfig.of_folders([script_dir, work_dir]).servers
    assert servers["clock"].command == "b" and servers["git"].command == "g"
    toml(work_dir, "[mcp.clock\n")
    with pytest.raises(RunError, match="not valid TOML"):
        ProjectConfig.of_folders([script_dir, work_dir])


@pytest.mark.parametrize("value", ["3", "[1]", "true"])
def test_a_model_alias_that_is_neither_string_nor_table_is_located(
    tmp_path: Path, value: str
) -> None:
    path = toml(tmp_path, f'[models]\nfast = "openai/x"\nsmall = {value}\n')
    with pytest.raises(ConfigError, match=r"\[models\] small: expected a model string") as raised:
        ProjectConfig.read(path)
    assert str(raised.value).startswith(f"{path}:3: error:")


def test_a_result_is_its_text_with_a_note_for_what_is_not_text() -> None:
    blocks = [
        mcp_types.TextContent(type="text", text="the tide is high"),
        mcp_types.ImageContent(type="image", data="iVBORw0=", mime_type="image/png"),
        mcp_types.EmbeddedResource(
            type="resource",
            resource=mcp_types.TextResourceContents(uri="file:///tides.txt", text="06:12 high"),
        ),
        mcp_types.EmbeddedResource(
            type="resource",
            resource=mcp_types.BlobResourceContents(
                uri="file:///chart.pdf", blob="JVBERi0=", mime_type="application/pdf"
            ),
        ),
        mcp_types.ResourceLink(type="resource_link", name="chart", uri="file:///chart.pdf"),
    ]
    assert content_text(blocks).splitlines() == [
        "the tide is high",
        "[image content (image/png) not shown]",
        "06:12 high",
        "[resource content (application/pdf) not shown]",
        "[a link to the resource file:///chart.pdf]",
    ]
    assert content_text([], {"height": 3.2}) == '{"height": 3.2}'


class ListingSession:
    """A session whose server lists one tool marked read-only, one marked not, one unmarked."""

    async def list_tools(self, params: object = None) -> mcp_types.ListToolsResult:
        schema = {"type": "object", "properties": {}}

        def tool(name: str, read_only: bool | None) -> mcp_types.Tool:
            marks = (
                None if read_only is None else mcp_types.ToolAnnotations(read_only_hint=read_only)
            )
            return mcp_types.Tool(name=name, input_schema=schema, annotations=marks)

        return mcp_types.ListToolsResult(
            tools=[tool("look", True), tool("stamp", False), tool("shred", None)]
        )


def count(word: str) -> int:
    """The letters in ``word`` (a ``code:`` function of the script)."""
    return len(word)


def test_the_mock_calls_only_the_tools_that_change_nothing(tmp_path: Path) -> None:
    """An MCP tool is called only when its server marks it readOnlyHint: true (unmarked, the
    MCP default is false); never write or edit; a code: function is the script's own (§15.3)."""
    listed = asyncio.run(_list_tools(ListingSession()))
    assert [(tool.name, tool.read_only) for tool in listed] == [
        ("look", True),
        ("stamp", False),
        ("shred", False),
    ]
    box = Toolbox(
        tmp_path, lambda alias: SimpleNamespace(count=count), {"desk": ServerConfig("desk")}
    )

    async def desk_tools(server: str) -> list[ServerTool]:
        return listed

    box.servers.tools = desk_tools  # type: ignore[method-assign]
    names = ["desk.*", "read", "write", "edit", "grep", "notes.count"]
    tools = asyncio.run(box.tools(names))
    offered = tuple(tool.schema()["function"] for tool in tools)
    turn = OfflineTurn("tidy", "@clerk", tools=offered, safe_tools=safe_tool_names(tools))
    called = [call.name for call in MockModel(seed=1).tool_calls(turn)]
    assert called == ["desk_look", "read", "grep", "notes_count"]


SCRIPT = """
actors:
    ai @a = tools: [clock.get_current_time]
action ask @ai(@a):
    prompt: What time is it?
mainflow:
    [START] -> ask -> [END]
"""


def test_the_compiler_reports_a_broken_fems_toml_where_a_server_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "t.fems"
    script.write_text(SCRIPT.lstrip("\n"), encoding="utf-8")
    toml(tmp_path, '[mcp.clock]\nargs = ["x"]\n')
    assert main(["check", str(script)]) == 1
    err = capsys.readouterr().err
    assert "t.fems:2:21: error: tool clock.get_current_time:" in err
    assert "[mcp.clock]: give exactly one of command" in err
    toml(tmp_path, '[mcp.clock]\ncommand = "python"\n')
    assert main(["check", str(script)]) == 0


def test_every_problem_of_fems_toml_is_shown_at_its_line_as_diagnostics_are(
    tmp_path: Path,
) -> None:
    """One reader, one style for the models and the servers alike: ``PATH:LINE: error: …``."""
    cases = [
        ('[models]\nfast = "a"\n\n[mcp.clock]\nargs = ["x"]\n', 4, "[mcp.clock]: give exactly one"),
        ('title = "x"\nmodels = 3\n', 2, "[models] must be a table"),
        ("[models]\nfast = \n", 2, "not valid TOML"),
    ]
    for text, line, problem in cases:
        path = toml(tmp_path, text)
        with pytest.raises(ConfigError) as raised:
            ProjectConfig.read(path)
        assert str(raised.value).startswith(f"{path}:{line}: error: {problem}")
