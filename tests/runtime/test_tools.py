"""Tools (§15.5): confinement of the built-ins, pydantic schemas and validation, the tool loop of
an AI turn (storage, scope, trace, limits), the offline models, and the OpenAI wire format."""

from __future__ import annotations

import asyncio
import io
import json
import os
import sqlite3
import threading
from pathlib import Path
from typing import Annotated, Any, Literal

import jsonschema
import pytest
from fems_runtime.builtin_tools import READ_LIMIT, WRITE_LIMIT, Workspace
from fems_runtime.llm import ModelClient
from fems_runtime.offline import example_arguments
from fems_runtime.paths import OutsideRoot, inside_root
from fems_runtime.records import RunError, TraceWriter
from fems_runtime.signals import OutSpec
from fems_runtime.specs import ScopeItem, TurnSpec
from fems_runtime.store import Store
from fems_runtime.tools import (
    Toolbox,
    ToolCall,
    ToolSchemaError,
    describe,
    offered_names,
)
from fems_runtime.turns import TurnServices
from fems_runtime.variables import ActorSpec, Variables
from pydantic import BaseModel, Field

from .fake_openai import Behaviour, fake_openai
from .test_endpoints import PATHS
from .test_turns import Ctx


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project folder with a note, a subfolder, and a secret outside it."""
    root = tmp_path / "project"
    (root / "docs").mkdir(parents=True)
    (root / "notes.txt").write_text("the key is under the mat\n", encoding="utf-8")
    (root / "docs" / "a.md").write_text("# A\n", encoding="utf-8")
    (tmp_path / "secret.txt").write_text("outside\n", encoding="utf-8")
    return root


def call(workspace: Workspace, name: str, **arguments: Any) -> str:
    box = Toolbox(workspace.root, None)

    async def offer_and_call() -> str:
        tools = await box.tools([name])
        outcome = await box.call(tools, ToolCall("c1", name, json.dumps(arguments)))
        return outcome.result

    return asyncio.run(offer_and_call())


# ---------------------------------------------------------------------- confinement


def test_inside_root_refuses_every_way_out(project: Path) -> None:
    assert inside_root(project, "notes.txt") == (project / "notes.txt").resolve()
    assert inside_root(project, "docs/../notes.txt") == (project / "notes.txt").resolve()
    assert inside_root(project, str(project / "docs")) == (project / "docs").resolve()
    os.symlink(project / "docs", project / "inner")  # a link that stays inside is fine
    assert inside_root(project, "inner/a.md") == (project / "docs" / "a.md").resolve()
    os.symlink(project.parent / "secret.txt", project / "leak")
    os.symlink(project.parent, project / "up")
    for way_out in ("../secret.txt", "docs/../../secret.txt", str(project.parent), "leak", "up"):
        with pytest.raises(OutsideRoot):
            inside_root(project, way_out)
    # the real path decides: out through a link and back in lands inside
    assert inside_root(project, "up/project/notes.txt") == (project / "notes.txt").resolve()


def test_read_and_list_stay_in_the_root(project: Path) -> None:
    workspace = Workspace(project)
    assert call(workspace, "read", path="notes.txt") == "the key is under the mat\n"
    os.symlink(project.parent / "secret.txt", project / "leak")
    for path in ("../secret.txt", str(project.parent / "secret.txt"), "leak"):
        result = call(workspace, "read", path=path)
        assert result.startswith("error: PermissionError") and "outside" in result
        assert "outside\n" not in result
    assert call(workspace, "list", path="..").startswith("error: PermissionError")
    listing = call(workspace, "list")
    assert listing.splitlines() == ["docs/", "leak@ (link)", "notes.txt (25 bytes)"]
    assert call(workspace, "list", path="docs") == "a.md (4 bytes)"
    assert "no file" in call(workspace, "read", path="missing.txt")


def test_read_cuts_big_files_and_refuses_binary_ones(project: Path) -> None:
    (project / "big.txt").write_text("é" * READ_LIMIT, encoding="utf-8")  # 2 bytes each
    result = call(Workspace(project), "read", path="big.txt")
    body, note = result.rsplit("\n", 1)
    assert body == "é" * (READ_LIMIT // 2)
    assert note == f"[cut: 'big.txt' has {2 * READ_LIMIT} bytes; the first {READ_LIMIT} are shown]"
    (project / "image.png").write_bytes(b"\x89PNG\x00\x01")
    assert "not a text file" in call(Workspace(project), "read", path="image.png")


def test_write_stays_in_the_root_and_is_capped(project: Path) -> None:
    workspace = Workspace(project)
    assert call(workspace, "write", path="out/report.md", content="ok") == (
        "wrote 2 bytes to out/report.md"
    )
    assert (project / "out" / "report.md").read_text(encoding="utf-8") == "ok"
    os.symlink(project.parent, project / "up")
    for path in ("../evil.txt", str(project.parent / "evil.txt"), "up/evil.txt"):
        assert "outside" in call(workspace, "write", path=path, content="x")
    assert not (project.parent / "evil.txt").exists()
    too_big = call(workspace, "write", path="big.txt", content="x" * (WRITE_LIMIT + 1))
    assert "at most" in too_big and not (project / "big.txt").exists()


# ---------------------------------------------------------------------- code functions


class Address(BaseModel):
    city: str


def lookup(
    word: Annotated[str, Field(description="the word to look up")],
    limit: int = 3,
    mode: Literal["exact", "prefix"] = "exact",
) -> list[str]:
    """Look a word up in the glossary."""
    return [f"{word}:{mode}"] * limit


def test_schema_comes_from_hints_and_docstring() -> None:
    tool = describe("glossary.lookup", lookup)
    entry = tool.schema()
    assert entry["type"] == "function"
    function = entry["function"]
    assert function["name"] == "glossary_lookup"  # providers allow no dots in names
    assert function["description"] == "Look a word up in the glossary."
    parameters = function["parameters"]
    assert parameters["required"] == ["word"]
    assert parameters["properties"]["word"]["description"] == "the word to look up"
    assert parameters["properties"]["limit"]["type"] == "integer"
    assert parameters["properties"]["mode"]["enum"] == ["exact", "prefix"]


def test_arguments_are_validated_and_failures_go_back_as_results(project: Path) -> None:
    threads: list[int] = []

    def where(address: Address) -> str:
        threads.append(threading.get_ident())
        if address.city == "nowhere":
            raise LookupError("no such city")
        return address.city.upper()

    tools = [describe("geo.where", where), describe("glossary.lookup", lookup)]
    box = Toolbox(project, None)

    def result(name: str, arguments: str) -> str:
        return asyncio.run(box.call(tools, ToolCall("c", name, arguments))).result

    assert result("geo_where", '{"address": {"city": "paris"}}') == "PARIS"
    assert threads and threading.get_ident() not in threads  # ran in a worker thread
    assert result("glossary.lookup", '{"word": "x", "limit": "2"}') == '["x:exact","x:exact"]'
    assert result("geo_where", '{"address": {"city": "nowhere"}}') == (
        "error: LookupError: no such city"
    )
    invalid = result("glossary_lookup", '{"word": "x", "mode": "fuzzy"}')
    assert invalid.startswith("error: invalid arguments for glossary_lookup: mode:")
    assert "missing" in result("geo_where", "{}").lower()
    assert result("geo_where", "{not json").startswith("error: the arguments are not JSON")
    assert result("geo_where", "[1]") == "error: the arguments must be a JSON object"
    assert result("web_search", "{}") == (
        "error: no tool 'web_search' (tools: geo_where, glossary_lookup)"
    )


def test_undescribable_functions_are_refused() -> None:
    def connect(conn: sqlite3.Connection) -> None: ...

    def many(*words: str) -> None: ...

    for function in (connect, many):
        with pytest.raises(ToolSchemaError, match="cannot be described"):
            describe("db.f", function)


def test_async_tools_are_awaited(project: Path) -> None:
    async def later(n: int) -> int:
        await asyncio.sleep(0)
        return n + 1

    box = Toolbox(project, None)
    tools = [describe("t.later", later)]
    assert asyncio.run(box.call(tools, ToolCall("c", "t_later", '{"n": 1}'))).result == "2"


def test_true_offers_the_scripts_tools_but_never_write_or_edit() -> None:
    named = ("notes.lookup", "write", "edit", "read", "clock.*", "deep_think", "web_search")
    assert offered_names(True, named) == ("read", "list", "glob", "grep", "notes.lookup", "clock.*")
    assert offered_names(False, named) == ()
    assert offered_names(("write", "read", "write"), named) == ("write", "read")
    # a host's tool (a build warning, §6.4) is left out; deep_think stays for the turn to see
    # (§15.7), and the toolbox offers no tool for it
    assert offered_names(("deep_think", "shell", "edit"), named) == ("deep_think", "edit")
    box = Toolbox(".", None)
    tools = asyncio.run(box.tools(offered_names(("deep_think", "shell", "edit"), named)))
    assert [tool.name for tool in tools] == ["edit"]


class Filter(BaseModel):
    tag: Literal["a", "b"]
    since: int | None = None


def test_example_arguments_are_valid_for_the_schema() -> None:
    def search(query: str, filter: Filter, count: int, exact: bool = False) -> str:
        return query

    tool = describe("s.search", search)
    arguments = example_arguments(tool.parameters)
    assert arguments == {"query": "example", "filter": {"tag": "a"}, "count": 1}
    assert tool.invoke(arguments) == "example"


def test_example_arguments_keep_to_an_mcp_servers_bounds() -> None:
    """A server's schema (mcp-server-git's git_add) may ask for items and minimums."""
    schema = {
        "type": "object",
        "properties": {
            "repo_path": {"type": "string"},
            "files": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            "context_lines": {"type": "integer", "minimum": 3},
            "ratio": {"type": "number", "minimum": 0, "maximum": 0.5},
        },
        "required": ["repo_path", "files", "context_lines", "ratio"],
    }
    arguments = example_arguments(schema)
    assert arguments == {
        "repo_path": "example",
        "files": ["example"],
        "context_lines": 3,
        "ratio": 0.5,
    }
    jsonschema.validate(arguments, schema)


# ---------------------------------------------------------------------- the tool loop


ACTORS = (
    ActorSpec("@eve", soul="eve", tools=("read", "list", "notes.count")),
    ActorSpec("@bob", soul="bob"),
    ActorSpec("@ann", soul="ann"),
)


class Notes:
    """A ``code:`` module with one tool that counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def count(self, word: str) -> int:
        """How often the word appears in the notes."""
        self.calls += 1
        return len(word)


def services_for(
    project: Path, replies: Any = None, model: str | None = None, **fields: Any
) -> tuple[TurnServices, io.StringIO, Notes]:
    store = Store(":memory:")
    notes = Notes()
    trace = io.StringIO()
    client = ModelClient(
        run_model=model or "fems/script", replies=replies, environ={}, **fields.pop("client", {})
    )
    services = TurnServices(
        models=client,
        store=store,
        session=store.open_session("new"),
        trace=TraceWriter(trace),
        file="game.fems",
        toolbox=Toolbox(project, lambda alias: notes),
        **fields,
    )
    return services, trace, notes


def events(trace: io.StringIO, name: str) -> list[dict[str, Any]]:
    return [e for e in map(json.loads, trace.getvalue().splitlines()) if e["event"] == name]


def turn(services: TurnServices, **fields: Any) -> Any:
    variables = Variables({"found": ""}, ACTORS)
    base = {"action": "search", "line": 7, "executor": "@eve", "prompt": "Look."}
    return asyncio.run(services.ai_turn(Ctx(variables.root), TurnSpec(**{**base, **fields})))


READ_NOTES = {"tool_calls": [{"name": "read", "arguments": {"path": "notes.txt"}}]}


def test_scripted_tool_calls_run_and_are_stored_in_the_turns_scope(project: Path) -> None:
    replies = {
        "search": [
            READ_NOTES,
            {
                "tool_calls": [
                    {"name": "notes.count", "arguments": {"word": "mat"}},
                    {"name": "list"},
                ]
            },
            'Under the mat. SET VARIABLE: <<found = "mat">>',
        ]
    }
    services, trace, notes = services_for(project, replies)
    result = turn(services, scope=(ScopeItem("actor", "@bob"),), outs=(OutSpec("found"),))
    assert result.assigned == {"found": "mat"} and result.calls == 3
    assert notes.calls == 1
    stored = services.store.messages(services.session)
    assert [(m.kind, m.speaker_name) for m in stored] == [
        ("prompt", "@eve"),
        ("tool_call", "@eve"),
        ("tool_result", "read"),
        ("tool_call", "@eve"),
        ("tool_result", "notes.count"),
        ("tool_call", "@eve"),
        ("tool_result", "list"),
        ("reply", "@eve"),
    ]
    assert stored[1].content == 'read({"path": "notes.txt"})'
    assert stored[2].content == "the key is under the mat\n"
    assert stored[4].content == "3"
    # visible to the turn's scope (@eve, @bob), never to @ann
    seen_by_bob = [m.kind for m in services.store.visible_messages(services.session, soul="bob")]
    assert seen_by_bob.count("tool_result") == 3
    seen_by_ann = services.store.visible_messages(services.session, soul="ann")
    assert seen_by_ann == []
    traced = events(trace, "tool_call")
    assert [(e["name"], e["arguments"], e["round"]) for e in traced] == [
        ("read", '{"path": "notes.txt"}', 0),
        ("notes.count", '{"word": "mat"}', 1),
        ("list", "{}", 1),
    ]
    assert traced[0]["result"] == "the key is under the mat\n"
    assert traced[0]["actor"] == "@eve" and traced[0]["action"] == "search"
    calls = events(trace, "llm_call")
    assert [m["role"] for m in calls[2]["messages"]] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "tool",
    ]
    asked, answered = calls[2]["messages"][1], calls[2]["messages"][2]
    assert asked["tool_calls"][0]["function"] == {
        "name": "read",
        "arguments": '{"path": "notes.txt"}',
    }
    assert answered["tool_call_id"] == asked["tool_calls"][0]["id"]
    assert calls[0]["tool_calls"][0]["function"]["name"] == "read"


def test_too_many_tool_rounds_is_a_run_error_naming_the_action(project: Path) -> None:
    services, _, _ = services_for(project, {"search": [READ_NOTES] * 3}, max_tool_rounds=2)
    with pytest.raises(RunError, match=r"action search: the model still calls tools after 2") as e:
        turn(services)
    assert e.value.line == 7
    services, _, _ = services_for(project, {"search": [READ_NOTES, "done"]})
    with pytest.raises(RunError, match="after 0 rounds"):
        turn(services, max_tool_rounds=0)  # the action's field wins over the meta default


def test_a_turn_without_tools_offers_none(project: Path) -> None:
    services, trace, _ = services_for(project, model="fems/mock")
    turn(services, executor="@bob")
    assert events(trace, "tool_call") == [] and len(events(trace, "llm_call")) == 1


def test_mock_calls_each_offered_tool_once_with_valid_arguments(project: Path) -> None:
    services, trace, notes = services_for(project, model="fems/mock")
    result = turn(services)
    assert result.calls == 2 and result.reply.startswith("@eve")  # tools first, then a line
    traced = events(trace, "tool_call")
    assert [e["name"] for e in traced] == ["read", "list", "notes.count"]
    assert json.loads(traced[2]["arguments"]) == {"word": "example"}
    assert notes.calls == 1
    assert all("invalid arguments" not in e["result"] for e in traced)


def test_mock_never_writes(project: Path) -> None:
    actors = (ActorSpec("@eve", soul="eve", tools=("write",)),)
    services, trace, _ = services_for(project, model="fems/mock")
    variables = Variables({}, actors)
    spec = TurnSpec(action="w", line=1, executor="@eve", prompt="Write.")
    asyncio.run(services.ai_turn(Ctx(variables.root), spec))
    assert events(trace, "tool_call") == [] and sorted(p.name for p in project.iterdir()) == [
        "docs",
        "notes.txt",
    ]


@pytest.mark.parametrize("path", sorted(PATHS))
def test_wire_format_against_an_openai_server(project: Path, path: str) -> None:
    """Both network paths (the `openai` SDK, litellm) offer the tools and send the calls and
    results back in the OpenAI protocol's shape."""
    with fake_openai() as server:
        server.queue(
            Behaviour(text="", tool_calls=(("read", '{"path": "notes.txt"}'),)),
            Behaviour(text="It is under the mat."),
        )
        model_map = {"test": PATHS[path](server.api_base, "test")}
        services, trace, _ = services_for(project, model="test", client={"model_map": model_map})
        services.models.run_model = None
        variables = Variables({"found": ""}, ACTORS)
        spec = TurnSpec(action="search", line=7, executor="@eve", model="test")

        async def run() -> Any:
            try:
                return await services.ai_turn(Ctx(variables.root), spec)
            finally:
                await services.models.aclose()

        result = asyncio.run(run())
    assert result.reply == "It is under the mat."
    first, second = server.requests
    offered = {t["function"]["name"]: t for t in first["tools"]}
    assert sorted(offered) == ["list", "notes_count", "read"]
    assert offered["read"]["type"] == "function"
    assert offered["read"]["function"]["parameters"]["required"] == ["path"]
    asked = second["messages"][-2]
    assert asked["role"] == "assistant"
    assert asked["tool_calls"] == [
        {
            "id": "call_0",
            "type": "function",
            "function": {"name": "read", "arguments": '{"path": "notes.txt"}'},
        }
    ]
    assert second["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_0",
        "content": "the key is under the mat\n",
    }
    assert [e["result"] for e in events(trace, "tool_call")] == ["the key is under the mat\n"]
