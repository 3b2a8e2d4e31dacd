"""`python -m bench --quick` runs every benchmark small and prints the table: CI checks that
each benchmark runs; its figures are never asserted (timing belongs to bench/)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bench.__main__ import BENCHMARKS

ROOT = Path(__file__).resolve().parent.parent


def test_every_benchmark_runs_in_quick_mode() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    for name in BENCHMARKS:
        assert f"== {name}:" in done.stdout
    table = done.stdout[done.stdout.index("| figure") :]
    rows = [line for line in table.splitlines() if line.startswith("| ")][1:]
    assert len(rows) >= len(BENCHMARKS)
    assert all(row.count("|") == 4 and row.split("|")[2].strip() for row in rows)
    assert "Traceback" not in done.stderr
