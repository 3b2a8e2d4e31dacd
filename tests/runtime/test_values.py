"""The literal grammar (§4.2, §10.3), actor references (§7.1), FemDict (§4.4), format_value (§9.4)."""

from __future__ import annotations

import copy
import json
import pickle

import pytest
from fems_runtime.values import (
    Actor,
    FemDict,
    LiteralError,
    format_value,
    parse_literal,
    to_json,
)
from fems_runtime.variables import ActorSpec, Variables


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('"text"', "text"),
        ("'text'", "text"),
        ("“中文”", "中文"),
        ('"3"', "3"),
        ('"true"', "true"),
        ('"a\\"b\\n"', 'a"b\n'),
        ("3", 3),
        ("-2", -2),
        ("+4", 4),
        ("1.5", 1.5),
        ("1e3", 1000.0),
        (".5", 0.5),
        ("true", True),
        ("True", True),
        ("false", False),
        ("False", False),
        ("TRUE", True),  # any case, as in vars: (§4.2, §12.2)
        ("FALSE", False),
        ("null", None),
        ("None", None),
        ("测试剧本", "测试剧本"),
        ("hello world", "hello world"),
        ("001", "001"),
        ("01.5", "01.5"),  # leading zeros: written as ids are (§4.2)
        ("-007", "-007"),
        ("", ""),
        ("  padded  ", "padded"),
        ("[1, 2, 3]", [1, 2, 3]),
        ("[]", []),
        ("[a, [b, c]]", ["a", ["b", "c"]]),
        ('["x, y", 2]', ["x, y", 2]),
        ("[1，2]", [1, 2]),
        ("{}", {}),
        ("{a: 1, 'b c': two, 3: [x]}", {"a": 1, "b c": "two", 3: ["x"]}),
        ("{a：1}", {"a": 1}),
        ("【@a，@b】", ["@a", "@b"]),  # §1.4: 【 】 are [ ]
        ("{a: 【1, 2】}", {"a": [1, 2]}),
        ("【1, 2]", "【1, 2]"),
        ("{x}", "{x}"),
        ("{ }", {}),
        ("[1, 2", "[1, 2"),
        ("[1, ]]", "[1, ]]"),
        ('"a" "b"', '"a" "b"'),
        ("__import__('os').system('x')", "__import__('os').system('x')"),
        ("os.system('rm -rf /')", "os.system('rm -rf /')"),
        ("lambda: 1", "lambda: 1"),
        ("nan", "nan"),
        ("inf", "inf"),
        ("(1, 2)", "(1, 2)"),
    ],
)
def test_parse_literal(text: str, expected: object) -> None:
    value = parse_literal(text)
    assert value == expected
    assert type(value) is type(expected) or isinstance(expected, dict)


def test_actor_literals_are_actors() -> None:
    value = parse_literal("[@Eve, {@Bob: 1}]")
    assert value == ["@Eve", {"@Bob": 1}]
    assert isinstance(value[0], Actor)
    assert isinstance(next(iter(value[1])), Actor)


def test_dicts_are_fem_dicts_with_none_for_missing_keys() -> None:
    value = parse_literal("{a: {b: 1}}")
    assert isinstance(value, FemDict) and isinstance(value["a"], FemDict)
    assert value["missing"] is None
    assert "missing" not in value


@pytest.mark.parametrize("text", ["@Nobody", "[@Eve, @Nobody]", "{@Nobody: 1}", "{a: @Nobody}"])
def test_undefined_actors_rejected_when_actors_given(text: str) -> None:
    with pytest.raises(LiteralError, match="@Nobody"):
        parse_literal(text, {"@Eve"})


def test_defined_actor_accepted_when_actors_given() -> None:
    assert parse_literal("@Eve", {"@Eve"}) == "@Eve"


def test_make_actor_builds_actor_values() -> None:
    assert parse_literal("[@Eve]", make_actor=lambda n: ("actor", n)) == [("actor", "@Eve")]


def test_actor_is_a_string_with_state() -> None:
    variables = Variables({"hp": {"@Eve": 100}}, [ActorSpec("@Eve", soul="1", source="m")])
    eve = variables.actor("@Eve")
    assert eve == "@Eve" and hash(eve) == hash("@Eve") and eve in {"@Eve"}
    assert eve + "!" == "@Eve!" and eve[0] == "@" and eve[1:] == "Eve"
    assert eve["soul"] == "1" and eve["name"] == "@Eve" and eve["hp"] == 100
    assert eve.get("mp", 7) == 7
    state = dict(eve.items())
    assert state["type"] == "ai" and state["source"] == "m" and state["hp"] == 100
    assert json.dumps([eve]) == '["@Eve"]'
    assert copy.deepcopy(eve) is eve
    assert pickle.loads(pickle.dumps(eve)) == "@Eve"
    with pytest.raises(KeyError):
        eve["mp"]


def test_actor_without_registry() -> None:
    assert Actor("@x")["name"] == "@x"
    with pytest.raises(ValueError):
        Actor("x")


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("plain", "plain"),
        (Actor("@Eve"), "@Eve"),
        ([Actor("@a"), Actor("@b")], "[@a, @b]"),
        ({Actor("@a"): 1, Actor("@b"): 2}, "{@a: 1, @b: 2}"),
        (True, "true"),
        (False, "false"),
        (None, ""),
        (3, "3"),
        (1.5, "1.5"),
        (["x", None, True], "[x, null, true]"),
        ((1, 2), "[1, 2]"),
        ({"k": [1]}, "{k: [1]}"),
        ({"b", "a"}, "[a, b]"),
    ],
)
def test_format_value(value: object, text: str) -> None:
    assert format_value(value) == text


def test_to_json() -> None:
    data = to_json({Actor("@a"): (1, {Actor("@b")}), "f": float("inf"), True: None})
    assert data == {"@a": [1, ["@b"]], "f": "inf", "true": None}
    assert json.dumps(data)
