"""The cost limit (§15.6) against a fake OpenAI-compatible server on 127.0.0.1 that reports
usage (11 prompt and 7 completion tokens a reply), priced by the model map's own per-token
prices: each call costs 11 × 0.001 + 7 × 0.002 = $0.025."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fems_helpers import build_script, load, run_program
from fems_runtime.limits import CostLimit
from fems_runtime.records import RunError
from fems_runtime.store import Store

from fems2py.cli import main

from .fake_openai import FakeOpenAI, fake_openai

CALL_COST = 11 * 0.001 + 7 * 0.002

SCRIPT = """
meta:
    name = chatter
    {meta}
vars:
    round = 0
actors:
    ai @Ann = source:{source}
action speak @ai(@Ann):
    prompt: Say something.
action next @assign:
    out: round += 1
mainflow:
    [START] -> [R]
    [R] -> speak -> next -> [C]
    [C] -> if (round < 5) -> [R]
    [C] -> if (round >= 5) -> [END]
"""


def project(tmp_path: Path, server: FakeOpenAI, meta: str = "", source: str = "paid") -> Path:
    """The script's module, with a model map of a priced and an unpriced model on ``server``."""
    (tmp_path / "fems.toml").write_text(
        "[models]\n"
        f'paid = {{ model = "openai/paid", api_base = "{server.api_base}", api_key = "k", '
        "input_cost_per_token = 0.001, output_cost_per_token = 0.002 }\n"
        f'free = {{ model = "openai/unpriced-local", api_base = "{server.api_base}", '
        'api_key = "k" }\n',
        encoding="utf-8",
    )
    return build_script(tmp_path, SCRIPT.format(meta=meta, source=source))


def test_the_run_stops_after_the_turn_that_passed_the_limit_and_resumes_higher(
    tmp_path: Path,
) -> None:
    db = str(tmp_path / "d.db")
    with fake_openai() as server:
        module = load(project(tmp_path, server))
        with pytest.raises(RunError) as stopped:
            module.run(db=db, max_cost=0.06)
        assert len(server.requests) == 3  # $0.05 after two calls, $0.075 after the third
        message = str(stopped.value)
        assert "t.fems:8:" in message  # the action that passed it
        assert "recorded cost $0.0750 passed the cost limit $0.06 after action speak" in message
        assert "--resume --max-cost" in message

        with Store(db) as store:
            assert store.session(1)["status"] == "failed"
            assert store.session_usage(1)["cost"] == pytest.approx(3 * CALL_COST)

        with pytest.raises(RunError, match="recorded cost \\$0.0750 passed"):
            module.run(db=db, resume=True, max_cost=0.07)  # not high enough: nothing new
        assert len(server.requests) == 3

        result = module.run(db=db, resume=True, max_cost=1.0)
        assert len(server.requests) == 5  # the three saved turns replayed, two new calls
    assert result.status == "completed" and result.variables["round"] == 5
    assert result.replayed == 3
    with Store(db) as store:
        assert store.session_usage(1)["cost"] == pytest.approx(5 * CALL_COST)


def test_meta_max_cost_and_the_option_over_it(tmp_path: Path) -> None:
    with fake_openai() as server:
        module = project(tmp_path, server, meta="max_cost = 0.03")
        stopped = run_program(module, "--db", "a.db")
        assert stopped.returncode == 1
        assert "recorded cost $0.0500 passed the cost limit $0.03" in stopped.stderr
        assert "Traceback" not in stopped.stderr
        assert len(server.requests) == 2

        higher = run_program(module, "--db", "b.db", "--max-cost", "0.08", "--result", "r.json")
        assert higher.returncode == 1 and "$0.1000 passed the cost limit $0.08 " in higher.stderr
        assert len(server.requests) == 2 + 4
        assert json.loads((tmp_path / "r.json").read_text())["status"] == "failed"

        bad = run_program(module, "--max-cost", "lots")
        assert bad.returncode == 2 and "'lots' is not a number of US dollars" in bad.stderr


def test_fems2py_run_takes_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    with fake_openai() as server:
        project(tmp_path, server)
        assert main(["run", "t.fems", "--db", "d.db", "--max-cost", "0.03"]) == 1
        assert len(server.requests) == 2
    assert "recorded cost $0.0500 passed the cost limit $0.03" in capsys.readouterr().err


def test_a_model_without_a_price_is_free_and_named_once(tmp_path: Path) -> None:
    with fake_openai() as server:
        module = project(tmp_path, server, source="free")
        done = run_program(module, "--db", "d.db", "--max-cost", "0.01")
        assert len(server.requests) == 5
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if "has no known price" in line]
    assert warnings == [
        "t.fems: warning: model openai/unpriced-local has no known price: its calls count as "
        "free against the cost limit of $0.01 (a model-map entry may give input_cost_per_token "
        "and output_cost_per_token, §15.6)"
    ]


def test_without_a_limit_nothing_is_said_about_prices(tmp_path: Path) -> None:
    with fake_openai() as server:
        done = run_program(project(tmp_path, server, source="free"), "--db", "d.db")
    assert done.returncode == 0 and "price" not in done.stderr


def test_offline_models_are_free_without_a_warning() -> None:
    said: list[str] = []
    limit = CostLimit(0.5)
    limit.start(1, 0.25, said.append)
    limit.add(None, "fems/mock")
    limit.add(None, None)  # a message that is no model call
    limit.add(0.2, "openai/paid")
    limit.check("speak")
    limit.add(None, "openai/paid", usage=False)  # a priced model whose endpoint sent no usage
    assert said == [
        "warning: model openai/paid reported no token usage: its calls count as "
        "free against the cost limit of $0.5 (a model-map entry may give "
        "input_cost_per_token and output_cost_per_token, §15.6)"
    ]
    said.clear()
    limit.add(0.1, "openai/paid")
    with pytest.raises(RunError, match="session's recorded cost \\$0.5500"):
        limit.check("speak")
    assert said == []


def test_a_batch_limit_counts_what_the_other_sessions_spent() -> None:
    limit = CostLimit(1.0, elsewhere=lambda: 0.95, what="the batch")
    limit.start(7, 0.0, print)
    limit.add(0.04, "openai/paid")
    limit.check("speak")
    limit.add(0.02, "openai/paid")
    with pytest.raises(RunError, match="the batch's recorded cost \\$1.0100 passed"):
        limit.check("speak")


@pytest.mark.parametrize("value", [-1, float("nan"), float("inf"), "1"])
def test_a_limit_is_a_number_of_dollars(value: object) -> None:
    with pytest.raises(RunError, match="number of US dollars"):
        CostLimit(value)  # type: ignore[arg-type]
