"""The stage without a browser (§17): its routes, token and read-only archive, answers checked
like the terminal checks them, the flow chart's nodes, and what ``--serve`` says without the
web extra. The page itself is tested in Chromium (test_stage_browser.py)."""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
from fems_helpers import build_script, load
from fems_runtime.events import RunEvents
from fems_runtime.records import StreamedReply
from fems_runtime.stage import chart as chart_module
from fems_runtime.stage import missing_web_extra
from fems_runtime.stage.archive import Archive
from fems_runtime.stage.chart import ChartNode, FlowChart, chart_for_source
from fems_runtime.stage.live import AnswerRefused, LiveStage
from fems_runtime.stage.server import create_app
from fems_runtime.store import NewMessage, Store
from starlette.testclient import TestClient

from fems2py.graph import stage_chart

SCRIPT = """
    vars:
        rounds = 0
        pick = ""
        players = [@Ann, @Max]

    actors:
        ai @Ann
        ai @Bob
        human @Max = soul:max, source:0

    action secret @ai(@Ann):
        prompt: Whisper to Bob.
        scope: [@Ann, @Bob]

    action ask @human(@Max):
        prompt: Pick a player and say how many rounds.
        scope: [@Ann, @Max]
        out: pick(dropdown, choices={players}), rounds(int)

    mainflow:
        [START] -> secret -> ask -> [END]
"""


async def _play(module: Any, db: str, answers: list[dict[str, Any]]) -> tuple[Any, list[str]]:
    """Run ``module`` with a live stage answering its human turn with ``answers`` in order;
    the run's result and the refusals of the answers that did not fit."""
    stage = LiveStage(FlowChart(missing="not drawn in this test"))
    refusals: list[str] = []

    async def answer() -> None:
        for given in answers:
            while not stage.state()["waiting"]:
                await asyncio.sleep(0.01)
            turn = stage.state()["waiting"][0]["id"]
            # the run waits at the human turn's node, seen through the trace (no trace file)
            assert [running["node"] for running in stage.state()["running"]] == ["ask"]
            try:
                stage.answer(turn, given["text"], given["outs"])
            except AnswerRefused as refusal:
                refusals.append(str(refusal))

    answering = asyncio.create_task(answer())
    result = await module.run_async(model="fems/mock", db=db, human=stage, observer=stage)
    await answering
    assert stage.state()["status"] == "completed"
    return result, refusals


def test_answers_from_the_page_are_checked_like_the_terminal_checks_them(tmp_path: Path) -> None:
    module = load(build_script(tmp_path, SCRIPT))
    answers = [
        {"text": "hm", "outs": {"rounds": "3"}},  # the menu is not answered
        {"text": "hm", "outs": {"pick": "7", "rounds": "3"}},  # no such choice
        {"text": "hm", "outs": {"pick": "1", "rounds": "many"}},  # not an int
        {"text": "Max it is, three rounds.", "outs": {"pick": "1", "rounds": "3"}},
    ]
    result, refusals = asyncio.run(_play(module, str(tmp_path / "game.db"), answers))
    assert [r.split(":")[0] for r in refusals] == ["pick", "pick", "rounds"]
    assert "an answer is needed" in refusals[0]
    assert result.variables["pick"] == "@Max"
    assert result.variables["rounds"] == 3


@pytest.fixture
def finished(tmp_path: Path) -> Path:
    """A database holding one finished session of SCRIPT."""
    module = load(build_script(tmp_path, SCRIPT))
    db = tmp_path / "game.db"
    answer = {"text": "From the page.", "outs": {"pick": "0", "rounds": "2"}}
    asyncio.run(_play(module, str(db), [answer]))
    return db


def _client(db: Path, token: str = "secret") -> TestClient:
    store = Store(str(db))
    archive = Archive(
        store, lambda row: chart_for_source([db.parent / row["script"]], row["script_hash"])
    )
    return TestClient(create_app(archive, token))


def test_every_route_but_the_static_files_needs_the_token(finished: Path) -> None:
    client = _client(finished)
    assert client.get("/").status_code == 403
    assert client.get("/api/sessions", params={"token": "guess"}).status_code == 403
    assert client.get("/static/stage.js").status_code == 200
    assert client.get("/", params={"token": "secret"}).status_code == 200
    headers = {"X-Stage-Token": "secret"}
    assert client.get("/api/sessions", headers=headers).json()["sessions"][0]["status"] == (
        "completed"
    )


def test_an_actor_view_is_what_its_scope_lets_it_see(finished: Path) -> None:
    client = _client(finished)
    headers = {"X-Stage-Token": "secret"}
    info = client.get("/api/sessions/1", headers=headers).json()
    assert [seat["name"] for seat in info["seats"]] == ["@Ann", "@Bob", "@Max"]
    assert info["chart"]["missing"] is None and "flowchart TD" in info["chart"]["mermaid"]

    def actions(seat: str) -> list[tuple[str, str]]:
        url = "/api/sessions/1/messages"
        found = client.get(url, headers=headers, params={"seat": seat}).json()["messages"]
        return [(m["kind"], m["action"]) for m in found]

    director = actions("")
    assert ("prompt", "secret") in director and ("human", "ask") in director
    assert actions("@Bob") == [("reply", "secret")]
    assert ("reply", "secret") not in actions("@Max")
    assert ("human", "ask") in actions("@Max")
    assert (
        client.get(
            "/api/sessions/1/messages", headers=headers, params={"seat": "@Nobody"}
        ).status_code
        == 404
    )
    assert client.get("/api/sessions/9", headers=headers).status_code == 404


def test_a_stored_session_takes_no_answers(finished: Path) -> None:
    client = _client(finished)
    answer = client.post(
        "/api/answer", headers={"X-Stage-Token": "secret"}, json={"id": 1, "text": "late"}
    )
    assert answer.status_code == 409
    assert "takes no answers" in answer.json()["error"]


def test_the_chart_names_each_node_it_draws_and_finds_the_node_of_a_step(tmp_path: Path) -> None:
    script = tmp_path / "t.fems"
    script.write_text(
        "actors:\n    ai @A\n\naction vote @ai(@A):\n    prompt: Vote.\n    scope: [@A]\n\n"
        "mainflow:\n    [START] -> vote -> vote -> [Tally]\n    [Tally] -> [END]\n",
        encoding="utf-8",
    )
    chart, nodes = stage_chart(script)
    assert all(node.id in chart for node in nodes)
    drawn = FlowChart(chart, tuple(ChartNode(*node) for node in nodes))
    votes = [node for node in nodes if node.action == "vote"]
    assert len(votes) == 2
    # a named node by its name; an anonymous one by the generated id's action and line
    assert drawn.node_id("Tally", 10) == next(n.id for n in nodes if n.name == "Tally")
    assert drawn.node_id(votes[1].name, 9) == votes[1].id
    assert drawn.node_id("vote_2", 9) in {vote.id for vote in votes}
    assert drawn.node_id("nothing", 9) is None
    looped = FlowChart(
        "", (ChartNode("a", "for@3:5", None, 3), ChartNode("b", "&Day@7:5", None, 7))
    )
    assert (looped.node_id("for_wolf", 3), looped.node_id("&Day", 7)) == ("a", "b")
    edited = chart_for_source([script], "0" * 64)
    assert edited.mermaid is None and "changed" in str(edited.missing)


def test_the_runtime_draws_the_chart_through_the_registered_drawer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "t.fems"
    script.write_text(textwrap.dedent(SCRIPT), encoding="utf-8")
    sha = hashlib.sha256(script.read_bytes()).hexdigest()
    drawn = chart_for_source([tmp_path / "elsewhere.fems", script], sha)
    assert drawn.missing is None and drawn.mermaid == stage_chart(script)[0]
    assert [node.id for node in drawn.nodes] == [node.id for node in stage_chart(script)[1]]
    broken = tmp_path / "broken.fems"
    broken.write_text("mainflow:\n    [START] -> nowhere -> [END]\n", encoding="utf-8")
    assert "has errors" in str(chart_for_source([broken]).missing)
    monkeypatch.setattr(chart_module, "entry_points", lambda group: ())
    assert "not installed" in str(chart_for_source([script], sha).missing)


def test_serve_without_the_web_extra_says_which_extra_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    module = load(build_script(tmp_path, SCRIPT))
    found = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *rest: None if name == "starlette" else found(name, *rest),
    )
    assert missing_web_extra() == "the stage needs starlette: pip install 'fems-runtime[web]'"
    assert module.PROGRAM.main(["--serve", "--model", "fems/mock", "--db", ":memory:"]) == 1
    assert "pip install 'fems-runtime[web]'" in capsys.readouterr().err
    assert module.PROGRAM.main(["--port", "8000"]) == 2


def test_a_reply_being_written_is_shown_only_to_the_seats_of_its_room(finished: Path) -> None:
    """A streamed reply (§17.1) shows as it arrives to the director and the seats of its turn's
    room, never to another seat; its reasoning to the director only (§13.1); a broken-off
    stream disappears; the stored reply of its turn replaces it."""

    async def watch() -> None:
        stage = LiveStage(FlowChart(missing="not drawn in this test"))
        store = Store(str(finished))
        stage.run_opened(store, 1, RunEvents())
        souls = {seat["name"]: seat["soul"] for seat in stage.view.seats()}  # type: ignore[union-attr]
        reply = StreamedReply(
            turn=9,
            action="secret",
            node="secret",
            speaker="@Ann",
            speaker_soul=souls["@Ann"],
            souls=frozenset({souls["@Ann"], souls["@Bob"]}),
            users=frozenset(),
        )
        writing = stage.reply_started(reply)
        writing.feed("reasoning", "Max must not ")
        assert stage.state("@Bob")["writing"] == [], "reasoning alone is not shown to actors"
        writing.feed("reasoning", "know.")
        writing.feed("text", "Bob, meet me ")
        director = stage.state()["writing"]
        assert [(w["speaker"], w["text"], w["reasoning"], w["done"]) for w in director] == [
            ("@Ann", "Bob, meet me ", "Max must not know.", False)
        ]
        shown = stage.state("@Bob")["writing"]
        assert [w["text"] for w in shown] == ["Bob, meet me "] and "reasoning" not in shown[0]
        assert stage.state("@Max")["writing"] == []
        assert stage.state("@Ann")["writing"][0]["turn"] == 9

        writing.feed("discard", "")
        assert stage.state()["writing"] == [], "a broken-off stream disappears"
        writing.feed("text", "Bob, at the well.")
        writing.finish("Bob, at the well.")
        assert stage.state("@Bob")["writing"][0]["done"] is True

        other = NewMessage("reply", "unrelated", souls=[souls["@Bob"]], turn=8)
        store.add_messages(1, [other])
        await asyncio.sleep(0.05)
        assert len(stage.state()["writing"]) == 1, "another turn's message does not replace it"
        stored = NewMessage(
            "reply", "Bob, at the well.", souls=reply.souls, turn=9, speaker_soul=souls["@Ann"]
        )
        store.add_messages(1, [stored])
        await asyncio.sleep(0.05)
        assert stage.state()["writing"] == [] and stage.state("@Bob")["writing"] == []
        store.close()

    asyncio.run(watch())


def test_sessions_are_listed_as_a_tree_of_forks_with_their_branch_turns(
    finished: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`fems2py serve` lists the forks of a session under it (§16.4a, §17.1); a forked
    session names its parent and branch turn; each session says how to fork it."""
    monkeypatch.chdir(finished.parent)
    with Store(str(finished)) as store:
        fork = store.open_session(title="the fork", script="t.fems", parent=1, branch_turn=1)
        store.open_session(title="its fork", script="t.fems", parent=fork, branch_turn=0)
        store.open_session(title="apart", script="t.fems")
    client = _client(finished)
    headers = {"X-Stage-Token": "secret"}
    tree = client.get("/api/sessions", headers=headers).json()["sessions"]

    def shape(nodes: list[dict[str, Any]]) -> list[Any]:
        return [(n["session"], n["parent"], n["branch_turn"], shape(n["children"])) for n in nodes]

    assert shape(tree) == [(4, None, None, []), (1, None, None, [(2, 1, 1, [(3, 2, 0, [])])])]
    info = client.get("/api/sessions/2", headers=headers).json()
    assert (info["parent"], info["branch_turn"], info["parent_here"]) == (1, 1, True)
    assert info["fork"] == {
        "commands": ["python t.py --db game.db", "fems2py run t.fems --db game.db"],
        "missing": None,
    }
    assert client.get("/api/sessions/1", headers=headers).json()["parent_here"] is False


def test_a_run_in_memory_has_no_fork_commands(tmp_path: Path) -> None:
    module = load(build_script(tmp_path, SCRIPT))

    async def watch() -> dict[str, Any]:
        stage = LiveStage(FlowChart(missing="not drawn in this test"), "game.py")
        answers = {"text": "ok", "outs": {"pick": "0", "rounds": "1"}}

        async def answer() -> None:
            while not stage.state()["waiting"]:
                await asyncio.sleep(0.01)
            stage.answer(stage.state()["waiting"][0]["id"], answers["text"], answers["outs"])

        answering = asyncio.create_task(answer())
        run = module.run_async(model="fems/mock", db=":memory:", human=stage, observer=stage)
        await run
        await answering
        return stage.sessions()[0]

    summary = asyncio.run(watch())
    assert summary["fork"]["commands"] == [] and "in memory" in summary["fork"]["missing"]
    assert summary["children"] == [] and summary["parent"] is None


def _unread(command: list[str], cwd: Path, stream: str) -> tuple[int, str]:
    """Run a stage with ``stream`` a pipe whose reader leaves (``… | head``): at once for
    stdout, after the stage's URL for stderr (``2>&1 | head``); its status and stderr."""
    process = subprocess.Popen(
        command,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE if stream == "stdout" else subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    deadline = threading.Timer(30, process.kill)  # one that serves on fails, not hangs
    deadline.start()
    try:
        if process.stdout is not None:
            process.stdout.close()
        said = ""
        while "the stage is at" not in said and (line := process.stderr.readline()):
            said += line
        if stream == "stderr":
            process.stderr.close()
        else:
            said += process.stderr.read()
        return process.wait(), said
    finally:
        deadline.cancel()
        process.stderr.close()


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_a_stage_whose_output_is_no_longer_read_stops_as_ctrl_c_stops_it(
    finished: Path, stream: str
) -> None:
    """`fems2py serve … | head` served on after head left, until Ctrl+C: it writes too
    seldom to die of a broken pipe. Now it stops within a second, as Ctrl+C stops it (a run on
    the stage is interrupted, resumable), and says no traceback."""
    fems2py = [sys.executable, "-m", "fems2py", "serve", "--db", str(finished)]
    status, said = _unread(fems2py, finished.parent, stream)
    assert status == 0 and "Traceback" not in said and "Error" not in said
    game = [sys.executable, "t_gen.py", "--serve", "--model", "fems/mock", "--db", "new.db"]
    status, said = _unread(game, finished.parent, stream)  # its human waits in the page
    assert status == 1 and "Traceback" not in said and "Error" not in said
    if stream == "stdout":
        assert said.splitlines()[-1] == (
            "t.fems: error: interrupted; the same command with --resume goes on where it stopped"
        )


def test_a_transcript_no_longer_read_ends_the_run_on_the_stage_quietly(tmp_path: Path) -> None:
    """`python game.py --serve --transcript | head -3`: the next line of the transcript
    ends the run and the stage, with no message (as without the stage)."""
    build_script(tmp_path, SCRIPT)
    game = [sys.executable, "t_gen.py", "--serve", "--transcript", "--model", "fems/mock"]
    status, said = _unread([*game, "--db", ":memory:"], tmp_path, "stdout")
    assert status == 1 and said.startswith("t.fems: the stage is at ")
    assert len(said.splitlines()) == 1
