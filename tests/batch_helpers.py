"""What the ``fems2py batch`` tests share: a small script of a few ``fems/mock`` turns per
session, running the command, and reading a batch back from the store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fems_runtime.store import Store

from fems2py.batch.table import batch_runs_table
from fems2py.cli import main

COIN = """\
meta:
    name = Coin game
vars:
    round = 0
    rounds = 3
    call = ""
    winner = ""
actors:
    ai @Ann
    ai @Bob
action next_round @assign:
    out: round += 1
action toss @ai(@Ann):
    scope: all
    prompt: |
        Call heads or tails.
        SET VARIABLE: <<call = ...>>
    out: call(dropdown, choices=[heads, tails])
action answer @ai(@Bob):
    scope: all
    prompt: Answer @Ann.
action decide @ai(@Bob):
    scope: all
    prompt: |
        Who won?
        SET VARIABLE: <<winner = ...>>
    out: winner(dropdown, choices=[Ann, Bob])
mainflow:
    [START] -> [Toss]: next_round -> toss -> answer -> fork:
        -> if (round < rounds) -> [Toss]
        -> if (round >= rounds) -> decide -> [END]
"""


def coin_script(folder: Path, rounds: int = 3, pause: float = 0) -> Path:
    """The coin game in ``folder``: ``rounds`` tosses per session; with ``pause``, a ``@func``
    sleeps that long after each toss (in a worker thread: the session's store writes its
    turns meanwhile, so a session lasts long enough to be interrupted with turns stored)."""
    path = folder / "coin.fems"
    text = COIN.replace("rounds = 3", f"rounds = {rounds}")
    if pause:
        (folder / "clock.py").write_text(
            f"import time\n\n\ndef rest() -> None:\n    time.sleep({pause})\n", encoding="utf-8"
        )
        text = text.replace("actors:", 'code:\n    clock = file:"clock.py"\nactors:')
        text = text.replace("-> toss -> answer", "-> toss -> rest -> answer")
        text += "action rest @func(clock.rest):\n"
    path.write_text(text, encoding="utf-8")
    return path


def batch(capsys: pytest.CaptureFixture[str], script: Path, *args: str) -> tuple[int, str]:
    """Run ``fems2py batch SCRIPT ARGS…`` in this process (results beside the script unless
    the arguments say where); its status and stderr."""
    if "--out" not in args and "--results" not in args:
        args = (*args, "--out", str(script.parent / "out"))
    status = main(["batch", str(script), "--no-progress", *args])
    return status, capsys.readouterr().err


def tagged_sessions(db: str) -> list[dict[str, Any]]:
    """Every batch run of the database with its session's status and kept row."""
    with Store(db) as store:
        t, runs = store.database().tables, batch_runs_table()
        sa = t.sa
        with store.database().engine.connect() as connection:
            rows = connection.execute(
                sa.select(
                    runs.c.batch_id,
                    runs.c.run_index,
                    runs.c.session_id,
                    runs.c.result,
                    t.sessions.c.status,
                ).join(t.sessions, t.sessions.c.id == runs.c.session_id)
            ).all()
    return [
        {
            "batch": row.batch_id,
            "index": row.run_index,
            "session": row.session_id,
            "status": row.status,
            "result": json.loads(row.result) if row.result else None,
        }
        for row in rows
    ]


def session_count(db: str) -> int:
    """How many sessions the database holds, tagged or not."""
    with Store(db) as store:
        return len(store.sessions())
