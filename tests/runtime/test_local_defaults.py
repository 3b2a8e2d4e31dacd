"""Local models at their defaults during a run (§15.4, issue #33).

A model-map entry of `model` and `api_base` only: the run asks its server what it is once, the
first time the entry is used, says so in one notice, and queues its calls on the slots the
server said it has; a server that says nothing is used as before. A streamed reply without
`max_tokens` that runs long is warned about once, in the transcript, on the stage (the reply's
watchers) and in the run's warnings, while the reply goes on. The servers are fakes on
127.0.0.1 that answer `/props` as llama.cpp does (`fake_local`).
"""

from __future__ import annotations

import asyncio
import io
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from fems_helpers import llm_calls, run_script
from fems_runtime import replies
from fems_runtime.events import ModelCallBegan, ProblemReported, ReplyChunk, RunEvents
from fems_runtime.llm import ModelClient
from fems_runtime.records import RunError, StreamedReply, WatchedReplies
from fems_runtime.replies import Listener, LongReplyWatch, Piece, long_reply_warning
from fems_runtime.transcript import Transcript

from fems2py.cli import main

from .fake_local import FakeLocalServer, fake_local, llama_cpp
from .fake_openai import Behaviour

VOTE = """
vars:
    voters = [@a, @b, @c, @d]
    count = 0
actors:
    ai @a
    ai @b
    ai @c
    ai @d
action vote @ai(@voter):
    prompt: Vote for someone among {voters}.
    scope: [@voter]
action record @assign:
    out: count += 1
mainflow:
    [START] -> [P]
    [P] -> par @voter in voters:
        -> vote -> record ->
    -> [END]
"""

COUNT = """
actors:
    ai @counter
action count @ai(@counter):
    prompt: Count from 1 to 3000, one number a line.
mainflow:
    [START] -> count -> [END]
"""

NOTICE = "as llama.cpp's server at"


def local_entry(folder: Path, server: FakeLocalServer, **entry: Any) -> None:
    """A `fems.toml` whose alias `local` is ``server``: `model` and `api_base`, and ``entry``."""
    extra = "".join(f"{name} = {value!r}\n" for name, value in entry.items())
    (folder / "fems.toml").write_text(
        f'[models.local]\nmodel = "openai/smollm2"\napi_base = "{server.api_base}"\n{extra}',
        encoding="utf-8",
    )


def test_a_run_asks_the_server_once_and_queues_on_its_one_slot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Four votes at once (`par`) on a server of one slot: each waits for the one before."""
    words = tuple(f"w{i} " for i in range(8))
    with fake_local(llama_cpp(n_ctx=8192, slots=1), Behaviour(pieces=words, gap=0.02)) as server:
        local_entry(tmp_path, server)
        result, events = run_script(tmp_path, VOTE, model="local")
    assert result.status == "completed" and len(llm_calls(events, "vote")) == 4
    assert server.asked["GET /props"] == 1
    assert server.max_in_flight == 1
    err = capsys.readouterr().err
    assert err.count(NOTICE) == 1
    assert "context_window 8192, max_concurrency 1" in err and f"{server.root}/props" in err


def test_what_the_entry_says_wins_over_the_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    words = tuple(f"w{i} " for i in range(8))
    with fake_local(llama_cpp(n_ctx=8192, slots=1), Behaviour(pieces=words, gap=0.05)) as server:
        local_entry(tmp_path, server, max_concurrency=4, context_window=8192)
        result, _ = run_script(tmp_path, VOTE, model="local")
    assert result.status == "completed"
    assert "GET /props" not in server.asked  # nothing left to ask
    assert server.max_in_flight > 1
    assert NOTICE not in capsys.readouterr().err


def test_the_window_the_server_says_is_the_turns_window(tmp_path: Path) -> None:
    """A window too small for the prompt is the run error that names it: it was read."""
    with fake_local(llama_cpp(n_ctx=16, slots=1)) as server:
        local_entry(tmp_path, server)
        with pytest.raises(RunError, match="window of 16 tokens"):
            run_script(tmp_path, COUNT, model="local")


def test_a_server_that_says_nothing_is_used_as_before(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    words = tuple(f"w{i} " for i in range(8))
    with fake_local({}, Behaviour(pieces=words, gap=0.05)) as server:
        local_entry(tmp_path, server)
        result, _ = run_script(tmp_path, VOTE, model="local")
    assert result.status == "completed" and server.asked == {}
    assert server.max_in_flight > 1  # no cap was read: the calls went at once
    assert NOTICE not in capsys.readouterr().err


LLAMA_CPP_TOO_LONG = {
    "code": 400,
    "message": "request (9210 tokens) exceeds the available context size (8192 tokens), "
    "try increasing it",
    "type": "exceed_context_size_error",
    "n_prompt_tokens": 9210,
    "n_ctx": 8192,
}
"""llama-server's HTTP 400 to a prompt over its slot's window, word for word."""


def test_a_request_the_server_finds_too_long_is_a_model_error_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`fems2py run` on a llama.cpp server that refuses every request as over its window (the
    engine's estimate of the prompt erred low): retried once with half the context, then one
    readable error naming the model, the window read and the server's words (§13.2a)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "count.fems").write_text(COUNT, encoding="utf-8")
    refusal = Behaviour(status=400, error=LLAMA_CPP_TOO_LONG)
    with fake_local(llama_cpp(n_ctx=8192, slots=1), refusal) as server:
        local_entry(tmp_path, server)
        status = main(["run", "count.fems", "--model", "local", "--db", ":memory:"])
        assert len(server.requests) == 2
    err = capsys.readouterr().err
    assert status == 1 and "Traceback" not in err
    assert (
        "error: action count: model openai/smollm2 refuses the request as longer than its "
        "context window (8192 tokens) even with half the context" in err
    )
    assert "exceeds the available context size (8192 tokens)" in err


def test_a_direct_call_asks_the_server_first() -> None:
    """`ModelClient.complete` outside a turn (an interrupt's call, a caller of the runtime)."""
    with fake_local(llama_cpp(n_ctx=4096, slots=2)) as server:
        notices: list[str] = []
        entry = {"model": "openai/smollm2", "api_base": server.api_base}
        client = ModelClient(model_map={"local": entry}, environ={}, notice=notices.append)
        choice = client.resolve("local")

        async def twice() -> None:
            for _ in range(2):
                await client.complete(choice, [{"role": "user", "content": "hi"}])
            await client.aclose()

        asyncio.run(twice())
        assert server.asked["GET /props"] == 1
    told = client.servers.told(choice)
    assert client.window(choice) == 4096 and told is not None
    assert told.max_concurrency == 2
    assert len(notices) == 1


# ---------------------------------------------------------------------- a long reply


def began(events: RunEvents, max_tokens: int | None, mono: float = 0.0) -> ModelCallBegan:
    where = events.where(node="n", line=4, action="count", actor="@counter")
    call = ModelCallBegan(
        id=events.new_id(),
        parent=None,
        where=where,
        streamed=True,
        max_tokens=max_tokens,
        mono=mono,
    )
    return events.emit(call)


def chunk(
    events: RunEvents, call: ModelCallBegan, text: str, mono: float, kind: str = "text"
) -> None:
    events.emit(
        ReplyChunk(
            id=events.new_id(), parent=call.id, where=call.where, kind=kind, chunk=text, mono=mono
        )
    )


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def watch(
    tokens: int = 5, seconds: float = 60.0, forward: Listener | None = None
) -> tuple[LongReplyWatch, list[tuple[int, float]], Clock]:
    """A watch of one reply; what it said, as (tokens, seconds); its clock."""
    said: list[tuple[int, float]] = []
    clock = Clock()
    watching = LongReplyWatch(
        lambda tokens, seconds: said.append((tokens, seconds)),
        forward,
        tokens=tokens,
        seconds=seconds,
        clock=clock,
    )
    return watching, said, clock


def test_a_reply_without_a_cap_is_said_once_past_its_size_and_every_piece_goes_on() -> None:
    forwarded: list[str] = []
    watching, said, clock = watch(tokens=5, forward=lambda _kind, text: forwarded.append(text))
    for number in range(20):
        clock.now = 0.5 * number
        watching(Piece.TEXT, f"{number}\n")
        if number == 3:
            assert said == []  # 4 tokens: not yet
    assert said == [(5, 2.0)]
    assert forwarded == [f"{number}\n" for number in range(20)]  # the reply's events


def test_a_slow_reply_is_said_past_its_time_counted_from_its_first_piece() -> None:
    watching, said, clock = watch(tokens=1000, seconds=60.0)
    clock.now = 100.0  # the call began at 0: 100 s reading the prompt is not the reply's time
    watching(Piece.TEXT, "1\n")
    clock.now = 130.0
    watching(Piece.TEXT, "2\n")
    assert said == []
    clock.now = 161.0
    watching(Piece.TEXT, "3\n")
    clock.now = 170.0
    watching(Piece.TEXT, "4\n")
    assert said == [(3, 61.0)]


def test_a_discard_starts_the_count_again() -> None:
    watching, said, _ = watch(tokens=3)
    watching(Piece.TEXT, "1\n")
    watching(Piece.TEXT, "2\n")
    watching(Piece.DISCARD, "")  # the stream broke off
    watching(Piece.TEXT, "1\n")
    watching(Piece.TEXT, "2\n")
    assert said == []
    watching(Piece.TEXT, "3\n")
    assert len(said) == 1


NUMBERS = tuple(f"{number}\n" for number in range(1, 41))
"""The reply of `COUNT`'s tests: 40 tokens, past a long-reply size of 10."""


def count_shown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **entry: Any) -> str:
    """Run `COUNT` on a local server that streams `NUMBERS`, with a long reply's size set at
    10 tokens and ``entry`` in the model map; what `--transcript` printed."""
    monkeypatch.setattr(replies, "LONG_REPLY_TOKENS", 10)
    shown = io.StringIO()
    with fake_local(llama_cpp(n_ctx=8192, slots=1), Behaviour(pieces=NUMBERS)) as server:
        local_entry(tmp_path, server, **entry)
        transcript = Transcript(everyone=["@counter"], stream=shown)
        result, events = run_script(tmp_path, COUNT, model="local", transcript=transcript)
    assert result.status == "completed"
    (call,) = llm_calls(events, "count")
    assert call["reply"] == "".join(NUMBERS)  # the whole reply: it went on
    return shown.getvalue()


def test_a_capped_reply_is_never_said_to_run_long(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    printed = count_shown(tmp_path, monkeypatch, max_tokens=4000)
    assert "sets no max_tokens" not in printed + capsys.readouterr().err


def test_a_run_shows_the_warning_in_its_transcript_and_the_reply_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    printed = count_shown(tmp_path, monkeypatch)
    assert printed.count("! count by @counter: the reply of @counter has run to about 10") == 1
    assert printed.index("    10") < printed.index("about 10 tokens") < printed.index("    40")
    assert capsys.readouterr().err.count("warning: action count: the reply of @counter") == 1


def _stderr_until(
    capsys: pytest.CaptureFixture[str], text: str, release: threading.Event, seen: list[str]
) -> None:
    """What is printed on stderr, into ``seen``, until ``text`` shows (or 60 s pass); then
    ``release``, which lets the held reply end."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and text not in "".join(seen):
        seen.append(capsys.readouterr().err)
        time.sleep(0.05)
    release.set()


@pytest.mark.parametrize("options", [[], ["--trace", "trace.jsonl"]], ids=["plain", "traced"])
def test_a_run_nobody_shows_says_a_long_reply_on_stderr_while_it_runs(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    options: list[str],
) -> None:
    """`fems2py run` without `--transcript` or the stage: the warning is on stderr while the
    reply is still held open by the server, and only once (not again with the run's
    warnings at its end)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(replies, "LONG_REPLY_TOKENS", 10)
    (tmp_path / "count.fems").write_text(COUNT, encoding="utf-8")
    release, seen = threading.Event(), []
    reply = Behaviour(pieces=NUMBERS, hold=release)
    watch = threading.Thread(
        target=_stderr_until, args=(capsys, "sets no max_tokens", release, seen), daemon=True
    )
    with fake_local(llama_cpp(n_ctx=8192, slots=1), reply) as server:
        local_entry(tmp_path, server)
        watch.start()
        status = main(["run", "count.fems", "--model", "local", "--db", ":memory:", *options])
        watch.join(timeout=5)
    assert status == 0
    said_while_held = "".join(seen)
    assert "sets no max_tokens" in said_while_held  # the reply was not yet let end
    err = said_while_held + capsys.readouterr().err
    warnings = [line for line in err.splitlines() if "sets no max_tokens" in line]
    assert len(warnings) == 1, err
    assert warnings[0].startswith(
        "count.fems:4: warning: action count: the reply of @counter has run to about 10 tokens"
    )


def test_the_stage_shows_the_warning_with_the_reply_being_written() -> None:
    """The page's state of a reply being written carries the warning said inside its call
    (stage.js shows it)."""
    from types import SimpleNamespace

    from fems_runtime.stage.live import _Partial

    reply = StreamedReply(1, "count", "n", "@counter", "1", frozenset({"1"}), frozenset())
    partial = _Partial(1, reply, SimpleNamespace(touch=lambda: None))  # type: ignore[arg-type]
    events = RunEvents("count.fems")
    events.subscribe(WatchedReplies(lambda _reply: partial))
    call = began(events, None)
    for number in range(3):
        chunk(events, call, f"{number}\n", mono=0.0)
    problem = long_reply_warning("@counter", "count", 3, 0.0)
    said = ProblemReported(id=events.new_id(), parent=call.id, where=call.where, problem=problem)
    events.emit(said)
    shown = partial.to_json(director=False)
    assert shown["warning"] == problem and shown["text"] == "0\n1\n2\n"
