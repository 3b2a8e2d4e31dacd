"""Variables and frames (§4, §7.2, §7.3, §11.3, §12.5a): resolution, aliases, module and loop
frames, the concurrent-branch rule, merge order, snapshots."""

from __future__ import annotations

import asyncio
import json

import pytest
from fems_runtime.records import RunError
from fems_runtime.values import Actor, FemDict
from fems_runtime.variables import ActorSpec, BlueprintSpec, Variables

ACTORS = [
    ActorSpec("@Eve", soul="1", source="fast", tools=("web",)),
    ActorSpec("@Bob", type="human", source="7"),
    ActorSpec("@Anon", type="human", source="0"),
    ActorSpec("@小灵"),
]


def make(**values: object) -> Variables:
    base = {
        "day": 0,
        "alive": ["@Eve", "@Bob"],
        "hp": {"@Eve": 100},
        "votes": {},
        "@VOTE": "",
        "@speaker": "",
        "@上帝": "@小灵",
        "count": 0,
        "name": "global",
    }
    base.update(values)
    return Variables(base, ACTORS)


def test_values_are_adopted() -> None:
    root = make().root
    assert isinstance(root["alive"][0], Actor)
    assert isinstance(root["hp"], FemDict) and root["hp"]["@Bob"] is None
    assert root["@Eve"] == "@Eve" and isinstance(root["@Eve"], Actor)


@pytest.mark.parametrize(
    ("name", "op", "value", "message"),
    [
        ("alive", "-=", 1, "cannot subtract 1 from 'alive' ([@Eve, @Bob])"),
        ("day", "+=", ["@Eve"], "cannot add [@Eve] to 'day' (0)"),
        ("hp", "add", "@Eve", "'hp' is not a list, so add() cannot change it ({@Eve: 100})"),
        ("name", "-=", "x", "cannot subtract 'x' from 'name' ('global')"),
    ],
)
def test_an_operation_that_does_not_fit_shows_the_values_as_written(
    name: str, op: str, value: object, message: str
) -> None:
    """§9.6: the run error writes actors as ``@name`` (§9.4), never Python's ``Actor('@Eve')``."""
    with pytest.raises(RunError) as caught:
        make().root.assign(name, op, value)
    assert caught.value.message == message


def test_undeclared_name_is_a_run_error() -> None:
    with pytest.raises(RunError, match="undeclared variable 'nope'"):
        make().root.get("nope")
    with pytest.raises(RunError, match="undeclared"):
        make().root.assign("nope", "=", 1)


@pytest.mark.parametrize(
    ("actor", "attr", "value"),
    [
        ("@Eve", "type", "ai"),
        ("@Eve", "soul", "1"),
        ("@Eve", "source", "fast"),
        ("@Eve", "tools", ["web"]),
        ("@Eve", "name", "@Eve"),
        ("@Bob", "type", "human"),
        ("@Bob", "soul", "Bob"),
        ("@Eve", "hp", 100),
        ("@Bob", "hp", None),
        ("@上帝", "soul", "小灵"),
    ],
)
def test_attributes(actor: str, attr: str, value: object) -> None:
    assert make().root.attr(actor, attr) == value


def test_static_attributes_win_over_dicts() -> None:
    root = make(type={"@Eve": "wolf"}).root
    assert root.attr("@Eve", "type") == "ai"


def test_attribute_of_non_dict_is_a_run_error() -> None:
    with pytest.raises(RunError, match="not a dict"):
        make().root.attr("@Eve", "day")


def test_attribute_writes_go_to_the_dict() -> None:
    root = make().root
    root.assign("hp", "-=", 3, "@Eve")
    root.assign("hp", "=", 50, "@Bob")
    assert root["hp"] == {"@Eve": 97, "@Bob": 50}
    with pytest.raises(RunError, match="fixed attribute"):
        root.assign("type", "=", "human", "@Eve")
    with pytest.raises(RunError, match="fixed attribute"):
        root.loop({"@x": root["@Eve"]}).assign("soul", "=", "2", "@x")


def test_alias_chain() -> None:
    variables = make(**{"@a": "@b", "@b": "@c", "@c": "@Eve"})
    assert variables.root["@a"] == "@Eve"
    assert variables.root.resolve_actor("@上帝") == "@小灵"


def test_alias_chain_longer_than_ten_hops() -> None:
    chain = {f"@v{i}": f"@v{i + 1}" for i in range(11)}
    chain["@v11"] = "@Eve"
    variables = make(**chain)
    assert variables.root["@v1"] == "@Eve"
    with pytest.raises(RunError, match="more than 10"):
        variables.root.get("@v0")


def test_alias_cycle_stops() -> None:
    with pytest.raises(RunError, match="more than 10"):
        make(**{"@a": "@b", "@b": "@a"}).root.get("@a")


def test_unbound_actor_variable_is_named() -> None:
    root = make().root
    assert root["@speaker"] == ""
    with pytest.raises(RunError, match="@speaker is unbound"):
        root.resolve_actor("@speaker", "the executor")


def test_actor_info() -> None:
    variables = make()
    info = variables.actor_info("@Bob")
    assert info["user"] == "7" and info["type"] == "human"
    assert variables.actor_info("@Anon")["user"] is None
    assert variables.actor_info("@Eve")["hp"] == 100 and "hp" not in variables.actor_info("@Bob")


def test_module_frames_are_fresh_and_write_through_to_globals() -> None:
    root = make().root
    call = root.module("M", params={"task": "t1"}, local={"finish": False})
    call.assign("finish", "=", True)
    call.assign("day", "+=", 1)
    call.assign("name", "=", "changed")
    assert call["task"] == "t1" and call["finish"] is True
    assert root["day"] == 1 and root["name"] == "changed"
    assert not root.declared("finish")
    again = root.module("M", params={"task": "t2"}, local={"finish": False})
    assert again["finish"] is False


def test_module_sees_callers_loop_variables() -> None:
    root = make().root
    loop = root.loop({"@coder": root["@Eve"]})
    call = loop.module("M", params={}, local={"name": "local"})
    assert call["@coder"] == "@Eve"
    assert call["name"] == "local" and root["name"] == "global"


def test_module_recursion_limit() -> None:
    frame = make().root
    for _ in range(64):
        frame = frame.module("M")
    with pytest.raises(RunError, match="deeper than 64"):
        frame.module("M")


def test_loop_variable_shadows_only_inside_the_body() -> None:
    root = make().root
    body = root.loop({"name": "loop"})
    body.assign("name", "=", "inner")
    assert body["name"] == "inner" and root["name"] == "global"


def test_branch_assignment_is_branch_local_until_merge() -> None:
    root = make().root
    a, b = root.branch(), root.branch()
    a.assign("@VOTE", "=", "@Eve")
    b.assign("@VOTE", "=", "@Bob")
    assert a["@VOTE"] == "@Eve" and b["@VOTE"] == "@Bob" and root["@VOTE"] == ""
    b.finish()
    a.finish()
    root.merge([a, b])
    assert root["@VOTE"] == "@Eve"  # a finished last, so its value is written last


def test_unfinished_branches_write_nothing_back() -> None:
    root = make().root
    a = root.branch()
    a.assign("name", "=", "cancelled")
    root.merge([a])
    assert root["name"] == "global"


def test_branch_entry_writes_and_increments_are_shared_at_once() -> None:
    root = make().root
    a, b = root.branch(), root.branch()
    a.assign("count", "+=", 1)
    b.assign("votes", "=", "@Bob", "@Eve")
    b.assign("alive", "remove", "@Eve")
    assert root["count"] == 1 and root["votes"] == {"@Eve": "@Bob"} and root["alive"] == ["@Bob"]
    assert a["votes"] == {"@Eve": "@Bob"}


def test_branch_own_value_takes_its_increments() -> None:
    root = make().root
    a = root.branch()
    a.assign("count", "=", 10)
    a.assign("count", "+=", 1)
    assert a["count"] == 11 and root["count"] == 0


def test_nested_branches_merge_into_their_parent_branch() -> None:
    root = make().root
    outer = root.branch()
    inner = outer.branch()
    inner.assign("name", "=", "inner")
    inner.finish()
    outer.merge([inner])
    assert outer["name"] == "inner" and root["name"] == "global"
    outer.finish()
    root.merge([outer])
    assert root["name"] == "inner"


def test_merge_rejects_foreign_branches() -> None:
    root = make().root
    other = root.branch().branch()
    other.finish()
    with pytest.raises(ValueError):
        root.merge([other])


def test_two_hundred_concurrent_branches_count_and_vote() -> None:
    """The classic vote (§12.5a): par @voter in voters: -> vote -> record ->."""
    voters = [f"@p{i}" for i in range(200)]
    variables = Variables(
        {"count": 0, "votes": {}, "@VOTE": "", "voters": voters},
        [ActorSpec(v) for v in voters],
    )
    root = variables.root
    finished: list[str] = []

    async def one(voter: str, delay: int) -> object:
        branch = root.branch()
        body = branch.loop({"@voter": variables.actor(voter)})
        await asyncio.sleep(0)
        body.assign("@VOTE", "=", voter)  # vote: each voter votes for itself
        for _ in range(delay):
            await asyncio.sleep(0)
        body.assign("votes", "=", body["@VOTE"], "@voter")  # record: votes.@voter = @VOTE
        value = body["count"]
        await asyncio.sleep(0)
        body.assign("count", "+=", 1)
        assert isinstance(value, int)
        branch.finish()
        finished.append(voter)
        return branch

    async def main() -> list[object]:
        return await asyncio.gather(*(one(v, (i * 7) % 13) for i, v in enumerate(voters)))

    branches = asyncio.run(main())
    assert root["count"] == 200
    assert root["votes"] == {v: v for v in voters}
    root.merge(branches)  # type: ignore[arg-type]
    assert root["@VOTE"] == finished[-1]


def test_write_back_order_is_finish_order() -> None:
    root = make().root
    written: list[str] = []
    branches = [root.branch() for _ in range(5)]
    for i, branch in enumerate(branches):
        branch.assign("name", "=", f"b{i}")
    for i in (3, 0, 4, 1, 2):
        branches[i].finish()
        written.append(f"b{i}")
    root.merge(branches)
    assert root["name"] == written[-1] == "b2"


@pytest.mark.parametrize(
    ("start", "op", "value", "expected"),
    [
        (1, "+=", 2, 3),
        (1, "-=", 2, -1),
        (1.5, "+=", 1, 2.5),
        ("ab", "+=", "c", "abc"),
        ([1], "+=", [2], [1, 2]),
        ([1], "+=", 2, [1, 2]),
        ([1], "add", 2, [1, 2]),
        ([1], "add", 1, [1]),
        ([1, 2], "remove", 1, [2]),
        ([1], "remove", 3, [1]),
    ],
)
def test_operations(start: object, op: str, value: object, expected: object) -> None:
    root = Variables({"x": start}).root
    undo = root.assign("x", op, value)
    assert root["x"] == expected
    assert type(root["x"]) is type(expected)
    undo()
    assert root["x"] == start


@pytest.mark.parametrize(
    ("start", "op", "value"),
    [("a", "-=", 1), (1, "+=", "a"), (True, "+=", 1), (1, "add", 2), (None, "+=", 1)],
)
def test_bad_operations(start: object, op: str, value: object) -> None:
    with pytest.raises(RunError):
        Variables({"x": start}).root.assign("x", op, value)


def test_missing_entries_start_empty() -> None:
    root = Variables({"groups": {}, "tally": {"b": None}, "names": {}}).root
    undo = root.assign("groups", "add", 1, "a")
    assert root["groups"] == {"a": [1]}
    root.assign("tally", "+=", 1, "a")
    root.assign("tally", "-=", 2, "b")
    assert root["tally"] == {"a": 1, "b": -2}
    undo()
    assert root["groups"] == {}
    with pytest.raises(RunError, match="names\\[x\\] has no value"):
        root.assign("names", "+=", "s", "x")


def test_assigned_containers_are_copies() -> None:
    root = Variables({"a": [1], "b": []}).root
    root.assign("b", "=", root["a"])
    root.assign("b", "add", 2)
    assert root["a"] == [1]


def test_snapshots_and_restore() -> None:
    variables = make()
    root = variables.root
    branch = root.branch()
    branch.assign("@VOTE", "=", "@Eve")
    snap = branch.snapshot()
    assert snap["@VOTE"] == "@Eve" and snap["alive"] == ["@Eve", "@Bob"]
    json.dumps(snap)
    assert variables.snapshot()["@VOTE"] == ""
    restored = make()
    restored.restore(snap)
    assert isinstance(restored.root["@VOTE"], Actor)
    assert restored.snapshot() == snap


def test_literal_uses_defined_actors() -> None:
    variables = make()
    assert isinstance(variables.literal("[@Eve]")[0], Actor)
    with pytest.raises(ValueError):
        variables.literal("@Nobody")


def test_spec_validation_and_blueprints() -> None:
    with pytest.raises(ValueError):
        ActorSpec("Eve")
    with pytest.raises(ValueError):
        ActorSpec("@Eve", type="robot")  # type: ignore[arg-type]
    variables = Variables({}, [], [BlueprintSpec("coder", source="m")])
    assert variables.blueprints["coder"].source == "m"
    variables.add_actor(ActorSpec("@x"))
    with pytest.raises(RunError, match="already defined"):
        variables.add_actor(ActorSpec("@x"))
