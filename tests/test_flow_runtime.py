"""The flow runtime end to end: scripts built from .fems sources and run on fems_runtime."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import CodeType

import pytest
from fems_helpers import run_script, steps_of
from fems_runtime import RunError
from fems_runtime.events import RunEvents
from fems_runtime.flow import Context, module
from fems_runtime.linetable import LineTable
from fems_runtime.names import declared_name
from fems_runtime.records import StepCounter
from fems_runtime.variables import Variables

FORK_MERGE = """
vars:
    a = 0
    b = 0
    merged = 0
action set_a @assign:
    out: a = 1
action set_b @assign:
    out: b = 2
action merge @assign:
    out: merged += 1
mainflow:
    [START] -> [F]
    [F] -> set_a -> [M]
    [F] -> set_b -> [M]
    [M]: merge -> [END]
"""


def test_fork_merges_once_and_keeps_both_branches_writes(tmp_path: Path) -> None:
    result, events = run_script(tmp_path, FORK_MERGE)
    assert result.variables["a"] == 1
    assert result.variables["b"] == 2
    assert result.variables["merged"] == 1
    assert steps_of(events, "M") == 1
    fork = next(e for e in events if e["event"] == "fork")
    assert fork["node"] == "F" and fork["merge"] == "M"


JOIN_ONE = """
vars:
    winner = ""
    slow_done = false
code:
    lab = file:"lab.py"
action fast @assign:
    out: winner = "fast"
action slow @func(lab.slow):
    out: slow_done
action after @assign:
    out: winner += "!"
mainflow:
    [START] -> [F]
    [F] -> [A]:fast
    [F] -> [B]:slow
    join(1):
        [A] ->
        [B] ->
    to [N]
    [N]: after -> [END]
"""

LAB = """
import time


def slow():
    time.sleep(0.3)
    return True
"""


def test_join_one_continues_after_first_branch_and_cancels_the_slow_one(tmp_path: Path) -> None:
    result, events = run_script(tmp_path, JOIN_ONE, {"lab.py": LAB})
    assert result.variables["winner"] == "fast!"
    assert result.variables["slow_done"] is False
    join = next(e for e in events if e["event"] == "join")
    assert join["cancelled"] == ["B"]
    assert steps_of(events, "N") == 1


PAR_VOTE = """
vars:
    voters = [@a, @b, @c, @d, @e]
    votes = {}
    count = 0
    @VOTE = ""
code:
    lab = file:"lab.py"
actors:
    ai @a
    ai @b
    ai @c
    ai @d
    ai @e
action vote @func(lab.choose):
    in: voter = @voter
    out: @VOTE
action record @assign:
    out: votes.@voter = @VOTE
         count += 1
mainflow:
    [START] -> [P]
    [P] -> par @voter in voters:
        -> vote -> record ->
    -> [END]
"""

VOTER_LAB = """
import time

ORDER = ["@a", "@b", "@c", "@d", "@e"]


def choose(voter):
    index = ORDER.index(voter)
    time.sleep(0.01 * (5 - index))  # finish in reverse order: branches interleave
    return ORDER[(index + 1) % 5]
"""


def test_par_voters_each_record_their_own_vote(tmp_path: Path) -> None:
    result, _ = run_script(tmp_path, PAR_VOTE, {"lab.py": VOTER_LAB})
    votes = result.variables["votes"]
    assert votes == {"@a": "@b", "@b": "@c", "@c": "@d", "@d": "@e", "@e": "@a"}
    assert result.variables["count"] == 5


MODULES = """
vars:
    day = 0
    log = []
    reached = false
module Day(n):
    vars:
        seen = 0
    action tick @assign:
        out: day += n
             seen += 1
             log += seen
    flow:
        [IN] -> tick -> [OUT]
module Stopper:
    flow:
        [IN] -> [BREAK]
action after @assign:
    out: reached = true
mainflow:
    [START] -> &Day(1) -> &Day(2) -> &Stopper -> after -> [END]
"""


def test_module_updates_globals_gets_fresh_locals_and_break_stops_the_caller(
    tmp_path: Path,
) -> None:
    result, events = run_script(tmp_path, MODULES)
    assert result.variables["day"] == 3
    assert result.variables["log"] == [1, 1]
    assert result.variables["reached"] is False
    assert "seen" not in result.variables


BY_VALUE = """
vars:
    items = [1, 2]
    table = {"a": 1}
module Change(p, q):
    action change @assign:
        out: |
            p = add(3)
            q.b = 2
            items = add(4)
    flow:
        [IN] -> change -> [OUT]
mainflow:
    [START] -> &Change(items, table) -> [END]
"""


def test_module_arguments_are_copies_and_the_callers_names_are_written_by_name(
    tmp_path: Path,
) -> None:
    """§11.2: a parameter is the call's own copy; only a write by the variable's name reaches
    the caller (§11.3)."""
    result, _ = run_script(tmp_path, BY_VALUE)
    assert result.variables["items"] == [1, 2, 4]
    assert result.variables["table"] == {"a": 1}


BREAK_IN_A_LOOP = """
vars:
    n = 0
    after = 0
action inc @assign:
    out: n += 1
action done @assign:
    out: after += 1
module Stop(i):
    flow:
        [IN] -> fork:
            -> if (i == 1) -> [BREAK]
            -> if (i != 1) -> [OUT]
mainflow:
    [START] -> for i in range(3):
        -> &Stop(i) -> inc ->
    -> done -> [END]
"""


def test_a_break_in_a_loop_body_ends_its_iteration_not_the_loop(tmp_path: Path) -> None:
    """§11.5: [BREAK] stops the caller's branch, which in a loop body is one iteration."""
    result, _ = run_script(tmp_path, BREAK_IN_A_LOOP)
    assert result.variables["n"] == 2
    assert result.variables["after"] == 1


LOOPS = """
vars:
    total = 0
    names = []
    exit1 = false
    exit2 = false
actors:
    ai @a
    ai @b
action add_i @assign:
    out: total += i
action add_name @assign:
    out: names += @x
action e1 @assign:
    out: exit1 = true
action e2 @assign:
    out: exit2 = names
mainflow:
    [START] -> [L1]
    [L1] -> for i in range(3):
        -> add_i ->
    -> [L2]
    [L2] -> for @x in [@a, @b]:
        -> add_name ->
    -> e1 -> e2 -> [END]
"""


def test_for_loops_over_range_and_inline_actors_then_run_the_whole_exit_chain(
    tmp_path: Path,
) -> None:
    result, _ = run_script(tmp_path, LOOPS)
    assert result.variables["total"] == 3
    assert result.variables["names"] == ["@a", "@b"]
    assert result.variables["exit1"] is True
    assert result.variables["exit2"] == ["@a", "@b"]


STUCK = """
vars:
    x = 1
mainflow:
    [START] -> [A]
    [A] -> if (x > 5) -> [END]
    [A] -> if (x < 0) -> [END]
"""


def test_stuck_flow_names_the_line_each_condition_and_its_values(tmp_path: Path) -> None:
    with pytest.raises(RunError) as caught:
        run_script(tmp_path, STUCK)
    message = str(caught.value)
    # the line of the conditions, not the line that first mentions [A]
    assert message.startswith("t.fems:5: error: flow stuck after [A]")
    assert "if (x > 5)  where x = 1" in message
    assert "if (x < 0)  where x = 1" in message


CHINESE = """
vars：
    计数 = 0
    名单 = 【】
action 加一 @assign：
    out： 计数 += 1
mainflow：
    【START】 -> 加一 -> 【A】
    【A】 -- if （计数 == 1） -> 【END】
"""


def test_chinese_punctuation_script_runs(tmp_path: Path) -> None:
    result, _ = run_script(tmp_path, CHINESE)
    assert result.variables["计数"] == 1


# ---------------------------------------------------------------- Context, with hand-written flows


class _Services:
    """The least a Context needs: a file name, the run's events and a line table (hand-written
    flows have no lines), no models, no code files, no debugger."""

    file = "hand.fems"
    conditions: dict[str, dict[str, tuple[tuple[str, tuple[str, ...]], ...]]] = {}
    debugger = None

    def __init__(self) -> None:
        self.events = RunEvents()
        self.lines = LineTable()
        self.actions: dict[tuple[CodeType, str], tuple[str, int]] = {}


def _context(**values: object) -> Context:
    variables = Variables(values)
    return Context(_Services(), variables.root, StepCounter(1000))  # type: ignore[arg-type]


def test_single_target_needs_no_branches() -> None:
    async def never(ctx: Context, node: str | None = None, stop: tuple[str, ...] = ()) -> None:
        raise AssertionError("a single target must not start a branch")

    ctx = _context()
    assert asyncio.run(ctx.fork(never, "A", ["B"], merge=None)) == "B"


def test_an_arrival_at_an_enclosing_merge_is_passed_on() -> None:
    """Inner fork G without a merge of its own; one of its branches reaches the outer merge M."""
    seen: list[str] = []

    async def flow(ctx: Context, node: str | None = "F", stop: tuple[str, ...] = ()) -> str | None:
        while node is not None and node not in stop:
            seen.append(node)
            match node:
                case "F":
                    node = await ctx.fork(flow, "F", ["X", "G"], merge="M", stop=stop)
                case "G":
                    node = await ctx.fork(flow, "G", ["M", "Dead"], merge=None, stop=stop)
                case "X" | "Dead":
                    return None
                case "M":
                    return "END"
        return node

    assert asyncio.run(flow(_context())) == "END"
    assert seen.count("M") == 1


def test_loops_iterate_over_a_snapshot_and_bind_the_variable_per_iteration() -> None:
    ctx = _context(items=[1, 2, 3], total=0)

    async def body(ctx: Context, node: str | None = "H", stop: tuple[str, ...] = ()) -> None:
        ctx.assign("items", "add", 99 + ctx["i"])  # growing the list does not add iterations
        ctx.assign("total", "+=", ctx["i"])

    asyncio.run(ctx.loop("for", "i", ctx["items"], body))
    assert ctx["total"] == 6
    assert "i" not in ctx.frame


def test_module_call_checks_arity() -> None:
    @module("M", params=("a",))
    async def m(ctx: Context, node: str | None = "IN", stop: tuple[str, ...] = ()) -> str:
        return "OUT"

    with pytest.raises(RunError, match="takes 1 arguments, got 2"):
        asyncio.run(_context().call(m, 1, 2))
    assert asyncio.run(_context().call(m, 1)) is True


def test_a_module_meta_delay_reaches_the_turns_inside_it_and_nested_calls_keep_the_larger() -> None:
    """§3: a module's meta accepts delay; its branches inherit it, the larger delay wins."""
    seen: dict[str, float] = {}

    @module("Inner", meta={"delay": 1.5})
    async def inner(ctx: Context, node: str | None = "IN", stop: tuple[str, ...] = ()) -> str:
        seen["inner"] = ctx.delay
        return "OUT"

    @module("Outer", meta={"delay": 4})
    async def outer(ctx: Context, node: str | None = "IN", stop: tuple[str, ...] = ()) -> str:
        seen["outer"] = ctx.delay
        await ctx.loop("par", "i", [1, 2], branch)
        await ctx.call(inner)
        return "OUT"

    async def branch(ctx: Context, node: str | None = "H", stop: tuple[str, ...] = ()) -> None:
        seen[f"branch {ctx['i']}"] = ctx.delay

    ctx = _context()
    asyncio.run(ctx.call(outer))
    assert ctx.delay == 0
    assert seen == {"outer": 4, "branch 1": 4, "branch 2": 4, "inner": 4}


RECURSIVE = """
vars:
    depth = 0
module Dive:
    action deeper @assign:
        out: depth += 1
    flow:
        [IN] -> deeper -> &Dive -> [OUT]
mainflow:
    [START] -> &Dive -> [END]
"""

# 65 different modules, each calling the next: no recursion, but deeper than the limit
CHAIN_OF_MODULES = (
    "".join(
        f"module M{n}:\n    flow:\n        [IN] -> {f'&M{n + 1} -> ' if n < 65 else ''}[OUT]\n"
        for n in range(1, 66)
    )
    + "mainflow:\n    [START] -> &M1 -> [END]\n"
)

SPINNING = """
vars:
    spins = 0
module Spin:
    meta:
        max_steps = 10
    action spin @assign:
        out: spins += 1
    flow:
        [IN] -> [S]:spin -> [S]
mainflow:
    [START] -> &Spin -> [END]
"""


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (RECURSIVE, r"module recursion deeper than 64 calls \(Dive\)"),
        (CHAIN_OF_MODULES, r"module calls nested deeper than 64 \(M65 is called inside a chain"),
        (SPINNING, r"max_steps \(10\) exceeded in module Spin"),
    ],
)
def test_module_limits_stop_the_run(tmp_path: Path, source: str, message: str) -> None:
    with pytest.raises(RunError, match=message):
        run_script(tmp_path, source)


BUILTIN_NAMES = """
vars:
    n = 0
    pick = ""
    alive = [@a, @b]
actors:
    ai @a
    ai @b
action len @assign:
    out: n += 1
action round @assign:
    out: n += 10
action tuple @ai(@a):
    prompt: Pick one.
    out: pick(dropdown, choices={alive})
mainflow:
    [START] -> len -> round -> tuple -> [A]
    [A] -> if (len(alive) == 2 and round(1.4) == 1) -> [END]
"""


def test_actions_named_like_builtins_do_not_shadow_them(tmp_path: Path) -> None:
    result, _ = run_script(tmp_path, BUILTIN_NAMES, model="fems/mock", seed=1)
    assert result.variables["n"] == 11
    assert result.variables["pick"] in ("@a", "@b")


LOOP_KEY = """
vars:
    d = {}
    @who = ""
    tally = {}
actors:
    ai @a
action put @assign:
    out: d[i] = i
         tally[k] += 1
mainflow:
    [START] -> [L]
    [L] -> for i in [1, 2]:
        -> [P]
        [P] -> for k in ["x", "y"]:
            -> put ->
        ->
    -> [END]
"""


def test_a_loop_variable_used_as_a_dict_key_in_an_action_reads_the_binding(
    tmp_path: Path,
) -> None:
    result, _ = run_script(tmp_path, LOOP_KEY)
    assert result.variables["d"] == {"1": 1, "2": 2}
    assert result.variables["tally"] == {"x": 2, "y": 2}


STUCK_IN_A_LOOP_BRANCH = """
vars:
    x = 1
action fine @assign:
    out: x += 1
mainflow:
    [START] -> [L]
    [L] -> for i in range(2):
        -> [F]
        [F] -> fine ->
        [F] -> [A]
        [A] -> fork:
            -> if (x > 5) -> fine ->
            -> if (x < 0) -> fine ->
    -> [END]
"""


def test_a_run_error_is_one_trace_event_at_the_node_that_failed(tmp_path: Path) -> None:
    with pytest.raises(RunError) as caught:
        run_script(tmp_path, STUCK_IN_A_LOOP_BRANCH)
    assert str(caught.value).startswith("t.fems:12: error: flow stuck after [A]")
    lines = (tmp_path / "trace.jsonl").read_text(encoding="utf-8").splitlines()
    errors = [e for e in map(json.loads, lines) if e["event"] == "error"]
    assert len(errors) == 1
    assert (errors[0]["node"], errors[0]["line"]) == ("A", 12)
    assert errors[0]["message"] == str(caught.value)


PAR_EVENTS = """
vars:
    n = 0
action bump @assign:
    out: n += i
mainflow:
    [START] -> [P]
    [P] -> par i in [1, 2, 3]:
        -> bump ->
    -> [END]
"""


def test_par_is_traced_as_a_fork_and_a_join_at_its_node(tmp_path: Path) -> None:
    result, events = run_script(tmp_path, PAR_EVENTS)
    assert result.variables["n"] == 6
    kinds = [(e["event"], e["node"]) for e in events if e["event"] in ("fork", "join")]
    assert kinds == [("fork", "par_i"), ("join", "par_i")]
    fork = next(e for e in events if e["event"] == "fork")
    assert fork["line"] == 7 and fork["var"] == "i" and fork["items"] == [1, 2, 3]
    assert all("event" in e and "node" in e for e in events)


NESTED_BREAK = """
vars:
    log = []
module Inner:
    action i1 @assign:
        out: log += "inner"
    flow:
        [IN] -> i1 -> [BREAK]
module Outer:
    action o1 @assign:
        out: log += "outer"
    action o2 @assign:
        out: log += "outer after inner"
    flow:
        [IN] -> o1 -> &Inner -> o2 -> [OUT]
action m @assign:
    out: log += "main"
mainflow:
    [START] -> &Outer -> m -> [END]
"""

FALLS_OFF = """
vars:
    log = []
module Falls:
    action i1 @assign:
        out: log += "inner"
    flow:
        [IN] -> i1
action m @assign:
    out: log += "main"
mainflow:
    [START] -> &Falls -> m -> [END]
"""

OUT_AND_BREAK = """
vars:
    log = []
module Both:
    action b @assign:
        out: log += "break branch"
    flow:
        [IN] -> [F]
        [F] -> [OUT]
        [F] -> b -> [BREAK]
action m @assign:
    out: log += "main"
mainflow:
    [START] -> &Both -> m -> [END]
"""

OUT_IN_A_BRANCH = """
vars:
    log = []
module Early:
    action a @assign:
        out: log += "a"
    action b @assign:
        out: log += "b"
    flow:
        [IN] -> [F]
        [F] -> a -> [OUT]
        [F] -> b
action m @assign:
    out: log += "main"
mainflow:
    [START] -> &Early -> m -> [END]
"""


@pytest.mark.parametrize(
    ("source", "log"),
    [
        # [BREAK] stops the caller's branch; Outer then ends without [OUT], so main stops too
        (NESTED_BREAK, ["outer", "inner"]),
        # a module whose every branch ends before [OUT] returns like [BREAK] (§11.5, §12.3)
        (FALLS_OFF, ["inner"]),
        # one branch reached [OUT]: the module returned normally
        (OUT_AND_BREAK, ["break branch", "main"]),
        (OUT_IN_A_BRANCH, ["a", "b", "main"]),
    ],
    ids=["nested-break", "falls-off-the-end", "out-and-break", "out-in-one-branch"],
)
def test_how_a_module_call_ends_decides_whether_the_caller_goes_on(
    tmp_path: Path, source: str, log: list[str]
) -> None:
    result, _ = run_script(tmp_path, source)
    assert sorted(result.variables["log"]) == sorted(log)
    assert result.status == "completed"


BRANCH_RULE = """
vars:
    x = 0
    y = -1
    seen = -1
    count = 0
    d = {}
action set_x @assign:
    out: x = 1
         count += 1
         d["a"] = x
action read_x @assign:
    out: y = x
         count += 1
         d["b"] = x
action after @assign:
    out: seen = x
mainflow:
    [START] -> [F]
    [F] -> set_x -> [M]
    [F] -> read_x -> [M]
    [M]: after -> [END]
"""


def test_a_branch_keeps_its_own_value_until_the_merge_writes_it_back(tmp_path: Path) -> None:
    """§12.5a: `x = 1` in one branch is invisible to its sibling, visible after the merge;
    `+=` and dict entries act on the shared value at once."""
    result, _ = run_script(tmp_path, BRANCH_RULE)
    values = result.variables
    assert (values["x"], values["y"], values["seen"]) == (1, 0, 1)
    assert values["count"] == 2
    assert values["d"] == {"a": 1, "b": 0}


ERROR_LINES = {
    "condition": (
        "vars:\n    x = 1\n    s = 'a'\nmainflow:\n    [START] -> [A]\n"
        "    [A] -> if (x > 0) -> [B]\n    [A] -> if (x > s) -> [B]\n    [B] -> [END]\n",
        7,  # the condition that failed, not its sibling
        "TypeError",
    ),
    "loop iterable": (
        # 'x = 2' may make x a list as far as the build knows (a bare number is a build error)
        "vars:\n    x = 1\naction a @assign:\n    out: x = 2\nmainflow:\n    [START] -> [L]\n"
        "    [L] -> for i in x:\n        -> a ->\n    -> [END]\n",
        7,
        "cannot iterate over 1",
    ),
    "loop over an actor": (
        "vars:\n    @who = @a\n    n = 0\nactors:\n    ai @a\naction a @assign:\n"
        "    out: n += 1\nmainflow:\n    [START] -> [L]\n"
        "    [L] -> for @x in @who:\n        -> a ->\n    -> [END]\n",
        10,
        "for @x: cannot iterate over @a (a list is needed)",
    ),
    "module argument": (
        "vars:\n    x = 1\nmodule M(p):\n    flow:\n        [IN] -> [OUT]\nmainflow:\n"
        "    [START] -> [A]\n    [A] -> &M(x / 0) -> [END]\n",
        8,
        "ZeroDivisionError",
    ),
    "assignment in a par body": (
        "vars:\n    x = 's'\naction a @assign:\n    out: x -= 1\nmainflow:\n    [START] -> [L]\n"
        "    [L] -> par i in range(2):\n        -> a ->\n    -> [END]\n",
        4,
        "cannot subtract 1",
    ),
    "module action": (
        "vars:\n    x = 1\nmodule M:\n    action bad @assign:\n        out: x -= 'q'\n"
        "    flow:\n        [IN] -> bad -> [OUT]\nmainflow:\n    [START] -> &M -> [END]\n",
        5,
        "cannot subtract 'q'",
    ),
    "module call bound on its own line": (
        "vars:\n    x = 1\nmodule M(p):\n    flow:\n        [IN] -> [OUT]\nmainflow:\n"
        "    [START] -> [A] -> [END]\n    [A]: &M(x / 0)\n",
        8,
        "ZeroDivisionError",
    ),
    "in: of an ai action": (
        "vars:\n    x = 1\nactors:\n    ai @a\naction t @ai(@a):\n    prompt: hi {y}\n"
        "    in: y = x / 0\nmainflow:\n    [START] -> t -> [END]\n",
        7,
        "ZeroDivisionError",
    ),
    "in: of a func action": (
        "vars:\n    x = 1\naction t @func(system.spawn):\n"
        "    in: spawn_requests = x / 0\nmainflow:\n    [START] -> t -> [END]\n",
        4,
        "ZeroDivisionError",
    ),
    "choices of an out": (
        "vars:\n    x = 1\n    p = ''\nactors:\n    ai @a\naction t @ai(@a):\n"
        "    prompt: hi\n    out: p(dropdown, choices={x})\nmainflow:\n    [START] -> t -> [END]\n",
        8,
        "TypeError",
    ),
    "recursion": (RECURSIVE, 7, "module recursion deeper than 64 calls"),
    "module max_steps": (SPINNING, 9, r"max_steps (10) exceeded in module Spin; last nodes:"),
}


@pytest.mark.parametrize(("source", "line", "message"), ERROR_LINES.values(), ids=ERROR_LINES)
def test_run_errors_point_at_the_fems_line_of_their_construct(
    tmp_path: Path, source: str, line: int, message: str
) -> None:
    with pytest.raises(RunError) as caught:
        run_script(tmp_path, source, model="fems/mock")
    assert str(caught.value).startswith(f"t.fems:{line}: error: ")
    assert message in str(caught.value)


STUCK_ON_ATTRIBUTES = """
vars:
    @who = @a
    hp = {@a: 3}
actors:
    ai @a
mainflow:
    [START] -> [A]
    [A] -> if (hp.@who > 10) -> [END]
    [A] -> if (@who.hp < 0 or @a.hp < 0) -> [END]
"""


def test_stuck_shows_paths_as_written_and_the_actor_variable_they_go_through(
    tmp_path: Path,
) -> None:
    with pytest.raises(RunError) as caught:
        run_script(tmp_path, STUCK_ON_ATTRIBUTES)
    lines = str(caught.value).splitlines()
    assert lines[1:] == [
        "  if (hp.@who > 10)  where @who = @a, hp.@who = 3",
        "  if (@who.hp < 0 or @a.hp < 0)  where @who = @a, @who.hp = 3, @a.hp = 3",
    ]


# ---------------------------------------------------------------- flow rules, script by script

NO_MERGE = """
vars:
    log = []
action a @assign:
    out: log = add("a")
action b @assign:
    out: log = add("b")
mainflow:
    [START] -> [F]
    [F] -> if (true) -> a -> [X]
    [F] -> if (true) -> b
    [X] -> [END]
"""

NESTED_FORKS = """
vars:
    n = 0
    log = []
action a1 @assign:
    out: n += 1
action a2 @assign:
    out: n += 10
action a3 @assign:
    out: n += 100
action inner @assign:
    out: log += "inner"
action outer @assign:
    out: log += "outer"
mainflow:
    [START] -> [F]
    [F] -> [G]
    [F] -> a3 -> [M]
    [G] -> a1 -> [MI]
    [G] -> a2 -> [MI]
    [MI]: inner -> [M]
    [M]: outer -> [END]
"""

FORK_IN_FOR = """
vars:
    total = 0
    log = []
    i = "global"
action a @assign:
    out: total += i
action b @assign:
    out: total += 10
action m @assign:
    out: log += i
action after @assign:
    out: log += i
mainflow:
    [START] -> [L]
    [L] -> for i in range(3):
        -> [F]
        [F] -> a -> [M]
        [F] -> b -> [M]
        [M]: m ->
    -> after -> [END]
"""

START_LINES = """
vars:
    log = []
action a @assign:
    out: log += "a"
action b @assign:
    out: log += "b"
mainflow:
    [START] -> [L]
    [L] -> for i in range(4):
        -> if (i == 1 or i == 3) -> a ->
        -> if (i >= 2) -> b ->
    -> [END]
"""

PAR_IN_MODULE_IN_PAR = """
vars:
    count = 0
    got = {}
module Inner(k):
    vars:
        local = 0
    action bump @assign:
        out: count += 1
             local += j
    action keep @assign:
        out: got[k] = local
    flow:
        [IN] -> [P]
        [P] -> par j in [1, 2]:
            -> bump ->
        -> keep -> [OUT]
mainflow:
    [START] -> [P]
    [P] -> par k in ["x", "y", "z"]:
        -> &Inner(k) ->
    -> [END]
"""

JOIN_WITH_AN_EARLY_END = """
vars:
    x = 0
    after = 0
action a @assign:
    out: x += 1
action go @assign:
    out: after += x
mainflow:
    [START] -> [F]
    [F] -> [A]:a
    [F] -> [B]:a
    [F] -> [C]
    [C] -> [END]
    join(all):
        [A] ->
        [B] ->
    to [N]
    [N]: go -> [END]
"""

JOIN_TWO_WITH_ONE_LIVE = """
vars:
    x = 0
    after = 0
action a @assign:
    out: x += 1
action go @assign:
    out: after += x
mainflow:
    [START] -> [F]
    [F] -> [A]:a
    [F] -> [X]
    [X] -> if (x > 100) -> [B]:a
    [X] -> if (x <= 100) -> [END]
    join(2):
        [A] ->
        [B] ->
    to [N]
    [N]: go -> [END]
"""

SHADOWING = """
vars:
    i = "global"
    seen = []
module Look:
    action look @assign:
        out: seen += i
    flow:
        [IN] -> look -> [OUT]
action mark @assign:
    out: i = "changed in the body"
mainflow:
    [START] -> [L]
    [L] -> for i in [1, 2]:
        -> &Look -> mark -> &Look ->
    -> &Look -> [END]
"""


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        # several edges hold and no merge node: each branch runs to its own end (§12.3, §12.5)
        (NO_MERGE, {"log": ["a", "b"]}),
        (NESTED_FORKS, {"n": 111, "log": ["inner", "outer"]}),
        (FORK_IN_FOR, {"total": 33, "log": [0, 1, 2, "global"], "i": "global"}),
        # start lines: none holding skips the iteration, several run concurrently (§12.7)
        (START_LINES, {"log": ["a", "b", "a", "b"]}),
        (PAR_IN_MODULE_IN_PAR, {"count": 6, "got": {"x": 3, "y": 3, "z": 3}}),
        # a branch that never reaches join(all) is not waited for (§12.6)
        (JOIN_WITH_AN_EARLY_END, {"x": 2, "after": 2}),
        # join(2) with one live branch left: that one arrival is enough
        (JOIN_TWO_WITH_ONE_LIVE, {"x": 1, "after": 1}),
        # the loop variable shadows the global inside the body only, modules see it (§11.3)
        (
            SHADOWING,
            {"i": "global", "seen": [1, "changed in the body", 2, "changed in the body", "global"]},
        ),
    ],
    ids=[
        "no-merge",
        "nested-forks",
        "fork-in-for",
        "for-start-lines",
        "par-in-module-in-par",
        "join-early-end",
        "join-two-one-live",
        "loop-variable-shadowing",
    ],
)
def test_flow_rules(tmp_path: Path, source: str, expected: dict[str, object]) -> None:
    result, _ = run_script(tmp_path, source)
    actual = {name: result.variables[name] for name in expected}
    if "log" in expected and source is NO_MERGE:
        actual["log"] = sorted(actual["log"])
    assert actual == expected


NESTED_JOIN = """
vars:
    ta = 0
    tb = 0
    tc = 0
    after = 0
code:
    lab = file:"lab.py"
action sa @func(lab.wait):
    in: seconds = 0.01
    out: ta
action sb @func(lab.wait):
    in: seconds = 0.02
    out: tb
action sc @func(lab.wait):
    in: seconds = 0.6
    out: tc
action go @assign:
    out: after += 1
mainflow:
    [START] -> [F]
    [F] -> [G]
    [F] -> [C]:sc
    [G] -> [A]:sa
    [G] -> [B]:sb
    join(2):
        [A] ->
        [B] ->
        [C] ->
    to [N]
    [N]: go -> [END]
"""

WAIT = """
import time


def wait(seconds):
    time.sleep(seconds)
    return seconds
"""


def test_join_n_counts_arrivals_through_a_nested_fork_and_cancels_the_rest(
    tmp_path: Path,
) -> None:
    """A and B arrive through the inner fork [G]: join(2) is complete, [C] is cancelled."""
    result, events = run_script(tmp_path, NESTED_JOIN, {"lab.py": WAIT})
    values = result.variables
    assert (values["ta"], values["tb"], values["tc"], values["after"]) == (0.01, 0.02, 0, 1)
    outer_join = [e for e in events if e["event"] == "join"][-1]
    assert outer_join["node"] == "join" and outer_join["cancelled"] == ["C"]
    assert steps_of(events, "N") == 1


JOIN_AFTER_END = """
vars:
    go = false
    c_said = ""
    b_done = false
    d_done = false
    after = 0
action b @assign:
    out: b_done = true
action c @assign:
    out: c_said = "C finished"
action d @assign:
    out: d_done = true
action next @assign:
    out: after += 1
mainflow:
    [START] -> fork:
        -> [B]: b
        -> [C]: c -> fork:
            -> if (go) -> [C2]
            -> if (not go) -> [END]
        -> [D]: d
    [C2] -> [J]
    join(2):
        [B] ->
        [C2] ->
        [D] ->
    to [Next]
    [Next]: next -> [END]
"""


def test_join_n_keeps_a_branch_that_already_ended(tmp_path: Path) -> None:
    """[C] reaches [END] before B and D make join(2) complete: it has finished, so it is not
    cancelled and its '=' write is kept (§12.6)."""
    result, events = run_script(tmp_path, JOIN_AFTER_END)
    assert result.variables["c_said"] == "C finished"
    assert result.variables["after"] == 1
    join = next(e for e in events if e["event"] == "join" and e["node"] == "join")
    assert join["cancelled"] == []


JOIN_AFTER_OUT = """
vars:
    go = false
    c_said = ""
    after = 0
action b @assign:
    out: after += 0
action c @assign:
    out: c_said = "C finished"
action next @assign:
    out: after += 1
module M:
    flow:
        [IN] -> fork:
            -> [B]: b
            -> [C]: c -> fork:
                -> if (go) -> [C2]
                -> if (not go) -> [OUT]
            -> [D]: b
        [C2] -> [J]
        join(2):
            [B] ->
            [C2] ->
            [D] ->
        to [Next]
        [Next]: next -> [OUT]
mainflow:
    [START] -> &M -> [END]
"""


def test_join_n_in_a_module_keeps_a_branch_that_already_reached_out(tmp_path: Path) -> None:
    """The same in a module, where a branch ends at [OUT] (§12.6)."""
    result, events = run_script(tmp_path, JOIN_AFTER_OUT)
    assert (result.variables["c_said"], result.variables["after"]) == ("C finished", 1)
    join = next(e for e in events if e["event"] == "join" and e["node"] == "join")
    assert join["cancelled"] == []


OWN_THEN_INCREMENT = """
vars:
    x = 0
    seen_a = 0
    seen_b = 0
action set10 @assign:
    out: x = 10
action inc @assign:
    out: x += 1
action inc5 @assign:
    out: x += 5
action read_a @assign:
    out: seen_a = x
action read_b @assign:
    out: seen_b = x
mainflow:
    [START] -> fork:
        -> set10 -> inc -> read_a -> [M]
        -> inc5 -> read_b -> [M]
    [M] -> [END]
"""


def test_an_increment_after_a_branch_own_value_acts_on_that_value(tmp_path: Path) -> None:
    """§12.5a Decision: after 'x = 10' the branch's 'x += 1' acts on its own value; the merge
    writes 11 over the shared value, replacing the other branch's 'x += 5'."""
    result, _ = run_script(tmp_path, OWN_THEN_INCREMENT)
    values = result.variables
    assert (values["seen_a"], values["seen_b"], values["x"]) == (11, 5, 11)


PAR_RULE = """
vars:
    last = 0
    mine = 0
    count = 0
    seen = [0]
    d = {}
    after = -1
code:
    lab = file:"lab.py"
action wait @func(lab.wait_turn):
    in: i = i
    out: mine
action record @assign:
    out: last = i
         count += 1
         seen = add(i)
         seen = remove(0)
         d[i] = mine
action release @func(lab.release):
    in: i = i
action read @assign:
    out: after = last
mainflow:
    [START] -> [P]
    [P] -> par i in [1, 2, 3]:
        -> wait -> record -> release ->
    -> read -> [END]
"""

TURNS = """
import threading
import time

released = {i: threading.Event() for i in (1, 2, 3, 4)}
released[4].set()


def wait_turn(i):
    released[i + 1].wait(10)  # 3 goes first, then 2, then 1
    time.sleep(0.02)
    return i * 10


def release(i):
    released[i].set()
"""


def test_par_branch_rule_and_write_back_in_finish_order(tmp_path: Path) -> None:
    """§12.5a in a par: each branch's `=` is its own (d[i] = mine records each branch's
    value); `+=`, add/remove and entries are shared at once; own values are written back in
    the order the branches finished (3, 2, 1), so `last` ends as 1 and is read after."""
    result, _ = run_script(tmp_path, PAR_RULE, {"lab.py": TURNS})
    values = result.variables
    assert values["d"] == {"1": 10, "2": 20, "3": 30}
    assert (values["count"], values["seen"]) == (3, [3, 2, 1])
    assert (values["last"], values["mine"], values["after"]) == (1, 10, 1)


def test_a_loop_body_compares_strings_that_read_like_code_as_written(tmp_path: Path) -> None:
    """The code generator rewrites the body's own `return None` statements to `return`;
    a condition's string holding those words stays as the author wrote it."""
    source = """
        vars:
            word = "return None"
            names = [1, 2]
            same = 0
            other = 0

        action count_same @assign:
            out: same += 1

        action count_other @assign:
            out: other += 1

        mainflow:
            [START] -> [P]
            [P] -> for i in names:
                -> if (word == "return None") -> count_same ->
                -> if (word != "return None") -> count_other ->
            -> [END]
    """
    result, _ = run_script(tmp_path, source)
    assert (result.variables["same"], result.variables["other"]) == (2, 0)


def test_a_function_stands_for_its_name_without_the_longest_module_prefix() -> None:
    modules = {"Outer", "Outer_Inner"}
    assert declared_name("Outer_Inner_note", modules) == "note"
    assert declared_name("Outer_Inner", modules) == "Inner"
    assert declared_name("Outer_note", modules) == "note"
    assert declared_name("Outer", modules) == "Outer"
    assert declared_name("Others_note", modules) == "Others_note"


UNBOUND_READS = """
vars:
    hp = {@knight: 100}
    @target = ""
    x = 0
actors:
    ai @knight
action talk @ai(@knight):
    prompt: Target {@target}: {@target.hp} and {hp.@target}.
action heal @assign:
    out: x = 1
mainflow:
    [START] -> talk -> if (hp.@target == None) -> heal -> [END]
"""


def test_an_unbound_actor_variables_attribute_is_empty_in_a_prompt_and_an_error_elsewhere(
    tmp_path: Path,
) -> None:
    """§7.2 decision: a prompt renders ``@v.hp`` of an unbound ``@v`` as ``""`` (like a missing
    key, §4.4); a condition or an assignment reading it stops the run naming ``@v``, rather
    than testing a key ``""`` no dict has."""
    with pytest.raises(RunError, match="actor variable @target is unbound") as caught:
        run_script(tmp_path, UNBOUND_READS, model="fems/mock")
    assert str(caught.value).startswith("t.fems:12: error:")
    events = [json.loads(line) for line in (tmp_path / "trace.jsonl").read_text().splitlines()]
    sent = next(e["messages"] for e in events if e["event"] == "llm_call")
    assert sent[-1]["content"] == "Target :  and ."
