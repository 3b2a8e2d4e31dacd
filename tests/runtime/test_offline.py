"""fems/mock is deterministic and only writes valid signals; fems/script replays and fails loudly."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path

import pytest
from fems_helpers import run_script
from fems_runtime.human import HumanAnswer, HumanRequest, MockHuman
from fems_runtime.offline import (
    MockModel,
    OfflineOut,
    OfflineTurn,
    ScriptedCalls,
    ScriptModel,
    mock_value,
    offline_out,
)
from fems_runtime.records import RunError
from fems_runtime.signals import OutSpec, apply_signals, apply_values
from fems_runtime.values import FemDict
from fems_runtime.variables import ActorSpec, Frame, Variables

OUTS = (
    OfflineOut("kill", type="actor"),
    OfflineOut("save", type="bool"),
    OfflineOut("count", type="int"),
    OfflineOut("ratio", type="float"),
    OfflineOut("word", type="string"),
    OfflineOut("pick", type="dropdown", choices=("接受", "拒绝")),
    OfflineOut("mode", type="enum", choices=("day", "night")),
    OfflineOut("votes.@bob", type="int"),
    OfflineOut("alive", current=["@a"]),
    OfflineOut("day", current=3),
    OfflineOut("@target", current=""),
    OfflineOut("note", current="hello"),
    OfflineOut("tally", current={"@bob": 1}),
)


def _turn(n: int = 0, actor: str = "@eve") -> OfflineTurn:
    return OfflineTurn(
        action="night", actor=actor, turn=n, outs=OUTS, candidates=("@bob", "@carol")
    )


def test_mock_is_deterministic_for_a_seed() -> None:
    first = [MockModel(7).reply(_turn(n)) for n in range(5)]
    again = [MockModel(7).reply(_turn(n)) for n in range(5)]
    other = [MockModel(8).reply(_turn(n)) for n in range(5)]
    assert first == again
    assert first != other
    assert MockModel(7).reply(_turn(0, "@bob")) != MockModel(7).reply(_turn(0, "@dan"))


def test_mock_writes_one_signal_per_out() -> None:
    reply = MockModel(1).reply(_turn())
    lines = reply.splitlines()
    assert lines[0].startswith("@eve")
    assert [line.split("<<")[1].split()[0] for line in lines[1:]] == [o.target for o in OUTS]


@pytest.mark.parametrize(
    ("replies", "expected"),
    [
        (
            {"night@eve": ["e1", "e2"], "night": ["n1"], "*": ["s1", "s2"]},
            ["e1", "e2", "n1", "s1", "s2", "s2"],
        ),
        ({"night": ["n1", "n2"], "*": ["s1", "s2"]}, ["n1", "n2", "s1", "s2", "s2", "s2"]),
    ],
)
def test_script_order_of_lists(replies: dict, expected: list[str]) -> None:
    model = ScriptModel(replies)
    assert [model.reply(_turn()) for _ in range(6)] == expected


def test_script_other_actor_skips_actor_list() -> None:
    model = ScriptModel({"night@eve": ["e"], "night": ["n"]})
    assert model.reply(_turn(actor="@bob")) == "n"
    assert model.reply(_turn(actor="@eve")) == "e"


def test_script_without_reply_names_action_and_actor(tmp_path: Path) -> None:
    path = tmp_path / "replies.json"
    path.write_text(json.dumps({"day": ["x"]}), encoding="utf-8")
    model = ScriptModel(path)
    with pytest.raises(RunError, match="no reply left for action night by @eve"):
        model.reply(_turn())


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{", "replies file r.json: invalid JSON"),
        ("[1]", "r.json: expected an object of reply lists, not a list"),
        ('{"a": [1]}', 'r.json: "a", reply 1: a reply is a string or {"tool_calls": [{'),
        ('{"a": ["x", 1]}', '"a", reply 2: a reply is a string or {"tool_calls"'),
        ('{"a": 3}', 'r.json: "a" must be a list of replies (each a string or {"tool_calls"'),
        ('{"a": 3}', "or a single one, not a number (3)"),
        ('{"a": [{"txt": "x"}]}', 'r.json: "a", reply 1: unknown field "txt"; a reply is'),
        ('{"a": [{"text": "x"}]}', 'r.json: "a", reply 1: a reply is a string or {"tool_calls"'),
    ],
)
def test_script_bad_replies_file(tmp_path: Path, content: str, message: str) -> None:
    """A wrong entry is named when the file is loaded, before any turn asks for a reply."""
    path = tmp_path / "r.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(RunError) as error:
        ScriptModel(path)
    assert message in str(error.value).replace(str(path), "r.json")


def test_a_single_reply_is_a_list_of_one_and_its_end_is_said() -> None:
    model = ScriptModel({"night": "only", "night@eve": {"tool_calls": [{"name": "look"}]}})
    first = model.reply(_turn())
    assert isinstance(first, ScriptedCalls) and first.calls[0].name == "look"
    assert model.reply(_turn()) == "only"
    with pytest.raises(RunError) as error:
        model.reply(_turn())
    assert str(error.value) == (
        "fems/script has no reply left for action night by @eve: in the replies, "
        '"night@eve" (1 reply) and "night" (1 reply) are used up by earlier turns; only the '
        "last reply of \"*\" repeats (looked for 'night@eve', 'night', '*')"
    )


def _frame() -> Frame:
    actors = [ActorSpec(name) for name in ("@eve", "@bob", "@carol")]
    values = {
        "kill": "",
        "save": False,
        "count": 0,
        "ratio": 0.0,
        "word": "",
        "pick": "",
        "mode": "day",
        "votes": {"@bob": 0},
        "alive": ["@bob"],
        "day": 1,
        "@target": "",
        "note": "x",
        "@voter": "@bob",
        "tally": {"@bob": 1},
    }
    return Variables(values, actors).root


SPECS = (
    OutSpec("kill", type="actor"),
    OutSpec("save", type="bool"),
    OutSpec("count", type="int"),
    OutSpec("ratio", type="float"),
    OutSpec("word", type="string"),
    OutSpec("pick", type="dropdown", choices=("接受", "拒绝")),
    OutSpec("mode", type="enum", choices=(("day", "night"),)),
    OutSpec("votes", key="@voter", type="int"),
    OutSpec("alive"),
    OutSpec("day"),
    OutSpec("@target"),
    OutSpec("note"),
    OutSpec("tally"),
)


@pytest.mark.parametrize("seed", range(6))
def test_mock_signals_are_accepted_by_the_parser(seed: int) -> None:
    frame = _frame()
    outs = tuple(
        OfflineOut(
            spec.label,
            spec.type,
            tuple(spec.choices[0]) if spec.type == "enum" else spec.choices,
            frame.get(spec.target) if spec.key is None else 0,
        )
        for spec in SPECS
    )
    turn = OfflineTurn("night", "@eve", seed, outs=outs, candidates=("@bob", "@carol"))
    outcome = apply_signals(MockModel(seed).reply(turn), frame, SPECS)
    assert outcome.rejected == []
    assert outcome.unset == []
    assert len(outcome.applied) == len(SPECS)
    # untyped outs keep the shape of the variable's value
    kinds = {name: type(frame.get(name)) for name in ("alive", "day", "tally", "note")}
    assert kinds == {"alive": list, "day": int, "tally": FemDict, "note": str}
    assert frame.get("@target") in ("@bob", "@carol")


@pytest.mark.parametrize(
    ("spec", "holds_actor"),
    [
        (OutSpec("@target", type="string"), True),  # an actor variable, whatever its type
        (OutSpec("@target", type="int"), True),
        (OutSpec("votes", key="@voter", type="string"), True),  # votes.@x
        (OutSpec("votes", key="@voter"), False),  # untyped, already holds a number
        (OutSpec("pick", key="@voter"), True),  # untyped, nothing there yet
        (OutSpec("votes", key="@voter", type="int"), False),
        (OutSpec("word", type="string"), False),
    ],
)
def test_offline_outs_that_take_an_actor(spec: OutSpec, holds_actor: bool) -> None:
    frame = _frame()
    frame.assign("pick", "=", {})
    seen = offline_out(spec, frame)
    assert seen.holds_actor is holds_actor
    value = mock_value(seen, ("@bob", "@carol"), random.Random(1))
    assert (value in ("@bob", "@carol")) is holds_actor


def test_human_mock_answers_every_out_validly_and_the_same_for_a_seed() -> None:
    specs = (
        OutSpec("pick", type="dropdown", choices=("接受", "拒绝")),
        OutSpec("@target", type="string"),
        OutSpec("votes", key="@voter", type="string"),
        OutSpec("count", type="int"),
        OutSpec("alive"),
    )

    def answers(seed: int) -> list[HumanAnswer]:
        human = MockHuman(seed)
        request = HumanRequest("vote", "@eve", "Vote: @bob or @carol?", specs, frame=_frame())
        return [asyncio.run(human.ask(request)) for _ in range(3)]

    first = answers(5)
    assert first == answers(5) and first != answers(6)
    for answer in first:
        assert answer.text
        assert answer.vars["pick"] in ("接受", "拒绝")
        assert answer.vars["@target"] in ("@bob", "@carol")
        assert answer.vars["votes.@voter"] in ("@bob", "@carol")
        assert answer.vars["count"] in range(4)
        assert answer.vars["alive"][0] == "@bob" and set(answer.vars["alive"]) <= {"@bob", "@carol"}
        outcome = apply_values(answer.vars, _frame(), specs)
        assert outcome.rejected == []


UNUSED_REPLIES = """
actors:
    ai @a = soul:a
action greet @ai(@a):
    prompt: Say hello.
mainflow:
    [START] -> greet -> [END]
"""


@pytest.mark.parametrize(("model", "unused"), [("quick", True), ("fems/script", False)])
def test_replies_no_turn_took_are_said_at_the_run_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], model: str, unused: bool
) -> None:
    """§15.3: ``--model`` names an alias of another model, which answers every turn; the user
    learns why the replies did nothing."""
    files = {"fems.toml": '[models]\nquick = "fems/mock"\n'}
    run_script(tmp_path, UNUSED_REPLIES, files, model=model, replies={"*": ["Hello."]})
    said = "no turn's model was fems/script: the replies went unused"
    assert (said in capsys.readouterr().err) is unused
