"""Hostile inputs and the properties they must keep (#10): replies a model could send, scripts
an author could write, and whole runs fed such replies.

The generators take a :class:`Chooser`, so the same code serves the test suite (hypothesis
draws, shrinking a failure to its smallest case) and ``python -m bench fuzz`` (a seeded
``random.Random``, fast enough for 100,000 cases, each reproducible from its number). Each
``check_*`` function raises only when a property breaks: a crash, an unwritable value, a rollback
that left something behind, a compiler bug.
"""

from __future__ import annotations

import contextlib
import json
import math
import random
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

from fems_runtime.records import RunError
from fems_runtime.signals import OutSpec, apply_signals
from fems_runtime.values import MAX_DEPTH, MAX_INT_DIGITS
from fems_runtime.variables import ActorSpec, Variables

from fems2py.codegen import generate_parts
from fems2py.diagnostics import CompileError
from fems2py.frontend import analyze_source

T = TypeVar("T")


class Chooser(Protocol):
    """Where a generator's choices come from."""

    def pick(self, options: Sequence[T]) -> T: ...

    def number(self, low: int, high: int) -> int: ...


class RandomChooser:
    """Choices from a seeded :class:`random.Random` (the campaign: case N is seed + N)."""

    def __init__(self, seed: int) -> None:
        self.random = random.Random(seed)

    def pick(self, options: Sequence[T]) -> T:
        return self.random.choice(options)

    def number(self, low: int, high: int) -> int:
        return self.random.randint(low, high)


class DrawChooser:
    """Choices from hypothesis's ``draw`` (the test suite)."""

    def __init__(self, draw: Callable[[Any], Any]) -> None:
        from hypothesis import strategies

        self.draw = draw
        self.strategies = strategies

    def pick(self, options: Sequence[T]) -> T:
        return self.draw(self.strategies.sampled_from(options))

    def number(self, low: int, high: int) -> int:
        return self.draw(self.strategies.integers(min_value=low, max_value=high))


def _nested(depth: int) -> str:
    return "[" * depth + "1" + "]" * depth


PREFIXES = [
    "SET VARIABLE:",
    "set_variable :",
    "SET  VARIABLE：",
    "设定变量：",
    "设置变量:",
    "SET VARIABLE",
    # Markdown around the prefix (§10.1), and marks that never close
    "**SET VARIABLE:**",
    "__SET VARIABLE__:",
    "`SET VARIABLE:`",
    "*SET VARIABLE*:",
    "**设定变量：**",
    "SET VARIABLE" + "*" * 300 + ":",
    "**SET VARIABLE**",
    "```\nSET VARIABLE:",
]
OPENERS = ["<<", "《《", "《", "〈", "<", "", " << ", "**<<", "`<<", " _ <<"]
CLOSERS = [">>", "》》", "》", "〉", ">", "", "> >"]
TARGETS = [
    "note",
    "count",
    "price",
    "flag",
    "@VOTE",
    "votes.@Eve",
    "votes.@voter",
    "hp[@Eve]",
    'scores["k"]',
    "scores[i]",
    "@Eve.hp",
    "undeclared",
    "x.y.z",
    "",
    "note[",
    "count]",
    "hp.@Nobody",
    "玩家",
]
OPS = ["=", "+=", "-=", "= add(", "= remove(", "==", "", " = "]
VALUES = [
    "1",
    "-7",
    "3.5",
    "0",
    "001",
    "1e308",
    "1e999",
    "-1e999",
    "nan",
    "inf",
    "Infinity",
    "9" * MAX_INT_DIGITS,
    "9" * (MAX_INT_DIGITS + 1),
    "-" + "8" * 4301,
    "true",
    "False",
    "null",
    "@Eve",
    "@Bob",
    "@Nobody",
    # bare actor names (§10.3): exact, folded, unknown, quoted
    "Eve",
    "bob",
    "BOB",
    "Nobody",
    '"Eve"',
    "Eve Bob",
    '"text"',
    "'it''s'",
    "“中文”",
    '"a >> b"',
    '"esc \\" q"',
    "[1, [2, [3]]]",
    _nested(MAX_DEPTH),
    _nested(MAX_DEPTH + 1),
    _nested(400),
    "[" * 500,
    "{a: 1, @Eve: 2, 'b c': [x]}",
    "{" * 300,
    "【1，2】",
    "\\",
    "\\\\\\",
    "\ud800",
    "a\udfffb",
    "\ufffd",
    "\u2028",
    "\x00",
    "__import__('os').system('x')",
    "{count}",
    "x" * 2000,
    "“never closed",
    '"never closed',
    "[1, 2",
    "]]",
    "@Eve)",
    "add(@Eve)",
    ") (",
    "=",
]
NOISE = [
    " ",
    "\n",
    "text ",
    "it's ",
    '"',
    "'",
    "“",
    "”",
    "\\",
    "=",
    ",",
    "[",
    "]",
    "\r\n",
    "\t",
    "*",
    "_",
    "`",
    "```\n",
]


def hostile_reply(choose: Chooser) -> str:
    """A reply of signals, broken signals and noise built from fragments that broke scanners
    and value readers before (unclosed quotes, nesting, huge numbers, invalid text)."""
    parts: list[str] = []
    for _ in range(choose.number(1, 10)):
        if choose.number(0, 3) == 0:
            parts.append(choose.pick(NOISE) * choose.number(1, 40))
            continue
        value = choose.pick(VALUES)
        if choose.number(0, 5) == 0:
            value = value * choose.number(2, 50)
        parts.append(
            choose.pick(PREFIXES)
            + choose.pick(["", " ", "\n"])
            + choose.pick(OPENERS)
            + choose.pick(TARGETS)
            + choose.pick(OPS)
            + value
            + choose.pick(["", ")", "）"])
            + choose.pick(CLOSERS)
            + choose.pick(NOISE)
        )
    return "".join(parts)


ACTORS = [ActorSpec("@Eve"), ActorSpec("@Bob")]
OUTS: list[list[OutSpec] | None] = [
    None,
    [OutSpec("note"), OutSpec("count", type="int"), OutSpec("price", type="float")],
    [OutSpec("flag", type="bool"), OutSpec("@VOTE", type="actor"), OutSpec("votes.@voter")],
    [OutSpec("note", type="string"), OutSpec("count", type="enum", choices=(1, 2, "x"))],
    [
        OutSpec("@VOTE", type="dropdown", choices=("@Eve", "@Bob")),
        OutSpec("votes.@voter", type="string"),
        OutSpec("note", type="actor"),
    ],
]


def fresh_variables() -> Variables:
    return Variables(
        {
            "note": "",
            "count": 0,
            "price": 1.5,
            "flag": False,
            "@VOTE": "",
            "@voter": "@Bob",
            "votes": {},
            "hp": {"@Eve": 3},
            "scores": {"k": 1},
            "i": "k",
            "玩家": "",
        },
        ACTORS,
    )


def check_reply(reply: str, outs: list[OutSpec] | None) -> None:
    """Applying ``reply`` never raises; what it sets stays within the limits of §10.3 and can
    be written as UTF-8 JSON (trace, result, store); a rollback restores every value."""
    variables = fresh_variables()
    before = json.dumps(variables.snapshot(), sort_keys=True)
    outcome = apply_signals(reply, variables.root, outs)
    after = variables.snapshot()
    json.dumps([after, outcome.SET_VARIABLE], ensure_ascii=False).encode("utf-8")
    for value in _leaves(after):
        if isinstance(value, int) and not isinstance(value, bool):
            assert len(str(abs(value))) <= MAX_INT_DIGITS, "an int past 4,000 digits was set"
        if isinstance(value, float):
            assert math.isfinite(value), "a non-finite number was set"
    vote = after["@VOTE"]
    assert vote == "" or variables.is_actor(vote), "an actor variable took a non-actor"
    outcome.rollback()
    assert json.dumps(variables.snapshot(), sort_keys=True) == before, "rollback left a change"


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [leaf for item in value.values() for leaf in _leaves(item)]
    if isinstance(value, list):
        return [leaf for item in value for leaf in _leaves(item)]
    return [value]


SCRIPT = """\
meta:
    name = fuzz
    max_steps = 60
code:
    tools = file:"tools.py"
vars:
    day = 0
    note = ""
    alive = [@a, @b]
    votes = {}
    @speaker = ""
actors:
    ai @a = soul:a
    ai @b = soul:b
action speak @ai(@speaker):
    prompt: |
        Day {day}. You are {@speaker}. Living: {alive}.
    scope: [@a] + alive
    out: note
action check @func(tools.review):
    in: text = note
    out: note
action tally @assign:
    out: votes.@speaker = day
         day += 1
mainflow:
    [START] -> [Day]
    [Day] -> for @speaker in alive:
        -> speak -> tally ->
    -> [Check]
    [Check] -> fork:
        -> if (day < 2) -> check -> [Day]
        -> if (day >= 2) -> [END]
"""
TOOLS = "def review(text):\n    return text\n"
SCRIPT_FRAGMENTS = [
    "f'{day}'",
    'f"{day}"',
    'file:"/etc/passwd"',
    'file:"../outside.md"',
    'file:"/dev/zero"',
    "\u2028",
    "\u2029",
    "\x85",
    "\x00",
    "\ud800",
    "9" * 5000,
    _nested(200),
    "{a:" * 50,
    "SET VARIABLE: <<day = 5>>",
    "__import__('os')",
    "&&",
    "lambda: 1",
    "[x for x in y]",
    '"""',
    "'''",
    "\\",
    "{{",
    "}}",
    "%(x)s",
    "$x",
    "`",
    "->",
    "：",
    "【",
    "--",
    "|",
    "#",
    "//",
    "@",
    "&Nope",
    "join(",
    "par @x in",
    "if (",
    "not ",
    "and",
    "[END]",
    "[START]",
    "\t",
    "    ",
]


def hostile_script(choose: Chooser) -> str:
    """The fuzz script with edits an author's mistakes or an attacker's text could make:
    lines deleted, duplicated or swapped, and hostile fragments dropped in anywhere."""
    lines = SCRIPT.splitlines()
    for _ in range(choose.number(1, 5)):
        index = choose.number(0, len(lines) - 1) if lines else 0
        kind = choose.pick(["delete", "duplicate", "swap", "insert", "insert", "truncate"])
        if not lines:
            lines = [""]
        if kind == "delete":
            del lines[index]
        elif kind == "duplicate":
            lines.insert(index, lines[index])
        elif kind == "swap":
            other = choose.number(0, len(lines) - 1)
            lines[index], lines[other] = lines[other], lines[index]
        elif kind == "insert":
            line = lines[index]
            at = choose.number(0, len(line))
            lines[index] = line[:at] + choose.pick(SCRIPT_FRAGMENTS) + line[at:]
        else:
            text = "\n".join(lines)
            lines = text[: choose.number(0, len(text))].splitlines()
    return "\n".join(lines) + choose.pick(["\n", "", "\r\n"])


def check_script(source: str, folder: Path) -> bool:
    """The front end answers ``source`` with diagnostics only; a script without errors
    compiles to Python that ``compile()`` accepts. True when it had no errors."""
    try:
        checked, diagnostics = analyze_source(source, "fuzz.fems", folder)
    except CompileError:
        return False
    if any(d.severity == "error" for d in diagnostics):
        return False
    parts = generate_parts(checked, "fuzz.fems", "0" * 64)
    compile("\n\n\n".join(parts.texts), "fuzz.py", "exec")
    return True


class Runner:
    """One generated module of :data:`SCRIPT`, built once, run with scripted replies."""

    def __init__(self, folder: Path) -> None:
        from bench.modules import import_path
        from fems2py.build import build_file

        folder.mkdir(parents=True, exist_ok=True)
        (folder / "tools.py").write_text(TOOLS, encoding="utf-8")
        (folder / "fuzz.fems").write_text(SCRIPT, encoding="utf-8")
        self.folder = folder
        built = build_file(folder / "fuzz.fems", folder / "fuzz.py").output
        self.module = import_path(built, f"fuzz_{folder.name}")
        self.check_run(["fine"])  # the first run imports the database layer: not a case

    def check_run(self, replies: list[str]) -> str:
        """A run fed ``replies`` ends completed or with a :class:`RunError`, and writes its
        ``--result`` either way; the status."""
        result = self.folder / "result.json"
        result.unlink(missing_ok=True)
        with contextlib.suppress(RunError):  # a failed run is fine: it must say so
            self.module.run(replies={"speak": replies}, db=":memory:", result=str(result))
        written = json.loads(result.read_text(encoding="utf-8"))
        assert written["status"] in ("completed", "failed")
        return str(written["status"])


def script_folder() -> Path:
    """A folder holding the script's ``code:`` file, and a file just outside it."""
    base = Path(tempfile.mkdtemp(prefix="fems-fuzz-"))
    (base / "outside.md").write_text("outside", encoding="utf-8")
    folder = base / "script"
    folder.mkdir()
    (folder / "tools.py").write_text(TOOLS, encoding="utf-8")
    return folder
