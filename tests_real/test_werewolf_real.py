"""examples/werewolf played whole against a real local model (§15.4, §13.1, §13.2a).

SmolLM2-135M writes nonsense, so nothing here is about the game's play: the test holds the
engine to what it did with a real model's replies. Every call streamed; the run completed; each
stored reply is the text the server streamed for that request; no request outgrew the model's
window; and no room's text, nor any private reasoning, reached an actor outside the room.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from fems_runtime.reasoning import split_reasoning
from fems_runtime.values import valid_text

from tests_real.local_model import CONTEXT_TOKENS, MODEL_ALIAS, RecordingProxy, llama_server

WEREWOLF = Path(__file__).resolve().parent.parent / "examples" / "werewolf"
MAX_TOKENS = 96


@pytest.fixture(scope="module")
def game(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One whole game through the `openai` path; what the engine and the server each kept."""
    folder = tmp_path_factory.mktemp("werewolf")
    for name in ("werewolf.fems", "game.py", "souls.yaml"):
        shutil.copy(WEREWOLF / name, folder / name)
    with llama_server(folder / "server.log") as base, RecordingProxy(base, reasoning=True) as proxy:
        (folder / "fems.toml").write_text(
            "[models.local]\n"
            f'model = "openai/{MODEL_ALIAS}"\n'
            f'api_base = "{proxy.api_base}"\n'
            'api_key = "local"\n'
            f"max_tokens = {MAX_TOKENS}\n"
            "max_concurrency = 1\n"  # llama.cpp's server answers one request at a time
            f"context_window = {CONTEXT_TOKENS}\n",
            encoding="utf-8",
        )
        run = subprocess.run(
            [
                sys.executable, "-m", "fems2py", "run", "werewolf.fems", "--model", "local",
                "--seed", "1", "--db", "game.db", "--souls", "souls.yaml",
                "--trace", "trace.jsonl", "--result", "result.json", "--timeout", "60",
            ],
            cwd=folder, capture_output=True, text=True, timeout=1800, check=False,
        )  # fmt: skip
        exchanges = list(proxy.exchanges)
        abandoned = proxy.abandoned
    events = [json.loads(line) for line in (folder / "trace.jsonl").read_text().splitlines()]
    with sqlite3.connect(folder / "game.db") as db:
        messages = db.execute("SELECT id, kind, content FROM fems_messages ORDER BY seq").fetchall()
    return {
        "run": run,
        "result": json.loads((folder / "result.json").read_text()),
        "calls": [e for e in events if e["event"] == "llm_call"],
        "exchanges": exchanges,
        "abandoned": abandoned,
        "messages": messages,
    }


def test_the_game_completes(game: dict[str, Any]) -> None:
    run = game["run"]
    assert run.returncode == 0, run.stderr[-3000:]
    assert game["result"]["status"] == "completed"
    assert game["result"]["vars"]["winner"] in ("villagers", "werewolves")
    assert "Traceback" not in run.stderr


def test_every_call_streamed_and_went_to_the_model(game: dict[str, Any]) -> None:
    exchanges = game["exchanges"]
    assert len(exchanges) >= 20  # a whole game: setup, nights, days, the reveal
    assert len(exchanges) == len(game["calls"])
    for exchange in exchanges:
        assert exchange.status == 200, exchange.body[:500]
        assert exchange.request["stream"] is True and exchange.streamed()
        assert exchange.request["max_tokens"] == MAX_TOKENS
        assert exchange.request["model"] == MODEL_ALIAS


def test_no_call_waited_on_the_one_slot_server_until_cut(game: dict[str, Any]) -> None:
    """`max_concurrency = 1` in the entry (§15.4): the engine queues calls itself, so none sits
    silent behind another on the server until `--timeout` closes it (as they did without)."""
    assert game["abandoned"] == 0


def _model_text(exchange: Any) -> str:
    """The reply as the engine must keep it: the streamed text, reasoning cut out (§13.1)."""
    return valid_text(split_reasoning(exchange.reply_text())[1])


def test_each_reply_is_the_text_the_model_streamed(game: dict[str, Any]) -> None:
    by_request = {json.dumps(e.request["messages"]): e for e in game["exchanges"]}
    for call in game["calls"]:
        exchange = by_request[json.dumps(call["messages"])]
        assert call["reply"] == _model_text(exchange)
    streamed = Counter(_model_text(e) for e in game["exchanges"])
    stored = Counter(content for _, kind, content in game["messages"] if kind == "reply")
    assert stored and not stored - streamed  # every stored reply, as often as it was written


def _estimated_tokens(messages: list[dict[str, Any]]) -> int:
    """§13.2a's estimate: about 4 characters of Latin text per token, 1 per CJK character."""
    text = "".join(str(m.get("content") or "") for m in messages)
    wide = sum(1 for ch in text if ord(ch) > 0x2E80)
    return wide + (len(text) - wide + 3) // 4


def test_no_request_outgrows_the_window(game: dict[str, Any]) -> None:
    room_for_the_reply = MAX_TOKENS
    for exchange in game["exchanges"]:
        assert (
            _estimated_tokens(exchange.request["messages"]) <= CONTEXT_TOKENS - room_for_the_reply
        )


def test_no_room_text_reaches_an_actor_outside_the_room(game: dict[str, Any]) -> None:
    calls = game["calls"]
    replies = Counter(call["reply"] for call in calls)
    checked = 0
    for said in calls:
        text = said["reply"].strip()
        if len(text) < 40 or replies[said["reply"]] > 1:
            continue  # too short or said twice: not a fingerprint of one room
        room = set(said["scope"])
        for heard in calls:
            if heard["actor"] not in room:
                sent = "\n".join(str(m.get("content") or "") for m in heard["messages"])
                assert text not in sent, (said["action"], heard["action"], heard["actor"])
                checked += 1
    assert checked > 0


def test_reasoning_is_kept_and_reaches_no_request(game: dict[str, Any]) -> None:
    """Each answer opened with a `reasoning_content` delta (the proxy's): the engine stored it
    as a `reasoning` message, traced it, and sent it back to nobody, its author included."""
    thoughts = [e.reasoning_text() for e in game["exchanges"]]
    assert all(thoughts) and len(set(thoughts)) == len(thoughts)
    stored = [content for _, kind, content in game["messages"] if kind == "reasoning"]
    assert sorted(stored) == sorted(thoughts)
    assert sorted(call["reasoning"] for call in game["calls"]) == sorted(thoughts)
    for exchange in game["exchanges"]:
        sent = json.dumps(exchange.request["messages"], ensure_ascii=False)
        assert not any(text in sent for text in thoughts)
        assert "private thought" not in sent
