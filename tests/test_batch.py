"""``fems2py batch`` on the local process pool with SQLite: a 50-session batch tagged in the
store, its results table and summary, a rerun that skips what is done, ``--set``, a model
sweep, and usage errors without tracebacks."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from batch_helpers import batch, coin_script, session_count, tagged_sessions
from fems_runtime.store import Store

from fems2py.batch.results import wilson
from fems2py.batch.table import BatchTable, BatchTag
from fems2py.batch.worker import ModuleBundle, load_module
from fems2py.build import build_cached


def test_fifty_sessions_on_the_pool_are_tagged_tabled_and_summarized(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = coin_script(tmp_path)
    db = str(tmp_path / "games.db")
    out = tmp_path / "out"
    args = ["--runs", "50", "--workers", "2", "--db", db, "--model", "fems/mock"]
    status, err = batch(capsys, script, *args, "--collect", "winner,call", "--out", str(out))
    assert status == 0, err
    runs = tagged_sessions(db)
    assert sorted(run["index"] for run in runs) == list(range(50))
    assert len({run["session"] for run in runs}) == 50 == session_count(db)
    assert {run["status"] for run in runs} == {"completed"}
    assert len({run["batch"] for run in runs}) == 1

    with (out / "results.csv").open(encoding="utf-8") as file:
        rows = list(csv.DictReader(file))
    assert [int(row["seed"]) for row in rows] == list(range(1, 51))
    by_session = {run["session"]: run for run in runs}
    for row in rows:
        assert row["status"] == "completed" and row["model"] == "fems/mock"
        assert int(row["model_calls"]) == 7  # three tosses and answers, one decision
        assert int(row["steps"]) > 0
        assert row["winner"] in ("Ann", "Bob") and row["call"] in ("heads", "tails")
        stored = by_session[int(row["session"])]["result"]
        assert stored["vars"]["winner"] == row["winner"]  # the row kept in the store

    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["status"] == {"completed": 50}
    winners = summary["collect"]["winner"]
    assert sum(entry["count"] for entry in winners) == 50
    for entry in winners:
        counted = sum(row["winner"] == entry["value"] for row in rows)
        assert entry["count"] == counted
        assert entry["ci95"] == list(wilson(counted, 50))
    assert "95% CI" in err and "Traceback" not in err

    # the same command again: nothing runs, the table is written again from the store
    status, err = batch(capsys, script, *args, "--collect", "winner", "--out", str(out))
    assert status == 0
    assert "all 50 sessions already completed" in err
    assert session_count(db) == 50
    again = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert [row["winner"] for row in again["rows"]] == [row["winner"] for row in rows]

    # a larger --runs extends the same batch
    more = ["--runs", "53", "--workers", "2", "--db", db, "--model", "fems/mock"]
    status, err = batch(capsys, script, *more, "--out", str(out))
    assert status == 0 and "50 already completed, 3 to run" in err
    assert session_count(db) == 53


def test_set_and_a_model_sweep(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = coin_script(tmp_path)
    replies = tmp_path / "replies.json"
    replies.write_text(
        json.dumps({"decide": ["SET VARIABLE: <<winner = Bob>>"], "*": ["fine"]}),
        encoding="utf-8",
    )
    db = str(tmp_path / "sweep.db")
    results = tmp_path / "sweep.json"
    status, err = batch(
        capsys,
        script,
        *("--seeds", "10..13", "--set", "rounds=1", "--db", db, "--workers", "2"),
        *("--model", "fems/mock", "--model", "fems/script", "--replies", str(replies)),
        *("--collect", "winner,round", "--results", str(results)),
    )
    assert status == 0, err
    data = json.loads(results.read_text(encoding="utf-8"))
    rows = data["rows"]
    assert [(row["seed"], row["model"]) for row in rows] == [
        (seed, model) for seed in range(10, 14) for model in ("fems/mock", "fems/script")
    ]
    assert all(row["round"] == 1 and row["set.rounds"] == "1" for row in rows)
    assert all(row["model_calls"] == 3 for row in rows)
    scripted = [e for e in data["summary"]["collect"]["winner"] if e["model"] == "fems/script"]
    assert scripted == [
        {
            "model": "fems/script",
            "value": "Bob",
            "count": 4,
            "of": 4,
            "share": 1.0,
            "ci95": list(wilson(4, 4)),
        }
    ]
    assert "winner (model fems/mock)" in err


@pytest.mark.parametrize(
    ("args", "message", "hint"),
    [
        (["--runs", "2", "--set", "rouns=2"], "no variable 'rouns'", "did you mean 'rounds'?"),
        (["--runs", "2", "--set", "rounds=@Zed"], "--set rounds=@Zed", "actors are written @name"),
        (["--runs", "2", "--collect", "winer"], "no variable 'winer'", "did you mean 'winner'?"),
        (["--seeds", "5-9"], "expected A..B", "--seeds 1..100"),
        (["--runs", "3", "--seeds", "1..2"], "disagree", "give one of them"),
        (["--runs", "2", "--db", ":memory:"], "a database its workers share", "SQLite file"),
        (["--runs", "2", "--ray", "10.0.0.1:6379"], "cannot share the SQLite file", "PostgreSQL"),
        (["--runs", "2", "--human", "terminal"], "unattended", "fems/mock"),
        (["--runs", "2", "--batch", "a b"], "--batch 'a b'", None),
    ],
)
def test_usage_errors_name_the_fix(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    message: str,
    hint: str | None,
) -> None:
    script = coin_script(tmp_path)
    if "--db" not in args:
        args = [*args, "--db", str(tmp_path / "x.db")]
    status, err = batch(capsys, script, *args)
    assert status == 2
    assert message in err
    if hint is not None:
        assert f"hint: {hint}" in err or hint in err
    assert "Traceback" not in err


def kinds_script(folder: Path) -> Path:
    """The coin game with a variable of each kind a ``--set`` is checked against: the
    toss is made by the actor ``@caller`` names."""
    script = coin_script(folder, rounds=1)
    text = script.read_text(encoding="utf-8")
    declared = "vars:\n    odds = 0.5\n    order = [@Ann, @Bob]\n    @caller = @Ann\n"
    text = text.replace("vars:\n", declared).replace("toss @ai(@Ann)", "toss @ai(@caller)")
    script.write_text(text, encoding="utf-8")
    return script


@pytest.mark.parametrize(
    ("value", "message", "hint"),
    [
        (
            "rounds=abc",
            "--set rounds=abc: rounds is an integer in coin.fems (vars: rounds = 1), "
            "and abc is a string",
            "for example --set rounds=1",
        ),
        (
            "rounds=2.5",
            "rounds is an integer in coin.fems (vars: rounds = 1), and 2.5 is a float",
            "for example --set rounds=1",
        ),
        (
            "order=[@Ann,",
            "order is a list in coin.fems (vars: order = [@Ann, @Bob]), "
            "and [@Ann, is not a complete list",
            "a list is written [a, b, …]",
        ),
        ("@caller=@Zed", "--set @caller=@Zed: @Zed is not a defined actor", "@Ann, @Bob"),
        (
            "@caller=Ann",
            "@caller is an actor in coin.fems (vars: @caller = @Ann), and Ann is a string",
            "actors are written @name",
        ),
        (
            "call=3",
            'call is a string in coin.fems (vars: call = ""), and 3 is an integer',
            """--set 'call="3"'""",
        ),
    ],
)
def test_a_set_value_of_the_wrong_kind_is_a_usage_error_before_any_session(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str, message: str, hint: str
) -> None:
    """A ``--set`` value is checked against the kind ``vars:`` declares before the batch
    starts: one error (exit 2), not a run error in each session."""
    db = tmp_path / "kinds.db"
    args = ["--runs", "3", "--set", value, "--db", str(db), "--model", "fems/mock"]
    status, err = batch(capsys, kinds_script(tmp_path), *args)
    assert status == 2, err
    lines = err.splitlines()
    assert len(lines) == 2 and lines[0].startswith("fems2py batch: error: "), err
    assert message in lines[0] and hint in lines[1]
    assert not db.exists()  # no session ran, no database was opened


def test_a_set_value_that_fits_its_variable_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An integer fits a float variable; ``@name`` of a defined actor an actor-typed one."""
    db = str(tmp_path / "fits.db")
    args = ["--runs", "2", "--db", db, "--model", "fems/mock", "--collect", "odds,@caller,order"]
    sets = ["--set", "odds=1", "--set", "@caller=@Bob", "--set", "order=[@Bob, @Ann]"]
    status, err = batch(capsys, kinds_script(tmp_path), *args, *sets)
    assert status == 0, err
    final = [run["result"]["vars"] for run in tagged_sessions(db)]
    assert [(v["odds"], v["@caller"], v["order"]) for v in final] == [
        (1, "@Bob", ["@Bob", "@Ann"])
    ] * 2


def test_a_batch_without_a_model_says_it_plays_fems_mock(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No ``--model`` and none in the script: the batch says so once on its own stderr, as a
    run does (its workers' notices go to their log), and each row names the model played."""
    monkeypatch.delenv("FEMS_MODEL", raising=False)
    out = tmp_path / "out"
    args = ["--runs", "3", "--workers", "2", "--db", str(tmp_path / "m.db"), "--out", str(out)]
    status, err = batch(capsys, coin_script(tmp_path, rounds=1), *args)
    assert status == 0, err
    assert err.count("fems: no model configured; using the offline model fems/mock") == 1
    with (out / "results.csv").open(encoding="utf-8") as file:
        assert [row["model"] for row in csv.DictReader(file)] == ["fems/mock"] * 3
    files = ("results.csv", "results.json", "summary.json", "summary.txt")
    assert f"wrote {', '.join(str(out / name) for name in files)}\n" in err  # every file


def test_wilson_interval_known_values() -> None:
    low, high = wilson(8, 10)
    assert round(low, 4) == 0.4902 and round(high, 4) == 0.9433
    assert wilson(0, 20)[0] == 0.0 and 0.16 < wilson(0, 20)[1] < 0.17
    assert wilson(20, 20)[1] == 1.0


def test_a_database_made_before_batches_gains_the_tag_table(tmp_path: Path) -> None:
    """The tag table is created beside the others in a database that lacks it (§14): one that
    only runs used (the runtime's store makes only the tables a run needs)."""
    db = str(tmp_path / "old.db")
    with Store(db) as store:
        old = store.open_session("new", title="an earlier run")
        database = store.database()
        assert (
            "fems_batch_runs" not in database.tables.sa.inspect(database.engine).get_table_names()
        )
    with Store(db) as store:
        table = BatchTable(store)
        tag = BatchTag("b", 0, {"seed": 1, "model": None, "set": {}})
        session = table.open_session(tag)
        runs = table.runs("b")
        assert runs == {
            0: {"session": session, "status": "running", "settings": tag.settings, "result": None}
        }
        table.save_result("b", 0, {"status": "completed"})
        assert table.runs("b")[0]["result"] == {"status": "completed"}
        assert store.session(old)["title"] == "an earlier run"


def test_a_worker_without_the_build_runs_the_shipped_module(tmp_path: Path) -> None:
    """A Ray machine without the script or the build: the module and its code files come
    with the batch and are written beside each other, where the module finds them."""
    built = build_cached(coin_script(tmp_path, rounds=1, pause=0.01)).output
    elsewhere = tmp_path / "not-on-this-machine" / built.name
    bundle = ModuleBundle(
        str(elsewhere),
        built.read_text(encoding="utf-8"),
        {"clock.py": (tmp_path / "clock.py").read_text(encoding="utf-8")},
    )
    module = load_module(bundle)
    assert Path(module.__file__).parent.name == f"fems2py-batch-{bundle.digest[:16]}"
    result = module.run(model="fems/mock", seed=2, db=str(tmp_path / "far.db"))
    assert result.status == "completed" and result.variables["winner"] in ("Ann", "Bob")


def test_failed_sessions_are_resumed_by_the_next_invocation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Scripted replies that run out fail every session (exit 1, the error in its row); with
    enough replies, the same batch resumes them from their records and completes them."""
    script = coin_script(tmp_path, rounds=2)
    short, full = tmp_path / "short.json", tmp_path / "full.json"
    short.write_text(json.dumps({"toss": ["heads"], "answer": ["ok"]}), encoding="utf-8")
    replies = {"toss": ["heads", "tails"], "answer": ["ok", "ok"], "decide": ["Ann"]}
    full.write_text(json.dumps(replies), encoding="utf-8")
    db = str(tmp_path / "f.db")
    args = ["--runs", "3", "--workers", "2", "--db", db, "--batch", "scripted"]
    status, err = batch(capsys, script, *args, "--replies", str(short), "--collect", "winner")
    assert status == 1, err
    rows = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))["rows"]
    assert [row["status"] for row in rows] == ["failed"] * 3
    assert all("coin.fems:" in row["error"] for row in rows)

    status, err = batch(capsys, script, *args, "--replies", str(full), "--collect", "winner")
    assert status == 0, err
    runs = tagged_sessions(db)
    assert {run["status"] for run in runs} == {"completed"} and session_count(db) == 3
    assert all(run["result"]["resumed"] and run["result"]["model_calls"] == 5 for run in runs)
