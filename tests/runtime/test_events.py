"""The run's events (#31, fems_runtime.events): what a built script's run emits, in order,
nested run → step → turn → model call / tool call / human wait, branches inside their fork;
and the trace written only by its subscriber."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path
from typing import Any

import pytest
from fems_helpers import build_script, load, read_trace
from fems_runtime import events as ev
from fems_runtime.llm import ModelClient
from fems_runtime.records import TRACE_FORMAT, RunError, trace_line
from fems_runtime.values import to_json

from tests.runtime.fake_openai import Behaviour, fake_openai
from tests.runtime.test_endpoints import openai_entry
from tests.runtime.test_turns import make_run, spec

RUNTIME = Path(__file__).resolve().parents[2] / "runtime" / "fems_runtime"


class Recorder:
    """A run observer that subscribes to the run's events and keeps them."""

    def __init__(self) -> None:
        self.events: list[ev.RunEvent] = []

    def run_opened(self, store: Any, session: int, events: ev.RunEvents) -> None:
        events.subscribe(self.events.append)


def record(
    tmp_path: Path,
    source: str,
    files: dict[str, str] | None = None,
    *,
    fails: bool = False,
    **options: Any,
) -> list[ev.RunEvent]:
    """Build and run ``source`` (fems/mock unless told); return its events."""
    module = load(build_script(tmp_path, source, files))
    recorder = Recorder()
    options.setdefault("model", "fems/mock")
    if fails:
        with pytest.raises(RunError):
            module.run(db=":memory:", observer=recorder, **options)
    else:
        module.run(db=":memory:", observer=recorder, **options)
    return recorder.events


def label(event: ev.RunEvent) -> str:
    """A span's begin as one word and what it is about."""
    where = event.where
    match event:
        case ev.StepBegan():
            return f"step {where.node}"
        case ev.TurnBegan():
            return f"{event.kind} {where.action} {where.actor or ''}".rstrip()
        case ev.ModelCallBegan():
            return f"model {event.request_model}"
        case ev.ToolCallBegan():
            return f"tool {event.tool} ({event.kind})"
        case ev.ForkBegan():
            return f"{event.kind} {where.node}"
        case ev.BranchBegan():
            return f"branch {event.target if event.target is not None else event.item}"
        case ev.HumanWaitBegan():
            return "wait"
    return type(event).__name__.removesuffix("Began").lower()


PAIRS: dict[type[ev.Began], type[ev.Ended]] = {
    ev.RunBegan: ev.RunEnded,
    ev.StepBegan: ev.StepEnded,
    ev.TurnBegan: ev.TurnEnded,
    ev.ModelCallBegan: ev.ModelCallEnded,
    ev.ToolCallBegan: ev.ToolCallEnded,
    ev.ForkBegan: ev.ForkJoined,
    ev.BranchBegan: ev.BranchEnded,
    ev.HumanWaitBegan: ev.HumanWaitEnded,
}


def tree(events: list[ev.RunEvent]) -> list[str]:
    """The spans as an indented outline, after checking that they nest: every event happens
    inside a span that is open, and every span is ended once, by an end of its own kind."""
    open_spans: dict[int, ev.Began] = {}
    depth: dict[int | None, int] = {None: -1}
    outline = []
    for event in events:
        assert event.parent is None or event.parent in open_spans, event
        if isinstance(event, ev.Began):
            assert event.id not in depth, f"id {event.id} used twice"
            open_spans[event.id] = event
            depth[event.id] = depth[event.parent] + 1
            outline.append("  " * depth[event.id] + label(event))
        elif isinstance(event, ev.Ended):
            began = open_spans.pop(event.id)
            assert PAIRS[type(began)] is type(event), (began, event)
            assert event.parent == began.parent and event.duration >= 0
    assert open_spans == {}, "every span ended"
    return outline


def ends(events: list[ev.RunEvent], kind: type[ev.Ended]) -> list[ev.Ended]:
    return [event for event in events if isinstance(event, kind)]


SEQUENCE = """
vars:
    n = 0
actors:
    ai @a
action talk @ai(@a):
    prompt: Say {n}.
action count @assign:
    out: n += 1
mainflow:
    [START] -> talk -> count -> [END]
"""


def test_a_sequence_nests_turns_in_steps_and_model_calls_in_turns(tmp_path: Path) -> None:
    events = record(tmp_path, SEQUENCE)
    assert tree(events) == [
        "run",
        "  step START",
        "  step talk",
        "    ai talk @a",
        "      model fems/mock",
        "  step count",
        "    assign count",
        "  step END",
    ]
    assert isinstance(events[0], ev.RunBegan) and isinstance(events[-1], ev.RunEnded)
    run = events[-1]
    assert (run.outcome, run.steps, run.model_calls) == ("ok", 4, 1)
    assert {event.where.session for event in events} == {1}
    assert {event.where.file for event in events} == {"t.fems"}
    assert [(end.kind, end.turn) for end in ends(events, ev.TurnEnded)] == [
        ("ai", 1),
        ("assign", None),
    ]
    (call,) = ends(events, ev.ModelCallEnded)
    assert (call.provider, call.request_model, call.response_model) == (
        "fems",
        "fems/mock",
        "fems/mock",
    )
    assert (call.where.action, call.where.actor, call.where.line) == ("talk", "@a", 5)
    assert call.reply and call.messages[-1]["content"] == "Say 0."
    steps = [e.where.action for e in events if isinstance(e, ev.StepBegan)]
    assert steps == [None, "talk", "count", None]
    (assigned,) = [event for event in events if isinstance(event, ev.Assigned)]
    assert (assigned.target, assigned.op, assigned.value) == ("n", "+=", 1)
    stored = [event for event in events if isinstance(event, ev.MessagesStored)]
    assert [m.kind for m in stored[0].messages] == ["prompt", "reply"]


FORK = """
vars:
    a = 0
    b = 0
action set_a @assign:
    out: a = 1
action set_b @assign:
    out: b = 2
mainflow:
    [START] -> [F]
    [F] -> set_a -> [M]
    [F] -> set_b -> [M]
    [M] -> [END]
"""


def test_a_forks_branches_nest_in_it_and_its_join_ends_it(tmp_path: Path) -> None:
    events = record(tmp_path, FORK)
    outline = tree(events)
    assert outline[:4] == ["run", "  step START", "  step F", "  fork F"]
    assert sorted(outline[4:10]) == sorted(
        [
            "    branch set_a",
            "      step set_a",
            "        assign set_a",
            "    branch set_b",
            "      step set_b",
            "        assign set_b",
        ]
    )
    assert outline[10:] == ["  step M", "  step END"]
    (joined,) = ends(events, ev.ForkJoined)
    assert (joined.kind, joined.node, joined.reached, joined.cancelled) == ("fork", "M", True, ())
    assert {branch.reached for branch in ends(events, ev.BranchEnded)} == {"M"}


LOOPS = """
vars:
    n = 0
action bump @assign:
    out: n += i
mainflow:
    [START] -> par i in [1, 2]:
        -> bump ->
    -> for j in [3]:
        -> bump ->
    -> [END]
"""


def test_par_and_for_iterations_are_branches_of_their_loop_step(tmp_path: Path) -> None:
    outline = tree(record(tmp_path, LOOPS.replace("n += i", "n += 1")))
    assert outline[:3] == ["run", "  step START", "  step par_i"]
    assert outline[3] == "    par par_i"
    assert sorted(outline[4:10]) == sorted(
        ["      branch 1", "      branch 2"] + ["        step bump", "          assign bump"] * 2
    )
    assert outline[10:] == [
        "  step for_j",
        "    for for_j",
        "      branch 3",
        "        step bump",
        "          assign bump",
        "  step END",
    ]


MODULE = """
vars:
    day = 0
module Day(n):
    action tick @assign:
        out: day += n
    flow:
        [IN] -> tick -> [OUT]
mainflow:
    [START] -> &Day(1) -> [END]
"""


def test_a_module_call_holds_the_modules_steps(tmp_path: Path) -> None:
    assert tree(record(tmp_path, MODULE)) == [
        "run",
        "  step START",
        "  step &Day",
        "    step IN",
        "    step tick",
        "      assign tick",
        "    step OUT",
        "  step END",
    ]


TOOLS = """
code:
    notes = file:"notes.py"
actors:
    ai @reader = tools: [read, notes.count]
action ask @ai(@reader):
    prompt: How often does 'mat' appear in notes.txt?
mainflow:
    [START] -> ask -> [END]
"""

NOTES = '''
def count(word: str, text: str) -> int:
    """How often `word` appears in `text`."""
    return text.count(word)
'''


def test_tool_calls_nest_in_their_turn_beside_its_model_calls(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("a mat\n", encoding="utf-8")
    read = {"tool_calls": [{"name": "read", "arguments": {"path": "notes.txt"}}]}
    count = {"tool_calls": [{"name": "notes.count", "arguments": {"word": "mat", "text": "mat"}}]}
    replies = {"ask": [read, count, "Once."]}
    events = record(tmp_path, TOOLS, {"notes.py": NOTES}, model=None, replies=replies)
    assert tree(events)[2:] == [
        "  step ask",
        "    ai ask @reader",
        "      model fems/script",
        "      tool read (builtin)",
        "      model fems/script",
        "      tool notes.count (function)",
        "      model fems/script",
        "  step END",
    ]
    results = [(end.tool, end.round, end.result) for end in ends(events, ev.ToolCallEnded)]
    assert results == [("read", 0, "a mat\n"), ("notes.count", 1, "1")]


HUMAN = """
vars:
    pick = ""
actors:
    human @you
    ai @bot
action ask @human(@you):
    prompt: Pick one.
    out: pick(string)
action who @mind(@you):
    prompt: Again.
mainflow:
    [START] -> ask -> who -> [END]
"""


def test_a_human_turn_waits_inside_its_turn(tmp_path: Path) -> None:
    answers = {"ask": [{"text": "there", "vars": {"pick": "x"}}], "who": ["me"]}
    events = record(tmp_path, HUMAN, human=answers)
    assert tree(events)[2:] == [
        "  step ask",
        "    human ask @you",
        "      wait",
        "  step who",
        "    mind who @you",
        "      wait",
        "  step END",
    ]
    turns = [(end.kind, end.turn) for end in ends(events, ev.TurnEnded)]
    assert turns == [("human", 1), ("human", 2)]
    answered = [event for event in events if isinstance(event, ev.HumanAnswered)]
    assert [(a.where.actor, a.text, a.values) for a in answered] == [
        ("@you", "there", {"pick": "x"}),
        ("@you", "me", {}),
    ]


FAILING = """
vars:
    n = 0
actors:
    ai @a
action talk @ai(@a):
    prompt: Hello.
    out: n(int)
    max_retries: 0
mainflow:
    [START] -> talk -> [END]
"""


def test_a_failure_ends_every_open_span_with_its_error(tmp_path: Path) -> None:
    replies = {"talk": ["no number here"]}
    events = record(tmp_path, FAILING, fails=True, model=None, replies=replies)
    tree(events)
    failed = [event for event in events if isinstance(event, ev.RunFailed)]
    assert len(failed) == 1 and "no valid reply" in failed[0].message
    assert failed[0].where.node == "talk"
    rejected = [event for event in events if isinstance(event, ev.ReplyRejected)]
    assert rejected and rejected[-1].final
    outcomes = [(type(end).__name__, end.outcome) for end in events if isinstance(end, ev.Ended)]
    assert outcomes[-3:] == [("TurnEnded", "error"), ("StepEnded", "error"), ("RunEnded", "error")]
    assert ("ModelCallEnded", "ok") in outcomes
    assert events[-1].error == failed[0].message
    assert events[-2].error_type == "RunError"


def test_the_trace_is_written_from_the_events_with_its_format(tmp_path: Path) -> None:
    module = load(build_script(tmp_path, SEQUENCE))
    recorder, trace = Recorder(), tmp_path / "trace.jsonl"
    module.run(db=":memory:", model="fems/mock", trace=str(trace), observer=recorder)
    lines = read_trace(trace)
    assert lines[0] == {
        "event": "run",
        "node": None,
        "format": TRACE_FORMAT,
        "session": 1,
        "script": "t.fems",
        "sha256": module.SCRIPT.sha256,
    }
    assert TRACE_FORMAT == 2
    from_events = [line for line in map(trace_line, recorder.events) if line is not None]
    assert lines == to_json(from_events)
    assert [line["event"] for line in lines] == [
        "run",
        "step",
        "step",
        "llm_call",
        "step",
        "assign",
        "step",
    ]


def test_nothing_but_the_trace_writer_writes_the_trace() -> None:
    """Every trace line comes from an event (``TraceWriter.__call__``): no runtime module calls
    a trace's ``write`` itself."""
    callers = []
    for path in RUNTIME.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                owner = ast.unparse(node.func.value)
                if node.func.attr == "write" and "trace" in owner and owner != "self":
                    callers.append(f"{path.name}:{node.lineno}")
    assert callers == []


def test_every_field_of_every_event_is_documented() -> None:
    """The events are a contract with exporters: each field says what it holds, in a ``#:``
    comment above it (or above the group of fields it belongs to)."""
    lines = Path(ev.__file__).read_text(encoding="utf-8").splitlines()
    undocumented = []
    for node in ast.walk(ast.parse("\n".join(lines))):
        if not isinstance(node, ast.ClassDef):
            continue
        for item in node.body:
            if not isinstance(item, ast.AnnAssign) or not isinstance(item.target, ast.Name):
                continue
            above = item.lineno - 2
            while lines[above].strip() and not lines[above].strip().startswith("#:"):
                if ":" not in lines[above] or lines[above].strip().startswith('"'):
                    break
                above -= 1
            if not lines[above].strip().startswith("#:"):
                undocumented.append(f"{node.name}.{item.target.id}")
    assert undocumented == []


def test_reasoning_is_marked_so_exporters_leave_it_out() -> None:
    assert ev.content_fields(ev.ModelCallEnded)["reasoning"] == ev.REASONING
    assert ev.content_fields(ev.ModelCallEnded)["reply"] == ev.CONTENT
    assert "reasoning" not in ev.content_fields(ev.ModelCallBegan)
    assert ev.ReplyChunk(id=1, parent=None, where=ev.Where(), kind="reasoning").private


def test_a_streamed_call_reports_its_first_chunk_pieces_and_usage() -> None:
    """A model behind the OpenAI protocol: its provider and models, time to first chunk, each
    piece (the reasoning marked private), the usage the provider reported."""
    behaviour = Behaviour(text="kept words", reasoning="Hmm.", reasoning_tokens=3, cached_tokens=5)
    with fake_openai(behaviour) as server:
        models = ModelClient(
            model_map={"test": openai_entry(server.api_base, "test")}, run_model="test", environ={}
        )
        run = make_run(models=models)
        seen: list[ev.RunEvent] = []
        run.services.events.subscribe(seen.append)

        async def talk() -> None:
            try:
                await run.services.ai_turn(run.ctx, spec(prompt="Talk."))
            finally:
                await models.aclose()

        asyncio.run(talk())
    began = next(e for e in seen if isinstance(e, ev.ModelCallBegan))
    assert (began.provider, began.request_model, began.streamed) == ("openai", "openai/test", True)
    inside = [e for e in seen if e.parent == began.id]
    assert isinstance(inside[0], ev.ModelCallFirstChunk) and inside[0].kind == "reasoning"
    chunks = [(e.kind, e.chunk, e.private) for e in inside if isinstance(e, ev.ReplyChunk)]
    assert chunks == [
        ("reasoning", "Hmm.", True),
        ("text", "kept ", False),
        ("text", "words", False),
    ]
    (ended,) = [e for e in seen if isinstance(e, ev.ModelCallEnded)]
    usage = (ended.input_tokens, ended.output_tokens, ended.reasoning_tokens, ended.cached_tokens)
    assert usage == (11, 7, 3, 5)
    assert (ended.response_model, ended.finish_reason, ended.reply) == (
        "openai/test",
        "stop",
        "kept words",
    )
    assert ended.reasoning == "Hmm." and ended.mono >= inside[0].mono >= began.mono
    stored = next(e for e in seen if isinstance(e, ev.MessagesStored))
    assert {m.kind: m.call for m in stored.messages}["reply"] == began.id  # shown as it came
    assert [m.private for m in stored.messages if m.kind == "reasoning"] == [True]


def test_a_place_met_again_is_the_same_where(monkeypatch: pytest.MonkeyPatch) -> None:
    bus = ev.RunEvents("game.fems")
    before = bus.where("", "Den", 3, "kill", "@wolf")
    bus.session = 7  # the session opened: the same place is in it now
    where = bus.where("", "Den", 3, "kill", "@wolf")
    assert where is not before and where == ev.Where(7, "", "Den", "kill", "@wolf", "game.fems", 3)
    assert bus.where("", "Den", 3, "kill", "@wolf") is where
    assert bus.where("/Vote#1", "Den", 3, "kill", "@wolf").path == "/Vote#1"
    monkeypatch.setattr(ev, "WHERES", 3)
    bus.where("/Vote#2", "Den", 3, "kill", "@wolf")  # too many places: all forgotten
    assert bus.where("", "Den", 3, "kill", "@wolf") is not where
