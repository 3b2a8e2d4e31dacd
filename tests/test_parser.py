"""Parser: each construct of §2–§12 → the syntax tree of fems2py.nodes, at any indent width."""

from __future__ import annotations

import dataclasses
import re
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fems2py.diagnostics import Diagnostic
from fems2py.nodes import (
    ActorValue,
    BoolValue,
    DictValue,
    Graph,
    Join,
    ListValue,
    Loop,
    ModuleCall,
    NullValue,
    NumberValue,
    Script,
    StringValue,
)
from fems2py.parser import parse

WIDTHS = pytest.mark.parametrize("width", [2, 4])


def reindent(source: str, width: int) -> str:
    """``source`` written with 4-space steps, re-indented with ``width``-space steps."""
    source = textwrap.dedent(source).lstrip("\n")
    return re.sub(
        r"^( +)",
        lambda m: " " * (len(m.group(1)) // 4 * width + len(m.group(1)) % 4),
        source,
        flags=re.M,
    )


def run(source: str, width: int = 4, base: Path | None = None) -> tuple[Script, list[Diagnostic]]:
    return parse(reindent(source, width), "s.fems", base)


def ok(source: str, width: int = 4, base: Path | None = None) -> Script:
    script, diagnostics = run(source, width, base)
    assert not [d for d in diagnostics if d.severity == "error"], [d.format() for d in diagnostics]
    return script


def errors(source: str, width: int = 4) -> list[Diagnostic]:
    return [d for d in run(source, width)[1] if d.severity == "error"]


def edges(graph: Graph) -> list[tuple[str, str, str | None]]:
    return [(e.source, e.target, e.condition.python if e.condition else None) for e in graph.edges]


def flow(body: str, width: int = 4) -> Graph:
    script = ok("mainflow:\n" + textwrap.indent(textwrap.dedent(body).strip("\n"), "    "), width)
    assert script.flow is not None
    return script.flow


# --------------------------------------------------------------------------- meta / vars


@WIDTHS
def test_meta_accepts_equals_and_colon(width: int) -> None:
    script = ok(
        """
        meta:
            name = 测试剧本
            version: 1.0
            owner = [001, 2]
            session = 3 / new
            max_steps = 50
            output_style = "回复请简洁"  # comment
            system_safety = |
                不许删库。
                # kept heading

                http://x // kept
            delay = 0.5
        """,
        width,
    )
    meta = {entry.key: entry.value for entry in script.meta}
    assert meta["name"] == StringValue("测试剧本", "bare", meta["name"].span)
    assert meta["version"].value == "1.0"
    assert [item.value for item in meta["owner"].items] == ["001", "2"]
    assert meta["session"].value == "3 / new"
    assert meta["max_steps"].value == 50
    assert (meta["output_style"].value, meta["output_style"].style) == ("回复请简洁", "quoted")
    assert meta["system_safety"].value == "不许删库。\n# kept heading\n\nhttp://x // kept"
    assert meta["system_safety"].style == "block"
    assert meta["delay"].value == 0.5


def test_block_ends_at_the_next_key_not_swallowing_it() -> None:
    script = ok(
        """
        vars:
            intro = |
                line one
            count = 2
        """
    )
    assert [(v.name, v.value.value) for v in script.variables] == [
        ("intro", "line one"),
        ("count", 2),
    ]


def test_comment_like_lines_belong_to_a_block() -> None:
    script = ok("vars:\n    a = |\n        text\n        # heading\n    b = 1\n")
    assert [(v.name, v.value.value) for v in script.variables] == [
        ("a", "text\n# heading"),
        ("b", 1),
    ]


def test_a_shallow_comment_ends_a_block() -> None:
    script, diagnostics = run("vars:\n    a = |\n        one\n# note\n        two\n")
    assert script.variables[0].value.value == "one"
    assert [(d.span.line, d.message) for d in diagnostics] == [
        (5, "unexpected indented line under 'a: |'")
    ]


def test_file_text_is_read_relative_to_the_script(tmp_path: Path) -> None:
    (tmp_path / "rules.txt").write_text("be kind", encoding="utf-8")
    script = ok('meta:\n    system_safety = file:"rules.txt"\n', base=tmp_path)
    value = script.meta[0].value
    assert (value.value, value.style, value.path) == ("be kind", "file", "rules.txt")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ('file:"game.db"', ("game.db", "file", "game.db")),
        ("sqlite:///x.db", ("sqlite:///x.db", "bare", None)),
    ],
)
def test_database_is_a_path_never_read(tmp_path: Path, value: str, expected: tuple) -> None:
    script = ok(f"meta:\n    database = {value}\n", base=tmp_path)
    entry = script.meta[0].value
    assert (entry.value, entry.style, entry.path) == expected


def test_prompt_from_a_file_has_placeholders(tmp_path: Path) -> None:
    (tmp_path / "p.txt").write_text("Day {day}, {{not}} {@x.hp}", encoding="utf-8")
    [action] = ok('action a @ai(@x):\n    prompt: file:"p.txt"\n', base=tmp_path).actions
    assert [p.path for p in action.prompt.placeholders] == ["day", "@x.hp"]
    assert {p.span for p in action.prompt.placeholders} == {action.prompt.span}


def test_missing_file_is_an_error_naming_the_path(tmp_path: Path) -> None:
    _, diagnostics = run('meta:\n    system_safety = file:"nope.txt"\n', base=tmp_path)
    [error] = diagnostics
    assert "nope.txt" in error.message and error.span.line == 2


@WIDTHS
def test_var_literals(width: int) -> None:
    script = ok(
        """
        vars:
            a = 3
            b = -2
            c = 1.5
            d = 1e3
            e = "3"
            f = true
            g = False
            h = null
            i = None
            j = @seer
            k = [@a, "x", 2, bare word]
            l = {@a: 1, "s": 2, w: 3, 4: [1]}
            m = 测试 剧本
            @speaker = ""
            n = [@a,
                 @b]
            all = []
        """,
        width,
    )
    values = {v.name: v.value for v in script.variables}
    assert values["a"] == NumberValue(3, values["a"].span)
    assert values["b"].value == -2 and values["c"].value == 1.5 and values["d"].value == 1000.0
    assert isinstance(values["e"], StringValue) and values["e"].value == "3"
    assert isinstance(values["f"], BoolValue) and values["f"].value is True
    assert values["g"].value is False
    assert isinstance(values["h"], NullValue) and isinstance(values["i"], NullValue)
    assert values["j"] == ActorValue("@seer", values["j"].span)
    assert isinstance(values["k"], ListValue)
    assert [type(i).__name__ for i in values["k"].items] == [
        "ActorValue",
        "StringValue",
        "NumberValue",
        "StringValue",
    ]
    assert values["k"].items[3].value == "bare word"
    assert isinstance(values["l"], DictValue)
    assert [k.value if not isinstance(k, ActorValue) else k.name for k, _ in values["l"].items] == [
        "@a",
        "s",
        "w",
        4,
    ]
    assert values["m"].value == "测试 剧本"
    assert values["@speaker"].value == ""
    assert [i.name for i in values["n"].items] == ["@a", "@b"]
    assert "all" in values


@WIDTHS
def test_closing_bracket_may_sit_under_the_opening_line(width: int) -> None:
    script = ok(
        """
        vars:
            hp = {
                @a: 1,
                @b: 2
            }
            after = 1
        action reset @assign:
            out: order = [
                    @a,
                ]
                 day = 0
        """,
        width,
    )
    assert [len(v.value.items) if v.name == "hp" else v.value.value for v in script.variables] == [
        2,
        1,
    ]
    assignments = script.actions[0].assignments
    assert [(a.target.name, a.value.python) for a in assignments] == [
        ("order", "[ ctx['@a'], ]"),
        ("day", "0"),
    ]


def test_code_aliases_and_reserved_names() -> None:
    script, diagnostics = run('code:\n    game = file:"utils/game.py"\n    flow = file:"x.py"\n')
    assert [(c.alias, c.path) for c in script.code][0] == ("game", "utils/game.py")
    assert "reserved" in diagnostics[0].message
    assert errors('code:\n    game = "x.py"\n')[0].message.startswith("expected file:")


# --------------------------------------------------------------------------- actors


@WIDTHS
def test_actors_and_blueprints(width: int) -> None:
    script = ok(
        """
        actors:
            ai @hostgod = soul:0, source:deepseek
            ai wolfbob = soul:1, source:glm5.1, tools:[deep_think]
            human @player = soul:9, source:0
            ai @eve = tools: true
            ai @预言家
            blueprint coder:
                source: openai/gpt-4o-mini
                tools: [code_interpreter]
        blueprint tester:
            source: fast
        """,
        width,
    )
    actors = {a.name: a for a in script.actors}
    assert actors["@hostgod"].soul == "0" and actors["@hostgod"].source == "deepseek"
    assert actors["@wolfbob"].tools == ("deep_think",) and actors["@wolfbob"].source == "glm5.1"
    assert actors["@player"].kind == "human" and actors["@player"].source == "0"
    assert actors["@eve"].tools is True
    assert actors["@预言家"].soul == "预言家" and actors["@预言家"].source is None
    assert [(b.name, b.source, b.tools) for b in script.blueprints] == [
        ("coder", "openai/gpt-4o-mini", ("code_interpreter",)),
        ("tester", "fast", ()),
    ]


def test_unknown_actor_property_suggests() -> None:
    [error] = errors("actors:\n    ai @a = sould:1\n")
    assert error.hint == "did you mean 'soul'?"


# --------------------------------------------------------------------------- methods


@WIDTHS
def test_memory_and_context_methods(width: int) -> None:
    script = ok(
        """
        memory rag10(memfile.retrieve):
            in: prompt, session_id, @actor
            out: memory_text
        context here(ctxfile.this_session):
            in:
                session
                @actor
            out: context_text
        """,
        width,
    )
    rag, here = script.methods
    assert (rag.kind, rag.name, rag.func.alias, rag.func.func) == (
        "memory",
        "rag10",
        "memfile",
        "retrieve",
    )
    assert [i.name for i in rag.inputs] == ["prompt", "session_id", "@actor"]
    assert rag.outputs == ("memory_text",)
    assert [i.name for i in here.inputs] == ["session", "@actor"]


# --------------------------------------------------------------------------- actions


@WIDTHS
def test_ai_action_with_every_field(width: int) -> None:
    script = ok(
        """
        code:
            game = file:"game.py"
        action wolf_kill @ai(@wolf):
            prompt: |
                第{day}天，存活：{alive}。{hp.@seer} {@seer.hp} {votes[@x]} {{literal}} {"a": 1}
            showprompt: "夜晚来临 {day}"
            scope: [@hostgod, {alive}] + wolves
            in: my_task = task_list[@coder_1], day
            out: kill: actor, vote(enum([a, b]), "标签"), v?: dropdown, choices={alive}, n(int)
            resolve: game.resolve_target(kill, SET_VARIABLE)
            max_retries: 3
            fallback: host_emergency
            memory: rag10
            context: here
            interrupt: night == true
            model: openai/gpt-4o
        """,
        width,
    )
    [action] = script.actions
    assert (action.kind, action.executor, action.role) == ("ai", "@wolf", None)
    assert [p.path for p in action.prompt.placeholders] == [
        "day",
        "alive",
        "hp.@seer",
        "@seer.hp",
        "votes[@x]",
    ]
    refs = [(p.ref.name, p.ref.attr) for p in action.prompt.placeholders]
    assert refs[2] == ("@seer", "hp") and refs[3] == ("@seer", "hp") and refs[4] == ("votes", None)
    first = action.prompt.placeholders[0]
    assert (first.span.line, first.span.col) == (5, 2 * width + 2)
    assert action.showprompt.value.value == "夜晚来临 {day}"
    assert [(i.kind, i.name) for i in action.scope.items] == [
        ("actor", "@hostgod"),
        ("expand", "alive"),
        ("var", "wolves"),
    ]
    assert [(i.name, i.expr.python if i.expr else None) for i in action.inputs] == [
        ("my_task", "ctx['task_list'][ctx['@coder_1']]"),
        ("day", None),
    ]
    outs = {o.target.name: o for o in action.outs}
    assert outs["kill"].type.name == "actor"
    assert outs["vote"].type.name == "enum"
    assert [c.value for c in outs["vote"].type.choices] == ["a", "b"]
    assert outs["v"].optional and outs["v"].type.name == "dropdown"
    assert outs["v"].type.choices == ()
    assert outs["v"].type.choices_from.name == "alive"  # the guide's choices={alive_players}
    assert outs["n"].type.name == "int"
    assert action.resolve.func.func == "resolve_target"
    assert action.resolve.args == ("kill", "SET_VARIABLE")
    assert action.max_retries == 3 and action.fallback == "host_emergency"
    assert (action.memory, action.context, action.model) == ("rag10", "here", "openai/gpt-4o")
    assert action.interrupt.kind == "condition"
    assert action.interrupt.condition.python == "ctx['night'] == True"
    names = [name for name, _ in action.field_spans]
    assert names[:4] == ["executor", "prompt", "showprompt", "scope"]


def test_prompt_placeholder_columns_are_exact() -> None:
    script = ok('action a @ai(@x):\n    prompt: "hi {day}!"\n')
    [placeholder] = script.actions[0].prompt.placeholders
    assert (placeholder.span.line, placeholder.span.col, placeholder.span.end_col) == (2, 17, 22)


@pytest.mark.parametrize(
    ("header", "kind", "executor", "role", "func"),
    [
        ("action a @ai(@x):", "ai", "@x", None, None),
        ("action a @human(@player) as (@预言家):", "human", "@player", "@预言家", None),
        ("action a @human(@player) as @预言家:", "human", "@player", "@预言家", None),
        ("action a @mind(@speaker):", "mind", "@speaker", None, None),
        ("action a @assign:", "assign", None, None, None),
        ("action a @func(game.tick):", "func", None, None, ("game", "tick")),
        ("action a @func(system.spawn):", "func", None, None, ("system", "spawn")),
    ],
)
def test_action_headers(header: str, kind: str, executor, role, func) -> None:
    [action] = ok(header + "\n").actions
    assert (action.kind, action.executor, action.role) == (kind, executor, role)
    assert (action.func.alias, action.func.func) == func if func else action.func is None


@pytest.mark.parametrize(
    ("text", "outs"),
    [
        ("out: a, b?", [("a", None, False, None), ("b", None, True, None)]),
        ('out: votes.@voter(string, "")', [("votes", "@voter", False, "string")]),
        ("out: @x.hp", [("hp", "@x", False, None)]),
        ("out: hp.@x: int", [("hp", "@x", False, "int")]),
        ("out: tasks[@coder_1]", [("tasks", "@coder_1", False, None)]),
        ("out: dict.key", [("dict", "key", False, None)]),
        ("out: @预言家", [("@预言家", None, False, None)]),
        ('out: finish(bool, "结束了没")', [("finish", None, False, "bool")]),
        (
            'out: v(dropdown, choices={@a, @b}, label="投票")',
            [("v", None, False, "dropdown")],
        ),
    ],
)
def test_out_forms(text: str, outs) -> None:
    [action] = ok(f"action a @ai(@x):\n    {text}\n").actions
    assert [
        (o.target.name, o.target.key, o.optional, o.type.name if o.type else None)
        for o in action.outs
    ] == outs


@pytest.mark.parametrize(
    ("text", "captions"),
    [
        ('out: vote_target(dropdown, choices={alive}, label="投票")', ["投票"]),
        ('out: vote_results.@voter(string, "标签")', ["标签"]),
        ('out: pick(actor, "tonight\'s victim"), ok(bool)', ["tonight's victim", None]),
        ('out: note("a note")', ["a note"]),
        ('out: n: int, "how many"', ["how many"]),
        ('out: v(label="only a label")', ["only a label"]),
        ('out: v(dropdown, label="x", choices={@a, @b})', ["x"]),
        ("out: a, b?", [None, None]),
    ],
)
def test_out_labels_are_kept_as_captions(text: str, captions: list[str | None]) -> None:
    """The guide's ``name(type, "标签")`` and ``label="…"`` (§10.8): kept for people."""
    [action] = ok(f"action a @ai(@x):\n    {text}\n").actions
    assert [o.caption for o in action.outs] == captions


def test_out_label_must_be_quoted() -> None:
    [error] = errors("action a @ai(@x):\n    out: v(dropdown, label=投票)\n")
    assert error.message == "expected a quoted label after 'label='"


@pytest.mark.parametrize(
    ("target", "name", "key", "kind", "word", "python"),
    [
        ("x", "x", None, None, None, None),
        ("@v", "@v", None, None, None, None),
        ("votes.@voter", "votes", "@voter", "actor", None, None),
        ("@x.hp", "hp", "@x", "actor", None, None),
        ("hp.@x", "hp", "@x", "actor", None, None),
        ("d[@x]", "d", "@x", "actor", None, None),
        ("scores.alice", "scores", "alice", "name", None, None),
        ('d["k"]', "d", '"k"', "index", None, '"k"'),
        ("d[3]", "d", "3", "index", None, "3"),
        ("d[i]", "d", "i", "index", "i", "ctx['i']"),
        ("d[ i ]", "d", "i", "index", "i", "ctx['i']"),
        ("d[i + 1]", "d", "i + 1", "index", None, "ctx['i'] + 1"),
        ("d[@x.team]", "d", "@x.team", "index", None, "ctx.attr('@x', 'team')"),
    ],
)
def test_targets_record_how_the_key_was_written(
    target: str, name: str, key: str | None, kind: str | None, word: str | None, python: str | None
) -> None:
    """§9.6: a literal key (``scores.alice``, ``d["k"]``) and a variable one (``d[i]``,
    ``d[@x]``) are different things, so the tree says which was written."""
    [action] = ok(f"action a @assign:\n    out: {target} = 1\n").actions
    [assignment] = action.assignments
    got = assignment.target
    expr = got.key_expr.python if got.key_expr is not None else None
    assert (got.name, got.key, got.key_kind, got.key_word, expr) == (
        name,
        key,
        kind,
        word,
        python,
    )
    assert got.written == target.replace("[ i ]", "[i]") or got.key_kind == "actor"
    [out_action] = ok(f"action a @ai(@x):\n    out: {target}\n").actions
    assert out_action.outs[0].target == got


@WIDTHS
def test_assign_statements(width: int) -> None:
    [action] = ok(
        """
        action next @assign:
            out: day += 1
                 score -= 2
                 alive = remove(@seer)
                 park = add(@Alice)
                 scene = "酒馆"
                 hp.@eve = 5
                 @x.hp += 1
                 votes[@v] = @VOTE
                 @speaker = @seer
                 pair = [1,
                    2]
                 title = hello world
        """,
        width,
    ).actions
    assert [(a.target.name, a.target.key, a.op, a.value.python) for a in action.assignments] == [
        ("day", None, "+=", "1"),
        ("score", None, "-=", "2"),
        ("alive", None, "remove", "ctx['@seer']"),
        ("park", None, "add", "ctx['@Alice']"),
        ("scene", None, "=", '"酒馆"'),
        ("hp", "@eve", "=", "5"),
        ("hp", "@x", "+=", "1"),
        ("votes", "@v", "=", "ctx['@VOTE']"),
        ("@speaker", None, "=", "ctx['@seer']"),
        ("pair", None, "=", "[1, 2]"),
        ("title", None, "=", "'hello world'"),
    ]


@WIDTHS
def test_structured_fields_on_indented_lines(width: int) -> None:
    [assign, ai] = ok(
        """
        action next @assign:
            out: |
                day += 1
                x = 2
        action talk @ai(@x):
            scope:
                [@a, @b]
            in: |
                a
                b = c
            out:
                v: int
        """,
        width,
    ).actions
    assert [a.target.name for a in assign.assignments] == ["day", "x"]
    assert [i.name for i in ai.scope.items] == ["@a", "@b"]
    assert [i.name for i in ai.inputs] == ["a", "b"]
    assert [o.type.name for o in ai.outs] == ["int"]


@pytest.mark.parametrize(
    ("scope", "items"),
    [
        ("[@a, @b]", [("actor", "@a"), ("actor", "@b")]),
        ("wolves", [("var", "wolves")]),
        ("[{alive}]", [("expand", "alive")]),
        ("[@上帝] + wolves", [("actor", "@上帝"), ("var", "wolves")]),
        ("@speaker", [("actor", "@speaker")]),
        ("@a, @b", [("actor", "@a"), ("actor", "@b")]),
        ("all", [("all", "all")]),
        ("【@CEO，@coder】", [("actor", "@CEO"), ("actor", "@coder")]),
    ],
)
def test_scope_forms(scope: str, items) -> None:
    [action] = ok(f"action a @ai(@x):\n    scope: {scope}\n").actions
    assert [(i.kind, i.name) for i in action.scope.items] == items


@pytest.mark.parametrize(
    ("text", "check"),
    [
        ("resolve: game.check", lambda a: a.resolve.args is None),
        ("resolve: game.check()", lambda a: a.resolve.args == ()),
        ("fallback: &Recover(day, @x)", lambda a: isinstance(a.fallback, ModuleCall)),
        ("fallback: &Recover", lambda a: a.fallback.module == "Recover" and a.fallback.args == ()),
        ("interrupt: HUMAN", lambda a: a.interrupt.kind == "human"),
        ("interrupt: HUMAN_EXCEPT", lambda a: a.interrupt.kind == "human_except"),
        ("interrupt: HUMAN_EXCEPT(@a, @b)", lambda a: a.interrupt.actors == ("@a", "@b")),
        ("interrupt: game.check_interrupt", lambda a: a.interrupt.func.func == "check_interrupt"),
        ("max_retries: 0", lambda a: a.max_retries == 0),
    ],
)
def test_resolve_fallback_interrupt(text: str, check) -> None:
    [action] = ok(f'code:\n    game = file:"g.py"\naction a @ai(@x):\n    {text}\n').actions
    assert check(action)


@pytest.mark.parametrize(
    ("field", "message", "hint", "col"),
    [
        ("promt: hi", "unknown action field 'promt'", "did you mean 'prompt'?", 5),
        ("scop: [@a]", "unknown action field 'scop'", "did you mean 'scope'?", 5),
        ("max_retries: many", "max_retries", None, 18),
        ("fallback: a b", "fallback", None, 15),
    ],
)
def test_field_errors(field: str, message: str, hint: str | None, col: int) -> None:
    [error] = errors(f"action a @ai(@x):\n    {field}\n")
    assert message in error.message
    assert error.hint == hint
    assert (error.span.line, error.span.col) == (2, col)


def test_duplicate_and_misplaced_fields() -> None:
    found = errors(
        "action a @ai(@x):\n    prompt: a\n    prompt: b\naction b @assign:\n    prompt: c\n"
    )
    assert [e.message for e in found] == [
        "field 'prompt' is given twice",
        "'prompt:' does not apply to @assign actions",
    ]


# --------------------------------------------------------------------------- file structure


def test_unknown_and_duplicate_blocks_report_every_error() -> None:
    found = errors(
        """
        meta:
            name = x
        mata:
            name = y
        meta:
            name = z
        vars:
            x = [1
        action a @aii(@x):
            prompt: hi
        mainflow:
            [START] -> -> [END]
        """
    )
    assert [(e.span.line, e.message.split(":")[0]) for e in found] == [
        (3, "unknown block 'mata' at the top level"),
        (5, "second 'meta"),
        (8, "'[' is never closed"),
        (9, "unknown action kind '@aii'"),
        (12, "expected a node, an action or &Module, found '->'"),
    ]
    assert found[0].hint == "did you mean 'meta'?"


def test_duplicate_action_names() -> None:
    [error] = errors("action a @assign:\naction a @assign:\n")
    assert error.message == "action 'a' is defined twice" and error.span.line == 2


@WIDTHS
def test_modules_nest_with_their_own_definitions(width: int) -> None:
    script = ok(
        """
        module Dev(task_var, @coder):
            meta:
                max_steps = 100
            vars:
                finish = false
            memory m(x.y):
                out: memory_text
            action write_code @ai(@coder):
                prompt: "任务: {task_var}"
            module Inner:
                flow:
                    [IN] -> [OUT]
            flow:
                [IN] -> write_code -> &Inner -> [OUT]
        """,
        width,
    )
    [module] = script.modules
    assert module.params == ("task_var", "@coder")
    assert module.meta[0].value.value == 100
    assert [v.name for v in module.variables] == ["finish"]
    assert [a.name for a in module.actions] == ["write_code"]
    assert [m.name for m in module.methods] == ["m"]
    assert module.modules[0].name == "Inner" and module.modules[0].flow.edges[0].target == "OUT"
    assert [e.target for e in module.flow.edges][-1] == "OUT"


def test_module_rejects_top_level_only_blocks() -> None:
    [error] = errors("module M:\n    actors:\n        ai @a\n")
    assert error.message == "'actors:' is not allowed inside a module"


def test_sketch_is_kept_apart() -> None:
    script = ok("sketch:\n    [A] = 10, 20\n    [START] = 0, 0\n")
    assert script.sketch == (("A", "10, 20"), ("START", "0, 0"))


def test_sketch_blocks_may_repeat() -> None:
    script = ok("sketch:\n    [A] = 1, 2\nvars:\n    x = 1\nsketch:\n    [B] = 3, 4\n")
    assert script.sketch == (("A", "1, 2"), ("B", "3, 4"))


# --------------------------------------------------------------------------- flows


@WIDTHS
def test_chains_and_bindings(width: int) -> None:
    graph = flow(
        """
        [START] -> action0 -> [B]:action1 -> &module1 -> [END]
        [A]: myaction
        [C]: &mymodule(arg, @x)
        [A] -> [D]:action2 -> [E]:&mymodule(arg) -> [B] -> [A]
        a -> b -> a
        """,
        width,
    )
    names = [n.name for n in graph.nodes]
    assert names[:5] == ["START", f"action0@2:{width + 12}", "B", f"&module1@2:{width + 38}", "END"]
    assert graph.node("B").binding == "action1" and not graph.node("B").anonymous
    assert graph.node("A").binding == "myaction"
    call = graph.node("C").binding
    assert isinstance(call, ModuleCall) and [a.python for a in call.args] == [
        "ctx['arg']",
        "ctx['@x']",
    ]
    assert ("B", "A", None) in edges(graph) and ("E", "B", None) in edges(graph)
    assert names[-3:] == [f"a@6:{width + 1}", f"b@6:{width + 6}", f"a@6:{width + 11}"]


def test_conflicting_bindings_are_an_error() -> None:
    found = errors("mainflow:\n    [A]: x\n    [A]: y\n    [A]: x\n")
    assert [e.message for e in found] == ["node [A] is bound twice"]


@WIDTHS
def test_conditions_in_both_forms(width: int) -> None:
    graph = flow(
        """
        [A] -> if (x == 1) -> [B]
        [A] -> (if y == 2) [C]
        [A] -> (if y == 3)[D]
        [A] -> if (a) and (b) -> [E]
        """,
        width,
    )
    assert edges(graph) == [
        ("A", "B", "ctx['x'] == 1"),
        ("A", "C", "ctx['y'] == 2"),
        ("A", "D", "ctx['y'] == 3"),
        ("A", "E", "(ctx['a']) and (ctx['b'])"),
    ]


@WIDTHS
@pytest.mark.parametrize("same_line", [True, False])
def test_fork_on_same_or_next_line(width: int, same_line: bool) -> None:
    head = "[A] -> [C] -> fork:" if same_line else "[A] -> [C] ->\nfork:"
    graph = flow(
        head
        + """
    -> [visit]
    -> if (score > 5 and level >= 3) -> [solo] -> [END]
    -> (if finish == false) [A]
""",
        width,
    )
    assert edges(graph) == [
        ("A", "C", None),
        ("C", "visit", None),
        ("C", "solo", "ctx['score'] > 5 and ctx['level'] >= 3"),
        ("solo", "END", None),
        ("C", "A", "ctx['finish'] == False"),
    ]


@WIDTHS
def test_continuation_line_under_a_trailing_arrow(width: int) -> None:
    graph = flow(
        """
        [IN] -> [A]:&CoderSandbox ->
             -> [B]:reviewer -> [C]:reviewer2 ->
        fork:
             -> (if submit == "goodjob") -> [OUT]
             -> (if submit == "discuss") -> [B]
        """,
        width,
    )
    assert edges(graph) == [
        ("IN", "A", None),
        ("A", "B", None),
        ("B", "C", None),
        ("C", "OUT", "ctx['submit'] == \"goodjob\""),
        ("C", "B", "ctx['submit'] == \"discuss\""),
    ]


@WIDTHS
@pytest.mark.parametrize("same_line", [True, False])
def test_for_loop_with_exit_chain(width: int, same_line: bool) -> None:
    head = "[P] -> for @speaker in alive:" if same_line else "[P] ->\nfor @speaker in alive:"
    graph = flow(
        head
        + """
    -> if (@speaker.type == "human") -> human_speak ->
    -> if (@speaker.type == ai) -> [S]:ai_speak -> [T] ->
    [S] -> log
-> [D] -> tally -> [END]
""",
        width,
    )
    loop_node = graph.nodes[1]
    loop = loop_node.binding
    assert isinstance(loop, Loop)
    assert (loop.kind, loop.var, loop.iterable.python) == ("for", "@speaker", "ctx['alive']")
    assert loop.head == loop_node.name and loop_node.name.startswith("for@")
    body = edges(loop.body)
    assert body[0][0] == loop.head and body[0][2] == "ctx.attr('@speaker', 'type') == \"human\""
    assert (loop.head, "S", "ctx.attr('@speaker', 'type') == 'ai'") in body
    assert ("S", "T", None) in body
    assert loop.ends[1] == "T" and loop.ends[0].startswith("human_speak@")
    outer = edges(graph)
    assert outer[0] == ("P", loop_node.name, None)
    assert outer[1] == (loop_node.name, "D", None)
    assert outer[2][0] == "D" and outer[3][1] == "END"


@WIDTHS
def test_par_loop_nested_in_for(width: int) -> None:
    graph = flow(
        """
        [START] -> for i in range(3):
            -> [A] -> par @coder in workers:
                -> &CoderSandbox(@coder, task_list[@coder]) ->
            -> [B] ->
        -> [END]
        """,
        width,
    )
    outer = graph.nodes[1].binding
    assert isinstance(outer, Loop) and outer.iterable.python == "range(3)"
    inner_node = outer.body.nodes[2]
    inner = inner_node.binding
    assert isinstance(inner, Loop) and inner.kind == "par" and inner.var == "@coder"
    call = inner.body.nodes[1].binding
    assert [a.python for a in call.args] == ["ctx['@coder']", "ctx['task_list'][ctx['@coder']]"]
    assert inner.ends == (inner.body.nodes[1].name,)
    assert outer.ends == ("B",)
    assert ("A", inner_node.name, None) in edges(outer.body)
    assert (inner_node.name, "B", None) in edges(outer.body)
    assert edges(graph)[-1] == (graph.nodes[1].name, "END", None)


@WIDTHS
def test_join_with_inputs_and_target(width: int) -> None:
    graph = flow(
        """
        [A] -> fork:
            -> [B]
            -> [C]
        join(2):
            [B] ->
            [C] ->
        to [next] -> [END]
        join(any):
            [B] ->
        to [E]
        """,
        width,
    )
    joins = [n for n in graph.nodes if isinstance(n.binding, Join)]
    assert [j.binding.count for j in joins] == [2, 1]
    first = joins[0].name
    assert ("B", first, None) in edges(graph) and ("C", first, None) in edges(graph)
    assert (first, "next", None) in edges(graph) and ("next", "END", None) in edges(graph)
    assert (joins[1].name, "E", None) in edges(graph)


def test_join_without_to_is_an_error() -> None:
    found = errors("mainflow:\n    join(all):\n        [B] ->\n    [X] -> [Y]\n")
    assert found[0].message == "expected 'to [node]' after the join's inputs"


@pytest.mark.parametrize(
    ("body", "message", "col"),
    [
        ("[A] -> [B] ->", "'->' at the end of the line leads nowhere", 16),
        ("-> [B]", "a line starting with '->' needs a node before it", 5),
        ("fork:\n        -> [B]", "'fork' needs a node before it", 5),
        ("[A] [B]", "expected '->' after [A], found '['", 9),
        ("[A] --> [B]", "expected '->' after [A], found '-'", 9),
        ("[A] → [B]", "expected '->' after [A], found '→'", 9),
        ("[A] -> [B]// note", "expected '->' after [B], found '/'", 15),
        ("[A] -> if (x && y) -> [B]", "'&&' is not an operator in FEM expressions", 18),
        ("[A] -> for x alive:\n        -> y ->", "expected 'for VAR in EXPR:'", 18),
        ("[A] -> for @s of alive:\n        -> y ->", "expected 'for VAR in EXPR:'", 19),
        ("[A] -> for @s in alive\n        -> y ->", "expected ':' at the end of the for line", 27),
        ("[A] -> for @s in alive:\n        y ->", "the for body has no line starting with '->'", 9),
        ("[A] -> fork\n        -> [B]", "expected ':' after 'fork'", 16),
        ("START -> [B]", "'START' is a reserved node and is written in brackets", 5),
        ("[A] -> END", "'END' is a reserved node and is written in brackets", 12),
        ("[A] -> if (x > 1) [B]", "expected '->' before [B]", 23),
        ("[A] -> if (x > 1 -> [B]", "'(' is never closed", 15),
        ("[A] -> if x > 1", "expected '->' after the condition", 20),
    ],
)
def test_flow_errors(body: str, message: str, col: int) -> None:
    found = errors("mainflow:\n    " + body + "\n")
    assert found[0].message == message
    assert found[0].span.col == col


def test_lines_continuing_a_broken_line_do_not_repeat_its_error() -> None:
    found = errors(
        "mainflow:\n    [A] -> [B ->\n    -> [C]\n    fork:\n        -> [D]\n    [E] -> [F\n"
    )
    assert [(e.span.line, e.message) for e in found] == [
        (2, "expected '[Name]'"),
        (6, "expected '[Name]'"),
    ]


def test_indent_width_never_drops_edges() -> None:
    narrow = flow("[A] ->\nfork:\n  -> [B]\n  -> [C]\n")
    wide = flow("[A] ->\nfork:\n          -> [B]\n          -> [C]\n")
    assert edges(narrow) == edges(wide) == [("A", "B", None), ("A", "C", None)]


def test_tabs_count_to_the_next_multiple_of_four_and_mixing_warns() -> None:
    script, diagnostics = parse("vars:\n\ta = 1\n    b = 2\n", "s.fems")
    assert [v.name for v in script.variables] == ["a", "b"]
    assert [d.severity for d in diagnostics] == ["warning"]


# --------------------------------------------------------------------------- Chinese twin

ASCII_SCRIPT = """
meta:
    name = "demo"
vars:
    alive = [@a,@b]
    votes = {@a: 0}
    finish = false
actors:
    ai @a = soul:1, source:x
    ai @b
action speak @ai(@a):
    prompt: "say hi, {alive}"
    showprompt: |
        Night falls -- [quiet]: {alive}
    scope: [@a, @b]
    out: finish(bool, "done")
action count @assign:
    out: votes.@a += 1
module Loop(x):
    flow:
        [IN] -> speak -> [OUT]
mainflow:
    [START] -> speak -> [B]:count -> &Loop(alive) ->
    fork:
        -> if (finish == true) -> [END]
        -> (if finish == false) [B]
    [B] -> for @v in alive:
        -> speak ->
    -> [END]
"""

CHINESE_SCRIPT = """
meta：
    name = “demo”
vars：
    alive = 【@a，@b】
    votes = {@a： 0}
    finish = false
actors：
    ai @a = soul：1， source：x
    ai @b
action speak @ai（@a）：
    prompt： “say hi, {alive}”
    showprompt： ｜
        Night falls -- [quiet]: {alive}
    scope： 【@a， @b】
    out： finish（bool， “done”）
action count @assign：
    out： votes.@a += 1
module Loop（x）：
    flow：
        【IN】 -- speak -- 【OUT】
mainflow：
    【START】 -- speak -- 【B】：count -- &Loop（alive） --
    fork：
        -- if （finish == true） -- 【END】
        -- （if finish == false） 【B】
    【B】 -- for @v in alive：
        -- speak --
    -- 【END】
"""


def test_chinese_punctuation_parses_to_the_same_tree() -> None:
    ascii_tree, ascii_diagnostics = parse(ASCII_SCRIPT, "s.fems")
    chinese_tree, chinese_diagnostics = parse(CHINESE_SCRIPT, "s.fems")
    assert ascii_diagnostics == chinese_diagnostics == []
    assert chinese_tree.actions[0].showprompt.value.value == "Night falls -- [quiet]: {alive}"
    # Replacements are one character for one, so even the spans agree.
    assert dataclasses.replace(chinese_tree, source="") == dataclasses.replace(
        ascii_tree, source=""
    )


def test_chinese_punctuation_diagnostics_point_at_the_users_column() -> None:
    source = (
        "action a @ai（@x）：\n    promt：“hi”\nmainflow：\n    【A】 -- if （x && y） -- 【B】\n"
    )
    found = errors(source)
    assert [(e.span.line, e.span.col) for e in found] == [(2, 5), (4, 18)]


def test_prompt_text_keeps_chinese_punctuation_and_double_dashes() -> None:
    [action] = ok("action a @ai(@x):\n    prompt: 你好，世界 -- 【注意】：{day}\n").actions
    assert action.prompt.value.value == "你好，世界 -- 【注意】：{day}"


# --------------------------------------------------------------------------- robustness

FRAGMENTS = st.sampled_from(
    [
        "meta:",
        "vars:",
        "mainflow:",
        "action a @ai(@x):",
        "module M(a):",
        "flow:",
        "fork:",
        "for @x in y:",
        "par i in range(2):",
        "join(all):",
        "to [X]",
        "[A]",
        "->",
        "--",
        "-> if (",
        ")",
        "[",
        "]",
        "{",
        "}",
        "(",
        "|",
        ":",
        "：",
        "“",
        "”",
        "'",
        '"',
        ",",
        "@",
        "&M(",
        "x",
        "prompt:",
        "out:",
        "scope:",
        "in:",
        "=",
        "+=",
        "#",
        "//",
        "  ",
        "    ",
        "\t",
        "\n",
        "\r\n",
    ]
)


@settings(max_examples=150, deadline=None)
@given(st.lists(FRAGMENTS, max_size=40))
def test_parse_never_raises(pieces: list[str]) -> None:
    script, diagnostics = parse(" ".join(pieces), "fuzz.fems")
    assert isinstance(script, Script)
    assert all(isinstance(d, Diagnostic) for d in diagnostics)


# --------------------------------------------------------------------------- more diagnostics


@pytest.mark.parametrize(
    ("source", "severity", "message", "line", "col"),
    [
        ("action a @ai(@x)\n    prompt: hi\n", "warning", "action header should end", 1, 17),
        ("action a @ai(@x):\n    out: v(list)\n", "warning", "unknown out type 'list'", 2, 12),
        ("action a @ai(@x):\n    prompt:\n        hi\n", "warning", "without '|'", 2, 12),
        ("action a @ai(@x):\n    prompt: |\n", "error", "expected the text of 'prompt'", 2, 14),
        ("action a @ai(x):\n", "warning", "actor references carry '@'", 1, 14),
        ("action a @ai():\n", "error", "expected an actor", 1, 14),
        ("action a @func(game):\n", "error", "expected 'alias.function'", 1, 16),
        ("memory m(a.b):\n    ins: x\n", "error", "unknown memory field 'ins'", 2, 5),
        ("blueprint b:\n    sorce: x\n", "error", "unknown blueprint line 'sorce'", 2, 5),
        ("actors:\n    robot @a\n", "error", "starts with 'ai' or 'human'", 2, 5),
        ("vars:\n    x 1\n", "error", "expected 'name = value'", 2, 7),
        ("vars:\n    x = {a 1}\n", "error", "expected 'key: value' in a dict", 2, 10),
        ("meta: x\n", "error", "unexpected 'x' after 'meta:'", 1, 7),
        (
            "mainflow:\n    [A] -> if (x) -> fork:\n        -> [B]\n",
            "error",
            "cannot lead to",
            2,
            22,
        ),
        ("mainflow:\n    [A] -> fork:\n", "error", "fork: has no branches", 2, 12),
        ("mainflow:\n    join(0):\n        [B] ->\n    to [C]\n", "error", "join counts", 2, 10),
        ("mainflow:\n    to [C]\n", "error", "'to' without a join", 2, 5),
        ("mainflow:\n    [A] -> for @x in alive:\n", "error", "for has no body", 2, 12),
        ("mainflow:\n    [A] -> &(x)\n", "error", "expected a module name", 2, 12),
        ("mainflow:\n    [A]: for\n", "error", "'for' is reserved", 2, 10),
        ("flow:\n    [A] -> [B]\n        -> [C]\n", "error", "unexpected indented line", 3, 9),
    ],
)
def test_more_diagnostics(source: str, severity: str, message: str, line: int, col: int) -> None:
    _, diagnostics = parse(source, "s.fems")
    found = [d for d in diagnostics if message in d.message]
    assert found, [d.format() for d in diagnostics]
    assert (found[0].severity, found[0].span.line, found[0].span.col) == (severity, line, col)


def test_crlf_and_lf_give_the_same_tree() -> None:
    lf, _ = parse(ASCII_SCRIPT, "s.fems")
    crlf, diagnostics = parse(ASCII_SCRIPT.replace("\n", "\r\n"), "s.fems")
    assert diagnostics == []
    assert dataclasses.replace(crlf, source="") == dataclasses.replace(lf, source="")


def test_tab_indentation_gives_the_same_graph() -> None:
    spaces, _ = parse(ASCII_SCRIPT, "s.fems")
    tabs, diagnostics = parse(ASCII_SCRIPT.replace("    ", "\t"), "s.fems")
    assert diagnostics == []
    assert [(e.source.split("@")[0], e.target.split("@")[0]) for e in tabs.flow.edges] == [
        (e.source.split("@")[0], e.target.split("@")[0]) for e in spaces.flow.edges
    ]


@pytest.mark.parametrize(
    ("written", "choices", "variable"),
    [
        ("choices={alive}", [], "alive"),
        ("choices={yes, no}", ["yes", "no"], None),
        ("choices=[yes, no]", ["yes", "no"], None),
    ],
)
def test_dropdown_choices_are_a_variable_or_literals(written, choices, variable):
    source = (
        'vars:\n    alive = [@a]\n    v = ""\nactors:\n    ai @a\n'
        f"action x @ai(@a):\n    prompt: pick\n    out: v(dropdown, {written})\n"
        "mainflow:\n    [START] -> x -> [END]\n"
    )
    script, diagnostics = parse(source, "t.fems")
    assert diagnostics == []
    out_type = script.actions[0].outs[0].type
    assert [c.value for c in out_type.choices] == choices
    assert (out_type.choices_from.name if out_type.choices_from else None) == variable


@pytest.mark.parametrize(
    "source",
    [
        "mainflow:\n[START] -> [A]\n[A] -> [END]\n[B] -> [C]\n",
        "vars:\n    x = 1\nmainflow:\n\n[START] -> [END]\n",
        "mainflow:\n    [START] -> x\nx -> [END]\n",
    ],
)
def test_unindented_flow_lines_are_one_error(source: str) -> None:
    script, diagnostics = parse(source, "s.fems")
    assert [d.message for d in diagnostics] == ["this flow line is not indented under 'mainflow:'"]
    assert script.flow is not None and not script.flow.complete


def test_empty_flow_block_is_an_error() -> None:
    script, diagnostics = parse("mainflow:\n# nothing yet\n", "s.fems")
    assert [d.message for d in diagnostics] == ["'mainflow:' has no lines"]
    assert script.flow is not None and not script.flow.complete


def test_action_field_outside_its_action() -> None:
    found = errors("action t @assign:\nout: x += 1\n")
    assert [(d.message, d.span.line) for d in found] == [
        ("'out:' is an action field, found at the top level", 2)
    ]


@pytest.mark.parametrize(
    ("field", "text"),
    [
        (
            "meta:\n    system_safety = |",
            "不许删库。\n    不许违法犯罪，不许生成危险内容。\n    name = x",
        ),
        (
            "action t @ai(@a):\n    prompt: |",
            "现在是第{day}天夜晚。\n    分析结束后请输出\n    out: day",
        ),
    ],
)
def test_text_block_at_the_keys_indentation_is_one_error(field: str, text: str) -> None:
    found = errors(f"{field}\n    {text}\n")
    assert len(found) == 1
    assert found[0].message.startswith("expected the text of ")
    assert found[0].span.line == 2


def test_bound_node_span_covers_its_binding() -> None:
    graph = flow("[A] -> [C]:reviewer -> [END]", 4)
    assert graph.node("C").span.col == 12 and graph.node("C").span.end_col == 24


def test_one_assignment_per_line() -> None:
    found = errors("action t @assign:\n    out: a += 1, b = 2\n")
    assert [(d.message, d.span.col) for d in found] == [
        ("one assignment per line in an @assign out:", 16)
    ]


@pytest.mark.parametrize(
    ("scope", "message", "col"),
    [
        ("[@a @b]", "expected ',' between '@a' and '@b'", 16),
        ("[@a, {alive]", "'{' is never closed", 17),
        ("[@a, [wolves]", "'[' is never closed", 12),
    ],
)
def test_scope_errors(scope: str, message: str, col: int) -> None:
    found = errors(f"action t @ai(@a):\n    scope: {scope}\n")
    assert [(d.message, d.span.col) for d in found] == [(message, col)]


def test_a_loop_may_have_several_exit_lines() -> None:
    graph = flow(
        """
        [P] -> for @s in alive:
            -> talk ->
        -> if (day < 3) -> tick -> [P]
        -> if (day >= 3) -> [END]
        """
    )
    loop = next(node.name for node in graph.nodes if isinstance(node.binding, Loop))
    exits = [(e.target, e.condition.text) for e in graph.edges if e.source == loop]
    assert exits[0][1] == "(day < 3)" and exits[1] == ("END", "(day >= 3)")


@pytest.mark.parametrize(
    ("written", "count"),
    [("[1, 2,]", 2), ("[\n        1,\n        2,\n    ]", 2), ("{@a: 1,}", 1), ("[]", 0)],
)
def test_literals_accept_a_trailing_comma(written: str, count: int) -> None:
    script = ok(f"vars:\n    x = {written}\nactors:\n    ai @a\n")
    assert len(script.variables[0].value.items) == count


def test_an_empty_item_in_a_literal_is_an_error() -> None:
    found = errors("vars:\n    x = [1, , 2]\n")
    assert [d.message for d in found] == ["empty item in a literal"]


def test_full_width_indentation_is_one_warning() -> None:
    script, diagnostics = parse("vars:\n\u3000\u3000x = 1\n\u3000\u3000y = 2\n", "s.fems")
    assert [v.name for v in script.variables] == ["x", "y"]
    assert [(d.severity, d.span.line) for d in diagnostics] == [("warning", 2)]


@pytest.mark.parametrize(
    "source",
    [
        'mainflow:\n    [A] -> if (x == "a) -> [B]\n',
        "action t @ai(@a):\n    scope: [@a, 'b]\n",
    ],
)
def test_an_unterminated_string_is_named_as_such(source: str) -> None:
    found = errors(source)
    assert [d.message for d in found] == ["unterminated string"]


def test_floor_division_with_spaces_is_a_comment_and_the_hint_says_so() -> None:
    [found] = errors("mainflow:\n    [A] -> if (day // 2 == 1) -> [B]\n")
    assert found.message == "'(' is never closed"
    assert found.hint is not None and "'//' after a space starts a comment" in found.hint


def test_code_aliases_are_found_when_the_whole_file_is_indented() -> None:
    script, diagnostics = parse(
        '  code:\n    game = file:"g.py"\n  mainflow:\n    [START] -> if (game.over()) -> [END]\n',
        "s.fems",
    )
    assert diagnostics == []
    assert script.flow is not None
    assert script.flow.edges[0].condition.python == "ctx.code('game').over()"


def test_two_misspelled_blocks_are_two_errors_and_stray_lines_one() -> None:
    found = errors(
        "varz:\n    x = 1\nacters:\n    ai @a\nmainflow:\n[START] -> [A]\n[A] -> [END]\n"
    )
    assert [(d.span.line, d.message) for d in found] == [
        (1, "unknown block 'varz' at the top level"),
        (3, "unknown block 'acters' at the top level"),
        (6, "this flow line is not indented under 'mainflow:'"),
    ]


def test_a_number_written_with_leading_zeros_is_text_in_vars() -> None:
    """§4.2: `001` stays a string, as ids are, in lists and dict keys too; `0` and `0.5` are
    numbers."""
    script = ok(
        """
        vars:
            pin = 001
            ids = [001, 0, 0.5, 10]
            m = {001: a}
            f = 01.5
        mainflow:
            [START] -> [END]
        """
    )
    values = {var.name: var.value for var in script.variables}
    assert (values["pin"].value, values["f"].value) == ("001", "01.5")
    assert [item.value for item in values["ids"].items] == ["001", 0, 0.5, 10]
    assert [key.value for key, _ in values["m"].items] == ["001"]
