"""``fems2py debug`` driven as an editor drives it: the adapter is a subprocess spoken to over
the Debug Adapter Protocol's wire format (stdin/stdout, or TCP on 127.0.0.1 with ``--listen``)
by the small client of ``dap_client.py``; the werewolf example runs offline (§15.3)."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from dap_client import TIMEOUT, DapClient  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
WEREWOLF = ROOT / "examples" / "werewolf" / "werewolf.fems"
GAME = WEREWOLF.parent / "game.py"  # its code: file
FEMS2PY = str(Path(sys.executable).parent / "fems2py")
OFFLINE = (
    "--model", "fems/mock", "--seed", "1",
    "--souls", str(ROOT / "examples" / "werewolf" / "souls.yaml"),
)  # fmt: skip


def line_of(text: str) -> int:
    """The werewolf.fems line holding ``text``, so the tests say what they stop on."""
    lines = WEREWOLF.read_text(encoding="utf-8").splitlines()
    return next(number for number, line in enumerate(lines, 1) if text in line)


TALLY = line_of("[Tally]: wolf_tally")
WOLF_LOOP = line_of("-> wolf_discuss ->")
VOTE_HEADER = line_of("action vote @mind(@voter):")
VOTE_PROMPT = VOTE_HEADER + 1  # its prompt: line
BALLOT_LINE = line_of("-> blank_ballot -> vote -> record_vote ->")


@contextmanager
def adapter(
    tmp_path: Path,
    *extra: str,
    db: str = ":memory:",
    env: dict[str, str] | None = None,
    stop_on_entry: bool = False,
    starts_sessions: bool = False,
) -> Iterator[DapClient]:
    """``fems2py debug werewolf.fems …`` over stdio, initialized and launched."""
    configuration = {
        "type": "fems",
        "request": "launch",
        "name": "Debug werewolf.fems",
        "program": str(WEREWOLF),
        "args": [*OFFLINE, "--db", db, *extra],
        "stopOnEntry": stop_on_entry,
    }
    with launched(tmp_path, configuration, env, starts_sessions) as client:
        yield client


@contextmanager
def launched(
    tmp_path: Path,
    configuration: dict[str, Any],
    env: dict[str, str] | None = None,
    starts_sessions: bool = False,
) -> Iterator[DapClient]:
    """A launch configuration run as the VS Code extension runs it: ``fems2py debug PROGRAM
    ARGS…`` over stdio, then initialize and launch with the configuration."""
    args = [FEMS2PY, "debug", configuration["program"], *configuration["args"]]
    err_file = tmp_path / f"adapter-{configuration['name']}.err"
    with open(err_file, "wb") as err:
        process = subprocess.Popen(
            args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            env={**os.environ, **(env or {})},
        )
    client = DapClient.over_stdio(process)
    try:
        client.request(
            "initialize",
            adapterID="fems",
            linesStartAt1=True,
            supportsStartDebuggingRequest=starts_sessions,
        )
        client.request("launch", **configuration)
        yield client
    finally:
        if process.poll() is None:
            with suppress(BrokenPipeError):  # it was exiting already
                client.send("disconnect")
        assert process.wait(TIMEOUT) in (0, 1)
        close(process)
        assert b"Traceback" not in err_file.read_bytes()


def close(process: subprocess.Popen[bytes]) -> None:
    for stream in (process.stdin, process.stdout, process.stderr):
        if stream is not None:
            with suppress(BrokenPipeError):  # what was left to send: the process is gone
                stream.close()


def start(client: DapClient, *points: dict[str, Any]) -> dict[str, Any]:
    """Set breakpoints on werewolf.fems, end the configuration, and wait for the first stop."""
    set_points(client, *points)
    client.request("configurationDone")
    return client.wait_event("stopped")


def set_points(client: DapClient, *points: dict[str, Any]) -> list[dict[str, Any]]:
    body = client.request(
        "setBreakpoints", source={"path": str(WEREWOLF)}, breakpoints=list(points)
    )
    return list(body["breakpoints"])


def top(client: DapClient, thread: int) -> dict[str, Any]:
    return client.request("stackTrace", threadId=thread)["stackFrames"][0]


def scope(client: DapClient, frame: int, name: str) -> dict[str, dict[str, Any]]:
    """The variables of scope ``name`` of a frame, by name."""
    scopes = client.request("scopes", frameId=frame)["scopes"]
    ref = next(s["variablesReference"] for s in scopes if s["name"] == name)
    return {v["name"]: v for v in client.request("variables", variablesReference=ref)["variables"]}


def evaluate(client: DapClient, frame: int, expression: str) -> str:
    return str(client.request("evaluate", expression=expression, frameId=frame)["result"])


def run_to_end(client: DapClient) -> dict[str, Any]:
    set_points(client)
    client.request("continue", threadId=1)
    return client.wait_event("exited")


def plain_run(tmp_path: Path, *extra: str) -> dict[str, Any]:
    """The same game without the debugger: its ``--result``."""
    result = tmp_path / "plain.json"
    args = [FEMS2PY, "run", str(WEREWOLF), *OFFLINE, "--db", ":memory:", "--result", str(result)]
    subprocess.run([*args, *extra], check=True, capture_output=True, timeout=TIMEOUT)
    return json.loads(result.read_text())


def test_breakpoints_move_to_the_next_line_that_runs_something(tmp_path: Path) -> None:
    with adapter(tmp_path) as client:
        comment = line_of("# Night: the wolves' den loops")
        answers = set_points(client, {"line": comment}, {"line": VOTE_PROMPT}, {"line": 9999})
        assert [a["verified"] for a in answers] == [True, True, False]
        assert answers[0]["line"] == line_of("[Night]: next_night")
        assert answers[1]["line"] == VOTE_PROMPT  # a field line of action vote
        assert answers[1]["source"]["path"] == str(WEREWOLF)


def test_an_action_breakpoint_stops_before_its_turn_with_the_context_the_model_gets(
    tmp_path: Path,
) -> None:
    """Conditional breakpoints on the vote's prompt: a wolf's context holds the den's talk, a
    villager's does not; the stack is the flow path; each voter of the ``par`` is a thread."""
    contexts = {}
    for role in ("wolf", "villager"):
        with adapter(tmp_path) as client:
            condition = f'role.@voter == "{role}" and day >= 1'
            stopped = start(client, {"line": VOTE_PROMPT, "condition": condition})
            thread = stopped["threadId"]
            stack = client.request("stackTrace", threadId=thread)["stackFrames"]
            assert [(f["source"]["path"], f["line"]) for f in stack] == [
                (str(WEREWOLF), VOTE_HEADER),
                (str(WEREWOLF), BALLOT_LINE),
                (str(WEREWOLF), line_of("[Ballot] -> par @voter in alive")),
            ]
            assert evaluate(client, stack[0]["id"], "role.@voter") == f"'{role}'"
            names = [t["name"] for t in client.request("threads")["threads"]]
            assert len(names) == 1 + 6 and any("@voter = @Alice" in n for n in names)
            turn = scope(client, stack[0]["id"], "Turn")
            assert turn["action"]["value"] == "'vote'"
            assert "Secret ballot" in turn["prompt"]["value"]
            assert "@ballot" in turn["outs"]["value"]
            ref = turn["context"]["variablesReference"]
            messages = client.request("variables", variablesReference=ref)["variables"]
            contexts[role] = " ".join(m["value"] for m in messages)
            assert messages[0]["name"] == "[0] system"
    assert "wolf_pick" in contexts["wolf"]  # the wolves' den: only the pack heard it
    assert "wolf_pick" not in contexts["villager"]


def test_stop_on_entry_then_pause_at_the_next_node(tmp_path: Path) -> None:
    with adapter(tmp_path, stop_on_entry=True) as client:
        stopped = start(client)
        assert stopped["reason"] == "entry"
        assert top(client, 1)["name"] == "mainflow: START"
        client.request("pause", threadId=1)
        client.request("continue", threadId=1)
        assert client.wait_event("stopped")["reason"] == "pause"
        assert top(client, 1)["name"] == "mainflow: shuffle"
        run_to_end(client)


def test_a_mind_turn_played_by_a_person_stops_at_its_node(tmp_path: Path) -> None:
    """WEREWOLF_HUMAN=1 seats @you: its vote sends no model call, so it stops at the node."""
    with adapter(tmp_path, "--human", "fems/mock", env={"WEREWOLF_HUMAN": "1"}) as client:
        stopped = start(client, {"line": VOTE_PROMPT, "condition": "@voter == @you"})
        frame = top(client, stopped["threadId"])
        assert (frame["name"], frame["line"]) == ("mainflow par_voter_in_alive: vote", BALLOT_LINE)
        scopes = [s["name"] for s in client.request("scopes", frameId=frame["id"])["scopes"]]
        assert "Turn" not in scopes
        run_to_end(client)


def test_stepping_and_continuing_to_the_end_give_the_plain_run_result(tmp_path: Path) -> None:
    result = tmp_path / "debugged.json"
    start_line = line_of("[START] -> shuffle")
    with adapter(tmp_path, "--result", str(result)) as client:
        stopped = start(client, {"line": start_line})
        assert top(client, stopped["threadId"])["name"] == "mainflow: START"
        client.request("next", threadId=1)
        assert client.wait_event("stopped")["reason"] in ("step", "breakpoint")
        assert top(client, 1)["name"] == "mainflow: shuffle"
        set_points(client)
        client.request("stepIn", threadId=1)
        assert client.wait_event("stopped")["reason"] == "step"
        frame = top(client, 1)
        assert (frame["name"], frame["line"]) == (
            "shuffle (turn 1, @Moderator)",
            line_of("action shuffle @ai(@Moderator):"),
        )
        client.request("stepOut", threadId=1)
        client.wait_event("stopped")
        assert (top(client, 1)["name"], top(client, 1)["line"]) == ("mainflow: deal", start_line)
        client.request("next", threadId=1)
        client.wait_event("stopped")
        assert top(client, 1)["name"] == "mainflow: Night"
        last = scope(client, top(client, 1)["id"], "Last turn")
        assert last["action"]["value"] == "'shuffle'" and "deal_seed" in last["signals"]["value"]
        assert run_to_end(client)["exitCode"] == 0
    assert json.loads(result.read_text()) == plain_run(tmp_path)


def test_evaluate_and_set_variable_is_an_assignment(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    result = tmp_path / "result.json"
    with adapter(tmp_path, "--trace", str(trace), "--result", str(result)) as client:
        stopped = start(client, {"line": TALLY})
        frame = top(client, stopped["threadId"])["id"]
        assert evaluate(client, frame, "wolves_alive") == "[@Cleo, @Fay]"
        assert evaluate(client, frame, "wolf_pick.@Cleo == @Cleo or len(alive) == 6") == "true"
        assert "cannot read" in client.failure("evaluate", expression="day ?", frameId=frame)
        scopes = client.request("scopes", frameId=frame)["scopes"]
        ref = next(s["variablesReference"] for s in scopes if s["name"] == "Globals")
        body = client.request("setVariable", variablesReference=ref, name="max_days", value="1")
        assert body["value"] == "1"
        assert evaluate(client, frame, "max_days") == "1"
        run_to_end(client)
    assigned = [json.loads(line) for line in trace.read_text().splitlines()]
    assert any(e.get("event") == "assign" and e.get("target") == "max_days" for e in assigned)
    assert json.loads(result.read_text())["vars"]["day"] == 1


def test_a_condition_that_is_no_fem_expression_is_unverified_when_set(tmp_path: Path) -> None:
    """'@voter ==' was accepted, then stopped at every vote, as if it held."""
    with adapter(tmp_path) as client:
        bad, good = {"line": VOTE_PROMPT, "condition": "@voter =="}, {"line": TALLY}
        answers = set_points(client, bad, good)
        assert answers[0]["message"] == "condition: not a FEM expression: '@voter =='"
        assert [a["verified"] for a in answers] == [False, True]


def test_hit_counts_and_logpoints(tmp_path: Path) -> None:
    with adapter(tmp_path) as client:
        log = {"line": WOLF_LOOP, "logMessage": "{@wolf} talks on night {night}"}
        stopped = start(client, log, {"line": TALLY, "hitCondition": "2"})
        frame = top(client, stopped["threadId"])["id"]
        assert evaluate(client, frame, "wolf_rounds") == "1"  # the second tally, about to run
        talks = [line for line in client.output().splitlines() if "talks on night" in line]
        assert talks == [f"{wolf} talks on night 1" for wolf in ("@Cleo", "@Fay") * 2]
        run_to_end(client)


def test_code_file_lines_stop_as_in_a_python_debugger(tmp_path: Path) -> None:
    """A breakpoint in game.py (a ``code:`` file), and a step into a ``@func`` from its node."""
    game = GAME
    first = consensus_line("prey = _prey(alive, role)")
    with adapter(tmp_path) as client:
        client.request(
            "setBreakpoints", source={"path": str(game)}, breakpoints=[{"line": first + 1}]
        )
        stopped = start(client)
        assert stopped["reason"] == "breakpoint"
        stack = client.request("stackTrace", threadId=stopped["threadId"])["stackFrames"]
        assert [(f["name"], f["source"]["path"], f["line"]) for f in stack] == [
            ("wolf_consensus", str(game), first + 1),
            ("wolf_tally", str(WEREWOLF), line_of("action wolf_tally")),
            ("mainflow", str(WEREWOLF), TALLY),
        ]
        assert evaluate(client, stack[0]["id"], "len(wolves_alive)") == "2"
        assert "wolf_pick" in scope(client, stack[0]["id"], "Locals")
        client.request("setBreakpoints", source={"path": str(game)}, breakpoints=[])
        set_points(client, {"line": TALLY})
        client.request("continue", threadId=1)
        assert top(client, client.wait_event("stopped")["threadId"])["line"] == TALLY
        client.request("stepIn", threadId=1)
        assert client.wait_event("stopped")["reason"] == "step"
        frame = top(client, 1)
        assert (frame["name"], frame["source"]["path"], frame["line"]) == (
            "wolf_consensus", str(game), first,
        )  # fmt: skip
        client.request("next", threadId=1)
        client.wait_event("stopped")
        assert top(client, 1)["line"] == first + 1
        run_to_end(client)


def consensus_line(text: str) -> int:
    """The game.py line of ``wolf_consensus`` (a ``code:`` function) holding ``text``."""
    source = GAME.read_text(encoding="utf-8").splitlines()
    start = source.index("def wolf_consensus(")
    return 1 + next(n for n in range(start, len(source)) if text in source[n])


def set_code_points(client: DapClient, *points: dict[str, Any]) -> list[dict[str, Any]]:
    body = client.request("setBreakpoints", source={"path": str(GAME)}, breakpoints=list(points))
    return list(body["breakpoints"])


def test_code_file_breakpoints_have_python_conditions_hit_counts_and_logpoints(
    tmp_path: Path,
) -> None:
    picks, valid, rounds = (consensus_line(t) for t in ("picks =", "valid =", "rounds ="))
    with adapter(tmp_path) as client:
        log = "picks of {len(wolves_alive)} wolves in round {wolf_rounds}{nowhere}"
        answers = set_code_points(
            client,
            {"line": picks, "logMessage": log},
            {"line": valid, "hitCondition": "3"},
            {"line": rounds, "condition": "len(wolves_alive) == 1"},
            {"line": rounds + 1, "condition": "len("},
        )
        assert [a["verified"] for a in answers] == [True, True, True, False]
        assert answers[3]["message"].startswith("condition: ")
        stopped = start(client)
        assert stopped["hitBreakpointIds"] == [answers[1]["id"]]
        assert top(client, stopped["threadId"])["line"] == valid
        logged = [line for line in client.output().splitlines() if line.startswith("picks of")]
        assert len(logged) == 3  # the logpoint ran on each call up to the third
        nowhere = "<NameError: name 'nowhere' is not defined>"
        assert logged[0] == f"picks of 2 wolves in round 0{nowhere}"
        client.request("continue", threadId=1)
        again = client.wait_event("stopped")
        assert again["hitBreakpointIds"] == [answers[2]["id"]]
        frame = top(client, again["threadId"])
        assert frame["line"] == rounds and evaluate(client, frame["id"], "len(wolves_alive)") == "1"
        set_code_points(client)
        run_to_end(client)


def test_nothing_is_written_after_the_run_ended(tmp_path: Path) -> None:
    """Disconnected while stopped in a ``code:`` function: its worker thread finishes the
    function after the run ended, and a logpoint it passes writes nothing after
    ``terminated``."""
    picks, rounds = consensus_line("picks ="), consensus_line("rounds =")
    with adapter(tmp_path) as client:
        set_code_points(client, {"line": picks}, {"line": rounds, "logMessage": "too late"})
        start(client)
        client.send("disconnect")
        events = [m["event"] for m in client.wait_closed() if m["type"] == "event"]
    after = events[events.index("terminated") + 1 :]
    assert "output" not in after, events


def test_a_code_breakpoint_passed_after_the_run_ended_does_not_stop(tmp_path: Path) -> None:
    """Disconnected while stopped in a ``code:`` function, whose worker thread goes on after
    the run ended: a breakpoint further on does not stop it. (A stop there held the thread
    for ever, and the process exiting, which waits for it, when the thread got there after
    the event loop began to close: here its condition takes a second to say yes.)"""
    picks, valid = consensus_line("picks ="), consensus_line("valid =")
    late = "__import__('time').sleep(1) is None"
    with adapter(tmp_path) as client:
        set_code_points(client, {"line": picks}, {"line": valid, "condition": late})
        start(client)
        client.send("disconnect")
        events = [m["event"] for m in client.wait_closed(TIMEOUT / 2) if m["type"] == "event"]
    assert "stopped" not in events[events.index("terminated") + 1 :], events


def test_set_variable_in_a_code_frame_sets_the_python_local(tmp_path: Path) -> None:
    """``prey`` emptied at the line that reads it: the function goes on with the new value."""
    valid = consensus_line("valid =")
    with adapter(tmp_path) as client:
        set_code_points(client, {"line": valid})
        stopped = start(client)
        frame = top(client, stopped["threadId"])["id"]
        assert evaluate(client, frame, "len(prey)") == "4"
        scopes = client.request("scopes", frameId=frame)["scopes"]
        ref = next(s["variablesReference"] for s in scopes if s["name"] == "Locals")
        body = client.request("setVariable", variablesReference=ref, name="prey", value="[]")
        assert body["value"] == "[]"
        message = client.failure("setVariable", variablesReference=ref, name="nope", value="1")
        assert "nope is not a local of wolf_consensus" in message
        set_code_points(client)
        client.request("next", threadId=1)
        client.wait_event("stopped")
        frame = top(client, 1)["id"]
        assert evaluate(client, frame, "prey") == "[]" and evaluate(client, frame, "valid") == "[]"
        run_to_end(client)


def test_restart_from_here_forks_the_session(tmp_path: Path) -> None:
    db = tmp_path / "games.db"
    with adapter(tmp_path, db=str(db)) as client:
        stopped = start(client, {"line": VOTE_HEADER})
        frame = top(client, stopped["threadId"])
        assert frame["canRestart"]
        set_points(client)
        client.request("restartFrame", frameId=frame["id"])
        again = client.wait_event("stopped")
        assert again["reason"] == "restart"
        assert "vote" in top(client, again["threadId"])["name"]
        assert "debugging session 2" in client.output()
        run_to_end(client)
    with sqlite3.connect(db) as connection:
        rows = connection.execute("SELECT id, parent FROM fems_sessions ORDER BY id").fetchall()
    assert rows == [(1, None), (2, 1)]


def test_a_disconnect_during_a_restart_from_here_ends_the_run(tmp_path: Path) -> None:
    """The editor leaves right after asking to restart from here: the restart is cancelled
    with the run, which ends as interrupted. (The restart used to go on: the forked run
    started after the client had gone, and stopped at its turn with no one to see it.)"""
    db = tmp_path / "games.db"
    with adapter(tmp_path, db=str(db)) as client:
        stopped = start(client, {"line": VOTE_HEADER})
        client.send("restartFrame", frameId=top(client, stopped["threadId"])["id"])
        client.send("disconnect")
        events = [m for m in client.wait_closed() if m["type"] == "event"]
    names = [event["event"] for event in events]
    assert names.count("stopped") == 1, names
    exited = next(event for event in events if event["event"] == "exited")
    assert exited["body"]["exitCode"] == 1 and "terminated" in names
    assert "error: interrupted" in "".join(
        event["body"]["output"] for event in events if event["event"] == "output"
    )


@pytest.mark.parametrize("end", ["run", "disconnect"])
def test_terminated_is_the_last_event_of_a_run(tmp_path: Path, end: str) -> None:
    """Whether the run ends or the editor leaves, nothing of the run follows ``terminated``:
    the main branch's ``thread`` exited event used to come after it."""
    with adapter(tmp_path) as client:
        start(client, {"line": TALLY})
        if end == "run":
            run_to_end(client)
            client.wait_event("terminated")
        client.send("disconnect")
        events = [m["event"] for m in client.wait_closed() if m["type"] == "event"]
    assert events[-1] == "terminated", events[events.index("exited") :]


def test_a_restarted_turn_with_a_breakpoint_stops_at_the_breakpoint(tmp_path: Path) -> None:
    """The reason of the restarted turn's stop is ``restart`` only with no breakpoint there:
    a breakpoint on its action makes it a breakpoint's stop (one stop, not two)."""
    with adapter(tmp_path, db=str(tmp_path / "games.db")) as client:
        stopped = start(client, {"line": VOTE_HEADER})
        client.request("restartFrame", frameId=top(client, stopped["threadId"])["id"])
        again = client.wait_event("stopped")
        assert again["reason"] == "breakpoint" and again["hitBreakpointIds"]
        assert "vote" in top(client, again["threadId"])["name"]
        assert run_to_end(client)["exitCode"] == 0


def test_restart_from_here_starts_a_forked_debug_session(tmp_path: Path) -> None:
    """An editor that starts child sessions gets a ``startDebugging`` request: the launch
    configuration again, with ``fork`` before the turn and ``stopOnEntry``. Launched as the
    extension launches it, the child is a new session that stops at that turn (its first live
    one) and runs to the end; the parent stays stopped where it was."""
    db = tmp_path / "games.db"
    with adapter(tmp_path, db=str(db), starts_sessions=True) as parent:
        stopped = start(parent, {"line": VOTE_HEADER})
        frame = top(parent, stopped["threadId"])
        turn = int(frame["name"].split("(turn ")[1].split(",")[0])
        parent.request("restartFrame", frameId=frame["id"])
        asked = parent.wait_request("startDebugging")
        assert asked["arguments"]["request"] == "launch"
        configuration = asked["arguments"]["configuration"]
        assert configuration["fork"] == f"1:{turn - 1}"
        assert configuration["stopOnEntry"] is True
        assert configuration["args"] == [*OFFLINE, "--db", str(db)]
        with launched(tmp_path, configuration) as child:
            parent.respond(asked)
            entry = start(child)
            assert entry["reason"] == "entry"
            assert top(child, entry["threadId"])["name"].startswith("vote (turn ")
            assert "debugging session 2" in child.output()
            assert run_to_end(child)["exitCode"] == 0
        assert top(parent, stopped["threadId"]) == frame  # the parent is still stopped there
        assert "a new debug session forks 1:" in parent.output()
        assert not parent.events("exited")
    with sqlite3.connect(db) as connection:
        rows = connection.execute("SELECT id, parent FROM fems_sessions ORDER BY id").fetchall()
    assert rows == [(1, None), (2, 1)]


def test_a_refused_child_session_forks_in_this_one(tmp_path: Path) -> None:
    db = tmp_path / "games.db"
    with adapter(tmp_path, db=str(db), starts_sessions=True) as client:
        stopped = start(client, {"line": VOTE_HEADER})
        set_points(client)
        client.request("restartFrame", frameId=top(client, stopped["threadId"])["id"])
        client.respond(client.wait_request("startDebugging"), False, "no child sessions here")
        assert client.wait_event("stopped")["reason"] == "restart"
        assert "no new debug session (no child sessions here)" in client.output()
        assert run_to_end(client)["exitCode"] == 0


def test_replayed_turns_stop_at_action_breakpoints(tmp_path: Path) -> None:
    """A launch with ``fork`` (the whole of session 1): its turns replay, and a breakpoint on
    the vote stops a replayed one, which shows the reply it replays; the result is the
    original run's."""
    db = tmp_path / "games.db"
    args = [*OFFLINE, "--db", str(db)]
    first = tmp_path / "first.json"
    run = [FEMS2PY, "run", str(WEREWOLF), *args, "--result", str(first)]
    subprocess.run(run, check=True, capture_output=True, timeout=TIMEOUT)
    forked = tmp_path / "forked.json"
    configuration = {
        "name": "fork",
        "program": str(WEREWOLF),
        "args": [*args, "--result", str(forked)],
        "fork": "1",
    }
    with launched(tmp_path, configuration) as client:
        stopped = start(client, {"line": VOTE_HEADER})
        frame = top(client, stopped["threadId"])
        assert frame["name"].startswith("vote (turn ") and frame["name"].endswith(", replayed)")
        turn = scope(client, frame["id"], "Turn")
        assert "context" not in turn and turn["replayed reply"]["value"]
        assert run_to_end(client)["exitCode"] == 0
        assert "0 model calls" in client.output()
    assert json.loads(forked.read_text())["vars"] == json.loads(first.read_text())["vars"]


def test_attach_over_tcp_with_listen(tmp_path: Path) -> None:
    args = [FEMS2PY, "debug", str(WEREWOLF), *OFFLINE, "--db", ":memory:"]
    process = subprocess.Popen(
        [*args, "--listen", "127.0.0.1:0"], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL
    )
    assert process.stderr is not None
    line = process.stderr.readline().decode()
    assert line.startswith("fems debugger: listening on 127.0.0.1:")
    client = DapClient.over_tcp("127.0.0.1", int(line.rsplit(":", 1)[1]))
    client.request("initialize", adapterID="fems")
    client.request("attach")
    stopped = start(client, {"line": TALLY})
    assert top(client, stopped["threadId"])["line"] == TALLY
    assert run_to_end(client)["exitCode"] == 0
    client.send("disconnect")
    assert process.wait(TIMEOUT) == 0
    close(process)
    client.close()


def test_listen_on_a_port_in_use_says_so_without_a_traceback() -> None:
    """Two runs with the guide's --listen 127.0.0.1:4711: the second ended in a traceback
    ('OSError: [Errno 98] error while attempting to bind on address …')."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        args = [FEMS2PY, "debug", str(WEREWOLF), *OFFLINE, "--listen", address]
        done = subprocess.run(args, capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 1
    assert done.stderr == f"fems debugger: cannot listen on {address}: Address already in use\n"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--listen", "127.0.0.1:1"], "--listen serves a debugger: use it with --debug"),
        (["--debug", "--listen", "nowhere"], "give HOST:PORT"),
    ],
)
def test_debug_options_misused_are_usage_errors(argv: Sequence[str], message: str) -> None:
    done = subprocess.run(
        [FEMS2PY, "run", str(WEREWOLF), *argv], capture_output=True, text=True, timeout=TIMEOUT
    )
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr


def test_game_module_serves_with_debug(tmp_path: Path) -> None:
    """``python game.py --debug``: the built module serves the protocol itself, and shows the
    stack ``fems2py debug`` shows."""
    module = tmp_path / "werewolf.py"
    subprocess.run(
        [FEMS2PY, "build", str(WEREWOLF), "-o", str(module)], check=True, capture_output=True
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "runtime")}  # this checkout's runtime alone
    process = subprocess.Popen(
        [sys.executable, str(module), "--debug", *OFFLINE, "--db", ":memory:"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    client = DapClient.over_stdio(process)
    client.request("initialize", adapterID="fems")
    client.request("launch", program=str(WEREWOLF))
    stopped = start(client, {"line": TALLY})
    frames = client.request("stackTrace", threadId=stopped["threadId"])["stackFrames"]
    assert frames[0]["source"]["path"] == str(WEREWOLF)
    # the stack is the flow path, as under fems2py debug: not the module's top level under it
    assert [(frame["name"], frame["line"]) for frame in frames] == [("mainflow: Tally", TALLY)]
    run_to_end(client)
    client.send("disconnect")
    assert process.wait(TIMEOUT) == 0
    close(process)


def test_debug_without_file_builds_what_launch_names(tmp_path: Path) -> None:
    """``fems2py debug`` alone (an nvim-dap adapter): the launch request names the script and
    its options; one that names no script, or a missing one, is refused with a message."""
    process = subprocess.Popen(
        [FEMS2PY, "debug"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    client = DapClient.over_stdio(process)
    client.request("initialize", adapterID="fems")
    assert "give program" in client.failure("launch")
    assert "no-such.fems" in client.failure("launch", program=str(tmp_path / "no-such.fems"))
    args = [*OFFLINE, "--db", ":memory:"]
    assert "SESSION:TURN" in client.failure("launch", program=str(WEREWOLF), fork="one")
    assert "give --db a file" in client.failure(
        "launch", program=str(WEREWOLF), args=args, fork="1:2"
    )
    client.request("launch", program=str(WEREWOLF), args=args, cwd=str(tmp_path))
    stopped = start(client, {"line": TALLY})
    assert top(client, stopped["threadId"])["source"]["path"] == str(WEREWOLF)
    assert run_to_end(client)["exitCode"] == 0
    client.send("disconnect")
    assert process.wait(TIMEOUT) == 0
    assert process.stderr is not None and b"Traceback" not in process.stderr.read()
    close(process)


def framed(*requests: tuple[str, dict[str, Any]]) -> bytes:
    """Requests as an editor writes them, for a recorded session on stdin."""
    wire = b""
    for seq, (command, arguments) in enumerate(requests, 1):
        body = json.dumps(
            {"seq": seq, "type": "request", "command": command, "arguments": arguments}
        ).encode()
        wire += b"Content-Length: %d\r\n\r\n" % len(body) + body
    return wire


def unframed(wire: bytes) -> list[dict[str, Any]]:
    """The messages an adapter wrote."""
    messages = []
    while wire:
        header, _, rest = wire.partition(b"\r\n\r\n")
        length = int(header.split(b":")[1])
        messages.append(json.loads(rest[:length]))
        wire = rest[length:]
    return messages


def debug_command(tmp_path: Path, how: str) -> list[str]:
    """``fems2py debug`` or a built module's ``--debug``, on the offline game."""
    if how == "fems2py":
        return [FEMS2PY, "debug", str(WEREWOLF), *OFFLINE, "--db", ":memory:"]
    module = tmp_path / "werewolf.py"
    subprocess.run(
        [FEMS2PY, "build", str(WEREWOLF), "-o", str(module)], check=True, capture_output=True
    )
    return [sys.executable, str(module), "--debug", *OFFLINE, "--db", ":memory:"]


@pytest.mark.parametrize("how", ["fems2py", "module"])
def test_a_session_recorded_in_a_file_is_read_from_stdin(tmp_path: Path, how: str) -> None:
    """stdin a regular file (which asyncio cannot poll) is read as a pipe is: its requests
    are answered, and its end is the client's going away."""
    session = tmp_path / "session.dap"
    session.write_bytes(
        framed(
            ("initialize", {"adapterID": "fems"}),
            ("launch", {"program": str(WEREWOLF)}),
            (
                "setBreakpoints",
                {"source": {"path": str(WEREWOLF)}, "breakpoints": [{"line": TALLY}]},
            ),
            ("configurationDone", {}),
            ("disconnect", {}),
        )
    )
    with open(session, "rb") as stdin:
        done = subprocess.run(
            debug_command(tmp_path, how), stdin=stdin, capture_output=True, timeout=TIMEOUT
        )
    assert done.returncode == 1, done.stderr  # the run it started ends as interrupted
    assert b"Traceback" not in done.stderr and b"no Debug Adapter" not in done.stderr
    responses = [m for m in unframed(done.stdout) if m["type"] == "response"]
    assert [(r["command"], r["success"]) for r in responses] == [
        ("initialize", True),
        ("launch", True),
        ("setBreakpoints", True),
        ("configurationDone", True),
        ("disconnect", True),
    ]
    assert responses[2]["body"]["breakpoints"][0]["line"] == TALLY


@pytest.mark.parametrize("end", ["", "disconnect", "terminate"])
def test_a_recorded_session_that_ends_there_ends_its_run_as_interrupted(
    tmp_path: Path, end: str
) -> None:
    """A recording that launches and configures the run, then ends (the file, or a disconnect
    or terminate request with it): the run, cancelled as it starts, maybe before it began,
    ends as interrupted (status 1, ``error: interrupted``, exited and terminated), not with
    status 0 and no word."""
    session = tmp_path / "session.dap"
    requests = [("initialize", {"adapterID": "fems"}), ("launch", {}), ("configurationDone", {})]
    session.write_bytes(framed(*requests, *([(end, {})] if end else [])))
    with open(session, "rb") as stdin:
        done = subprocess.run(
            debug_command(tmp_path, "fems2py"), stdin=stdin, capture_output=True, timeout=TIMEOUT
        )
    assert done.returncode == 1 and b"Traceback" not in done.stderr, done.stderr
    events = [m for m in unframed(done.stdout) if m["type"] == "event"]
    names = [m["event"] for m in events]
    assert names.index("exited") < names.index("terminated"), names
    assert events[names.index("exited")]["body"] == {"exitCode": 1}
    said = [m["body"] for m in events if m["event"] == "output"]
    assert {"category": "stderr", "output": "werewolf.fems: error: interrupted\n"} in said


def read_framed(stream: IO[bytes]) -> dict[str, Any]:
    """The next message an adapter wrote on ``stream``."""
    length = 0
    while line := stream.readline().strip():
        name, _, value = line.decode().partition(":")
        if name.lower() == "content-length":
            length = int(value)
    return dict(json.loads(stream.read(length)))


def test_an_editor_that_goes_away_ends_the_run_as_a_disconnect_does(tmp_path: Path) -> None:
    """The editor dies while the run is stopped: both pipes close under the adapter. The run
    ends as a disconnect ends it (status 1, nothing on stderr), without a broken pipe's
    traceback for each message it can no longer send."""
    err_file = tmp_path / "adapter.err"
    with open(err_file, "wb") as err:
        process = subprocess.Popen(
            debug_command(tmp_path, "fems2py"),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
        )
    assert process.stdin is not None and process.stdout is not None
    points = {"source": {"path": str(WEREWOLF)}, "breakpoints": [{"line": TALLY}]}
    process.stdin.write(
        framed(
            ("initialize", {"adapterID": "fems"}),
            ("launch", {"program": str(WEREWOLF)}),
            ("setBreakpoints", points),
            ("configurationDone", {}),
        )
    )
    process.stdin.flush()
    while read_framed(process.stdout).get("event") != "stopped":
        pass
    close(process)
    assert process.wait(TIMEOUT) == 1
    assert err_file.read_text() == ""


@pytest.mark.parametrize("how", ["fems2py", "module"])
def test_stdin_from_dev_null_ends_at_once_and_says_why(tmp_path: Path, how: str) -> None:
    """``</dev/null`` (CI, nohup): no client, so no run; one line says how to debug."""
    done = subprocess.run(
        debug_command(tmp_path, how),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0 and done.stdout == ""
    assert "Traceback" not in done.stderr
    assert done.stderr.strip() == (
        "fems debugger: no Debug Adapter Protocol request came on stdin: start the debugger "
        "from an editor (docs/guide/debugging.md), or use --listen HOST:PORT"
    )
