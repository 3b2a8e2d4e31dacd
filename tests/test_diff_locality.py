"""Diff locality (§16.2): a one-line edit of a script changes a few lines of its module.

A comment line is inserted before every line of every golden case and example in turn; the
module built from each edited script differs from the original's in at most five lines (the
source hash and the line table among them; the inserted comment itself may become a line of a
docstring or of comments above a node). No position may leak into names, ids or arguments.
"""

from __future__ import annotations

import difflib
import shutil
from pathlib import Path

import pytest

from fems2py.build import build_source
from fems2py.diagnostics import CompileError
from fems2py.golden import GOLDEN_DIR

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SCRIPTS = sorted(GOLDEN_DIR.glob("*/input.fems")) + sorted(EXAMPLES.glob("*/*.fems"))
MOST = 5


def changed_lines(before: list[str], after: list[str]) -> int:
    """Lines that differ: per changed hunk, the larger of its removed and added lines."""
    opcodes = difflib.SequenceMatcher(None, before, after, autojunk=False).get_opcodes()
    return sum(max(i2 - i1, j2 - j1) for tag, i1, i2, j1, j2 in opcodes if tag != "equal")


@pytest.mark.parametrize("script", SCRIPTS, ids=[f"{p.parent.name}" for p in SCRIPTS])
def test_a_comment_line_inserted_anywhere_changes_at_most_five_module_lines(
    script: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "case"
    shutil.copytree(script.parent, folder, ignore=shutil.ignore_patterns("build", "*.py"))
    for code_file in script.parent.glob("*.py"):
        if code_file.name != "expected.py":
            shutil.copy(code_file, folder / code_file.name)
    target, output = folder / script.name, folder / "module.py"
    lines = target.read_text(encoding="utf-8").split("\n")
    original = build_source(target, output).splitlines()
    worst: list[tuple[int, int]] = []
    for index, line in enumerate(lines):
        indent = line[: len(line) - len(line.lstrip())] if line.strip() else ""
        edited = [*lines[:index], f"{indent}# an inserted comment", *lines[index:]]
        target.write_text("\n".join(edited), encoding="utf-8")
        try:
            module = build_source(target, output).splitlines()
        except CompileError:
            continue  # a comment where the script's grammar takes none (inside a | block…)
        count = changed_lines(original, module)
        assert count > 0  # the source hash at least
        if count > MOST:
            worst.append((index + 1, count))
    assert worst == [], f"inserting before these lines changed more than {MOST}: {worst}"
