"""The semantic checker: merge nodes (§12.5), name resolution (§11.3), code signatures (§5).

Mistakes and their exact messages live in tests/errors/ (see test_errors.py); this file tests
what the checker computes and what it must accept.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from fems2py.checker import CheckedScript, check
from fems2py.checks.codefiles import FuncSignature, Param, read_signatures, signatures_of
from fems2py.checks.graphs import dominators, immediate_post_dominators, reachable
from fems2py.nodes import Edge, FlowNode, Graph, Script, Span
from fems2py.parser import parse

HEADER = """\
vars:
    x = 0
    answer = ""
    alive = [@a, @b]
    @v = ""
    @w = ""
actors:
    ai @a = soul:a
    ai @b = soul:b
action one @ai(@a):
    prompt: One.
action two @ai(@b):
    prompt: Two.
action three @ai(@a):
    prompt: Three.
"""


def analyze(source: str, folder: Path, files: dict[str, str] | None = None) -> CheckedScript:
    for name, text in (files or {}).items():
        (folder / name).write_text(textwrap.dedent(text), encoding="utf-8")
    script, diagnostics = parse(textwrap.dedent(source), "t.fems", folder)
    assert [d for d in diagnostics if d.severity == "error"] == []
    return check(script, folder)


def flow(body: str) -> str:
    return HEADER + "mainflow:\n" + textwrap.indent(textwrap.dedent(body), "    ")


def errors(checked: CheckedScript) -> list[str]:
    return [d.message for d in checked.diagnostics if d.severity == "error"]


def warnings(checked: CheckedScript) -> list[str]:
    return [d.message for d in checked.diagnostics if d.severity == "warning"]


# ---------------------------------------------------------------------------- graph algorithms


def test_reachable_avoids_blocked_nodes() -> None:
    successors = {"a": ["b"], "b": ["c"], "c": ["a"]}
    assert reachable(["a"], successors) == {"a", "b", "c"}
    assert reachable(["a"], successors, avoid=["c"]) == {"a", "b"}


def test_dominators_of_a_diamond() -> None:
    successors = {"s": ["a", "b"], "a": ["m"], "b": ["m"], "m": []}
    assert dominators("s", successors) == {"s": "s", "a": "s", "b": "s", "m": "s"}


@pytest.mark.parametrize(
    ("successors", "terminals", "expected"),
    [
        # diamond: the fork merges where both branches meet
        ({"f": ["a", "b"], "a": ["m"], "b": ["m"], "m": ["e"]}, {"e"}, {"f": "m", "m": "e"}),
        # one branch ends at a terminal: nothing post-dominates the fork but the exit
        ({"f": ["a", "b"], "a": ["e"], "b": ["m"], "m": ["e"]}, {"e"}, {"f": "e", "b": "m"}),
        ({"f": ["a", "b"], "a": ["x"], "b": ["m"], "m": ["e"]}, {"e"}, {"f": None}),
        # a loop back to the fork keeps the merge after the loop
        ({"f": ["a", "m"], "a": ["f"], "m": ["e"]}, {"e"}, {"f": "m", "a": "f"}),
        # an endless loop never reaches the exit
        ({"f": ["a", "b"], "a": ["f"], "b": ["f"]}, set(), {"f": None, "a": None}),
    ],
)
def test_immediate_post_dominators(
    successors: dict[str, list[str]], terminals: set[str], expected: dict[str, str | None]
) -> None:
    nodes = set(successors) | {t for targets in successors.values() for t in targets}
    result = immediate_post_dominators(nodes, successors, terminals)
    assert {node: result[node] for node in expected} == expected


# ---------------------------------------------------------------------------- merge nodes


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param(
            """\
            [START] -> [F]
            [F] -> [A]:one -> [M]
            [F] -> [B]:two -> [M]
            [M] -> [END]
            """,
            {("main", "F"): "M"},
            id="diamond",
        ),
        pytest.param(
            """\
            [START] -> [F]
            [F] -> [G]
            [F] -> [B]:two -> [M]
            [G] -> [G1]:one -> [N]
            [G] -> [G2]:three -> [N]
            [N] -> [M]
            [M] -> [END]
            """,
            {("main", "F"): "M", ("main", "G"): "N"},
            id="nested forks",
        ),
        pytest.param(
            """\
            [START] -> [L]
            [L] -> [A]:one -> [M]
            [L] -> [B]:two -> [M]
            [M] -> if (x < 3) -> [L]
            [M] -> if (x >= 3) -> [END]
            """,
            {("main", "L"): "M", ("main", "M"): "END"},
            id="loop back",
        ),
        pytest.param(
            """\
            [START] -> [F]
            [F] -> [A]:one -> [END]
            [F] -> [B]:two -> [M]
            [M] -> [END]
            """,
            {("main", "F"): "END"},
            id="both reach END",
        ),
        pytest.param(
            """\
            [START] -> [F]
            [F] -> [A]:one
            [F] -> [B]:two -> [M]
            [M] -> [END]
            """,
            {("main", "F"): None},
            id="dead end",
        ),
        pytest.param(
            """\
            [START] -> [F]
            [F] -> [B]:one
            [F] -> [C]:two
            join(1):
                [B] ->
                [C] ->
            to [D]
            [D] -> [END]
            """,
            {("main", "F"): "join"},
            id="explicit join",
        ),
    ],
)
def test_merge_nodes(
    body: str, expected: dict[tuple[str, str], str | None], tmp_path: Path
) -> None:
    checked = analyze(flow(body), tmp_path)
    assert errors(checked) == []
    merges = {key: value for key, value in checked.merge_nodes.items()}
    if "join" in expected.values():
        merges = {
            key: "join" if value and value.startswith("join@") else value
            for key, value in merges.items()
        }
    assert merges == expected


def test_loop_head_with_several_start_lines_merges_inside_the_body(tmp_path: Path) -> None:
    checked = analyze(
        flow(
            """\
            [START] -> for @v in alive:
                -> [S]
                [S] -> [A]:one -> [M]
                [S] -> [B]:two -> [M]
                [M] ->
                -> if (x > 1) -> [C]:three ->
            -> [END]
            """
        ),
        tmp_path,
    )
    assert errors(checked) == []
    loop_node = next(key for key in checked.merge_nodes if key[1].startswith("for@"))
    assert checked.merge_nodes[loop_node] is None  # both start lines end the iteration
    assert checked.merge_nodes[("main", "S")] == "M"


def test_a_chain_of_modules_deeper_than_a_run_may_go_is_checked(tmp_path: Path) -> None:
    """400 modules, each calling the next: the effects of a call are looked for only as deep
    as a run may nest calls (§11.6), so the check ends without Python's recursion limit."""
    calls = [f"&M{i + 1}" for i in range(399)] + ["one"]
    modules = [
        f"module M{i}:\n    flow:\n        [IN] -> {call} -> [OUT]" for i, call in enumerate(calls)
    ]
    source = "\n".join([HEADER.rstrip(), *modules, "mainflow:", "    [START] -> &M0 -> [END]"])
    assert errors(analyze(source, tmp_path)) == []


def test_module_flow_keys_nest(tmp_path: Path) -> None:
    source = HEADER + textwrap.dedent(
        """\
        module Outer:
            module Inner:
                flow:
                    [IN] -> [F]
                    [F] -> [A]:one -> [OUT]
                    [F] -> [B]:two -> [OUT]
            flow:
                [IN] -> &Inner -> [OUT]
        mainflow:
            [START] -> &Outer -> [END]
        """
    )
    checked = analyze(source, tmp_path)
    assert errors(checked) == []
    assert checked.merge_nodes == {("module:Outer/Inner", "F"): "OUT"}


# ---------------------------------------------------------------------------- names (§11.3)


def test_module_sees_params_locals_enclosing_and_globals(tmp_path: Path) -> None:
    source = HEADER + textwrap.dedent(
        """\
        module Outer(topic):
            vars:
                rounds = 0
            module Inner:
                action speak @ai(@a):
                    prompt: {topic} after {rounds} rounds; x is {x}.
                flow:
                    [IN] -> speak -> [OUT]
            flow:
                [IN] -> &Inner -> [OUT]
        mainflow:
            [START] -> &Outer(answer) -> [END]
        """
    )
    assert errors(analyze(source, tmp_path)) == []


def test_module_sees_the_loop_variable_of_its_caller(tmp_path: Path) -> None:
    source = HEADER + textwrap.dedent(
        """\
        module Turn:
            action speak @ai(@speaker):
                prompt: You are {@speaker}.
            flow:
                [IN] -> speak -> [OUT]
        mainflow:
            [START] -> for @speaker in alive:
                -> &Turn ->
            -> [END]
        """
    )
    assert errors(analyze(source, tmp_path)) == []


def test_executor_bound_by_a_loop_around_the_module_call(tmp_path: Path) -> None:
    source = HEADER + textwrap.dedent(
        """\
        module Pair:
            action reply @ai(@w):
                prompt: {@w} answers {@v}.
            flow:
                [IN] -> for @v in alive:
                    -> reply ->
                -> [OUT]
        mainflow:
            [START] -> par @w in alive:
                -> &Pair ->
            -> [END]
        """
    )
    assert errors(analyze(source, tmp_path)) == []


def test_module_action_shadows_global_action(tmp_path: Path) -> None:
    source = HEADER + textwrap.dedent(
        """\
        module Round:
            action one @ai(@w):
                prompt: Shadowing one.
            flow:
                [IN] -> for @v in alive:
                    -> one ->
                -> [OUT]
        mainflow:
            [START] -> for @v in alive:
                -> one ->
            -> &Round -> [END]
        """
    )
    # Only the module's `one` runs as the unbound @w inside a loop over @v (§9.5, §11.4).
    assert errors(analyze(source, tmp_path)) == ["for binds @v but action 'one' runs as @w"]


def test_exclusive_conditions_do_not_warn_about_shared_assignments(tmp_path: Path) -> None:
    source = HEADER + textwrap.dedent(
        """\
        action set_a @assign:
            out: answer = "a"
        action set_b @assign:
            out: answer = "b"
        action report @ai(@a):
            prompt: {answer}
        mainflow:
            [START] -> [F]
            [F] -> if (x == 1) -> set_a -> [M]
            [F] -> if (x == 2) -> set_b -> [M]
            [F] -> if (x not in [1, 2]) -> [M]
            [M]: report -> [END]
        """
    )
    checked = analyze(source, tmp_path)
    assert errors(checked) == [] and warnings(checked) == []


@pytest.mark.parametrize(
    ("conditions", "warned"),
    [
        (["x == 1", "x == 2", "x == 3"], False),  # pairwise exclusive
        (["x == 1", "x == 2", "x == 1"], True),  # the first and the last may both run
        (["x == 1", "x != 1"], False),
        (["x == 1", "x != 1", "x == 2"], True),  # x != 1 and x == 2 may both hold
        (["x < 2", "x >= 2"], False),
        (["not (x == 1)", "x == 1"], False),
        (["x == 1", "len(alive) == 2", "x == 3"], True),
        (["x == 1", None], True),
        # pairwise exclusive through different conjuncts
        (
            [
                "x == 1 and len(alive) == 1",
                "x == 2 and len(alive) == 1",
                "x == 1 and len(alive) == 2",
            ],
            False,
        ),
        (["x == 1 and len(alive) == 1", "x == 2", "x == 1 and len(alive) > 1"], True),
    ],
)
def test_branches_clash_unless_their_conditions_exclude_each_other(
    tmp_path: Path, conditions: list[str | None], warned: bool
) -> None:
    edges = "\n".join(
        f"    [F] -> {f'if ({condition}) -> ' if condition else ''}set{index} -> [M]"
        for index, condition in enumerate(conditions)
    )
    actions = "".join(
        f'action set{index} @assign:\n    out: answer = "{index}"\n'
        for index in range(len(conditions))
    )
    source = (
        HEADER
        + actions
        + "action report @ai(@a):\n    prompt: {answer}\n"
        + f"mainflow:\n    [START] -> [F]\n{edges}\n    [M]: report -> [END]\n"
    )
    checked = analyze(source, tmp_path)
    assert errors(checked) == []
    expected = [
        "branches of [F] may each assign 'answer' with '=', and it is read after they merge at [M]"
    ]
    assert warnings(checked) == (expected if warned else [])


def test_implicit_func_inputs_and_code_calls_in_conditions(tmp_path: Path) -> None:
    files = {"game.py": "def over(alive, day=0):\n    return not alive\n"}
    source = HEADER + textwrap.dedent(
        """\
        code:
            game = file:"game.py"
        action check_over @func(game.over):
            out: answer
        mainflow:
            [START] -> check_over -> [A]
            [A] -> if (game.over(alive)) -> [END]
            [A] -> if (game.done(alive)) -> [END]
        """
    )
    checked = analyze(source, tmp_path, files)
    assert errors(checked) == ["'game.done' is not defined in game.py"]
    assert checked.code_signatures["game"]["over"] == FuncSignature(
        "over", (Param("alive", False), Param("day", True)), False, 1
    )
    assert checked.code_files["game"] == (tmp_path / "game.py").resolve()


def test_spawn_is_built_in(tmp_path: Path) -> None:
    source = HEADER + textwrap.dedent(
        """\
        action spawn_team @func(system.spawn):
            in: spawn_requests = answer
            out: alive
        mainflow:
            [START] -> spawn_team -> [END]
        """
    )
    assert errors(analyze(source, tmp_path)) == []


# ---------------------------------------------------------------------------- code signatures


@pytest.mark.parametrize(
    ("code", "name", "expected"),
    [
        (
            "def f(a, b=1, *args, c, d=2, **kw): ...",
            "f",
            FuncSignature(
                "f",
                (Param("a", False), Param("b", True), Param("c", False), Param("d", True)),
                True,
                1,
                "it takes *args (a model passes arguments by name)",
            ),
        ),
        (
            "async def g(x, /, y): ...",
            "g",
            FuncSignature(
                "g",
                (Param("y", False),),
                False,
                1,
                "it has positional-only parameters (a model passes arguments by name)",
                is_async=True,
            ),
        ),
        (
            "class Judge:\n    def __init__(self, rules, strict=False): ...",
            "Judge",
            FuncSignature(
                "Judge",
                (Param("rules", False), Param("strict", True)),
                False,
                1,
                "it is a class, not a function",
            ),
        ),
        ("from os.path import join as j", "j", FuncSignature("j", None, False, 1)),
        ("helper = print", "helper", FuncSignature("helper", None, False, 1)),
        ("LIMIT: int = 3", "LIMIT", FuncSignature("LIMIT", None, False, 1, value="3")),
        ("def f(): ...\nf = [1]", "f", FuncSignature("f", None, False, 2, value="[1]")),
        (
            "try:\n    def h(a): ...\nexcept ImportError:\n    h = None",
            "h",
            FuncSignature("h", None, False, 4),
        ),
    ],
)
def test_signatures_of(code: str, name: str, expected: FuncSignature) -> None:
    assert signatures_of(ast.parse(code))[name] == expected


def test_signature_accepts_and_required() -> None:
    signature = signatures_of(ast.parse("def f(a, b=1): ..."))["f"]
    assert signature.required == ("a",)
    assert signature.accepts("b") and not signature.accepts("c")
    assert signatures_of(ast.parse("def g(**kw): ..."))["g"].accepts("anything")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"def f(:\n", "code file 'x.py' has a Python syntax error at line 1"),
        (b"\xff\xfe", "code file 'x.py' is not valid UTF-8"),
    ],
)
def test_unreadable_code_files(content: bytes, message: str) -> None:
    from fems2py.checks.codefiles import CodeFileError

    with pytest.raises(CodeFileError, match=message.replace("(", r"\(")):
        read_signatures(content, "x.py")


# ---------------------------------------------------------------------------- the result


def test_hand_built_tree_without_parser(tmp_path: Path) -> None:
    span = Span("t.fems", 3, 5, 3, 12)
    graph = Graph(
        nodes=(FlowNode("START", None, False, span), FlowNode("Q", None, False, span)),
        edges=(Edge("START", "Q", None, span),),
        span=span,
    )
    checked = check(Script("t.fems", "", flow=graph), tmp_path)
    assert [(d.severity, d.message) for d in checked.diagnostics] == [
        ("warning", "the main flow has no [END]"),
        ("warning", "[Q] has no out-edges: its branch ends there"),
    ]
    assert not checked.has_errors


def test_diagnostics_are_sorted_by_position(tmp_path: Path) -> None:
    source = HEADER + textwrap.dedent(
        """\
        action bad @ai(@a):
            prompt: {zzz} and {yyy}
        mainflow:
            [START] -> bad -> [END]
            [Lost] -> [END]
        """
    )
    checked = analyze(source, tmp_path)
    positions = [(d.span.line, d.span.col) for d in checked.diagnostics]
    assert positions == sorted(positions) and len(positions) == 3
    assert checked.has_errors


def test_an_incomplete_flow_skips_shape_checks_but_not_names(tmp_path: Path) -> None:
    span = Span("t.fems", 3, 5, 3, 12)
    graph = Graph(
        nodes=(FlowNode("Q", "missing_action", False, span),),
        edges=(),
        span=span,
        complete=False,
    )
    checked = check(Script("t.fems", "", flow=graph), tmp_path)
    assert [d.message for d in checked.diagnostics] == ["undefined action 'missing_action'"]


def test_broken_names_count_as_defined(tmp_path: Path) -> None:
    span = Span("t.fems", 3, 5, 3, 12)
    graph = Graph(
        nodes=(
            FlowNode("START", None, False, span),
            FlowNode("talk@3:16", "talk", True, span),
            FlowNode("END", None, False, span),
        ),
        edges=(Edge("START", "talk@3:16", None, span), Edge("talk@3:16", "END", None, span)),
        span=span,
    )
    script = Script("t.fems", "", flow=graph, broken_names=frozenset({"talk"}))
    assert check(script, tmp_path).diagnostics == ()


@pytest.mark.parametrize(
    ("declarations", "message", "at"),
    [
        (["@p = @q", "@q = @p"], "actor variable @p is an alias of itself: @p → @q → @p", 3),
        (["@p = @p"], "actor variable @p is an alias of itself: @p → @p", 3),
        (
            ["@p = @a", "@q = @r", "@r = @s", "@s = @q"],
            "actor variable @q is an alias of itself: @q → @r → @s → @q",
            4,
        ),
    ],
)
def test_a_cycle_of_actor_variable_aliases_is_an_error(
    tmp_path: Path, declarations: list[str], message: str, at: int
) -> None:
    """§4.3: a chain of aliases that comes back to itself never reaches an actor; one error
    per cycle, at the first of its declarations."""
    source = "vars:\n    x = 0\n" + "".join(f"    {d}\n" for d in declarations)
    source += "actors:\n    ai @a\naction one @ai(@a):\n    prompt: One.\n"
    source += "mainflow:\n    [START] -> one -> [END]\n"
    checked = analyze(source, tmp_path)
    cycles = [d for d in checked.diagnostics if "alias of itself" in d.message]
    assert [d.message for d in cycles] == [message]
    assert cycles[0].severity == "error" and (cycles[0].span.line, cycles[0].span.col) == (at, 10)
    assert "bind one of them to an actor" in (cycles[0].hint or "")


@pytest.mark.parametrize(
    ("written", "hint"),
    [
        ("helper.stop", "did you mean 'helpers'?"),
        ("h.stop", 'declare it in code: (h = file:"h.py")'),
    ],
)
def test_interrupt_with_an_unknown_code_alias_says_so(
    tmp_path: Path, written: str, hint: str
) -> None:
    """§10.7: ``interrupt: alias.fn`` with an alias code: does not declare is an unknown alias,
    not a Python attribute the expression grammar forbids."""
    source = f"""\
        code:
            helpers = file:"helpers.py"
        actors:
            ai @a
        action one @ai(@a):
            prompt: One.
            interrupt: {written}
        mainflow:
            [START] -> one -> [END]
        """
    checked = analyze(source, tmp_path, {"helpers.py": "def stop():\n    return False\n"})
    alias = written.split(".")[0]
    assert [(d.message, d.hint) for d in checked.diagnostics] == [
        (f"unknown code alias '{alias}'", hint)
    ]
    span = checked.diagnostics[0].span
    assert (span.line, span.col, span.end_col) == (7, 16, 16 + len(written))


def test_a_misspelt_in_name_of_a_func_action_is_one_error(tmp_path: Path) -> None:
    """``in: sesion`` (for ``session``) is one mistake: the undeclared variable, not also a
    parameter the function lacks and an argument in: does not pass."""
    source = """\
        vars:
            session = 1
            r = 0
        code:
            helpers = file:"helpers.py"
        action go @func(helpers.f):
            in: sesion
            out: r
        mainflow:
            [START] -> go -> [END]
        """
    checked = analyze(source, tmp_path, {"helpers.py": "def f(session):\n    return 1\n"})
    assert [(d.span.line, d.span.col, d.message, d.hint) for d in checked.diagnostics] == [
        (7, 9, "undeclared variable 'sesion'", "did you mean 'session'?")
    ]


def test_unknown_code_function_lists_at_most_five_of_the_file(tmp_path: Path) -> None:
    functions = "".join(f"def f{n}(x):\n    return x\n" for n in range(7))
    source = HEADER + textwrap.dedent(
        """\
        code:
            game = file:"game.py"
        action tally @func(game.totals):
            in: x
            out: x
        mainflow:
            [START] -> tally -> [END]
        """
    )
    checked = analyze(source, tmp_path, {"game.py": functions})
    [hint] = [d.hint for d in checked.diagnostics if d.severity == "error"]
    assert hint == "game.py defines: f0, f1, f2, f3, f4, … (2 more)"


def test_a_resolve_argument_written_with_at_is_the_parameter_without_it(tmp_path: Path) -> None:
    """§10.5: ``resolve: checks.f(@v)`` passes ``@v``'s value as the parameter ``v``, as the
    runtime does, so the checker matches it against ``v``."""
    source = HEADER + textwrap.dedent(
        """\
        code:
            checks = file:"checks.py"
        action judge @ai(@a):
            prompt: Judge.
            out: x(int)
            resolve: checks.fair(@v, @a, llm_output)
        mainflow:
            [START] -> judge -> [END]
        """
    )
    helpers = {"checks.py": "def fair(v, a, llm_output):\n    return [(True, False, '')]\n"}
    assert errors(analyze(source, tmp_path, helpers)) == []
