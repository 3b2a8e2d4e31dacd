"""Generated modules as programs: the command line, exit codes, result files, model turns with
fems/script, and a vendored module running with the compiler's dependencies blocked."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import fems_runtime as fr
import pytest
from fems_helpers import build_script, load, read_trace, run_program, run_script, steps_of

from fems2py import build
from fems2py.build import BuildRefused, build_cached, build_file, build_source
from fems2py.golden import GOLDEN_DIR

RUNTIME_DIR = Path(__file__).resolve().parent.parent / "runtime"

VOTE = """
vars:
    voters = [@a, @b, @c, @d, @e]
    votes = {}
    count = 0
    @VOTE = ""
actors:
    ai @a
    ai @b
    ai @c
    ai @d
    ai @e
action vote @ai(@voter):
    prompt: Vote for someone among {voters}.
    scope: [@voter]
    out: @VOTE(actor, "your vote")
action record @assign:
    out: votes.@voter = @VOTE
         count += 1
mainflow:
    [START] -> [P]
    [P] -> par @voter in voters:
        -> vote -> record ->
    -> [END]
"""

REPLIES = {
    f"vote{voter}": [f"I pick SET VARIABLE: <<@VOTE = {choice}>>"]
    for voter, choice in [("@a", "@b"), ("@b", "@c"), ("@c", "@d"), ("@d", "@e"), ("@e", "@a")]
}


def test_par_vote_with_scripted_models_records_five_distinct_votes(tmp_path: Path) -> None:
    result, events = run_script(tmp_path, VOTE, replies=REPLIES)
    assert result.variables["votes"] == {
        "@a": "@b",
        "@b": "@c",
        "@c": "@d",
        "@d": "@e",
        "@e": "@a",
    }
    assert result.variables["count"] == 5
    calls = [e for e in events if e["event"] == "llm_call"]
    assert sorted(c["actor"] for c in calls) == ["@a", "@b", "@c", "@d", "@e"]


FORK_AI = """
vars:
    a = ""
    b = ""
    merged = 0
actors:
    ai @Ann
    ai @Bob
action ask_a @ai(@Ann):
    prompt: Say a word.
    out: a
action ask_b @ai(@Bob):
    prompt: Say a word.
    out: b
action merge @assign:
    out: merged += 1
mainflow:
    [START] -> [F]
    [F] -> fork:
        -> ask_a -> [M]
        -> ask_b -> [M]
    [M]: merge -> [END]
"""


def test_fork_with_scripted_models_merges_once_keeping_both_branches(tmp_path: Path) -> None:
    replies = {
        "ask_a": ['SET VARIABLE: <<a = "apple">>'],
        "ask_b": ['SET VARIABLE: <<b = "banana">>'],
    }
    result, events = run_script(tmp_path, FORK_AI, replies=replies)
    assert (result.variables["a"], result.variables["b"]) == ("apple", "banana")
    assert result.variables["merged"] == 1
    assert steps_of(events, "M") == 1
    assert sorted(e["action"] for e in events if e["event"] == "llm_call") == ["ask_a", "ask_b"]


JOIN_AI = """
vars:
    answer = ""
    slow_done = false
code:
    lab = file:"lab.py"
actors:
    ai @Curie
action curie @ai(@Curie):
    prompt: Answer.
    out: answer
action slow @func(lab.slow):
    out: slow_done
mainflow:
    [START] -> [Go]
    [Go] -> [A]:curie
    [Go] -> [B]:slow
    join(1):
        [A] ->
        [B] ->
    to [Next]
    [Next] -> [END]
"""

SLOW = """
import time


def slow():
    time.sleep(0.3)
    return True
"""


def test_join_one_keeps_the_model_answer_and_never_writes_the_slow_branch(
    tmp_path: Path,
) -> None:
    replies = {"curie": ['SET VARIABLE: <<answer = "blue">>']}
    result, events = run_script(tmp_path, JOIN_AI, {"lab.py": SLOW}, replies=replies)
    assert result.variables == {**result.variables, "answer": "blue", "slow_done": False}
    assert [e["cancelled"] for e in events if e["event"] == "join"] == [["B"]]


STUCK = """
vars:
    x = 1
    name = "ok"
mainflow:
    [START] -> [A]
    [A] -> if (x > 5) -> [END]
    [A] -> if (name == "no") -> [END]
"""


def test_cli_reports_a_stuck_flow_at_the_fems_line_and_exits_1(tmp_path: Path) -> None:
    module = build_script(tmp_path, STUCK)
    completed = run_program(module, "--db", ":memory:", "--result", "result.json")
    assert completed.returncode == 1
    assert "t.fems:6: error: flow stuck after [A]" in completed.stderr
    assert "where x = 1" in completed.stderr and "where name = 'ok'" in completed.stderr
    assert "Traceback" not in completed.stderr
    result = json.loads((tmp_path / "result.json").read_text(encoding="utf-8"))
    assert result["status"] == "failed" and result["error"].startswith("t.fems:6:")


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["--db", ":memory:"], 0),
        (["--no-such-option"], 2),
        (["--seed", "not-a-number"], 2),
        (["--db", ":memory:", "--resume"], 1),
        (["--db", ":memory:", "--session", "abc"], 2),
        (["--db", ":memory:", "--session", "-1 / new"], 2),  # sessions are numbered from 1
        (["--db", ":memory:", "--session", "0"], 2),
        (["--db", ":memory:", "--session", "2 / new"], 0),
    ],
)
def test_cli_exit_codes(tmp_path: Path, args: list[str], code: int) -> None:
    module = build_script(tmp_path, "mainflow:\n    [START] -> [END]\n")
    assert run_program(module, *args).returncode == code


def test_a_module_usage_error_names_the_module_file(tmp_path: Path) -> None:
    module = build_script(tmp_path, "mainflow:\n    [START] -> [END]\n")
    completed = run_program(module, "--nosuch")
    assert completed.returncode == 2
    assert completed.stderr.startswith("usage: t_gen.py [-h]")
    assert completed.stderr.splitlines()[-1] == "t_gen.py: error: unrecognized arguments: --nosuch"


def test_show_of_an_undeclared_variable_is_a_usage_error_before_the_run(tmp_path: Path) -> None:
    """--show names variables to print at the end (§16.3): a misspelt one is said at once
    (exit 2, with the close name), not as '(not a variable)' after a run that was paid for."""
    module = build_script(tmp_path, "vars:\n    winner = 0\nmainflow:\n    [START] -> [END]\n")
    completed = run_program(module, "--db", "runs.db", "--show", "winner,winer")
    assert completed.returncode == 2 and not (tmp_path / "runs.db").exists()
    assert completed.stderr.splitlines()[-1] == (
        "t_gen.py: error: --show winer: the script declares no variable winer "
        "(did you mean winner?)"
    )
    shown = run_program(module, "--db", ":memory:", "--show", "winner")
    assert shown.returncode == 0 and shown.stderr.endswith("winner = 0\n")


SHOWN_VALUES = """\
vars:
    ks = [@a, @b]
    seen = {@a: 1}
    done = false
    nothing = None
    word = "two words"
actors:
    ai @a = soul:x
    ai @b = soul:y
mainflow:
    [START] -> [END]
"""


@pytest.mark.parametrize("transcript", [False, True])
def test_show_prints_final_values_as_fem_writes_them(tmp_path: Path, transcript: bool) -> None:
    """--show prints lists, dicts, booleans and null as the debugger and prompts do (§16.3),
    not as Python does (['@a', '@b'], False, None), with or without --transcript's summary."""
    module = build_script(tmp_path, SHOWN_VALUES)
    shown = run_program(
        module,
        "--db",
        ":memory:",
        "--show",
        "ks,seen,done,nothing,word",
        *(["--transcript"] if transcript else []),
    )
    assert shown.returncode == 0, shown.stderr
    output = shown.stdout if transcript else shown.stderr
    lines = [line.strip() for line in output.splitlines()]
    for line in ("ks = [@a, @b]", "seen = {@a: 1}", "done = false", "nothing = null"):
        assert line in lines, output
    assert "word = two words" in lines


def test_result_and_trace_in_a_new_folder_are_written_and_a_folder_is_refused_first(
    tmp_path: Path,
) -> None:
    """--result and --trace in a folder that does not exist yet create it, as build -o does;
    they failed with 'FileNotFoundError: [Errno 2] …', --result after the whole run. A
    --result that is a folder is a usage error before the run; a --trace that cannot be
    opened fails the run before its first step, in words rather than an exception's name."""
    module = build_script(tmp_path, "mainflow:\n    [START] -> [END]\n")
    made = run_program(module, "--db", ":memory:", "--result", "out/r.json", "--trace", "t/t.jsonl")
    assert made.returncode == 0, made.stderr
    assert json.loads((tmp_path / "out" / "r.json").read_text())["status"] == "completed"
    assert (tmp_path / "t" / "t.jsonl").read_text().startswith("{")
    for path, said in [
        ("out", "--result out is a folder: give a file path"),
        ("t_gen.py/r.json", "--result t_gen.py/r.json: t_gen.py is a file, not a folder"),
    ]:
        refused = run_program(module, "--db", "runs.db", "--result", path)
        assert refused.returncode == 2 and not (tmp_path / "runs.db").exists()
        assert refused.stderr.splitlines()[-1] == f"t_gen.py: error: {said}"
    failed = run_program(module, "--db", ":memory:", "--trace", "t")
    assert failed.returncode == 1
    assert failed.stderr == "t.fems: error: cannot write the trace file t: Is a directory\n"


def test_a_module_root_that_is_not_a_folder_is_a_usage_error(tmp_path: Path) -> None:
    """--root is the folder the file tools may reach: a mistyped one is said before the run."""
    module = build_script(tmp_path, "mainflow:\n    [START] -> [END]\n")
    refused = run_program(module, "--db", ":memory:", "--root", "nosuch")
    assert refused.returncode == 2
    assert refused.stderr.splitlines()[-1] == (
        "t_gen.py: error: argument --root: 'nosuch': no such folder"
    )


@pytest.mark.parametrize(
    ("option", "what"),
    [("--replies", "replies file"), ("--human", "answers file"), ("--souls", "souls file")],
)
def test_an_input_file_that_cannot_be_read_says_so_in_words(
    tmp_path: Path, option: str, what: str
) -> None:
    """A replies, answers or souls file saved as UTF-16 (a Windows editor) or a folder named
    by mistake printed 'UnicodeDecodeError: 'utf-8' codec can't decode byte 0xff …' and
    'IsADirectoryError: [Errno 21] …'."""
    module = build_script(tmp_path, "mainflow:\n    [START] -> [END]\n")
    (tmp_path / "f.json").write_bytes('{"*": ["Hi."]}'.encode("utf-16"))
    (tmp_path / "folder").mkdir()
    for path, said in [
        ("f.json", f"{what} f.json is not UTF-8 text (byte 0xff at offset 0): save it with UTF-8"),
        ("folder", f"cannot read {what} folder: Is a directory"),
    ]:
        done = run_program(module, "--db", ":memory:", option, path)
        assert done.returncode == 1
        assert done.stderr.startswith(f"t.fems: error: {said}")


BOM = "\ufeff"  # what Windows editors write first when they save "UTF-8 with BOM"


def test_files_saved_with_a_byte_order_mark_read_as_a_script_does(tmp_path: Path) -> None:
    """A replies file or fems.toml saved as "UTF-8 with BOM" failed ("invalid JSON: Unexpected
    UTF-8 BOM", "not valid TOML: Invalid statement") though a script with one builds: the mark
    is dropped from every file a run reads (§1.1)."""
    script = 'vars:\n    said = ""\nactors:\n    ai @a\naction ask @ai(@a):\n'
    script += "    prompt: Say it.\n    out: said: string\nmainflow:\n    [START] -> ask -> [END]\n"
    (tmp_path / "t.fems").write_text(BOM + script, encoding="utf-8")
    (tmp_path / "fems.toml").write_text(BOM + '[models]\nfast = "fems/script"\n', "utf-8")
    (tmp_path / "r.json").write_text(BOM + '{"ask": ["SET VARIABLE: <<said = yes>>"]}', "utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "fems2py", "run", "t.fems", "--db", ":memory:", "--model", "fast"]
        + ["--replies", "r.json", "--show", "said"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.endswith("said = yes\n")


TOOL_SCRIPT = """
actors:
    ai @clerk = tools: [clock.get_current_time]
action ask @ai(@clerk):
    prompt: What time is it?
mainflow:
    [START] -> ask -> [END]
"""


@pytest.mark.parametrize(
    ("saved", "byte"),
    [
        ('[models]\nfast = "openai/x"\n'.encode("utf-16"), "0xff at offset 0"),
        ('[models]\nfast = "café"\n'.encode("latin-1"), "0xe9 at offset 20"),
    ],
    ids=["utf-16", "latin-1"],
)
def test_a_fems_toml_not_in_utf_8_says_so_as_an_input_file_does(
    tmp_path: Path, saved: bytes, byte: str
) -> None:
    """A fems.toml saved as UTF-16 (a Windows editor) or Latin-1 said Python's reason: "cannot
    be read: 'utf-8' codec can't decode byte 0xff in position 0: invalid start byte". Every
    reader of the one file (a run, `fems2py models`, `fems2py check` of a script naming a
    server's tool, a generated module) says what --replies says, in one located line."""
    module = build_script(tmp_path, "mainflow:\n    [START] -> [END]\n")
    (tmp_path / "u.fems").write_text(TOOL_SCRIPT, encoding="utf-8")
    (tmp_path / "fems.toml").write_bytes(saved)
    said = f"not UTF-8 text (byte {byte}): save it with UTF-8 encoding"
    fems2py = [sys.executable, "-m", "fems2py"]
    for command in (
        [sys.executable, str(module), "--db", ":memory:"],
        [*fems2py, "run", "t.fems", "--db", ":memory:"],
        [*fems2py, "models", "t.fems"],
    ):
        done = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, check=False)
        assert done.returncode == 1, done.stderr
        [line] = done.stderr.splitlines()  # the path as the command has its folder
        assert line.endswith(f"fems.toml: error: {said}")
    checked = subprocess.run(
        [*fems2py, "check", "u.fems"], capture_output=True, text=True, cwd=tmp_path, check=False
    )
    assert checked.returncode == 1 and "Traceback" not in checked.stderr
    assert f"tool clock.get_current_time: fems.toml: {said}" in checked.stderr


def test_a_fems_toml_that_is_a_folder_says_so_in_words(tmp_path: Path) -> None:
    """A folder named fems.toml said "[Errno 21] Is a directory: '…/fems.toml'"."""
    module = build_script(tmp_path, "mainflow:\n    [START] -> [END]\n")
    (tmp_path / "fems.toml").mkdir()
    done = run_program(module, "--db", ":memory:")
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"{tmp_path / 'fems.toml'}: error: cannot be read: Is a directory"
    ]


def test_replies_beside_the_mock_model_is_a_usage_error(tmp_path: Path) -> None:
    """--replies implies fems/script (§15.3): with --model fems/mock the two contradict, on
    the module's command line (exit 2, one error line) and from Python (a run error)."""
    module = build_script(tmp_path, "mainflow:\n    [START] -> [END]\n")
    (tmp_path / "r.json").write_text('{"*": ["Hi."]}', encoding="utf-8")
    both = ("--model", "fems/mock", "--replies", "r.json")
    completed = run_program(module, *both, "--db", ":memory:")
    assert completed.returncode == 2
    errors = [line for line in completed.stderr.splitlines() if "error:" in line]
    assert errors == [
        "t_gen.py: error: --replies plays the fems/script model and --model fems/mock the "
        "mock: they contradict; drop --model (--replies implies fems/script) or drop --replies"
    ]
    with pytest.raises(fr.RunError, match="--replies plays the fems/script model"):
        load(module).run(model="fems/mock", replies={"*": ["Hi."]}, db=":memory:")
    assert load(module).run(model="fems/script", replies={"*": ["Hi."]}, db=":memory:")


TYPE_ERROR = """
vars:
    x = "text"
action bump @assign:
    out: x -= 1
mainflow:
    [START] -> bump -> [END]
"""


def test_a_failing_assignment_points_at_its_own_line(tmp_path: Path) -> None:
    module = build_script(tmp_path, TYPE_ERROR)
    completed = run_program(module, "--db", ":memory:")
    assert completed.returncode == 1
    assert completed.stderr.startswith("t.fems:4: error:")
    assert "Traceback" not in completed.stderr


def test_a_missing_dict_entry_compared_says_it_reads_as_null(tmp_path: Path) -> None:
    """§4.4: an entry nobody wrote reads as null; comparing it with a number is a run error at
    the condition's line that says where the null comes from, not only Python's words."""
    source = """
    vars:
        hp = {@ann: 100}
    actors:
        ai @ann
        ai @ben
    mainflow:
        [START] -> fork:
            -> if (hp.@ben > 0) -> [END]
            -> if (hp.@ben == None) -> [END]
    """
    completed = run_program(build_script(tmp_path, source), "--db", ":memory:")
    assert completed.returncode == 1 and "Traceback" not in completed.stderr
    assert completed.stderr.startswith(
        "t.fems:8: error: TypeError: '>' not supported between instances of 'NoneType' and "
        "'int' (a value here is null: a dict entry not written yet reads so, §4.4)"
    )


def test_fems_traceback_maps_generated_frames_to_fems_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FEMS_TRACEBACK", "1")
    module = build_script(tmp_path, TYPE_ERROR)
    completed = run_program(module, "--db", ":memory:")
    assert completed.returncode == 1
    assert "Traceback (most recent call last):" in completed.stderr
    assert "    ^ t.fems:4\n" in completed.stderr  # the failing statement
    assert "    ^ t.fems:6\n" in completed.stderr  # the flow node that ran it


BLOCKER = """
import importlib.abc
import sys

BLOCKED = {"fems2py", "black", "parso", "jinja2"}


class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{name} is blocked in this test")
        return None


sys.meta_path.insert(0, Blocker())
"""

VENDORED = """
vars:
    total = 0
code:
    maths = file:"lib/maths.py"
action add @func(maths.add):
    in: a = total, b = 5
    out: total
mainflow:
    [START] -> add -> [END]
"""


@pytest.mark.parametrize("bundle", [False, True])
def test_vendored_module_runs_without_the_compiler(tmp_path: Path, bundle: bool) -> None:
    source_dir, vendor = tmp_path / "src", tmp_path / "vendor"
    (source_dir / "lib").mkdir(parents=True)
    vendor.mkdir()
    (source_dir / "lib" / "maths.py").write_text("def add(a, b):\n    return a + b\n")
    (source_dir / "game.fems").write_text(textwrap.dedent(VENDORED).lstrip(), encoding="utf-8")
    if bundle:
        build_file(source_dir / "game.fems", vendor / "game.py", bundle=True)
    else:
        build_file(source_dir / "game.fems", source_dir / "game.py")
        (vendor / "lib").mkdir()
        (vendor / "game.py").write_text((source_dir / "game.py").read_text(encoding="utf-8"))
        (vendor / "lib" / "maths.py").write_text((source_dir / "lib" / "maths.py").read_text())
    (vendor / "sitecustomize.py").write_text(BLOCKER, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": f"{vendor}{os.pathsep}{RUNTIME_DIR}"}
    completed = subprocess.run(
        [sys.executable, "game.py", "--db", ":memory:", "--result", "r.json"],
        capture_output=True,
        text=True,
        cwd=vendor,
        env=env,
        check=False,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    assert json.loads((vendor / "r.json").read_text())["vars"]["total"] == 5
    probe = subprocess.run(
        [sys.executable, "-c", "import fems2py"], cwd=vendor, env=env, check=False
    )
    assert probe.returncode != 0  # the blocker really blocks


def test_build_refuses_to_overwrite_a_hand_written_file(tmp_path: Path) -> None:
    script = tmp_path / "t.fems"
    script.write_text("mainflow:\n    [START] -> [END]\n", encoding="utf-8")
    precious = tmp_path / "t.py"
    precious.write_text("print('mine')\n", encoding="utf-8")
    with pytest.raises(BuildRefused):
        build_file(script, precious)
    assert precious.read_text(encoding="utf-8") == "print('mine')\n"
    build_file(script, tmp_path / "gen.py")
    build_file(script, tmp_path / "gen.py")  # its own output may be rebuilt
    # so may a module from before the header became a docstring (its first line a comment)
    older = tmp_path / "older.py"
    older.write_text("# Generated by fems2py 0.1.0 from t.fems. Do not edit: …\n", "utf-8")
    build_file(script, older)
    assert older.read_text(encoding="utf-8").startswith('"""Generated by fems2py from t.fems.')


def test_build_cache_reuses_a_build_until_the_source_changes(tmp_path: Path) -> None:
    script = tmp_path / "t.fems"
    script.write_text("mainflow:\n    [START] -> [END]\n", encoding="utf-8")
    first = build_cached(script).output
    assert first.is_relative_to(build.cache_root())
    assert sorted(tmp_path.iterdir()) == [script]  # a build writes nothing beside the script
    assert build_cached(script).output == first
    script.write_text("vars:\n    x = 1\nmainflow:\n    [START] -> [END]\n", encoding="utf-8")
    second = build_cached(script).output
    assert second != first
    assert not first.exists()  # the stale build is pruned
    assert second.read_text(encoding="utf-8") == build_source(script, second)


def test_build_cache_rebuilds_when_the_compiler_itself_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cached module calls the runtime as the compiler of its day did: a changed code
    generator (same version number, as during development) must not reuse it."""
    script = tmp_path / "t.fems"
    script.write_text("mainflow:\n    [START] -> [END]\n", encoding="utf-8")
    first = build_cached(script).output
    monkeypatch.setattr(build, "compiler_fingerprint", lambda: "another compiler")
    assert build_cached(script).output != first


# 13_ai_fields names a network model in `model:` (the action's model wins over --model).
RUNNABLE = [
    case for case in sorted(GOLDEN_DIR.glob("*/expected.py")) if case.parent.name != "13_ai_fields"
]


@pytest.mark.parametrize("expected", RUNNABLE, ids=[p.parent.name for p in RUNNABLE])
def test_every_golden_module_runs_offline(tmp_path: Path, expected: Path) -> None:
    case = tmp_path / expected.parent.name
    shutil.copytree(expected.parent, case)
    (case / "answers.json").write_text('{"*": ["ok"]}', encoding="utf-8")
    module = load(case / "expected.py")
    result = module.run(model="fems/mock", seed=1, db=":memory:", human=str(case / "answers.json"))
    assert result.status == "completed"
    assert result.steps > 0


def test_an_incompatible_runtime_fails_at_import_with_the_pip_line() -> None:
    """A generated module's first statement makes its ``SCRIPT``, which checks the version."""
    with pytest.raises(ImportError, match=r"pip install 'fems-runtime==9\.9\.\*'"):
        fr.ScriptInfo(file="t.fems", sha256="0" * 64, compiler="9.9.0")
    assert fr.ScriptInfo(file="t.fems", sha256="0" * 64, compiler=fr.__version__).compiler


NAMES = """
vars:
    log = []
action run @assign:
    out: log += "run"
action node @assign:
    out: log += "node"
action match @assign:
    out: log += "match"
action PROGRAM @assign:
    out: log += "PROGRAM"
mainflow:
    [START] -> run -> node -> match -> PROGRAM -> [END]
"""


def test_fems_names_that_clash_with_python_or_the_module_still_work(tmp_path: Path) -> None:
    result, _ = run_script(tmp_path, NAMES)
    assert result.variables["log"] == ["run", "node", "match", "PROGRAM"]
    text = (tmp_path / "t_gen.py").read_text(encoding="utf-8")
    for function in ("run_", "node_", "match_", "PROGRAM_"):
        assert f"async def {function}(ctx: fr.Context)" in text


DECLARED_NAMES = """
vars:
    team = [@eve]
actors:
    ai @eve = soul:eve
action Team_talk @ai(@eve):
    prompt: Say hi.
action ﬁx @ai(@eve):
    prompt: Fix it.
module Team:
    action talk @ai(@eve):
        prompt: Say hello.
    action class @ai(@eve):
        prompt: Say class.
    flow:
        [IN] -> talk -> class -> Team_talk -> [OUT]
module Team_sub:
    flow:
        [IN] -> [OUT]
mainflow:
    [START] -> ﬁx -> &Team -> &Team_sub -> [Again]:&Team -> for @x in team:
        -> ﬁx ->
    -> for @x in team:
        -> ﬁx ->
    -> [END]
"""


def test_functions_stand_for_their_fems_names_and_say_them_where_they_cannot(
    tmp_path: Path,
) -> None:
    """An action or module in module ``Team`` runs as ``Team_<name>`` and the runtime reads its
    name back (fems_runtime.names); where that reading would be wrong (a top-level
    ``Team_talk`` or module ``Team_sub`` beside module ``Team``, ``ﬁx`` that Python reads as
    ``fix``) the module says the name. Loop and call nodes count their steps under the ids
    the compiler gave them."""
    result, events = run_script(tmp_path, DECLARED_NAMES, model="fems/mock", seed=1)
    assert result.status == "completed"
    turns = [e["action"] for e in events if e["event"] == "llm_call"]
    assert turns == ["ﬁx", "talk", "class", "Team_talk", "talk", "class", "Team_talk", "ﬁx", "ﬁx"]
    steps = [e["node"] for e in events if e["event"] == "step"]
    assert steps == [
        *["START", "ﬁx", "&Team", "IN", "talk", "class", "Team_talk", "OUT"],
        *["&Team_sub", "IN", "OUT", "Again", "IN", "talk", "class", "Team_talk", "OUT"],
        *["for_x", "ﬁx", "for_x_2", "ﬁx", "END"],
    ]
    text = (tmp_path / "t_gen.py").read_text(encoding="utf-8")
    said = [line.strip() for line in text.splitlines() if "action=" in line]
    # Team's talk runs as Team_talk_2, the top-level Team_talk having taken Team_talk
    assert said == ['action="Team_talk",', 'action="ﬁx",', 'action="talk",']
    assert "async def Team_class(" in text  # the name Python reserves is no problem here
    assert "@fr.module()\nasync def Team(" in text
    assert '@fr.module(\n    "Team_sub",\n)\nasync def Team_sub(' in text
    assert 'ctx.call(Team, node="Again")' in text and 'node="for_x_2"' in text


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"db": "/nonexistent/dir/x.db"}, "cannot open database"),
        ({"db": ":memory:", "session": "7"}, "session 7 does not exist"),
    ],
    ids=["database", "session"],
)
def test_a_run_that_fails_before_its_first_step_still_writes_result_and_trace(
    tmp_path: Path, options: dict[str, str], message: str
) -> None:
    module = load(build_script(tmp_path, "mainflow:\n    [START] -> [END]\n"))
    result_file, trace_file = tmp_path / "r.json", tmp_path / "t.jsonl"
    with pytest.raises(fr.RunError, match=message):
        module.run(result=str(result_file), trace=str(trace_file), **options)
    result = json.loads(result_file.read_text(encoding="utf-8"))
    assert set(result) == {"session", "status", "steps", "vars", "error"}
    assert (result["status"], result["steps"], result["session"]) == ("failed", 0, None)
    assert message in result["error"]
    events = read_trace(trace_file)
    assert [(e["event"], e["node"]) for e in events] == [("error", None)]
