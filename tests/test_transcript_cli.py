"""A generated module's --transcript and --show options, end to end on a tiny script."""

from pathlib import Path

from fems_helpers import build_script, load, read_trace
from fems_runtime.app import Program

SCRIPT = """\
vars:
    verdict = ""
actors:
    ai @judge
    ai @clerk
action rule @ai(@judge):
    scope: [@judge, @clerk]
    showprompt: The court is in session.
    prompt: Rule on the case.
    out: verdict: enum([guilty, innocent])
mainflow:
    [START] -> rule -> [END]
"""


def _program(tmp_path: Path) -> Program:
    return load(build_script(tmp_path, SCRIPT, name="court.fems")).PROGRAM


def test_transcript_prints_narration_reply_and_summary(tmp_path, capsys):
    program = _program(tmp_path)
    status = program.main(
        ["--model", "fems/mock", "--db", ":memory:", "--transcript", "--show", "verdict"]
    )
    out = capsys.readouterr().out
    assert status == 0
    assert "~ The court is in session.  [all]" in out
    assert "@judge ▸ all" in out
    assert "Rule on the case." not in out  # the prompt is private (§13.1)
    assert "1 model call\n" in out  # one call, said in the singular
    assert any(line in ("verdict = guilty", "verdict = innocent") for line in out.splitlines())


def test_without_transcript_the_summary_goes_to_stderr(tmp_path, capsys):
    program = _program(tmp_path)
    assert program.main(["--model", "fems/mock", "--db", ":memory:", "--show", "verdict"]) == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "completed in 3 steps, 1 model call (session" in captured.err
    assert "verdict = " in captured.err


def test_souls_file_gives_the_actor_its_persona(tmp_path, capsys):
    program = _program(tmp_path)
    souls = tmp_path / "souls.yaml"
    souls.write_text(
        "souls:\n  judge:\n    name: Judge Dee\n    persona: A stern but fair judge.\n"
    )
    trace = tmp_path / "trace.jsonl"
    argv = [
        "--model",
        "fems/mock",
        "--db",
        ":memory:",
        "--souls",
        str(souls),
        "--trace",
        str(trace),
    ]
    assert program.main(argv) == 0
    events = read_trace(trace)
    call = next(e for e in events if e["event"] == "llm_call")
    assert call["messages"][0] == {"role": "system", "content": "A stern but fair judge."}


def test_a_broken_souls_file_is_a_run_error(tmp_path, capsys):
    program = _program(tmp_path)
    souls = tmp_path / "souls.json"
    souls.write_text("{not json")
    assert program.main(["--model", "fems/mock", "--db", ":memory:", "--souls", str(souls)]) == 1
    err = capsys.readouterr().err
    assert "is not valid JSON" in err
    assert "Traceback" not in err


STRICT = """\
vars:
    target = ""
    alive = [@ann, @ben]
actors:
    ai @wolf
    ai @ann
    ai @ben
action pick @ai(@wolf):
    prompt: Pick a victim among {alive}. SET VARIABLE: <<target = @...>>
    out: target(actor)
    max_retries: 1
    fallback: pick_any
action pick_any @assign:
    out: target = @ann
mainflow:
    [START] -> pick -> [END]
"""


def test_a_strict_turn_shows_its_last_problem_and_its_fallback(tmp_path, capsys):
    """§10.6: each problem as it happens: the retry's feedback, then the last rejection and
    the fallback, which store no message of their own."""
    program = load(build_script(tmp_path, STRICT, name="wolf.fems")).PROGRAM
    replies = tmp_path / "replies.json"
    replies.write_text('{"pick": ["SET VARIABLE: <<target = @zed>>", "<<target = @zed>> again"]}')
    status = program.main(["--replies", str(replies), "--db", ":memory:", "--transcript"])
    out = capsys.readouterr().out
    assert status == 0
    assert "(rejected reply of @wolf, private) SET VARIABLE: <<target = @zed>>" in out
    assert "(feedback to @wolf, private) Your previous reply" in out  # the retry's feedback
    lines = [line.strip() for line in out.splitlines() if line.strip().startswith("!")]
    assert lines[0].startswith("! pick by @wolf: ") and lines[0].endswith("(no retry left)")
    assert lines[1:] == ["! pick by @wolf: its fallback runs"]
