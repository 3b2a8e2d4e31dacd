"""``fems2py batch --ray``: the same 50-session batch as Ray tasks on a local Ray instance this
module starts (two CPUs), with SQLite on this machine and with PostgreSQL through the
cluster's address (where SQLite is refused)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import ray
from batch_helpers import batch, coin_script, session_count, tagged_sessions
from postgres_server import server, url

__all__ = ["server", "url"]  # fixtures


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A local Ray instance; yields its address, as a cluster's would be given."""
    ray.init(
        num_cpus=2, include_dashboard=False, logging_level=logging.WARNING, log_to_driver=False
    )
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


def _check_fifty(db: str, err: str) -> None:
    runs = tagged_sessions(db)
    assert sorted(run["index"] for run in runs) == list(range(50)), err
    assert {run["status"] for run in runs} == {"completed"}
    assert not any(run["result"]["resumed"] for run in runs)  # each ran once
    assert all(run["result"]["model_calls"] == 5 for run in runs)
    assert session_count(db) == 50


def test_fifty_sessions_as_ray_tasks_with_sqlite(
    cluster: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = coin_script(tmp_path, rounds=2)
    db = str(tmp_path / "ray.db")
    args = ["--runs", "50", "--workers", "2", "--db", db, "--model", "fems/mock", "--ray"]
    status, err = batch(capsys, script, *args, "--collect", "winner", "--out", str(tmp_path))
    assert status == 0, err
    assert "50 to run on 2 Ray task slots" in err
    _check_fifty(db, err)

    # with the cluster's address, the SQLite file is refused before anything runs
    status, err = batch(capsys, script, *args, cluster, "--out", str(tmp_path))
    assert status == 2 and "cannot share the SQLite file" in err
    assert "hint: give --db a PostgreSQL URL" in err


def test_fifty_sessions_as_ray_tasks_with_postgres(
    cluster: str, url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = coin_script(tmp_path, rounds=2)
    args = ["--runs", "50", "--workers", "2", "--db", url, "--model", "fems/mock"]
    status, err = batch(capsys, script, *args, "--ray", cluster, "--out", str(tmp_path))
    assert status == 0, err
    _check_fifty(url, err)
    status, err = batch(capsys, script, *args, "--ray", cluster, "--out", str(tmp_path))
    assert status == 0 and "all 50 sessions already completed" in err
    assert session_count(url) == 50
