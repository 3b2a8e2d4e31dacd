"""``fems2py batch --otel`` (issue 31): one trace per session, tagged with the batch and the
session's index, from the pool's worker processes and from Ray tasks, all of it in Phoenix
before the batch exits; with no collector, one warning for the whole batch."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path
from typing import Any

import pytest
import ray
from batch_helpers import batch, coin_script, tagged_sessions

from tests.phoenix_server import Phoenix, free_port


def _check_traces(spans: list[dict[str, Any]], name: str, db: str, runs: int) -> None:
    """One workflow span per session, alone at the root of its own trace, tagged."""
    workflows = [span for span in spans if span["name"].startswith("invoke_workflow ")]
    tagged = tagged_sessions(db)
    sessions = {run["session"]: run["index"] for run in tagged}
    assert len(workflows) == len(sessions) == runs
    tags = {
        int(span["attributes"]["gen_ai.conversation.id"]): span["attributes"]["fems.batch.index"]
        for span in workflows
    }
    assert tags == sessions
    assert {span["attributes"]["fems.batch.name"] for span in workflows} == {name}
    assert len({span["context"]["trace_id"] for span in workflows}) == runs
    assert all(span["parent_id"] is None for span in workflows)
    chats = [span for span in spans if span["name"] == "chat fems/mock"]
    assert len(chats) == sum(run["result"]["model_calls"] for run in tagged)


def test_pool_workers_export_each_session_as_its_own_trace(
    phoenix: Phoenix,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    project = f"coins-{uuid.uuid4().hex[:8]}"
    for variable, value in phoenix.environment(project).items():
        monkeypatch.setenv(variable, value)  # the spawned workers inherit them
    script = coin_script(tmp_path, rounds=2)
    db = str(tmp_path / "pool.db")
    args = ["--runs", "4", "--workers", "2", "--db", db, "--model", "fems/mock", "--otel"]
    status, err = batch(capsys, script, *args, "--batch", "coins")
    assert status == 0, err
    _check_traces(phoenix.spans(project, roots=4), "coins", db, 4)


def test_ray_tasks_export_with_the_batch_s_variables(
    phoenix: Phoenix,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ray.init(
        num_cpus=2, include_dashboard=False, logging_level=logging.WARNING, log_to_driver=False
    )
    try:  # Ray's workers started without the variables: the batch hands them over
        project = f"ray-{uuid.uuid4().hex[:8]}"
        for variable, value in phoenix.environment(project).items():
            monkeypatch.setenv(variable, value)
        script = coin_script(tmp_path, rounds=2)
        db = str(tmp_path / "ray.db")
        args = ["--runs", "3", "--workers", "2", "--db", db, "--model", "fems/mock", "--ray"]
        status, err = batch(capsys, script, *args, "--batch", "ray-coins")
    finally:
        ray.shutdown()
    assert status == 0, err
    _check_traces(phoenix.spans(project, roots=3), "ray-coins", db, 3)


NO_COLLECTOR = "no OpenTelemetry collector answers"


@pytest.mark.parametrize("where", ["pool", "ray"])
def test_a_batch_without_a_collector_says_so_once(
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    where: str,
) -> None:
    """Each worker exports through a process of its own: the pool's three each said the
    warning (on the terminal, past the log their other messages go to), and Ray's went to
    Ray's logs, unseen. The workers report it with their sessions' rows; the batch says it.
    (capfd: the export processes write to the file descriptor, not to sys.stderr.)"""
    endpoint = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    script = coin_script(tmp_path, rounds=1)
    args = ["--runs", "6", "--workers", "3", "--db", str(tmp_path / "b.db"), "--model", "fems/mock"]
    if where == "ray":
        ray.init(
            num_cpus=3, include_dashboard=False, logging_level=logging.WARNING, log_to_driver=False
        )
    try:
        status, err = batch(capfd, script, *args, *(["--ray"] if where == "ray" else []))
    finally:
        if where == "ray":
            ray.shutdown()
    assert status == 0, err
    said = [line for line in err.splitlines() if NO_COLLECTOR in line]
    assert said == [
        f"fems: warning: {NO_COLLECTOR} at {endpoint}/v1/traces: the sessions' spans were not "
        "exported; start one (docs/guide/observability.md) or unset OTEL_EXPORTER_OTLP_ENDPOINT"
    ]
    log = "".join(path.read_text(encoding="utf-8") for path in tmp_path.glob("out/*.log"))
    assert NO_COLLECTOR not in log
