"""Golden files: the compiler's output for each golden/<case>/input.fems is reviewed and fixed.

Regenerate with ``make golden`` (``python -m fems2py.golden``) and review the diff.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import black
import pytest

from fems2py.build import BLACK_MODE
from fems2py.golden import EXPECTED, GOLDEN_DIR, cases, expected_source

CASES = cases()


def test_there_are_enough_golden_cases() -> None:
    assert len(CASES) >= 15


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_output_matches_golden(case: Path) -> None:
    expected = (case / EXPECTED).read_text(encoding="utf-8")
    assert expected_source(case) == expected, f"run `make golden` and review {case.name}"


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_golden_is_black_stable_and_compiles(case: Path) -> None:
    expected = (case / EXPECTED).read_text(encoding="utf-8")
    assert black.format_str(expected, mode=BLACK_MODE) == expected
    compile(expected, str(case / EXPECTED), "exec")


def test_ruff_is_clean_on_golden_without_blanket_noqa() -> None:
    ruff = Path(sys.executable).parent / "ruff"
    completed = subprocess.run(
        [str(ruff), "check", "--no-cache", str(GOLDEN_DIR)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    for case in CASES:
        text = (case / EXPECTED).read_text(encoding="utf-8")
        assert "# noqa\n" not in text and "# ruff: noqa" not in text
