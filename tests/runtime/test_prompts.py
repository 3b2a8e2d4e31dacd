"""The prompt renderer (§9.4)."""

from __future__ import annotations

import pytest
from fems_runtime.prompts import render
from fems_runtime.variables import ActorSpec, Variables


@pytest.fixture
def frame():
    variables = Variables(
        {
            "alive": ["@Eve", "@Bob"],
            "hp": {"@Eve": 100},
            "task_list": {"@Eve": "write tests", "x": 1},
            "scores": {"a": {"deep": 5}},
            "flag": True,
            "empty": None,
            "day": 3,
            "@speaker": "@Eve",
            "@nobody": "",
            "items": [10, 20],
        },
        [ActorSpec("@Eve", soul="1"), ActorSpec("@Bob", type="human")],
    )
    return variables.root.loop({"i": 1})


@pytest.mark.parametrize(
    ("template", "text"),
    [
        ("Day {day}.", "Day 3."),
        ("选择 {1} 或 {2}", "选择 {1} 或 {2}"),  # numbers are not names (§1.6): literal
        ("{3d}", "{3d}"),
        ("{alive}", "[@Eve, @Bob]"),
        ("{hp}", "{@Eve: 100}"),
        ("{flag}", "true"),
        ("{empty}|", "|"),
        ("{ day }", "3"),
        ("{@Eve}", "@Eve"),
        ("{@speaker}", "@Eve"),
        ("{@Eve.hp}", "100"),
        ("{hp.@Eve}", "100"),
        ("{hp.@speaker}", "100"),
        ("{@speaker.soul}", "1"),
        ("{@Bob.type}", "human"),
        ("{@Bob.hp}", ""),
        ("{@nobody.hp}", ""),
        ("{task_list[@Eve]}", "write tests"),
        ("{task_list[@speaker]}", "write tests"),
        ('{task_list["x"]}', "1"),
        ("{task_list[x]}", "1"),
        ("{task_list.x}", "1"),
        ("{task_list[@Bob]}", ""),
        ("{items[i]}", "20"),
        ("{i}", "1"),
        ("{missing}", ""),
        ("{{literal}}", "{literal}"),
        ("{{day}}", "{day}"),
        ("{{{day}}}", "{3}"),
        ('JSON: {"a": 1}', 'JSON: {"a": 1}'),
        ("{ }", "{ }"),
        ("{}", "{}"),
        ("{not a path}", "{not a path}"),
        ("a } b {", "a } b {"),
        ("中文{day}天", "中文3天"),
        ("http://x/{day}#top", "http://x/3#top"),
    ],
)
def test_render(frame, template: str, text: str) -> None:
    assert render(template, frame) == text


def test_in_mode_substitutes_only_listed_names(frame) -> None:
    only = {"my_task": "write tests", "n": 2}
    assert (
        render("{my_task} x{n} {day} {alive} {{x}}", frame, only)
        == "write tests x2 {day} {alive} {x}"
    )


def test_mapping_lookup() -> None:
    data = {"a": 1, "d": {"k": "v"}, "@x": "@x", "hp": {"@x": 5}}
    assert render("{a} {d[k]} {d.k} {hp.@x} {zz}", data) == "1 v v 5 "


def test_same_text_every_time(frame) -> None:
    template = "{alive} {hp} {flag}"
    assert render(template, frame) == render(template, frame)
