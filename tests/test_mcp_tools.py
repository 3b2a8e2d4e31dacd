"""Tools from MCP servers (§15.5), with the reference servers from PyPI that no one here wrote:
``mcp-server-time`` and ``mcp-server-git`` (on a repository the test makes), run as the
project's ``fems.toml`` declares them. Every server is started through a launcher that writes
its pid, so each test can check that no server process outlives its run (a normal end, a run
error, Ctrl-C)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fems_helpers import build_script, llm_calls, read_trace, run_program, run_script, sent_text
from fems_runtime.project import ProjectConfig
from fems_runtime.records import RunError
from fems_runtime.tools import Toolbox, ToolCall

LAUNCHER = """
import os, sys
from pathlib import Path
from typing import Any

with Path(sys.argv[1]).open("a", encoding="utf-8") as pids:  # one line per start
    pids.write(f"{os.getpid()}\\n")
os.execv(sys.executable, [sys.executable, "-m", *sys.argv[2:]])
"""

CLOCK_SCRIPT = """
vars:
    answer = ""

actors:
    ai @clerk = tools: [clock.get_current_time]
    ai @guest

action ask @ai(@clerk):
    prompt: What time is it?
    out: answer(string)

action chat @ai(@guest):
    prompt: Say hello.

mainflow:
    [START] -> ask -> chat -> [END]
"""

GIT_SCRIPT = """
vars:
    answer = ""

actors:
    ai @archivist = tools: [git.*, clock.get_current_time]
    ai @guest

action ask @ai(@archivist):
    prompt: What was the last commit?
    out: answer(string)

action chat @ai(@guest):
    prompt: Say hello.

mainflow:
    [START] -> ask -> chat -> [END]
"""


def declare(project: Path, **servers: list[str]) -> None:
    """Write ``fems.toml`` with one stdio server per keyword: the module and its arguments,
    started through the pid-writing launcher."""
    (project / "launch.py").write_text(LAUNCHER, encoding="utf-8")
    lines = []
    for name, module in servers.items():
        args = [str(project / "launch.py"), str(project / f"{name}.pid"), *module]
        lines += [f"[mcp.{name}]", f"command = {json.dumps(sys.executable)}"]
        lines += [f"args = {json.dumps(args)}", "timeout = 60", ""]
    (project / "fems.toml").write_text("\n".join(lines), encoding="utf-8")


def clock_server() -> list[str]:
    return ["mcp_server_time", "--local-timezone", "UTC"]


def git_repository(path: Path) -> Path:
    """A repository with one commit whose message the tests look for."""
    path.mkdir()
    git = ["git", "-C", str(path), "-c", "user.name=Tess", "-c", "user.email=tess@example.org"]
    subprocess.run([*git, "init", "-q"], check=True)
    (path / "README").write_text("hello\n", encoding="utf-8")
    subprocess.run([*git, "add", "README"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "plant the lighthouse"], check=True)
    return path


def alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie has stopped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(")")[-1].split()[0] == "Z")


def server_pids(project: Path, name: str) -> list[int]:
    """The pid of each start of server ``name``, in order."""
    return [int(line) for line in (project / f"{name}.pid").read_text(encoding="utf-8").split()]


def server_pid(project: Path, name: str) -> int:
    return server_pids(project, name)[-1]


def tool_events(events: list[dict]) -> list[dict]:
    return [e for e in events if e["event"] == "tool_call"]


def test_mock_calls_the_clock_and_the_trace_shows_the_servers_answer(tmp_path: Path) -> None:
    declare(tmp_path, clock=clock_server())
    result, events = run_script(tmp_path, CLOCK_SCRIPT, model="fems/mock")
    assert result.status == "completed"
    (called,) = tool_events(events)
    assert called["name"] == "clock.get_current_time" and called["actor"] == "@clerk"
    # fems/mock gives each required string a placeholder value, which the server refuses
    # in its own words: the answer is the server's, passed back to the model as the result
    assert json.loads(called["arguments"]) == {"timezone": "example"}
    assert called["result"].startswith("error: Error executing tool get_current_time")
    assert not alive(server_pid(tmp_path, "clock"))


def git_state(repository: Path) -> str:
    """Its branches, commits and working tree: what a tool that writes would change."""
    git = ["git", "-C", str(repository)]
    commands = (["branch", "-a", "-v"], ["log", "--all", "--format=%H"], ["status", "-s"])
    return "\n".join(
        subprocess.run([*git, *command], capture_output=True, text=True, check=True).stdout
        for command in commands
    )


def test_mock_calls_only_the_git_tools_its_server_marks_read_only(tmp_path: Path) -> None:
    """A mock run offered `git.*` is a rehearsal that changes nothing (§15.3): git_commit,
    git_add, git_reset, git_checkout and git_create_branch lack readOnlyHint and are not
    called."""
    repository = git_repository(tmp_path / "repo")
    before = git_state(repository)
    declare(
        tmp_path,
        git=["mcp_server_git", "--repository", str(repository)],
        clock=clock_server(),
    )
    result, events = run_script(tmp_path, GIT_SCRIPT, model="fems/mock")
    assert result.status == "completed"
    called = [e["name"] for e in tool_events(events)]
    assert called == [
        "git.git_status",
        "git.git_diff_unstaged",
        "git.git_diff_staged",
        "git.git_diff",
        "git.git_log",
        "git.git_show",
        "git.git_branch",
        "clock.get_current_time",
    ]
    writing = ("git_commit", "git_add", "git_reset", "git_checkout", "git_create_branch")
    assert not [name for name in called if name.removeprefix("git.") in writing]
    assert git_state(repository) == before


def test_the_model_is_offered_the_servers_tools_as_it_lists_them(tmp_path: Path) -> None:
    declare(tmp_path, clock=clock_server())

    async def offered() -> list[dict]:
        box = Toolbox(tmp_path, None, ProjectConfig.of_folders([tmp_path]).servers)
        try:
            every = await box.tools(["clock.*"])
            one = await box.tools(["clock.convert_time", "read"])
            # one session per server per run: the second listing reuses the first start
            assert len(server_pids(tmp_path, "clock")) == 1
            assert [t.name for t in one] == ["clock.convert_time", "read"]
            return [tool.schema() for tool in every]
        finally:
            await box.aclose()

    schemas = asyncio.run(offered())
    assert [s["function"]["name"] for s in schemas] == [
        "clock_get_current_time",
        "clock_convert_time",
    ]
    first = schemas[0]["function"]
    assert first["description"] == "Get current time in a specific timezone"
    parameters = first["parameters"]
    assert parameters["required"] == ["timezone"]
    assert "IANA timezone name" in parameters["properties"]["timezone"]["description"]
    assert not alive(server_pid(tmp_path, "clock"))


def test_concurrent_turns_share_one_session(tmp_path: Path) -> None:
    declare(tmp_path, clock=clock_server())

    async def many() -> list[str]:
        box = Toolbox(tmp_path, None, ProjectConfig.of_folders([tmp_path]).servers)
        try:
            offers = await asyncio.gather(
                *(box.tools(["clock.get_current_time"]) for _ in range(4))
            )
            calls = [
                box.call(tools, ToolCall(str(n), "clock_get_current_time", '{"timezone": "UTC"}'))
                for n, tools in enumerate(offers)
            ]
            return [outcome.result for outcome in await asyncio.gather(*calls)]
        finally:
            await box.aclose()

    results = asyncio.run(many())
    assert all('"timezone": "UTC"' in result for result in results)
    # four turns at once started the server once: one process, one session
    (pid,) = server_pids(tmp_path, "clock")
    assert not alive(pid)


def test_a_script_reads_the_git_log_and_the_guest_never_sees_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repository = git_repository(tmp_path / "repo")
    declare(
        tmp_path,
        git=["mcp_server_git", "--repository", str(repository)],
        clock=clock_server(),
    )
    log = {"name": "git.git_log", "arguments": {"repo_path": str(repository)}}
    now = {"name": "clock.get_current_time", "arguments": {"timezone": "UTC"}}
    replies = {
        "ask": [
            {"tool_calls": [log, now]},
            'It planted a lighthouse. SET VARIABLE: <<answer = "ok">>',
        ],
        "chat": ["Hello."],
    }
    result, events = run_script(tmp_path, GIT_SCRIPT, replies=replies, transcript=True)
    assert result.variables["answer"] == "ok"
    git_log, clock = tool_events(events)
    assert "Message: plant the lighthouse" in git_log["result"]
    assert '"timezone": "UTC"' in clock["result"] and '"datetime"' in clock["result"]
    # the reply is written after the model saw both results
    second = llm_calls(events, "ask")[1]
    assert "plant the lighthouse" in sent_text(second) and '"datetime"' in sent_text(second)
    shown = capsys.readouterr().out  # the transcript
    assert "⚙ @archivist calls git.git_log(" in shown and "Message: plant the lighthouse" in shown
    # an actor without the tools, outside the turn's scope, never sees either result
    chat = llm_calls(events, "chat")[0]
    assert "lighthouse" not in json.dumps(chat) and "datetime" not in json.dumps(chat)
    assert not alive(server_pid(tmp_path, "git")) and not alive(server_pid(tmp_path, "clock"))


def test_a_tool_the_server_does_not_list_is_a_run_error_naming_its_tools(tmp_path: Path) -> None:
    declare(tmp_path, clock=clock_server())
    source = CLOCK_SCRIPT.replace("clock.get_current_time", "clock.get_moon_phase")
    with pytest.raises(RunError) as raised:
        run_script(tmp_path, source, model="fems/mock")
    message = str(raised.value)
    assert "MCP server 'clock' has no tool 'get_moon_phase'" in message
    assert "get_current_time, convert_time" in message
    assert not alive(server_pid(tmp_path, "clock"))


def test_the_server_stops_when_the_run_fails(tmp_path: Path) -> None:
    declare(tmp_path, clock=clock_server())
    now = {"name": "clock.get_current_time", "arguments": {"timezone": "UTC"}}
    replies = {"ask": [{"tool_calls": [now]}]}  # then no reply left: a run error
    with pytest.raises(RunError, match="no reply left"):
        run_script(tmp_path, CLOCK_SCRIPT, replies=replies)
    assert not alive(server_pid(tmp_path, "clock"))


WAITING = """
import asyncio
from pathlib import Path
from typing import Any


async def wait() -> str:
    \"\"\"Wait for a long time.\"\"\"
    Path(__file__).with_name("waiting").write_text("yes", encoding="utf-8")
    await asyncio.sleep(120)
    return "done"
"""


def test_ctrl_c_stops_the_server(tmp_path: Path) -> None:
    declare(tmp_path, clock=clock_server())
    source = CLOCK_SCRIPT.replace(
        "tools: [clock.get_current_time]", "tools: [clock.*, slow.wait]"
    ).replace("vars:", 'code:\n    slow = file:"slow.py"\n\nvars:')
    module = build_script(tmp_path, source, {"slow.py": WAITING})
    now = {"name": "clock.get_current_time", "arguments": {"timezone": "UTC"}}
    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps({"ask": [{"tool_calls": [now, {"name": "slow.wait"}]}]}))
    command = [sys.executable, str(module), "--replies", str(replies), "--db", ":memory:"]
    started = subprocess.Popen(command, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (tmp_path / "waiting").exists():
            time.sleep(0.05)
        pid = server_pid(tmp_path, "clock")
        assert alive(pid)
        started.send_signal(signal.SIGINT)
        _, err = started.communicate(timeout=60)
    finally:
        started.kill()
        started.wait(timeout=60)
        assert started.stderr is not None
        started.stderr.close()
    assert started.returncode == 1 and "error: interrupted" in err, err
    assert "Traceback" not in err
    assert not alive(pid)


@dataclass(frozen=True)
class GitLogGame:
    """GIT_SCRIPT offering only git.git_log, built, with its repository and the tool call."""

    repository: Path
    module: Path
    log: dict[str, Any]
    replies: Path
    db: Path

    @classmethod
    def make(cls, project: Path) -> GitLogGame:
        repository = git_repository(project / "repo")
        declare(project, git=["mcp_server_git", "--repository", str(repository)])
        source = GIT_SCRIPT.replace(
            "tools: [git.*, clock.get_current_time]", "tools: [git.git_log]"
        )
        log = {"name": "git.git_log", "arguments": {"repo_path": str(repository)}}
        module = build_script(project, source)
        return cls(repository, module, log, project / "replies.json", project / "dialog.db")

    def commit(self, message: str) -> None:
        """A commit after a first run: a new git_log would show it, a replayed one cannot."""
        git = ["git", "-C", str(self.repository), "-c", "user.name=T", "-c", "user.email=t@x.org"]
        subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", message], check=True)


def test_resume_replays_the_servers_answers_without_calling_the_tool(tmp_path: Path) -> None:
    game = GitLogGame.make(tmp_path)
    module, log, replies, db = game.module, game.log, game.replies, game.db
    replies.write_text(json.dumps({"ask": [{"tool_calls": [log]}]}), encoding="utf-8")
    failed = run_program(module, "--replies", str(replies), "--db", str(db))
    assert failed.returncode == 1 and "no reply left" in failed.stderr
    game.commit("move the lighthouse")
    answer = 'Planted. SET VARIABLE: <<answer = "ok">>'
    replies.write_text(
        json.dumps({"ask": [{"tool_calls": [log]}, answer], "chat": ["Hi."]}), encoding="utf-8"
    )
    trace = tmp_path / "trace.jsonl"
    resumed = run_program(
        module, "--replies", str(replies), "--db", str(db), "--resume", "--trace", str(trace)
    )
    assert resumed.returncode == 0, resumed.stderr
    events = read_trace(trace)
    assert tool_events(events) == []
    sent = sent_text(llm_calls(events, "ask")[0])
    assert "plant the lighthouse" in sent and "move the lighthouse" not in sent
    assert not any(alive(pid) for pid in server_pids(tmp_path, "git"))


def test_a_fork_replays_the_servers_answers_without_calling_the_tool(tmp_path: Path) -> None:
    """§16.4a: a fork takes the parent's tool rounds as recorded: the tool is not called again
    (a new commit would show in a new git_log), and its server does not outlive the run."""
    game = GitLogGame.make(tmp_path)
    module, log, replies, db = game.module, game.log, game.replies, game.db
    answer = 'Planted. SET VARIABLE: <<answer = "ok">>'
    replies.write_text(
        json.dumps({"ask": [{"tool_calls": [log]}, answer], "chat": ["Hi."]}), encoding="utf-8"
    )
    parent = run_program(module, "--replies", str(replies), "--db", str(db))
    assert parent.returncode == 0, parent.stderr
    game.commit("move the lighthouse")
    replies.write_text(json.dumps({"chat": ["Hello again."]}), encoding="utf-8")
    trace = tmp_path / "trace.jsonl"
    forked = run_program(
        module, "--replies", str(replies), "--db", str(db), "--fork", "1:1", "--trace", str(trace)
    )
    assert forked.returncode == 0, forked.stderr
    events = read_trace(trace)
    assert tool_events(events) == []
    assert [call["action"] for call in llm_calls(events)] == ["chat"]
    assert not any(alive(pid) for pid in server_pids(tmp_path, "git"))
    with sqlite3.connect(db) as database:
        results = [
            content
            for (content,) in database.execute(
                "SELECT content FROM fems_messages WHERE session_id = 2 AND kind = 'tool_result'"
            )
        ]
    assert len(results) == 1 and "plant the lighthouse" in results[0]
    assert "move the lighthouse" not in results[0]


FAILING_SERVERS = {
    "exits at once": (
        ["-c", "import sys; print('cannot open the tide table', file=sys.stderr); sys.exit(2)"],
        60,
        ["MCP server 'clock'", "failed to start", "cannot open the tide table"],
    ),
    "hangs on start": (
        ["-c", "import time; time.sleep(120)"],
        1,
        ["MCP server 'clock'", "did not start within 1 s"],
    ),
}


@pytest.mark.parametrize("case", FAILING_SERVERS, ids=list(FAILING_SERVERS))
def test_a_server_that_cannot_start_is_a_run_error_not_a_traceback(
    tmp_path: Path, case: str
) -> None:
    args, timeout, expected = FAILING_SERVERS[case]
    (tmp_path / "fems.toml").write_text(
        f"[mcp.clock]\ncommand = {json.dumps(sys.executable)}\nargs = {json.dumps(args)}\n"
        f"timeout = {timeout}\n",
        encoding="utf-8",
    )
    module = build_script(tmp_path, CLOCK_SCRIPT)
    done = run_program(module, "--model", "fems/mock", "--db", ":memory:")
    assert done.returncode == 1
    assert "Traceback" not in done.stderr and "Loop" not in done.stderr  # no process left behind
    for part in expected:
        assert part in done.stderr


def test_a_server_command_not_on_the_path_is_named(tmp_path: Path) -> None:
    (tmp_path / "fems.toml").write_text(
        '[mcp.clock]\ncommand = "fems-no-such-command"\nargs = ["-m", "mcp_server_time"]\n',
        encoding="utf-8",
    )
    module = build_script(tmp_path, CLOCK_SCRIPT)
    done = run_program(module, "--model", "fems/mock", "--db", ":memory:")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert (
        "failed to start: no command 'fems-no-such-command' (give its full path, or put it on "
        "PATH)" in done.stderr
    )


def test_a_tool_error_and_invalid_arguments_go_back_to_the_model(tmp_path: Path) -> None:
    declare(tmp_path, clock=clock_server())
    wrong_zone = {"name": "clock.get_current_time", "arguments": {"timezone": "Mars/Olympus"}}
    wrong_type = {"name": "clock_get_current_time", "arguments": {"timezone": 3}}
    replies = {
        "ask": [
            {"tool_calls": [wrong_zone, wrong_type]},
            'Unknown. SET VARIABLE: <<answer = "?">>',
        ],
        "chat": ["Hello."],
    }
    result, events = run_script(tmp_path, CLOCK_SCRIPT, replies=replies)
    assert result.status == "completed"
    zone, kind = (e["result"] for e in tool_events(events))
    assert zone.startswith("error: ") and "Mars/Olympus" in zone
    # refused before the call, by the schema the server gave
    assert kind == (
        "error: invalid arguments for clock_get_current_time: timezone: 3 is not of type 'string'"
    )


TRACKER = """
import sys

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("tracker")


@server.tool()
def open_issues(ctx: Context, label: str) -> str:
    \"\"\"The open issues with a label.\"\"\"
    seen_by = (ctx.headers or {}).get("authorization", "nobody")
    return f"issue 7 ({label}) is open; asked by {seen_by}"


server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
"""

TRACKER_SCRIPT = """
vars:
    answer = ""

actors:
    ai @triager = tools: [tracker.open_issues]

action ask @ai(@triager):
    prompt: Which bugs are open?
    out: answer(string)

mainflow:
    [START] -> ask -> [END]
"""


@pytest.fixture
def tracker(tmp_path: Path) -> Iterator[str]:
    """A streamable HTTP MCP server on 127.0.0.1 (the SDK's own server class); its URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    (tmp_path / "tracker.py").write_text(TRACKER, encoding="utf-8")
    command = [sys.executable, str(tmp_path / "tracker.py"), str(port)]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with socket.socket() as client:
                if client.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_a_streamable_http_server_gets_its_headers_from_the_environment(
    tmp_path: Path, tracker: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "fems.toml").write_text(
        f'[mcp.tracker]\nurl = "{tracker}"\nheaders_env = {{ Authorization = "TRACKER_TOKEN" }}\n',
        encoding="utf-8",
    )
    issues = {"name": "tracker.open_issues", "arguments": {"label": "bug"}}
    replies = {"ask": [{"tool_calls": [issues]}, 'Issue 7. SET VARIABLE: <<answer = "7">>']}
    monkeypatch.delenv("TRACKER_TOKEN", raising=False)
    with pytest.raises(
        RunError, match="reads the environment variable TRACKER_TOKEN, which is not"
    ):
        run_script(tmp_path, TRACKER_SCRIPT, replies=replies)
    monkeypatch.setenv("TRACKER_TOKEN", "Bearer tide-42")
    result, events = run_script(tmp_path, TRACKER_SCRIPT, replies=replies)
    assert result.variables["answer"] == "7"
    (called,) = tool_events(events)
    assert called["result"] == "issue 7 (bug) is open; asked by Bearer tide-42"
