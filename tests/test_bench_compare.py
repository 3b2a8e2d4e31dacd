"""`python -m bench compare`, the side-by-side benchmark with FemWA: its scripts pass the check and
run to their expected results, the offline comparison runs and reports them, and the fake
server answers streaming requests. The FemWA half needs `pip install femwa==1.1.11` (network),
so it is not run here; its figures are never asserted (timing belongs to bench/)."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from bench import compare_scripts

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("bench", ["chain_4", "par_3", "assign_6", "werewolf_2r"])
def test_every_bench_script_passes_the_check(bench, tmp_path):
    paths = compare_scripts.write(tmp_path, [bench], max_concurrency=4)
    done = subprocess.run(
        [sys.executable, "-m", "fems2py", "check", str(paths[bench])],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    if bench.startswith("par"):
        assert "max_concurrency = 4" in paths[bench].read_text(encoding="utf-8")


@pytest.mark.parametrize("name", ["chain_3", "par_x", "werewolf", "assign_0", "loop_4"])
def test_a_malformed_bench_name_is_refused(name):
    with pytest.raises(compare_scripts.BenchError):
        compare_scripts.parse(name)


def test_the_expected_results_follow_the_bench_size():
    assert compare_scripts.expected("chain_8") == compare_scripts.Expected(8, {"n": 8})
    assert compare_scripts.expected("werewolf_3r").model_calls == 33
    assert compare_scripts.expected("assign_10").variables == {"n": 10}


def test_the_offline_comparison_runs_each_bench_to_its_expected_result(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "bench", "compare", "--offline", "--reps", "1"]
        + ["--benches", "chain_4,par_3,assign_4", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    runs = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))["runs"]
    assert [(r["bench"], r["problems"]) for r in runs] == [
        ("chain_4", []),
        ("par_3", []),
        ("assign_4", []),
    ]
    assert [r["model_calls"] for r in runs] == [4, 3, 0]
    table = (tmp_path / "summary.md").read_text(encoding="utf-8")
    assert table.count("| ok    |") == 3


def test_a_bad_bench_name_is_a_usage_error():
    done = subprocess.run(
        [sys.executable, "-m", "bench", "compare", "--benches", "chain_3", "--offline"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "needs an even N" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_fake_server_streams_the_dictated_reply_and_counts_the_requests():
    with subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "fake_server.py"), "0"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as server:
        assert server.stdout is not None and server.stdin is not None
        port = int(server.stdout.readline())
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        body = {
            "model": "fake",
            "stream": True,
            "messages": [{"role": "user", "content": "go FAKE_REPLY[[SET VARIABLE: <<n += 1>>]]"}],
        }
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/chat/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with opener.open(request, timeout=30) as answer:
            assert answer.headers["Content-Type"] == "text/event-stream"
            events = answer.read().decode().split("\n\n")
        data = [e.removeprefix("data: ") for e in events if e]
        assert data[-1] == "[DONE]"
        chunks = [json.loads(d) for d in data[:-1]]
        text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
        assert text == "SET VARIABLE: <<n += 1>>"
        assert chunks[-1]["usage"]["completion_tokens"] == 4
        with opener.open(f"http://127.0.0.1:{port}/arrivals", timeout=30) as answer:
            assert len(json.loads(answer.read())) == 1
        server.stdin.close()  # the server exits when its input closes
        assert server.wait(10) == 0
