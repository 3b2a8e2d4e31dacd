"""A worker killed mid-session loses nothing: the batch resumes its session (and those the
broken pool stopped) from their turn records, and a rerun of the command finds every session
completed exactly once, each with the dialog an uninterrupted run of its seed stores. On
SQLite and on PostgreSQL, where the process pool also runs a plain 50-session batch."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from batch_helpers import batch, coin_script, session_count, tagged_sessions
from fems_runtime.store import Store
from postgres_server import server, url

from fems2py.batch.worker import ModuleBundle, load_module
from fems2py.build import build_cached

__all__ = ["server", "url"]  # fixtures


def _pool_workers(coordinator: int) -> list[int]:
    """The pool's worker processes: children of the batch that run multiprocessing's spawn
    entry point (not its resource tracker)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
        except (OSError, IndexError, ValueError):
            continue
        if (
            parent == coordinator
            and b"spawn_main" in command
            and b"resource_tracker" not in command
        ):
            found.append(int(entry.name))
    return found


def _running_with_messages(store: Store) -> bool:
    """Whether some session is running and has stored messages: a kill now lands in the
    middle of a session."""
    t = store.database().tables
    sa = t.sa
    query = (
        sa.select(sa.func.count())
        .select_from(t.messages.join(t.sessions, t.sessions.c.id == t.messages.c.session_id))
        .where(t.sessions.c.status == "running")
    )
    with store.database().engine.connect() as connection:
        return bool(connection.execute(query).scalar())


def _dialog(db: str, session: int) -> list[tuple[str, str | None, str]]:
    with Store(db) as store:
        return [(m.kind, m.speaker_name, m.content) for m in store.messages(session)]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_worker_killed_mid_session_loses_nothing(
    backend: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], request: pytest.FixtureRequest
) -> None:
    db = str(tmp_path / "kill.db") if backend == "sqlite" else request.getfixturevalue("url")
    script = coin_script(tmp_path, rounds=8, pause=0.05)
    args = ["--runs", "12", "--workers", "2", "--db", db, "--model", "fems/mock"]
    command = [sys.executable, "-m", "fems2py", "batch", str(script), *args, "--no-progress"]
    watcher = Store(db)  # creates the tables the batch will fill
    started = subprocess.Popen(command, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        workers: list[int] = []
        while time.monotonic() < deadline and started.poll() is None:
            workers = _pool_workers(started.pid)
            if workers and _running_with_messages(watcher):
                break
            time.sleep(0.02)
        assert workers, "the batch ended before a worker could be killed"
        os.kill(workers[0], signal.SIGKILL)
        _, err = started.communicate(timeout=180)
    finally:
        started.kill()
        watcher.close()
    assert started.returncode == 0, err
    assert "Traceback" not in err

    status, err = batch(capsys, script, *args)  # the same command again
    assert status == 0 and "all 12 sessions already completed" in err
    runs = tagged_sessions(db)
    assert sorted(run["index"] for run in runs) == list(range(12))
    assert {run["status"] for run in runs} == {"completed"}
    assert session_count(db) == 12  # no session started twice
    resumed = [run for run in runs if run["result"]["resumed"]]
    assert resumed, "no session was interrupted by the kill"

    # each resumed session holds the dialog of an uninterrupted run of its seed
    built = build_cached(script).output
    module = load_module(ModuleBundle(str(built), built.read_text(encoding="utf-8")))
    reference = str(tmp_path / "reference.db")
    for run in resumed:
        seed = run["result"]["seed"]
        alone = module.run(model="fems/mock", seed=seed, db=reference, human="fems/mock")
        assert _replies(_dialog(db, run["session"])) == _replies(_dialog(reference, alone.session))


def _replies(dialog: list[tuple[str, str | None, str]]) -> list[tuple[str, str | None, str]]:
    """The messages that say something (a stopped call leaves an ``[Interrupted]`` reply that
    the resumed run answers again)."""
    return [line for line in dialog if line[2] != "[Interrupted]"]


def test_fifty_sessions_on_the_pool_with_postgres(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = coin_script(tmp_path, rounds=2)
    args = ["--runs", "50", "--workers", "2", "--db", url, "--model", "fems/mock"]
    status, err = batch(capsys, script, *args, "--collect", "winner", "--out", str(tmp_path))
    assert status == 0, err
    runs = tagged_sessions(url)
    assert sorted(run["index"] for run in runs) == list(range(50))
    assert {run["status"] for run in runs} == {"completed"}
    assert session_count(url) == 50


def test_ctrl_c_stops_cleanly_and_a_rerun_finishes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """SIGINT to the batch: the running sessions stop the way an interrupted run does, the
    results so far are written, the exit status is 130, and the same command finishes."""
    db = str(tmp_path / "stop.db")
    script = coin_script(tmp_path, rounds=8, pause=0.05)
    args = ["--runs", "10", "--workers", "2", "--db", db, "--model", "fems/mock"]
    out = tmp_path / "out"
    command = [sys.executable, "-m", "fems2py", "batch", str(script), *args, "--out", str(out)]
    watcher = Store(db)
    started = subprocess.Popen(command, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not _running_with_messages(watcher):
            time.sleep(0.02)
        started.send_signal(signal.SIGINT)
        _, err = started.communicate(timeout=120)
    finally:
        started.kill()
        watcher.close()
    assert started.returncode == 130, err
    assert "stopped; run the same command again" in err and "Traceback" not in err
    with (out / "results.csv").open(encoding="utf-8") as file:
        statuses = [row["status"] for row in csv.DictReader(file)]
    assert len(statuses) == 10
    assert "interrupted" in statuses and "completed" not in statuses[-1:]
    assert not _pool_workers(started.pid)  # every worker stopped

    status, err = batch(capsys, script, *args, "--out", str(out))
    assert status == 0, err
    runs = tagged_sessions(db)
    assert sorted(run["index"] for run in runs) == list(range(10))
    assert {run["status"] for run in runs} == {"completed"}
    assert any(run["result"]["resumed"] for run in runs)
    assert session_count(db) == 10
