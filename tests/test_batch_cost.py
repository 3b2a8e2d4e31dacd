"""``fems2py batch --max-cost`` (§15.6) against a fake OpenAI-compatible server on 127.0.0.1
that reports usage (11 prompt and 7 completion tokens a reply) and a model map that prices
them: each call costs 11 × 0.001 + 7 × 0.002 = $0.025, each session (three calls) $0.075."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from batch_helpers import batch, tagged_sessions

from tests.runtime.fake_openai import fake_openai

SCRIPT = """\
meta:
    name = Talk
vars:
    round = 0
actors:
    ai @Ann = source:paid
action next_round @assign:
    out: round += 1
action talk @ai(@Ann):
    prompt: Say something.
mainflow:
    [START] -> [Talk]: next_round -> talk -> fork:
        -> if (round < 3) -> [Talk]
        -> if (round >= 3) -> [END]
"""


def test_the_limit_caps_the_whole_batch_and_a_higher_one_finishes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "talk.fems"
    script.write_text(SCRIPT, encoding="utf-8")
    db = str(tmp_path / "b.db")
    args = ["--runs", "4", "--workers", "1", "--db", db, "--batch", "priced"]
    with fake_openai() as server:
        (tmp_path / "fems.toml").write_text(
            "[models]\n"
            f'paid = {{ model = "openai/paid", api_base = "{server.api_base}", api_key = "k", '
            "input_cost_per_token = 0.001, output_cost_per_token = 0.002 }\n",
            encoding="utf-8",
        )
        status, err = batch(capsys, script, *args, "--max-cost", "0.09")
        # the first session ($0.075) completes; the second passes $0.09 with its first call
        # (the batch's $0.100) and stops after that turn; the last two never start
        assert status == 1, err
        assert len(server.requests) == 4
        assert "2 sessions not started" in err and "higher --max-cost" in err
        rows = json.loads((tmp_path / "out" / "results.json").read_text())["rows"]
        assert [row["status"] for row in rows] == ["completed", "failed", "pending", "pending"]
        error = rows[1]["error"]
        assert "the batch's recorded cost $0.1000 passed the cost limit $0.09" in error
        assert "run the batch again with a higher --max-cost" in error

        status, err = batch(capsys, script, *args, "--max-cost", "1")
        assert status == 0, err
        assert len(server.requests) == 4 + 2 + 3 + 3  # the stopped session resumed, two new
    runs = tagged_sessions(db)
    assert len(runs) == 4 and {run["status"] for run in runs} == {"completed"}
    assert sum(run["result"]["cost"] for run in runs) == pytest.approx(12 * 0.025)


def test_the_limit_is_dollars(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "talk.fems"
    script.write_text(SCRIPT, encoding="utf-8")
    status, err = batch(
        capsys, script, "--runs", "1", "--db", str(tmp_path / "b.db"), "--max-cost", "-1"
    )
    assert status == 2 and "--max-cost -1: give a number of US dollars ≥ 0" in err
