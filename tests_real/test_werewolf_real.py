"""examples/werewolf played whole against a real local model (§15.4, §13.1, §13.2a, issue #33).

The model map is what a newcomer writes: `model` and `api_base`, nothing else. The replies end
at the example's own `max_tokens` (its `meta:`), and the window and the slots are the ones
llama.cpp's `llama-server` says at `/props`, read once by the run and named in its notice.

SmolLM2-135M writes nonsense, so nothing here is about the game's play: the test holds the
engine to what it did with a real model's replies. Every call streamed; the run completed; each
stored reply is the text the server streamed for that request; no request outgrew the window
the server said; and no room's text, nor any private reasoning, reached an actor outside the
room.
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from fems_runtime.replies import split_reasoning
from fems_runtime.values import valid_text

from tests_real.local_model import MODEL_ALIAS, RecordingProxy, llama_cpp_server

WEREWOLF = Path(__file__).resolve().parent.parent / "examples" / "werewolf"
GAME_WINDOW = 8192
"""llama-server's `-c`, all of it one slot's (`--parallel 1`): the game's longest requests
(the reveal: every player's memory, about 6,500 tokens) fit it with the reply's room to spare."""
NOTICE = re.compile(
    rf"^fems: model openai/{MODEL_ALIAS}: context_window (\d+), max_concurrency (\d+), as "
    r"llama\.cpp's server at (\S+) says",
    re.MULTILINE,
)


def example_max_tokens() -> int:
    """The `max_tokens` of the example's `meta:`: what each of its replies may be."""
    meta = (WEREWOLF / "werewolf.fems").read_text(encoding="utf-8").split("\nmeta:", 1)[1]
    found = re.search(r"^\s+max_tokens\s*=\s*(\d+)", meta, re.MULTILINE)
    assert found is not None, "examples/werewolf's meta sets no max_tokens"
    return int(found.group(1))


@pytest.fixture(scope="module")
def game(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One whole game through the `openai` path; what the engine and the server each kept."""
    folder = tmp_path_factory.mktemp("werewolf")
    for name in ("werewolf.fems", "game.py", "souls.yaml"):
        shutil.copy(WEREWOLF / name, folder / name)
    log = folder / "server.log"
    with llama_cpp_server(log, GAME_WINDOW) as base, RecordingProxy(base, reasoning=True) as proxy:
        # no api_key: the engine sends a placeholder to a server of its own (llama-server
        # asks for none unless started with --api-key)
        (folder / "fems.toml").write_text(
            f'[models.local]\nmodel = "openai/{MODEL_ALIAS}"\napi_base = "{proxy.api_base}"\n',
            encoding="utf-8",
        )
        run = subprocess.run(
            [
                sys.executable, "-m", "fems2py", "run", "werewolf.fems", "--model", "local",
                "--seed", "1", "--db", "game.db", "--souls", "souls.yaml",
                "--trace", "trace.jsonl", "--result", "result.json",
            ],
            cwd=folder, capture_output=True, text=True, timeout=1800, check=False,
        )  # fmt: skip
        exchanges = list(proxy.exchanges)
        abandoned = proxy.abandoned
        api_base = proxy.api_base
    events = [json.loads(line) for line in (folder / "trace.jsonl").read_text().splitlines()]
    with sqlite3.connect(folder / "game.db") as db:
        messages = db.execute("SELECT id, kind, content FROM fems_messages ORDER BY seq").fetchall()
    return {
        "run": run,
        "api_base": api_base,
        "result": json.loads((folder / "result.json").read_text()),
        "calls": [e for e in events if e["event"] == "llm_call"],
        "exchanges": exchanges,
        "abandoned": abandoned,
        "messages": messages,
    }


def _notices(game: dict[str, Any]) -> list[tuple[int, int, str]]:
    """What the run's notices say the server said: (window, slots, where) each."""
    stderr = game["run"].stderr
    return [(int(w), int(s), url) for w, s, url in NOTICE.findall(stderr)]


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
        assert exchange.request["max_tokens"] == example_max_tokens()
        assert exchange.request["model"] == MODEL_ALIAS


def test_each_prompt_was_read_with_its_progress_streamed(game: dict[str, Any]) -> None:
    """The engine asked the llama.cpp server for its progress (§15.4), with the default
    `--timeout`: a prompt near the window takes minutes to read on two shared cores, and
    each batch read came as a chunk, so none of that wait was silence the timeout cut."""
    longest = max(game["exchanges"], key=lambda exchange: exchange.usage()["prompt_tokens"])
    for exchange in game["exchanges"]:
        assert exchange.request["return_progress"] is True
        assert exchange.progress(), "no prompt_progress chunk came"
    read = longest.progress()[-1]
    assert read["processed"] == read["total"] > GAME_WINDOW // 2


def test_the_run_read_the_window_and_the_slots_from_the_server(game: dict[str, Any]) -> None:
    """Once per run, from `/props` through the proxy (§15.4): the slot's window and one slot."""
    root = game["api_base"].removesuffix("/v1")
    assert _notices(game) == [(GAME_WINDOW, 1, f"{root}/props")], game["run"].stderr[-3000:]


def test_no_call_waited_on_the_one_slot_server_until_cut(game: dict[str, Any]) -> None:
    """The one slot the server said (§15.4): the engine queues calls itself, so none sits
    silent behind another on the server until `--timeout` closes it."""
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


def test_no_request_outgrows_the_window_the_server_said(game: dict[str, Any]) -> None:
    """Counted in the model's own tokens by the server (its usage): each prompt left the
    reply its `max_tokens` within the window the run read."""
    ((window, _, _),) = _notices(game)
    for exchange in game["exchanges"]:
        prompt = exchange.usage().get("prompt_tokens")
        assert isinstance(prompt, int) and prompt + example_max_tokens() <= window


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
