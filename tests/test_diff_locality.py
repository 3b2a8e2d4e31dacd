"""Diff locality (§16.2): a one-line edit of a script changes a few lines of its module.

Every golden case and example is edited one line at a time, in every way a reviewer's pull
request does, and rebuilt (in this process: unchanged parts keep black's formatting from the
first build, so each rebuild formats one part at most):

- a comment line inserted before every line; a blank line wherever it means something a
  comment line would not (inside a ``|`` block, below a comment: elsewhere both are skipped
  alike);
- a prompt line inserted before every line of each ``|`` text block, and after its last;
- a new variable inserted at every place of each ``vars:`` block;
- every blank line, comment line, line of a ``|`` block and variable deleted in turn.

The rule (issue #12, item 1, whose list of lines this is): the rebuilt module differs from
the original in at most :data:`MOST` lines, the source hash and the line table among them.
Lines are counted per changed hunk as the larger of its removed and added lines. A deleted
variable may in addition take its own entry's lines with it (an inserted one is one line).
So no position may leak into names, ids, arguments or order (a shifted line, a renumbered
``deal_2`` or a list sorted by line would change lines outside the edit), and no one-line
change may reflow its neighbours (a two-line prompt cut to one stays a call of
``fr.lines``; a dict that grows by one entry does not burst from one line into many).
Deleting a line of a flow or an action's header is not among these edits: it changes the
flow's structure, which the module shows.
"""

from __future__ import annotations

import difflib
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fems2py.build import build_source
from fems2py.diagnostics import CompileError
from fems2py.golden import GOLDEN_DIR

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SCRIPTS = sorted(GOLDEN_DIR.glob("*/input.fems")) + sorted(EXAMPLES.glob("*/*.fems"))
MOST = 5
TEXT_BLOCK = re.compile(r":\s*\|\s*$")  # `prompt: |` and every other field holding a text block


@dataclass(frozen=True)
class Edit:
    """One edited version of a script: what was done where, and the lines after it."""

    kind: str
    line: int  # the 1-based line of the original the edit is at (inserted before it, deleted)
    lines: list[str]


def indent_of(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def text_blocks(lines: list[str]) -> Iterator[tuple[int, int, str]]:
    """(first line index, end index, indent) of each ``|`` block's text lines."""
    for index, line in enumerate(lines):
        if not TEXT_BLOCK.search(line.split("//")[0]):
            continue
        opener = len(indent_of(line))
        end = index + 1
        while end < len(lines) and (not lines[end].strip() or len(indent_of(lines[end])) > opener):
            end += 1
        while end > index + 1 and not lines[end - 1].strip():
            end -= 1  # blank lines after the block belong to what follows
        if end > index + 1:
            yield index + 1, end, indent_of(lines[index + 1])


def vars_blocks(lines: list[str]) -> Iterator[tuple[int, int, str]]:
    """(first entry index, end index, indent) of each ``vars:`` block."""
    for index, line in enumerate(lines):
        if line.strip() != "vars:":
            continue
        opener = len(indent_of(line))
        end = index + 1
        while end < len(lines) and lines[end].strip() and len(indent_of(lines[end])) > opener:
            end += 1
        if end > index + 1:
            yield index + 1, end, indent_of(lines[index + 1])


def edits(lines: list[str]) -> Iterator[Edit]:
    """Every one-line edit of the script the test makes."""
    comments = {i for i, line in enumerate(lines) if line.lstrip().startswith(("#", "//"))}
    deletable = comments | {i for i, line in enumerate(lines) if not line.strip()}
    blank_matters = {i + 1 for i in comments}  # a blank line detaches a comment from below it
    for start, end, indent in text_blocks(lines):
        deletable.update(range(start, end))
        blank_matters.update(range(start, end + 1))  # a blank line of the text
        for index in range(start, end + 1):
            prompt_line = f"{indent}An inserted prompt line."
            yield Edit("prompt line", index + 1, [*lines[:index], prompt_line, *lines[index:]])
    variables = set()
    for start, end, indent in vars_blocks(lines):
        variables.update(range(start, end))
        for index in range(start, end + 1):
            variable = f"{indent}an_inserted_variable = 0"
            yield Edit("variable", index + 1, [*lines[:index], variable, *lines[index:]])
    for index, line in enumerate(lines):
        comment = f"{indent_of(line) if line.strip() else ''}# an inserted comment"
        yield Edit("comment", index + 1, [*lines[:index], comment, *lines[index:]])
        if index in blank_matters:
            yield Edit("blank", index + 1, [*lines[:index], "", *lines[index:]])
        if index in deletable or index in variables:
            kind = "delete variable" if index in variables else "delete"
            yield Edit(kind, index + 1, [*lines[:index], *lines[index + 1 :]])


def changed_lines(before: list[str], after: list[str]) -> int:
    """Lines that differ: per changed hunk, the larger of its removed and added lines."""
    opcodes = difflib.SequenceMatcher(None, before, after, autojunk=False).get_opcodes()
    return sum(max(i2 - i1, j2 - j1) for tag, i1, i2, j1, j2 in opcodes if tag != "equal")


def entry_lines(module: list[str], line: str) -> int:
    """How many lines the entry of the deleted variable ``line`` (``name = value``) takes in
    ``module``'s ``VARIABLES`` (0 when it shares a line with others, as in a module's
    ``variables={…}``)."""
    key = f'"{line.split("=")[0].strip()}": '
    for index, text in enumerate(module):
        if text.startswith(f"    {key}"):
            end = index + 1
            while end < len(module) and module[end].startswith("     "):
                end += 1
            return end - index
    return 0


def copy_case(script: Path, folder: Path) -> Path:
    """The script's folder copied to ``folder`` (the code and text files it names included)."""
    shutil.copytree(script.parent, folder, ignore=shutil.ignore_patterns("build", "*.py"))
    for code_file in script.parent.glob("*.py"):
        if code_file.name != "expected.py":
            shutil.copy(code_file, folder / code_file.name)
    return folder / script.name


@pytest.mark.parametrize("script", SCRIPTS, ids=[f"{p.parent.name}" for p in SCRIPTS])
def test_a_one_line_edit_anywhere_changes_at_most_five_module_lines(
    script: Path, tmp_path: Path
) -> None:
    target = copy_case(script, tmp_path / "case")
    output = target.parent / "module.py"
    lines = target.read_text(encoding="utf-8").split("\n")
    original = build_source(target, output).splitlines()
    tried: set[str] = set()
    built: set[str] = set()
    worst: list[tuple[str, int, int]] = []
    for edit in edits(lines):
        tried.add(edit.kind)
        target.write_text("\n".join(edit.lines), encoding="utf-8")
        try:
            module = build_source(target, output).splitlines()
        except CompileError:
            continue  # a deletion that breaks the script; a comment where none may go (`|`)
        built.add(edit.kind)
        count = changed_lines(original, module)
        allowed = MOST
        if edit.kind == "delete variable":
            allowed += entry_lines(original, lines[edit.line - 1])
        assert count > 0  # the source hash at least
        if count > allowed:
            worst.append((edit.kind, edit.line, count))
    assert worst == [], f"these edits (kind, line, module lines changed) changed too much: {worst}"
    # each kind of edit was checked at least once (a script may use all its variables)
    assert tried - built <= {"delete variable"}
