"""A fork or a reuse killed with SIGKILL at any point resumes with ``--resume`` to the state of
an uninterrupted run: the same messages, none stored twice or lost, the same final variables
(§16.4, §16.4a). The kill points are write transactions of the run, drawn from a seed; the
process kills itself inside the transaction, before its commit, and the test resumes it."""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fems_helpers import load

from tests.test_fork import MOCK, messages, session_row, werewolf

KILLS = 20
# The driver turns the store's group-commit timer off (batches are then written when the run
# reads, writes or closes the store), so the write transactions, and which one a kill lands in,
# are the same in every run of a seed whatever the machine's load.
DRIVER = """\
import contextlib, os, runpy, signal, sys
from fems_runtime.store import messages
from fems_runtime.store.open_database import OpenDatabase

messages.GROUP_COMMIT_S = 1e9

kill_at, count = int(sys.argv[1]), [0]
transaction = OpenDatabase.transaction

@contextlib.contextmanager
def counted(self):
    with transaction(self) as db:
        yield db
        count[0] += 1
        if count[0] == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

OpenDatabase.transaction = counted
sys.argv = [sys.argv[2], *sys.argv[3:]]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
finally:
    print(f"transactions: {count[0]}", file=sys.stderr)
"""
EDIT = {"Speak once to the village": "Speak up once to the village"}


def drive(folder: Path, module: Path, kill_at: int, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the module as a program that kills itself inside its ``kill_at``-th write
    transaction (0: never)."""
    driver = folder / "driver.py"
    driver.write_text(DRIVER, encoding="utf-8")
    return subprocess.run(
        [sys.executable, str(driver), str(kill_at), str(module), *args],
        capture_output=True,
        text=True,
        cwd=folder,
        check=False,
        timeout=120,
    )


def final_state(db: Path, session: int, result: Any) -> tuple[Any, ...]:
    row = session_row(db, session)
    return messages(db, session), result, row["branch_turn"], row["status"]


@pytest.mark.parametrize("kind", ["fork", "reuse"])
def test_a_killed_branch_resumes_to_the_state_of_an_uninterrupted_one(
    tmp_path: Path, kind: str
) -> None:
    parent = werewolf(tmp_path / "parent")
    base = tmp_path / "base.db"
    load(parent).run(model="fems/mock", human="fems/mock", seed=1, db=str(base))
    # a fork plays another game from the first night's end; a reuse replays up to an edit
    module = parent if kind == "fork" else werewolf(tmp_path / "edited", EDIT)
    branch = (
        ("--fork", "1:12", "--seed", "2") if kind == "fork" else ("--reuse", "1", "--seed", "1")
    )

    reference = tmp_path / "reference.db"
    shutil.copy(base, reference)
    whole = drive(tmp_path, module, 0, *MOCK, *branch, "--db", str(reference), "--result", "r.json")
    assert whole.returncode == 0, whole.stderr
    writes = int(whole.stderr.rsplit("transactions: ", 1)[1])
    expected = final_state(reference, 2, (tmp_path / "r.json").read_text())
    assert len(expected[0]) > len(messages(base, 1)) // 2

    draw = random.Random(f"kill {kind}")
    for kill in range(KILLS // 2):
        db = tmp_path / f"k{kill}.db"
        shutil.copy(base, db)
        # from the third write on (the first two open the database and create the session)
        at = draw.randint(3, writes)
        killed = drive(tmp_path, module, at, *MOCK, *branch, "--db", str(db))
        assert killed.returncode == -9, (at, killed.stderr)
        resumed = load(module).run(
            model="fems/mock",
            human="fems/mock",
            seed=int(branch[-1]),
            db=str(db),
            resume=True,
            session=2,
            result=str(tmp_path / "r.json"),
        )
        assert resumed.status == "completed", at
        state = final_state(db, 2, (tmp_path / "r.json").read_text())
        assert state == expected, f"killed at write {at} of {writes}"
        assert messages(db, 1) == messages(base, 1)  # the parent is never written
