"""Signals (§10): extraction variants, parsing, data-only values, the out whitelist, typed outs,
SET_VARIABLE and rollback."""

from __future__ import annotations

import asyncio
import re

import pytest
from fems_runtime.out_types import SignalError
from fems_runtime.records import RunError
from fems_runtime.signals import (
    OutSpec,
    apply_signals,
    apply_values,
    extract_signals,
    parse_signal,
    read_triples,
    run_resolve,
    split_target,
)
from fems_runtime.values import Actor, FemDict
from fems_runtime.variables import ActorSpec, Variables

ACTORS = [ActorSpec("@Eve"), ActorSpec("@Bob"), ActorSpec("@Olivia"), ActorSpec("@小灵")]


def fresh() -> Variables:
    return Variables(
        {
            "KILL": "",
            "@VOTE": "",
            "@voter": "@Bob",
            "choice": "",
            "note": "",
            "count": 0,
            "price": 1.5,
            "alive": ["@Eve", "@Bob"],
            "votes": {},
            "hp": {"@Eve": 100, "@Bob": 80},
            "scores": {"alice": 1},
            "flag": False,
            "玩家1": "",
            "finish": False,
        },
        ACTORS,
    )


# (reply, outs, expected variable values after applying, number of rejected signals)
CASES = [
    # prefixes and brackets
    ("SET VARIABLE: <<KILL = @Eve>>", None, {"KILL": "@Eve"}, 0),
    ("set variable: <<KILL = @Eve>>", None, {"KILL": "@Eve"}, 0),
    ("Set   Variable：<<KILL = @Eve>>", None, {"KILL": "@Eve"}, 0),
    ("SETVARIABLE:<<KILL=@Eve>>", None, {"KILL": "@Eve"}, 0),
    ("SET VARIABLE : <<finish = true>>", None, {"finish": True}, 0),
    ("SET_VARIABLE: <<KILL = @Eve>>", None, {"KILL": "@Eve"}, 0),
    ("设定变量：<< KILL = @Olivia>>", None, {"KILL": "@Olivia"}, 0),
    ("设定变量：《KILL = @Olivia》", None, {"KILL": "@Olivia"}, 0),
    ("设置变量:《《KILL = @Olivia》》", None, {"KILL": "@Olivia"}, 0),
    ("设定变量: 〈KILL = @Olivia〉", None, {"KILL": "@Olivia"}, 0),
    ("SET VARIABLE: 《《KILL = @Bob>>", None, {"KILL": "@Bob"}, 0),
    (
        "I think so. SET VARIABLE: <<KILL = @Eve>> and then SET VARIABLE: <<count += 2>>",
        None,
        {"KILL": "@Eve", "count": 2},
        0,
    ),
    (
        "line one\nSET VARIABLE: <<count += 1>>\nSET VARIABLE: <<count += 1>>\n",
        None,
        {"count": 2},
        0,
    ),
    # Markdown around the prefix, inline code and fenced blocks (§10.1)
    ("**SET VARIABLE:** <<KILL = @Eve>>", None, {"KILL": "@Eve"}, 0),
    ("**SET VARIABLE**: <<KILL = @Eve>>", None, {"KILL": "@Eve"}, 0),
    ("__SET VARIABLE__: <<KILL = @Eve>>", None, {"KILL": "@Eve"}, 0),
    ("*SET VARIABLE*: <<KILL = @Eve>>", None, {"KILL": "@Eve"}, 0),
    ("***SET VARIABLE:*** <<KILL = @Eve>>", None, {"KILL": "@Eve"}, 0),
    ("`SET VARIABLE:` <<KILL = @Eve>>", None, {"KILL": "@Eve"}, 0),
    ("`SET VARIABLE: <<KILL = @Eve>>`", None, {"KILL": "@Eve"}, 0),
    ("SET VARIABLE: `<<KILL = @Eve>>`", None, {"KILL": "@Eve"}, 0),
    ("SET VARIABLE: **<<KILL = @Eve>>**", None, {"KILL": "@Eve"}, 0),
    ("**设定变量：** 《KILL = @Olivia》", None, {"KILL": "@Olivia"}, 0),
    ("My vote:\n```\nSET VARIABLE: <<count = 3>>\n```\n", None, {"count": 3}, 0),
    ("```text\n**SET VARIABLE:** <<KILL = @Bob>>\n```", None, {"KILL": "@Bob"}, 0),
    ("**SET VARIABLE:**\n<<KILL = @Eve>>", None, {"KILL": ""}, 1),  # the bracket must follow
    ("**SET VARIABLE:** KILL = @Eve", None, {"KILL": ""}, 1),
    ("**VARIABLE:** <<KILL = @Eve>>", None, {"KILL": ""}, 0),
    # a bare actor name where only an actor fits (§10.3)
    ("SET VARIABLE: <<@VOTE = Bob>>", None, {"@VOTE": "@Bob"}, 0),
    ("SET VARIABLE: <<@VOTE = bob>>", None, {"@VOTE": "@Bob"}, 0),
    ("SET VARIABLE: <<@VOTE = OLIVIA>>", None, {"@VOTE": "@Olivia"}, 0),
    ("SET VARIABLE: <<@VOTE = 小灵>>", None, {"@VOTE": "@小灵"}, 0),
    ("**SET VARIABLE:** <<@VOTE = @Bob>>", None, {"@VOTE": "@Bob"}, 0),
    ('SET VARIABLE: <<@VOTE = "Bob">>', None, {"@VOTE": ""}, 1),  # quoted: a string
    ("SET VARIABLE: <<@VOTE = Bobby>>", None, {"@VOTE": ""}, 1),
    ("SET VARIABLE: <<@VOTE = Bob Eve>>", None, {"@VOTE": ""}, 1),
    ("SET VARIABLE: <<KILL = Bob>>", [OutSpec("KILL", type="actor")], {"KILL": "@Bob"}, 0),
    ("SET VARIABLE: <<KILL = eve>>", [OutSpec("KILL", type="actor")], {"KILL": "@Eve"}, 0),
    ("SET VARIABLE: <<KILL = Bob>>", None, {"KILL": "Bob"}, 0),  # not actor-valued: a string
    ("SET VARIABLE: <<KILL = Bob>>", [OutSpec("KILL", type="string")], {"KILL": "Bob"}, 0),
    ("SET VARIABLE: <<votes.@voter = Eve>>", None, {"votes": {"@Bob": "@Eve"}}, 0),
    (
        "SET VARIABLE: <<votes.@Bob = eve>>",
        [OutSpec("votes.@voter", type="string")],
        {"votes": {"@Bob": "@Eve"}},
        0,
    ),
    ("SET VARIABLE: <<hp.@Eve = Bob>>", None, {"hp": {"@Eve": "Bob", "@Bob": 80}}, 0),
    (
        "SET VARIABLE: <<@VOTE = Bob>>",
        [OutSpec("@VOTE", type="dropdown", choices=("@Eve", "@Bob"))],
        {"@VOTE": "@Bob"},
        0,
    ),
    (
        "SET VARIABLE: <<choice = eve>>",
        [OutSpec("choice", type="dropdown", choices=(["@Eve", "@Bob"],))],
        {"choice": "@Eve"},
        0,
    ),
    (
        "SET VARIABLE: <<choice = Olivia>>",
        [OutSpec("choice", type="dropdown", choices=(["@Eve", "@Bob"],))],
        {"choice": ""},
        1,
    ),
    (
        "SET VARIABLE: <<choice = Bob>>",
        [OutSpec("choice", type="enum", choices=("Bob", "Eve"))],
        {"choice": "Bob"},
        0,
    ),
    # values are data
    ("SET VARIABLE: <<choice = 接受>>", None, {"choice": "接受"}, 0),
    ('SET VARIABLE: <<choice = "A">>', None, {"choice": "A"}, 0),
    ("SET VARIABLE: <<choice = hello world>>", None, {"choice": "hello world"}, 0),
    ('SET VARIABLE: <<choice = "3">>', None, {"choice": "3"}, 0),
    ("SET VARIABLE: <<choice = count>>", None, {"choice": "count"}, 0),
    (
        "SET VARIABLE: <<note = __import__('os').system('x')>>",
        None,
        {"note": "__import__('os').system('x')"},
        0,
    ),
    ("SET VARIABLE: <<note = {count}>>", None, {"note": "{count}"}, 0),
    ("SET VARIABLE: <<note = it's fine>> I'm sure", None, {"note": "it's fine"}, 0),
    ('SET VARIABLE: <<note = "a >> b">>', None, {"note": "a >> b"}, 0),
    ("SET VARIABLE: <<count = 3>>", None, {"count": 3}, 0),
    ("SET VARIABLE: <<count += 5>>", None, {"count": 5}, 0),
    ("SET VARIABLE: <<count -= 2>>", None, {"count": -2}, 0),
    ("SET VARIABLE: <<price += 1>>", None, {"price": 2.5}, 0),
    ("SET VARIABLE: <<flag = True>>", None, {"flag": True}, 0),
    ("SET VARIABLE: <<note = null>>", None, {"note": None}, 0),
    ('SET VARIABLE: <<note = [@Eve, 2, "x"]>>', None, {"note": ["@Eve", 2, "x"]}, 0),
    ("SET VARIABLE: <<note = {@Eve: 1, b: two}>>", None, {"note": {"@Eve": 1, "b": "two"}}, 0),
    ("SET VARIABLE: <<玩家1 = 中文>>", None, {"玩家1": "中文"}, 0),
    # lists
    ("SET VARIABLE: <<alive = add(@Olivia)>>", None, {"alive": ["@Eve", "@Bob", "@Olivia"]}, 0),
    ("SET VARIABLE: <<alive = add(@Eve)>>", None, {"alive": ["@Eve", "@Bob"]}, 0),
    ("SET VARIABLE: <<alive = remove(@Eve)>>", None, {"alive": ["@Bob"]}, 0),
    ("SET VARIABLE: <<alive = remove(@Olivia)>>", None, {"alive": ["@Eve", "@Bob"]}, 0),
    ("设定变量：《alive = remove（@Eve）》", None, {"alive": ["@Bob"]}, 0),
    ("设定变量：《alive = 【@Bob】》", None, {"alive": ["@Bob"]}, 0),
    # dict entries and actor attributes
    ("SET VARIABLE: <<votes.@Eve = @Bob>>", None, {"votes": {"@Eve": "@Bob"}}, 0),
    ("SET VARIABLE: <<hp.@Eve -= 3>>", None, {"hp": {"@Eve": 97, "@Bob": 80}}, 0),
    ("SET VARIABLE: <<@Bob.hp += 10>>", None, {"hp": {"@Eve": 100, "@Bob": 90}}, 0),
    ('SET VARIABLE: <<scores["bob"] = 4>>', None, {"scores": {"alice": 1, "bob": 4}}, 0),
    ("SET VARIABLE: <<scores.alice += 1>>", None, {"scores": {"alice": 2}}, 0),
    ("SET VARIABLE: <<votes.@voter = @Eve>>", None, {"votes": {"@Bob": "@Eve"}}, 0),
    ("SET VARIABLE: <<votes.@Eve += 1>>", None, {"votes": {"@Eve": 1}}, 0),
    ("SET VARIABLE: <<@VOTE = @小灵>>", None, {"@VOTE": "@小灵"}, 0),
    ("SET VARIABLE: <<@VOTE += 001>>", None, {"@VOTE": ""}, 1),  # §4.3: an actor or ""
    ("SET VARIABLE: <<@VOTE = add(@Eve)>>", None, {"@VOTE": ""}, 1),
    ("SET VARIABLE: <<@voter -= 1>>", None, {"@voter": "@Bob"}, 1),
    # whitelist
    (
        "SET VARIABLE: <<KILL = @Eve>> SET VARIABLE: <<count = 9>>",
        [OutSpec("KILL")],
        {"KILL": "@Eve", "count": 0},
        1,
    ),
    (
        "SET VARIABLE: <<votes.@voter = @Eve>>",
        [OutSpec("votes", key="@voter")],
        {"votes": {"@Bob": "@Eve"}},
        0,
    ),
    (
        "SET VARIABLE: <<votes.@Bob = @Eve>>",
        [OutSpec("votes.@voter")],
        {"votes": {"@Bob": "@Eve"}},
        0,
    ),
    ("SET VARIABLE: <<votes.@Eve = @Eve>>", [OutSpec("votes.@voter")], {"votes": {}}, 1),
    ("SET VARIABLE: <<votes = {}>>", [OutSpec("votes.@voter")], {"votes": {}}, 1),
    ("SET VARIABLE: <<undeclared = 1>>", None, {}, 1),
    ("SET VARIABLE: <<undeclared = 1>>", [OutSpec("undeclared")], {}, 1),
    ("SET VARIABLE: <<@Eve.type = human>>", None, {}, 1),
    # typed outs
    ("SET VARIABLE: <<count = 7>>", [OutSpec("count", type="int")], {"count": 7}, 0),
    ('SET VARIABLE: <<count = "7">>', [OutSpec("count", type="int")], {"count": 7}, 0),
    ("SET VARIABLE: <<count = seven>>", [OutSpec("count", type="int")], {"count": 0}, 1),
    ("SET VARIABLE: <<count += 2>>", [OutSpec("count", type="int")], {"count": 2}, 0),
    ("SET VARIABLE: <<price = 3>>", [OutSpec("price", type="float")], {"price": 3.0}, 0),
    ("SET VARIABLE: <<flag = yes>>", [OutSpec("flag", type="bool")], {"flag": True}, 0),
    ("SET VARIABLE: <<flag = maybe>>", [OutSpec("flag", type="bool")], {"flag": False}, 1),
    ("SET VARIABLE: <<note = 42>>", [OutSpec("note", type="string")], {"note": "42"}, 0),
    ("SET VARIABLE: <<KILL = @Bob>>", [OutSpec("KILL", type="actor")], {"KILL": "@Bob"}, 0),
    ("SET VARIABLE: <<KILL = Nobody>>", [OutSpec("KILL", type="actor")], {"KILL": ""}, 1),
    ("SET VARIABLE: <<KILL = @Nobody>>", None, {"KILL": ""}, 1),
    (
        "SET VARIABLE: <<choice = b>>",
        [OutSpec("choice", type="enum", choices=("a", "b"))],
        {"choice": "b"},
        0,
    ),
    (
        "SET VARIABLE: <<choice = c>>",
        [OutSpec("choice", type="enum", choices=("a", "b"))],
        {"choice": ""},
        1,
    ),
    (
        "SET VARIABLE: <<choice = @Eve>>",
        [OutSpec("choice", type="dropdown", choices=(["@Eve", "@Bob"],))],
        {"choice": "@Eve"},
        0,
    ),
    (
        "SET VARIABLE: <<choice = @Olivia>>",
        [OutSpec("choice", type="dropdown", choices=(["@Eve", "@Bob"],))],
        {"choice": ""},
        1,
    ),
    # malformed
    ("SET VARIABLE: KILL = @Eve", None, {"KILL": ""}, 1),
    ("SET VARIABLE: <<KILL @Eve>>", None, {"KILL": ""}, 1),
    ("SET VARIABLE: <<hello world = 3>>", None, {}, 1),
    ("SET VARIABLE: <<count += >>", None, {"count": 0}, 1),
    ("SET VARIABLE: <<note += 1>>", None, {"note": ""}, 1),
    ("no signals here << x = 1 >>", None, {}, 0),
]


@pytest.mark.parametrize(("reply", "outs", "expected", "rejected"), CASES)
def test_signal_table(
    reply: str, outs: list[OutSpec] | None, expected: dict, rejected: int
) -> None:
    variables = fresh()
    outcome = apply_signals(reply, variables.root, outs)
    snapshot = variables.snapshot()
    for name, value in expected.items():
        assert snapshot[name] == value
    assert len(outcome.rejected) == rejected
    assert [r.raw for r in outcome.rejected] == outcome.SET_VARIABLE


def test_increment_on_int_stays_int() -> None:
    variables = fresh()
    apply_signals("SET VARIABLE: <<count += 5>>", variables.root, None)
    assert type(variables.root["count"]) is int


def test_actor_values_are_actor_references() -> None:
    variables = fresh()
    apply_signals("SET VARIABLE: <<KILL = @Eve>>", variables.root, None)
    kill = variables.root["KILL"]
    assert isinstance(kill, Actor) and kill == "@Eve"
    assert kill["soul"] == "Eve"


def test_rejected_signals_keep_raw_text_in_order() -> None:
    variables = fresh()
    reply = "SET VARIABLE: <<a = 1>> ok SET VARIABLE: <<count = 1>> SET VARIABLE: <<b = 2>>"
    outcome = apply_signals(reply, variables.root, None)
    assert outcome.SET_VARIABLE == ["SET VARIABLE: <<a = 1>>", "SET VARIABLE: <<b = 2>>"]
    assert variables.root["count"] == 1


def test_rollback_undoes_every_accepted_signal() -> None:
    variables = fresh()
    reply = (
        "SET VARIABLE: <<count += 2>> SET VARIABLE: <<KILL = @Eve>> "
        "SET VARIABLE: <<alive = remove(@Eve)>> SET VARIABLE: <<alive = add(@Olivia)>> "
        "SET VARIABLE: <<hp.@Eve -= 3>> SET VARIABLE: <<votes.@Eve = @Bob>> "
        "SET VARIABLE: <<note = hi>> SET VARIABLE: <<note += there>>"
    )
    before = variables.snapshot()
    outcome = apply_signals(reply, variables.root, None)
    assert not outcome.rejected
    assert variables.snapshot() != before
    outcome.rollback()
    assert variables.snapshot() == before


def test_rollback_keeps_concurrent_increments() -> None:
    variables = fresh()
    root = variables.root
    branch = root.branch()
    outcome = apply_signals("SET VARIABLE: <<count += 5>>", branch, None)
    root.assign("count", "+=", 1)  # a sibling's increment in between
    outcome.rollback()
    assert root["count"] == 1


def test_unset_lists_missing_required_outs() -> None:
    variables = fresh()
    outs = [OutSpec("KILL"), OutSpec("choice", optional=True), OutSpec("count")]
    outcome = apply_signals("SET VARIABLE: <<KILL = @Eve>>", variables.root, outs)
    assert [o.target for o in outcome.unset] == ["count"]


@pytest.mark.parametrize(
    ("body", "target", "key", "op", "value"),
    [
        ("KILL = @Eve", "KILL", None, "=", "@Eve"),
        ("x+=1", "x", None, "+=", "1"),
        ("x -= 2", "x", None, "-=", "2"),
        ("xs = add(@a)", "xs", None, "add", "@a"),
        ("xs = remove( @a )", "xs", None, "remove", "@a"),
        ("votes.@x = 1", "votes", "@x", "=", "1"),
        ("@x.hp += 1", "hp", "@x", "+=", "1"),
        ("hp.@x += 1", "hp", "@x", "+=", "1"),
        ('d["a b"] = c = d', "d", '"a b"', "=", "c = d"),
        ("note = a = b", "note", None, "=", "a = b"),
    ],
)
def test_parse_signal(body: str, target: str, key: str | None, op: str, value: str) -> None:
    assert parse_signal(body) == parse_signal(body)
    signal = parse_signal(body)
    assert (signal.target, signal.key, signal.op, signal.value_text) == (target, key, op, value)


@pytest.mark.parametrize("body", ["no operator", "a b = 1", "= 3", "x.y.z = 1"])
def test_parse_signal_rejects(body: str) -> None:
    with pytest.raises(SignalError):
        parse_signal(body)


def test_extract_positions_and_malformed() -> None:
    reply = "a SET VARIABLE: <<x = 1>> b\nSET VARIABLE: broken\nc"
    found = extract_signals(reply)
    assert [(s.body, s.text) for s in found] == [
        ("x = 1", "SET VARIABLE: <<x = 1>>"),
        (None, "SET VARIABLE: broken"),
    ]
    assert reply[found[0].start : found[0].end] == "SET VARIABLE: <<x = 1>>"


def test_unclosed_bracket_does_not_swallow_next_signal() -> None:
    found = extract_signals("SET VARIABLE: <<x = 1\nSET VARIABLE: <<y = 2>>")
    assert [s.body for s in found] == [None, "y = 2"]


def test_outspec_normalizes_targets() -> None:
    assert OutSpec("votes.@voter") == OutSpec("votes", key="@voter")
    assert OutSpec("@x.hp").target == "hp" and OutSpec("@x.hp").key == "@x"
    assert OutSpec("d[k]").label == "d[k]"
    assert OutSpec("votes.@voter").label == "votes.@voter"
    with pytest.raises(ValueError):
        OutSpec("x", type="list")


def test_split_target_forms() -> None:
    assert split_target("a") == ("a", None)
    assert split_target("@a") == ("@a", None)
    assert split_target("d[@x]") == ("d", "@x")


def test_apply_values_uses_labels_and_types() -> None:
    variables = fresh()
    outs = [OutSpec("count", type="int"), OutSpec("votes.@voter", type="actor")]
    outcome = apply_values(
        {"count": "4", "votes.@voter": "@Eve", "KILL": "@Bob"}, variables.root, outs
    )
    assert variables.root["count"] == 4
    assert variables.root["votes"] == FemDict({"@Bob": "@Eve"})
    assert [r.raw for r in outcome.rejected] == ["KILL = @Bob"]


def test_read_triples() -> None:
    assert read_triples([(True, False, "fine"), (False, True, "bad")]).ok is False
    result = read_triples((True, True, "ok"))
    assert result.ok and result.feedback == ["ok"]
    with pytest.raises(RunError, match="triples"):
        read_triples("yes")


def test_run_resolve_named_arguments() -> None:
    variables = fresh()
    seen = {}

    def check(KILL=None, alive=None, SET_VARIABLE=None):  # noqa: N803 - names from the script
        seen.update(KILL=KILL, alive=alive, SET_VARIABLE=SET_VARIABLE)
        return [(KILL in alive, True, "target must be alive")]

    variables.root.assign("KILL", "=", "@Olivia")
    result = asyncio.run(
        run_resolve(
            check,
            ["KILL", "alive", "SET_VARIABLE"],
            variables.root,
            prompt="p",
            llm_output="r",
            set_variable=["SET VARIABLE: <<x>>"],
        )
    )
    assert not result.ok and result.feedback == ["target must be alive"]
    assert seen["SET_VARIABLE"] == ["SET VARIABLE: <<x>>"]


def test_an_async_resolve_is_awaited() -> None:
    """§10.5: an ``async def`` resolve returned a coroutine, read as malformed triples."""

    async def check(llm_output):
        return [(llm_output == "ok", False, "")]

    result = asyncio.run(
        run_resolve(check, None, fresh().root, prompt="p", llm_output="ok", set_variable=[])
    )
    assert result.ok


def test_run_resolve_without_arguments_passes_what_it_accepts() -> None:
    variables = fresh()

    def check(prompt, llm_output, my_task):
        return [(llm_output == "ok" and my_task == "t" and prompt == "p", False, "")]

    result = asyncio.run(
        run_resolve(
            check,
            None,
            variables.root,
            prompt="p",
            llm_output="ok",
            set_variable=[],
            inputs={"my_task": "t"},
        )
    )
    assert result.ok


def test_run_resolve_without_arguments_passes_an_empty_set_variable_it_names() -> None:
    """§10.5: a function that requires ``SET_VARIABLE`` gets it even when no signal was
    rejected (left out, it failed with a TypeError exactly when the reply was good); one with a
    default, or ``**kwargs`` alone, still gets it only when it is not empty."""
    seen: dict[str, object] = {}

    def check(prompt, llm_output, SET_VARIABLE):  # noqa: N803 - the name §10.5 gives it
        seen["named"] = SET_VARIABLE
        return [(True, False, "")]

    def loose(**kwargs):
        seen["loose"] = sorted(kwargs)
        return [(True, False, "")]

    def defaulted(prompt, llm_output, SET_VARIABLE=None):  # noqa: N803
        seen["defaulted"] = SET_VARIABLE
        return [(True, False, "")]

    for func in (check, loose, defaulted):
        result = asyncio.run(
            run_resolve(func, None, fresh().root, prompt="p", llm_output="ok", set_variable=[])
        )
        assert result.ok
    assert seen == {"named": [], "loose": ["llm_output", "prompt"], "defaulted": None}


def test_run_resolve_errors_become_run_errors() -> None:
    def broken(**kwargs):
        raise ValueError("boom")

    with pytest.raises(RunError, match="boom"):
        asyncio.run(
            run_resolve(broken, None, fresh().root, prompt="", llm_output="", set_variable=[])
        )


@pytest.mark.parametrize(
    ("value", "accepted"),
    [
        ("@Eve", True),
        ('""', True),
        ("Eve", True),
        ('"Eve"', False),
        ("3", False),
        ("@Nobody", False),
        ("Nobody", False),
    ],
)
def test_actor_variables_take_actors_only(value: str, accepted: bool) -> None:
    variables = fresh()
    outcome = apply_signals(f"SET VARIABLE: <<@VOTE = {value}>>", variables.root, None)
    assert (not outcome.rejected) is accepted


def test_a_bare_name_needs_an_exact_or_unique_match() -> None:
    """``Ann`` is exactly @Ann; ``ann`` folds to both @Ann and @ANN, so it names nobody."""
    variables = Variables({"@VOTE": ""}, [ActorSpec("@Ann"), ActorSpec("@ANN"), ActorSpec("@Bo")])
    outcome = apply_signals("SET VARIABLE: <<@VOTE = ann>>", variables.root, None)
    assert variables.root["@VOTE"] == "" and len(outcome.rejected) == 1
    outcome = apply_signals("SET VARIABLE: <<@VOTE = ANN>>", variables.root, None)
    assert variables.root["@VOTE"] == "@ANN" and not outcome.rejected
    apply_signals("SET VARIABLE: <<@VOTE = bo>>", variables.root, None)
    assert variables.root["@VOTE"] == "@Bo"


def test_a_bare_name_becomes_an_actor_reference() -> None:
    variables = fresh()
    outs = [OutSpec("@VOTE", type="dropdown", choices=("@Eve", "@Bob"))]
    outcome = apply_signals("SET VARIABLE: <<@VOTE = Bob>>", variables.root, outs)
    vote = variables.root["@VOTE"]
    assert isinstance(vote, Actor) and vote["soul"] == "Bob"
    assert outcome.applied[0].value == "@Bob"


# ------------------------------------------------- entry keys: literal, actor, variable (§10.4)


def looped(i: object) -> tuple[Variables, object]:
    """A frame inside ``for i in …`` bound to ``i``, over the globals of :func:`fresh`."""
    variables = fresh()
    return variables, variables.root.loop({"i": i})


@pytest.mark.parametrize(
    ("reply", "applied"),
    [
        ("SET VARIABLE: <<scores[2] = 6>>", {2: 6}),
        ("SET VARIABLE: <<scores[i] = 6>>", {2: 6}),  # written like the out: i's binding
        ('SET VARIABLE: <<scores["2"] = 6>>', {2: 6}),  # the model cannot know the type
        ("SET VARIABLE: <<scores[3] = 6>>", {}),
        ('SET VARIABLE: <<scores["i"] = 6>>', {}),
    ],
)
def test_variable_key_out_is_the_current_binding(reply: str, applied: dict) -> None:
    """``out: scores[i]`` inside ``for i in range(3)`` allows ``scores[<i now>]``, and the
    value lands under that key, never under the string ``"i"``."""
    variables, frame = looped(2)
    outs = [OutSpec("scores", key=2, key_from="i", type="int")]
    outcome = apply_signals(reply, frame, outs)
    assert variables.root["scores"] == {"alice": 1, **applied}
    assert len(outcome.rejected) == (0 if applied else 1)
    if applied:
        assert outcome.applied[0].key == 2 and not outcome.unset


def test_variable_key_is_read_when_the_signal_is_applied() -> None:
    """The whitelist reads ``i`` in the frame it is given, not the value the spec was built
    with (like ``dict.@x``, §10.4)."""
    variables, frame = looped(1)
    out = OutSpec("scores", key=0, key_from="i")
    apply_signals("SET VARIABLE: <<scores[i] = 5>>", frame, [out])
    assert variables.root["scores"] == {"alice": 1, 1: 5}


def test_variable_key_without_a_value_is_rejected() -> None:
    variables, frame = looped(None)
    outcome = apply_signals(
        "SET VARIABLE: <<scores[i] = 5>>", frame, [OutSpec("scores", key=0, key_from="i")]
    )
    assert variables.root["scores"] == {"alice": 1}
    assert "i has no value" in outcome.rejected[0].reason


@pytest.mark.parametrize(
    ("out", "reply", "expected"),
    [
        (OutSpec("scores", key="alice"), "SET VARIABLE: <<scores.alice = 3>>", {"alice": 3}),
        (OutSpec("scores", key="alice"), 'SET VARIABLE: <<scores["alice"] = 3>>', {"alice": 3}),
        (OutSpec("scores", key="bob"), "SET VARIABLE: <<scores[bob] = 3>>", {"alice": 1, "bob": 3}),
        (OutSpec("scores", key=3), 'SET VARIABLE: <<scores["3"] = 3>>', {"alice": 1, 3: 3}),
        (OutSpec("scores", key="3"), "SET VARIABLE: <<scores[3] = 3>>", {"alice": 1, "3": 3}),
        (OutSpec('scores["k"]'), "SET VARIABLE: <<scores.k = 3>>", {"alice": 1, "k": 3}),
    ],
)
def test_literal_key_out_writes_its_own_key(out: OutSpec, reply: str, expected: dict) -> None:
    """The entry is the out's key (its type included), however the model spells it."""
    variables = fresh()
    outcome = apply_signals(reply, variables.root, [out])
    assert not outcome.rejected
    assert variables.root["scores"] == expected


def test_without_outs_a_signal_key_is_data() -> None:
    """No ``out:``: ``scores[i]`` is the string key ``"i"`` (§10.3: never looked up)."""
    variables, frame = looped(2)
    apply_signals("SET VARIABLE: <<scores[i] = 6>>", frame, None)
    assert variables.root["scores"] == {"alice": 1, "i": 6}


def test_outspec_keys_labels_and_shown_names() -> None:
    variables, frame = looped(2)
    assert OutSpec("d[3]").key == 3 and OutSpec('d["3"]').key == "3"
    assert OutSpec("scores", key=2, key_from="i").label == "scores[i]"
    assert OutSpec("scores", key=2, key_from="i").shown(frame) == "scores[2]"
    assert OutSpec("votes.@voter").shown(frame) == "votes.@Bob"
    assert OutSpec("votes.@voter").shown(None) == "votes.@voter"
    assert OutSpec("scores", key="alice").label == "scores[alice]"
    assert OutSpec("x", caption="how many").label == "x"


def test_apply_values_with_a_variable_key_label() -> None:
    """A person's answer keyed by the out's label (``d[i]``) goes to ``d[<i now>]``."""
    variables, frame = looped(2)
    outs = [OutSpec("scores", key=2, key_from="i", type="int")]
    outcome = apply_values({"scores[i]": "7"}, frame, outs)
    assert not outcome.rejected and variables.root["scores"] == {"alice": 1, 2: 7}
    assert outcome.applied[0].key == 2


def test_a_list_valued_key_is_rejected_and_unset_needs_no_hashing() -> None:
    """A variable key holding a list cannot name an entry: the signal is rejected with the
    reason, not a TypeError; ``unset`` works with outs whose choices hold lists."""
    variables = fresh()
    outs = [
        OutSpec("votes", key="@Eve", key_from="alive"),
        OutSpec("choice", type="dropdown", choices=(["@Eve", "@Bob"],)),
    ]
    outcome = apply_signals("SET VARIABLE: <<votes[alive] = 1>>", variables.root, outs)
    assert "alive is [@Eve, @Bob], which cannot be a dict key" in outcome.rejected[0].reason
    assert [o.target for o in outcome.unset] == ["votes", "choice"]


def test_an_unbound_actor_key_rejects_the_answer_instead_of_failing() -> None:
    variables = fresh()
    variables.root.assign("@voter", "=", "")
    outs = [OutSpec("votes.@voter")]
    for outcome in (
        apply_values({"votes.@voter": "@Eve"}, variables.root, outs),
        apply_signals("SET VARIABLE: <<votes.@voter = @Eve>>", variables.root, outs),
    ):
        assert len(outcome.rejected) == 1 and "votes.@voter" in outcome.rejected[0].reason
    assert variables.root["votes"] == {}


@pytest.mark.parametrize(("key", "problem"), [(None, "i has no value"), ([1], "i is [1]")])
def test_a_variable_key_without_an_entry_fails_when_the_action_starts(key, problem) -> None:
    """Generated code builds ``OutSpec("d", key=ctx["i"], key_from="i")`` as the action starts:
    a None or list key is a run error there (an ``@func`` out would otherwise overwrite the
    whole dict)."""
    with pytest.raises(RunError, match=rf"out d\[i\]: {re.escape(problem)}"):
        OutSpec("d", key=key, key_from="i")
