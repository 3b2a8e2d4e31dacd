"""Hypothesis over hostile replies, scripts and runs (#10): the properties of
:mod:`bench.fuzzing`, in bounded time; ``python -m bench fuzz --n 100000`` is the long
campaign over the same generators."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.fuzzing import (
    OUTS,
    DrawChooser,
    Runner,
    check_reply,
    check_script,
    hostile_reply,
    hostile_script,
    script_folder,
)


def bounded(examples: int) -> settings:
    """A fixed number of examples, no deadline (a run case takes a while), no database."""
    return settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )


@bounded(300)
@given(data=st.data())
def test_hostile_replies_are_only_ever_rejected_signals(data: st.DataObject) -> None:
    choose = DrawChooser(data.draw)
    check_reply(hostile_reply(choose), choose.pick(OUTS))


@pytest.fixture(scope="module")
def folder() -> Path:
    return script_folder()


@bounded(60)
@given(data=st.data())
def test_hostile_scripts_only_produce_diagnostics_or_python(
    data: st.DataObject, folder: Path
) -> None:
    check_script(hostile_script(DrawChooser(data.draw)), folder)


@pytest.fixture(scope="module")
def runner(tmp_path_factory: pytest.TempPathFactory) -> Runner:
    return Runner(tmp_path_factory.mktemp("run"))


@bounded(15)
@given(data=st.data())
def test_runs_fed_hostile_replies_end_with_a_result(data: st.DataObject, runner: Runner) -> None:
    choose = DrawChooser(data.draw)
    replies = [hostile_reply(choose) for _ in range(choose.number(1, 3))]
    with contextlib.redirect_stderr(io.StringIO()):
        assert runner.check_run(replies) in ("completed", "failed")
