"""OpenTelemetry export against a real backend (issue 31): Arize Phoenix on 127.0.0.1 receives
the spans of runs made as a user makes them (the generated module's command line, its export
turned on by the standard variables or ``--otel``), and its REST API gives them back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from fems2py.build import build_file
from tests.phoenix_server import Phoenix
from tests.runtime.fake_openai import Behaviour, fake_openai

ROOT = Path(__file__).resolve().parent.parent
WEREWOLF = ROOT / "examples" / "werewolf"
AUDIT = ROOT / "examples" / "audit"
REASONING = "Secretly, I think the ledger is cooked."


def run_module(module: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The built module's command line, as a user runs it."""
    return subprocess.run(
        [sys.executable, str(module), *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
        cwd=module.parent,
    )


def by_id(spans: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {span["context"]["span_id"]: span for span in spans}


def named(spans: list[dict[str, Any]], operation: str) -> list[dict[str, Any]]:
    return [span for span in spans if span["name"].startswith(f"{operation} ")]


def everything(spans: list[dict[str, Any]]) -> str:
    return json.dumps(spans, ensure_ascii=False)


def test_a_werewolf_game_arrives_as_one_trace_of_agents_and_chats(
    phoenix: Phoenix,
    tmp_path: Path,
) -> None:
    module = build_file(WEREWOLF / "werewolf.fems", tmp_path / "werewolf.py").output
    project = f"werewolf-{uuid.uuid4().hex[:8]}"
    trace = tmp_path / "trace.jsonl"
    args = ["--model", "fems/mock", "--seed", "1", "--db", ":memory:"]
    args += ["--souls", str(WEREWOLF / "souls.yaml"), "--trace", str(trace)]
    done = run_module(module, *args, env=phoenix.environment(project))  # no --otel: the
    assert done.returncode == 0, done.stderr  # variables turn it on
    lines = [json.loads(line) for line in trace.read_text(encoding="utf-8").splitlines()]
    calls = [line for line in lines if line["event"] == "llm_call"]
    spans = phoenix.spans(project)
    ids = by_id(spans)

    (workflow,) = named(spans, "invoke_workflow")
    assert workflow["name"] == "invoke_workflow werewolf" and workflow["parent_id"] is None
    assert workflow["attributes"]["gen_ai.conversation.id"] == "1"
    assert len({span["context"]["trace_id"] for span in spans}) == 1
    assert sum(1 for span in spans if span["parent_id"] is None) == 1

    agents = named(spans, "invoke_agent")
    turns = {(call["turn"], call["actor"]) for call in calls}
    assert sorted(
        (a["attributes"]["fems.turn"], a["attributes"]["gen_ai.agent.name"]) for a in agents
    ) == sorted(turns)
    chats = named(spans, "chat")
    assert len(chats) == len(calls)
    for chat in chats:
        agent = ids[chat["parent_id"]]
        assert agent["attributes"]["fems.turn"] == chat["attributes"]["fems.turn"]
        assert chat["attributes"]["gen_ai.request.model"] == "fems/mock"
        assert agent["attributes"]["fems.step"] >= 1
        assert ids[agent["parent_id"]]["name"].split()[0] in ("invoke_workflow", "for", "branch")
    branches = named(spans, "branch")
    kinds = {ids[branch["parent_id"]]["name"].split()[0] for branch in branches}
    assert branches and kinds <= {"for", "par", "fork"}
    prompt = "Shuffle the role cards"  # werewolf.fems's prompts never leave the machine
    exported = everything(spans)
    assert "gen_ai.input.messages" not in exported and "gen_ai.output.messages" not in exported
    assert calls[0]["reply"] not in exported and prompt not in exported


def test_tool_calls_tokens_and_content_when_asked_but_never_reasoning(
    phoenix: Phoenix,
    tmp_path: Path,
) -> None:
    module = build_file(AUDIT / "audit.fems", tmp_path / "audit.py").output
    project = f"audit-{uuid.uuid4().hex[:8]}"
    for name in ("books.py",):
        (tmp_path / name).write_text((AUDIT / name).read_text(encoding="utf-8"))
    answers = (  # survey: a tool call, then its report; audit, report, decide
        Behaviour(text="", tool_calls=(("list", '{"path": "."}'),), reasoning_tokens=3),
        Behaviour(text="The ledger is ledger/, limits are in policy.md.", reasoning=REASONING),
        Behaviour(text="Travel is over.\nSET VARIABLE: <<over_limit = [travel]>>"),
        Behaviour(text="Travel spent 900, over its 500 limit.", reasoning=REASONING),
    )
    decide = Behaviour(text="SET VARIABLE: <<approved = false>>")
    with fake_openai(default=decide) as server:
        server.queue(*answers)
        (tmp_path / "fems.toml").write_text(
            f'[models]\nlocal = {{ model = "openai/local", api_base = "{server.api_base}", '
            'api_key = "secret-key-123" }\n',
            encoding="utf-8",
        )
        environment = {
            **phoenix.environment(project),
            "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true",
        }
        args = ["--otel", "--model", "local", "--db", ":memory:", "--root", str(AUDIT)]
        done = run_module(module, *args, env=environment)
    assert done.returncode == 0, done.stderr
    spans = phoenix.spans(project)
    ids = by_id(spans)
    (tool,) = named(spans, "execute_tool")
    assert tool["name"] == "execute_tool list"
    assert tool["attributes"]["gen_ai.tool.name"] == "list"
    assert ids[tool["parent_id"]]["name"] == "invoke_agent @clerk"
    chats = named(spans, "chat")
    assert chats and all(chat["attributes"]["gen_ai.usage.input_tokens"] > 0 for chat in chats)
    assert all(chat["attributes"]["gen_ai.usage.output_tokens"] > 0 for chat in chats)
    assert all(chat["attributes"]["gen_ai.provider.name"] == "openai" for chat in chats)
    first = min(chats, key=lambda chat: chat["start_time"])
    assert first["attributes"]["gen_ai.response.finish_reasons"] == ["tool_calls"]
    answered = [chat for chat in chats if chat is not first]
    assert all(chat["attributes"]["gen_ai.response.time_to_first_chunk"] >= 0 for chat in answered)
    exported = everything(spans)
    assert "Find this month" in exported  # the prompt, asked for
    assert "The ledger is ledger/" in exported  # the reply, asked for
    assert REASONING not in exported and "secret-key-123" not in exported
