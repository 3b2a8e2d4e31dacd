"""Checkpoints and ``--resume`` (§16.4): an interrupted run, resumed, ends exactly like an
uninterrupted one with the same seed, without repeating or losing a message.

Every test plays a run to the end (run A), plays the same script again in a fresh database and
folder with a model (or an answers file) that gives out midway (run B), resumes B, and compares:
final variables, every stored message (kind, speaker, content, turn, action, scope tags), and
the side effects of an ``@func`` (a line appended to a file per call).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from fems_helpers import build_script, llm_calls, load, read_trace
from fems_runtime.llm import ModelClient
from fems_runtime.records import RunError
from fems_runtime.store import Store

from fems2py.build import build_file

SCRIPT = """
vars:
    voters = [@a, @b, @c]
    votes = {}
    @VOTE = ""
    day = 0
    log_count = 0
    answer = ""
    mood = ""

code:
    side = file:"side.py"

actors:
    ai @a
    ai @b
    ai @c
    human @h = soul:h, source:0

action open @ai(@a):
    showprompt: Day {day} begins.
    prompt: Say how you feel today.
    scope: all
    out: mood(string)

action note @func(side.note):
    in: day = day, mood = mood
    out: log_count

action vote @ai(@voter):
    prompt: Day {day}: vote for someone among {voters}.
    scope: [@voter]
    out: @VOTE(actor, "your vote")

action record @assign:
    out: votes.@voter = @VOTE

action settle @assign:
    out: @VOTE = ""

action ask @human(@h):
    prompt: Day {day} is over. What now?
    scope: all
    out: answer(string)

action next_day @assign:
    out: day += 1

mainflow:
    [START] -> [Day]
    [Day] -> open -> note -> [P]
    [P] -> par @voter in voters:
        -> vote -> record ->
    -> settle -> ask -> next_day -> [Check]
    [Check] -> if (day < 2) -> [Day]
    [Check] -> if (day >= 2) -> [END]
"""

SIDE = """
from pathlib import Path

LOG = Path(__file__).with_name("side.log")


def note(day, mood):
    with LOG.open("a", encoding="utf-8") as log:
        log.write(f"day {day}: {mood}\\n")
    return len(LOG.read_text(encoding="utf-8").splitlines())
"""

ANSWERS = {
    "ask": [
        {"text": "Go on.", "vars": {"answer": "first"}},
        {"text": "Once more.", "vars": {"answer": "second"}},
    ]
}
MODEL_CALLS = 8  # per day: open + three votes


def _game(directory: Path, answers: dict[str, Any] = ANSWERS) -> ModuleType:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "answers.json").write_text(json.dumps(answers), encoding="utf-8")
    return load(build_script(directory, SCRIPT, {"side.py": SIDE}))


def _options(directory: Path, **extra: Any) -> dict[str, Any]:
    options = {
        "model": "fems/mock",
        "seed": 7,
        "db": f"sqlite:///{directory / 'dialog.db'}",
        "human": str(directory / "answers.json"),
    }
    return {**options, **extra}


def _messages(directory: Path, session: int) -> list[tuple[Any, ...]]:
    """Every stored message of the session in sequence order, with its scope tags."""
    with Store(f"sqlite:///{directory / 'dialog.db'}") as store:
        return [
            (m.kind, m.speaker_name, m.content, m.turn, m.action, m.node, store.scope_of(m.id))
            for m in store.messages(session)
        ]


def _by_turn(messages: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Messages grouped by turn, each turn's messages in stored order: concurrent turns (the
    ``par`` votes) are stored in whichever order they finish, even without a resume."""
    return sorted(messages, key=lambda m: m[3])


class _FailingModel:
    """Makes every model call after the first ``calls`` fail (the provider went down)."""

    def __init__(
        self,
        monkeypatch: pytest.MonkeyPatch,
        calls: int,
        fail_once: Callable[[], bool] | None = None,
    ) -> None:
        """``fail_once``: a failing call first waits (up to 10 s) until it holds, so a test can
        pin down what concurrent turns stored before the provider went down."""
        self.left = calls
        original = ModelClient.complete

        async def complete(client: ModelClient, *args: Any, **kwargs: Any) -> Any:
            if self.left <= 0:
                deadline = time.monotonic() + 10
                while fail_once is not None and not fail_once() and time.monotonic() < deadline:
                    await asyncio.sleep(0.01)
                raise RunError("the model provider is down")
            self.left -= 1
            return await original(client, *args, **kwargs)

        monkeypatch.setattr(ModelClient, "complete", complete)
        self.monkeypatch = monkeypatch

    def recover(self) -> None:
        self.monkeypatch.undo()


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """Run A: uninterrupted."""
    directory = tmp_path_factory.mktemp("uninterrupted")
    outcome = _game(directory).run(**_options(directory))
    assert outcome.status == "completed"
    return directory, outcome


def _assert_same_run(reference: tuple[Path, Any], directory: Path, resumed: Any) -> None:
    ref_dir, ref = reference
    assert resumed.status == "completed"
    assert resumed.variables == ref.variables
    assert resumed.steps == ref.steps
    expected, got = _messages(ref_dir, ref.session), _messages(directory, resumed.session)
    assert _by_turn(got) == _by_turn(expected)  # none missing, none twice, same content
    # everything outside the concurrent votes is in exactly the same order
    assert [m for m in got if m[4] != "vote"] == [m for m in expected if m[4] != "vote"]
    side = (directory / "side.log").read_text(encoding="utf-8")
    assert side == (ref_dir / "side.log").read_text(encoding="utf-8")  # the func ran once a day


@pytest.mark.parametrize("calls", range(MODEL_CALLS))
def test_a_run_interrupted_after_any_model_call_resumes_like_an_uninterrupted_one(
    reference: tuple[Path, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    calls: int,
) -> None:
    game = _game(tmp_path)
    failing = _FailingModel(monkeypatch, calls)
    with pytest.raises(RunError, match="the model provider is down"):
        game.run(**_options(tmp_path))
    failing.recover()
    trace = tmp_path / "resume.jsonl"
    resumed = game.run(**_options(tmp_path, resume=True, trace=trace))
    _assert_same_run(reference, tmp_path, resumed)
    events = read_trace(trace)
    replayed = [
        e for e in events if e["event"] == "replay" and e.get("actor") in ("@a", "@b", "@c")
    ]
    calls_made = llm_calls(events)
    assert len(calls_made) == resumed.model_calls
    assert len(replayed) + resumed.model_calls == MODEL_CALLS  # no recorded call made again


def test_a_par_vote_interrupted_midway_records_every_vote_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    game = _game(tmp_path)

    def stored_votes() -> list[Any]:
        with Store(f"sqlite:///{tmp_path / 'dialog.db'}") as store:
            return [m for m in store.messages(1) if m.kind == "reply" and m.action == "vote"]

    # the opening and one vote, then the provider fails (once that vote is stored: otherwise
    # the failure may cancel it first, and nothing would be interrupted "midway")
    failing = _FailingModel(monkeypatch, 2, fail_once=lambda: len(stored_votes()) >= 1)
    with pytest.raises(RunError):
        game.run(**_options(tmp_path))
    failing.recover()
    before = stored_votes()
    assert len(before) >= 1
    resumed = game.run(**_options(tmp_path, resume=True))
    assert resumed.status == "completed" and resumed.session == 1
    replies = [m for m in _messages(tmp_path, 1) if m[0] == "reply" and m[4] == "vote"]
    voters = Counter((m[1], m[2].splitlines()[-1], m[3]) for m in replies)
    assert sorted(speaker for speaker, _, _ in voters) == sorted(["@a", "@b", "@c"] * 2)
    assert set(voters.values()) == {1}
    assert len({m[3] for m in replies}) == 6  # six turns, six distinct turn ids
    assert sorted(resumed.variables["votes"]) == ["@a", "@b", "@c"]


def test_an_answers_file_that_runs_out_resumes_with_the_longer_file(
    reference: tuple[Path, Any], tmp_path: Path
) -> None:
    game = _game(tmp_path, answers={"ask": [ANSWERS["ask"][0]]})
    with pytest.raises(RunError, match="no answer left"):
        game.run(**_options(tmp_path))
    (tmp_path / "answers.json").write_text(json.dumps(ANSWERS), encoding="utf-8")
    resumed = game.run(**_options(tmp_path, resume=True))
    _assert_same_run(reference, tmp_path, resumed)
    assert resumed.variables["answer"] == "second"  # the replayed answer was taken from the file


def test_a_resumed_run_that_fails_again_can_be_resumed_again(
    reference: tuple[Path, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    game = _game(tmp_path)
    for calls in (1, 2):
        failing = _FailingModel(monkeypatch, calls)
        with pytest.raises(RunError):
            game.run(**_options(tmp_path, resume=calls > 1))
        failing.recover()
    resumed = game.run(**_options(tmp_path, resume=True))
    _assert_same_run(reference, tmp_path, resumed)
    with Store(f"sqlite:///{tmp_path / 'dialog.db'}") as store:
        assert store.session(1)["last_turn"] == max(m[3] for m in _messages(tmp_path, 1))


def test_a_completed_session_cannot_be_resumed(tmp_path: Path) -> None:
    game = _game(tmp_path)
    game.run(**_options(tmp_path))
    with pytest.raises(RunError, match="session 1 is completed; there is nothing to resume"):
        game.run(**_options(tmp_path, resume=True, session=1))


def test_a_session_of_a_changed_script_cannot_be_resumed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    game = _game(tmp_path)
    failing = _FailingModel(monkeypatch, 3)
    with pytest.raises(RunError):
        game.run(**_options(tmp_path))
    failing.recover()
    changed = SCRIPT.replace("Say how you feel today.", "Say how you feel, briefly.")
    edited = load(build_script(tmp_path, changed, {"side.py": SIDE}))
    with pytest.raises(RunError, match="session 1 was run from a different script") as error:
        edited.run(**_options(tmp_path, resume=True))
    assert str(error.value).endswith("or run with --reuse 1 to replay what is unchanged")
    with Store(f"sqlite:///{tmp_path / 'dialog.db'}") as store:
        assert store.session(1)["status"] == "failed"  # refused: nothing was touched


def test_resume_needs_a_session_of_this_script(tmp_path: Path) -> None:
    game = _game(tmp_path)
    with pytest.raises(RunError, match="no session of t.fems in this database to resume"):
        game.run(**_options(tmp_path, resume=True))
    with pytest.raises(RunError, match="session 5 does not exist"):
        game.run(**_options(tmp_path, resume=True, session=5))


def test_without_session_resume_takes_the_newest_session_of_the_script(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    game = _game(tmp_path)
    game.run(**_options(tmp_path))  # session 1 completes
    (tmp_path / "side.log").unlink()
    failing = _FailingModel(monkeypatch, 4)
    with pytest.raises(RunError):
        game.run(**_options(tmp_path))  # session 2 fails
    failing.recover()
    assert game.run(**_options(tmp_path, resume=True)).session == 2


def test_a_continued_session_resumes_only_its_last_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``session: 1`` runs again in the same session: the first run's records are not replayed
    into the second, and its messages stay as they were."""
    game = _game(tmp_path)
    first = game.run(**_options(tmp_path))
    stored = _messages(tmp_path, first.session)
    failing = _FailingModel(monkeypatch, 5)
    with pytest.raises(RunError):
        game.run(**_options(tmp_path, session=1))
    failing.recover()
    resumed = game.run(**_options(tmp_path, session=1, resume=True))
    messages = _messages(tmp_path, 1)
    assert messages[: len(stored)] == stored
    second = messages[len(stored) :]
    assert Counter(m[4] for m in second if m[0] == "reply") == {"open": 2, "vote": 6}
    assert len({m[3] for m in second}) == 2 * 5  # ten new turns: 2 x (open, 3 votes, ask)
    assert min(m[3] for m in second) > max(m[3] for m in stored)
    assert resumed.variables["log_count"] == 4  # side.log: two lines per run


# ---------------------------------------------------------------------- spawn and werewolf

SPAWN = """
vars:
    team = []
    spawn_requests = [{blueprint: coder, count: 2}]
    said = ""

blueprint coder:
    source: fast

action hire @func(system.spawn):
    out: team

action talk @ai(@coder):
    prompt: Introduce yourself.
    scope: [@coder]
    out: said(string)

mainflow:
    [START] -> hire -> [P]
    [P] -> par @coder in team:
        -> talk ->
    -> [END]
"""


def test_a_replayed_spawn_makes_the_same_actors_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    game = load(build_script(tmp_path, SPAWN))
    options = {"model": "fems/mock", "seed": 3, "db": f"sqlite:///{tmp_path / 'spawn.db'}"}
    failing = _FailingModel(monkeypatch, 1)
    with pytest.raises(RunError):
        game.run(**options)
    failing.recover()
    resumed = game.run(**options, resume=True)
    assert resumed.variables["team"] == ["@coder_1", "@coder_2"]
    with Store(options["db"]) as store:
        assert [a["name"] for a in store.session_actors(1)] == ["@coder_1", "@coder_2"]
        speakers = sorted(m.speaker_name for m in store.messages(1) if m.kind == "reply")
    assert speakers == ["@coder_1", "@coder_2"]


WEREWOLF = Path(__file__).resolve().parents[2] / "examples" / "werewolf"


@pytest.fixture(scope="module")
def werewolf(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ModuleType]:
    root = tmp_path_factory.mktemp("werewolf")
    for name in ("werewolf.fems", "souls.yaml"):
        shutil.copy(WEREWOLF / name, root / name)
    for code in WEREWOLF.glob("*.py"):
        shutil.copy(code, root / code.name)
    return root, load(build_file(WEREWOLF / "werewolf.fems", root / "werewolf_gen.py").output)


@pytest.mark.parametrize("calls", [4, 19])  # during the night; in the middle of the first vote
def test_werewolf_resumes_like_an_uninterrupted_game(
    werewolf: tuple[Path, ModuleType],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    calls: int,
) -> None:
    root, game = werewolf
    options = {"model": "fems/mock", "seed": 3, "souls": root / "souls.yaml"}
    whole = game.run(**options, db=f"sqlite:///{tmp_path / 'whole.db'}")
    failing = _FailingModel(monkeypatch, calls)
    with pytest.raises(RunError, match="the model provider is down"):
        game.run(**options, db=f"sqlite:///{tmp_path / 'cut.db'}")
    failing.recover()
    resumed = game.run(**options, db=f"sqlite:///{tmp_path / 'cut.db'}", resume=True)
    # `@ballot` after the vote holds whichever voter's branch finished last, resumed or not
    drop = {"@ballot"}
    assert {k: v for k, v in resumed.variables.items() if k not in drop} == {
        k: v for k, v in whole.variables.items() if k not in drop
    }
    with (
        Store(f"sqlite:///{tmp_path / 'whole.db'}") as a,
        Store(f"sqlite:///{tmp_path / 'cut.db'}") as b,
    ):
        expected = [(m.kind, m.speaker_name, m.content, m.turn) for m in a.messages(1)]
        got = [(m.kind, m.speaker_name, m.content, m.turn) for m in b.messages(1)]
    assert _by_turn(got) == _by_turn(expected)


def test_checkpoint_rows_are_written_with_their_messages(tmp_path: Path) -> None:
    game = _game(tmp_path)
    game.run(**_options(tmp_path))
    with Store(f"sqlite:///{tmp_path / 'dialog.db'}") as store:
        start, records = store.run_records(1)
        turns = {m.turn for m in store.messages(1)}
    assert start == {"kind": "run", "turn": 0, "seq": 0}
    kinds = Counter(r["kind"] for r in records)
    assert kinds == {"ai": 8, "func": 2, "human": 2}
    assert {r["turn"] for r in records if r["kind"] != "func"} == turns


RETRY = """
vars:
    pick = 0

actors:
    ai @a
    ai @b

action hello @ai(@b):
    prompt: Greet @a.
    scope: all

action choose @ai(@a):
    prompt: Pick a number.
    scope: all
    out: pick(int)
    max_retries: 2

mainflow:
    [START] -> hello -> choose -> [END]
"""


def test_a_turn_interrupted_between_retries_resumes_at_the_next_attempt(tmp_path: Path) -> None:
    """Attempt 0 (a bad reply) is replayed; attempt 1 goes live with the retry messages an
    uninterrupted run would have sent, and its feedback is stored once, with its reply."""
    game = load(build_script(tmp_path, RETRY))
    bad, good = "I pick nothing.", "SET VARIABLE: <<pick = 3>>"
    db = f"sqlite:///{tmp_path / 'retry.db'}"
    with pytest.raises(RunError, match="no reply left for action choose"):
        game.run(replies={"hello": ["Hi @a."], "choose": [bad]}, db=db)
    trace = tmp_path / "trace.jsonl"
    resumed = game.run(
        replies={"hello": ["Hi @a."], "choose": [bad, good]}, db=db, resume=True, trace=trace
    )
    assert resumed.variables["pick"] == 3 and resumed.model_calls == 1
    with Store(db) as store:
        stored = [(m.kind, m.action, m.turn) for m in store.messages(1)]
    assert stored == [
        ("prompt", "hello", 1),
        ("reply", "hello", 1),
        ("prompt", "choose", 2),
        ("feedback", "choose", 2),  # the rejected reply, stored with its feedback (§13.3)
        ("feedback", "choose", 2),
        ("reply", "choose", 2),
    ]
    events = read_trace(trace)
    (call,) = llm_calls(events)
    sent = [m["content"] for m in call["messages"]]
    assert call["attempt"] == 1 and sent[-2] == bad and "could not be accepted" in sent[-1]
    context = sent[0]
    assert "Hi @a." in context and bad not in context  # the context as it was before the turn


RETRY_THEN_LATER = RETRY.replace(
    "[START] -> hello -> choose -> [END]", "[START] -> hello -> choose -> hello -> [END]"
)


def test_a_resumed_retried_turn_leaves_its_rejected_attempt_out_of_later_contexts(
    tmp_path: Path,
) -> None:
    """§13.3 across a resume (§16.4): the rejected attempt replayed, its feedback is not
    stored twice, and the turns after it see only the accepted reply."""
    game = load(build_script(tmp_path, RETRY_THEN_LATER))
    bad, good = "I pick nothing.", "SET VARIABLE: <<pick = 3>>"
    db = f"sqlite:///{tmp_path / 'retry.db'}"
    with pytest.raises(RunError, match="no reply left for action choose"):
        game.run(replies={"hello": ["Hi @a."] * 2, "choose": [bad]}, db=db)
    trace = tmp_path / "trace.jsonl"
    resumed = game.run(
        replies={"hello": ["Hi @a."] * 2, "choose": [bad, good]}, db=db, resume=True, trace=trace
    )
    assert resumed.variables["pick"] == 3
    with Store(db) as store:
        kinds = [m.kind for m in store.messages(1) if m.action == "choose"]
    assert kinds == ["prompt", "feedback", "feedback", "reply"]
    later = llm_calls(read_trace(trace), "hello")[-1]
    sent = later["messages"][0]["content"]
    assert good in sent and bad not in sent and "could not be accepted" not in sent
