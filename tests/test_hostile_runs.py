"""A run that started always ends with a ``--result`` file and a one-line error, never a Python
traceback (§16.3), whatever the replies hold; the database password never shows (§10, #10)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from fems_helpers import build_script, run_program

NOTE = """
vars:
    note = ""
    count = 0
actors:
    ai @a
action speak @ai(@a):
    prompt: Count {count}, note {note}.
    scope: [@a]
action again @ai(@a):
    prompt: Count is now {count}.
    scope: [@a]
mainflow:
    [START] -> speak -> again -> [END]
"""

BIG = "4" * 4000


@pytest.mark.parametrize(
    "reply",
    [
        "SET VARIABLE: <<note = " + "[" * 300 + "1" + "]" * 300 + ">>",
        "SET VARIABLE: <<count = " + "9" * 4301 + ">>",
        f"SET VARIABLE: <<count += {BIG}>> SET VARIABLE: <<count += {BIG}>>",
        "lone \ud800 surrogate SET VARIABLE: <<note = a\udfffb>>",
        "SET VARIABLE: <<note = “never closed " * 3000,
    ],
    ids=["nested", "digits", "increments", "surrogates", "unclosed"],
)
def test_hostile_replies_are_rejected_signals_and_the_run_completes(
    tmp_path: Path, reply: str
) -> None:
    module = build_script(tmp_path, NOTE)
    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps({"speak": [reply], "again": ["fine"]}), encoding="utf-8")
    done = run_program(
        module, "--replies", str(replies), "--db", "d.db", "--result", "r.json", "--trace", "t"
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    result = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert result["status"] == "completed"
    assert len(str(result["vars"]["count"])) <= 4001 and result["vars"]["note"] == ""
    trace = (tmp_path / "t").read_text(encoding="utf-8")
    assert "\ud800" not in trace and '"event": "llm_call"' in trace


def test_a_failure_outside_the_script_still_writes_the_result(tmp_path: Path) -> None:
    """The trace path is a folder: the run fails before its first step, with a one-line error
    and a failed result (it used to end in a traceback and no result file)."""
    module = build_script(tmp_path, NOTE)
    (tmp_path / "folder").mkdir()
    done = run_program(module, "--model", "fems/mock", "--trace", "folder", "--result", "r.json")
    assert done.returncode == 1
    assert "Traceback" not in done.stderr and "error:" in done.stderr
    result = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert result["status"] == "failed" and "folder" in result["error"]


def test_fems_traceback_shows_the_traceback(tmp_path: Path) -> None:
    module = build_script(tmp_path, NOTE)
    (tmp_path / "folder").mkdir()
    os.environ["FEMS_TRACEBACK"] = "1"
    try:
        done = run_program(module, "--model", "fems/mock", "--trace", "folder")
    finally:
        del os.environ["FEMS_TRACEBACK"]
    assert done.returncode == 1 and "Traceback (most recent call last)" in done.stderr


def test_an_empty_db_is_a_usage_error(tmp_path: Path) -> None:
    module = build_script(tmp_path, NOTE)
    done = run_program(module, "--model", "fems/mock", "--db", "", "--result", "r.json")
    assert done.returncode == 2
    assert "--db is empty" in done.stderr
    assert not (tmp_path / "dialog.db").exists() and not (tmp_path / "r.json").exists()


def test_the_database_password_never_shows(tmp_path: Path) -> None:
    """Nothing listens on port 1: the connection fails, and neither the message, the result,
    the trace nor the traceback (FEMS_TRACEBACK=1) holds the password."""
    module = build_script(tmp_path, NOTE)
    url = "postgresql+psycopg://bob:S3cret%2FPW@127.0.0.1:1/game"
    os.environ["FEMS_TRACEBACK"] = "1"
    try:
        done = run_program(
            module, "--model", "fems/mock", "--db", url, "--result", "r.json", "--trace", "t"
        )
    finally:
        del os.environ["FEMS_TRACEBACK"]
    assert done.returncode == 1
    assert "bob:***@127.0.0.1:1/game" in done.stderr
    written = done.stderr + (tmp_path / "r.json").read_text() + (tmp_path / "t").read_text()
    assert "S3cret" not in written and "S3cret/PW" not in written
