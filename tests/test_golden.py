"""Golden files: the compiler's output for each golden/<case>/input.fems is reviewed and fixed.

Regenerate with ``make golden`` (``python -m fems2py.golden``) and review the diff.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import black
import pytest

from fems2py import build as build_module
from fems2py.build import BLACK_MODE, GENERATED_HEADERS
from fems2py.codegen import PART_SEPARATOR, generate_parts, split_parts
from fems2py.golden import EXPECTED, GOLDEN_DIR, cases, expected_source

EXAMPLES = GOLDEN_DIR.parent / "examples"

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


def _parts(script: Path) -> list[str]:
    checked, _, sha = build_module._analyze(script)
    return generate_parts(checked, script.name, sha).texts


SCRIPTS = [case / "input.fems" for case in CASES] + sorted(EXAMPLES.glob("*/*.fems"))


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.parent.name for p in SCRIPTS])
def test_formatting_part_by_part_is_byte_identical_to_formatting_the_whole_module(
    script: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parts = _parts(script)
    whole = black.format_str(PART_SEPARATOR.join(parts), mode=BLACK_MODE)
    one_by_one = [black.format_str(part, mode=BLACK_MODE) for part in parts]
    assert PART_SEPARATOR.join(one_by_one) == whole  # what makes a per-part cache sound
    assert split_parts(whole) == one_by_one
    monkeypatch.setattr(build_module, "_formatted", {})
    assert build_module.format_parts(parts) == whole  # cold: nothing cached
    assert build_module.format_parts(parts) == whole  # warm: everything cached


def _count_black_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    real = build_module._black_once

    def counting(source: str, mode: black.Mode) -> str:
        calls.append(source)
        return real(source, mode)

    monkeypatch.setattr(build_module, "_black_once", counting)
    return calls


def test_a_one_line_prompt_edit_reformats_only_the_head_and_its_own_function(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(build_module, "_formatted", {})  # nothing from earlier tests
    shutil.copytree(GOLDEN_DIR / "17_text_values", tmp_path / "case")
    script = tmp_path / "case" / "input.fems"
    first = build_module.build_source(script)
    text = script.read_text(encoding="utf-8")
    script.write_text(text.replace("# A heading, not a comment", "# Another heading"), "utf-8")
    calls = _count_black_calls(monkeypatch)
    second = build_module.build_source(script)
    assert len(calls) == 1  # one black call, for two parts:
    head, function = split_parts(calls[0])
    assert head.startswith(GENERATED_HEADERS[0]) and "\nSCRIPT = " in head  # holds the source hash
    assert function.startswith("# \ue000") and "Another heading" in function  # its marker
    assert second != first
    assert second == black.format_str(second, mode=BLACK_MODE)


def test_the_format_store_carries_parts_across_processes_and_survives_damage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "t.fems"
    script.write_text("vars:\n    x = 1\nmainflow:\n    [START] -> [END]\n", encoding="utf-8")
    monkeypatch.setattr(build_module, "_formatted", {})
    expected = build_module.build_source(script)
    store = build_module._cache_dir(script) / "t.black.json"
    build_module.build_file(script, tmp_path / "a.py")
    assert store.is_file()
    monkeypatch.setattr(build_module, "_formatted", {})  # a new process: memory is empty
    calls = _count_black_calls(monkeypatch)
    build_module.build_file(script, tmp_path / "b.py")
    assert calls == []
    assert (tmp_path / "b.py").read_text(encoding="utf-8") == expected
    store.write_text("{not json", encoding="utf-8")
    monkeypatch.setattr(build_module, "_formatted", {})
    build_module.build_file(script, tmp_path / "c.py")
    assert (tmp_path / "c.py").read_text(encoding="utf-8") == expected
    assert len(calls) == 1  # everything formatted again, in one call
