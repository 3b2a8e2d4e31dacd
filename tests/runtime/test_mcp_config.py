"""MCP servers without a server (§15.5): the `[mcp.NAME]` tables of fems.toml, how a result's
content becomes the model's text, and the compiler's view of a broken file."""

from __future__ import annotations

import textwrap
from pathlib import Path

import mcp.types as mcp_types
import pytest
from fems_runtime.mcp import (
    McpConfigError,
    ServerConfig,
    content_text,
    project_servers,
    read_servers,
)
from fems_runtime.records import RunError

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
    servers = read_servers(path)
    assert servers["clock"] == ServerConfig(
        "clock", "python", ("-m", "mcp_server_time"), {"TZ": "UTC"}, str(tmp_path / "servers")
    )
    assert servers["tracker"] == ServerConfig(
        "tracker",
        url="http://127.0.0.1:9000/mcp",
        headers_env={"Authorization": "TRACKER_TOKEN"},
        timeout=5.0,
    )
    assert read_servers(tmp_path / "missing.toml") == {}


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
    with pytest.raises(McpConfigError, match=problem) as raised:
        read_servers(path)
    assert "[mcp.clock]" in str(raised.value)


def test_the_working_directorys_file_wins_and_a_broken_one_is_a_run_error(tmp_path: Path) -> None:
    script_dir, work_dir = tmp_path / "script", tmp_path / "work"
    script_dir.mkdir()
    work_dir.mkdir()
    toml(script_dir, '[mcp.clock]\ncommand = "a"\n[mcp.git]\ncommand = "g"\n')
    toml(work_dir, '[mcp.clock]\ncommand = "b"\n')
    servers = project_servers([script_dir, work_dir])
    assert servers["clock"].command == "b" and servers["git"].command == "g"
    toml(work_dir, "[mcp.clock\n")
    with pytest.raises(RunError, match="not valid TOML"):
        project_servers([script_dir, work_dir])


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
