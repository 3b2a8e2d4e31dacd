"""The built-ins of the coding hosts (§15.5): read with a line range, glob, grep and edit —
confined to the root (``../``, absolute paths, links out), with bounded results (a cut says
so), called the way a model calls them (JSON arguments, errors as results)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest
from fems_runtime import builtin_tools
from fems_runtime.builtin_tools import GREP_MATCH_LIMIT, LIST_LIMIT, READ_LIMIT
from fems_runtime.offline import MockModel, OfflineTurn, safe_tool_names
from fems_runtime.tools import Toolbox, ToolCall


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project with a few text files, a subfolder, and a secret folder outside it."""
    root = tmp_path / "project"
    (root / "src").mkdir(parents=True)
    (root / "story.txt").write_text("one\ntwo\nthree\nfour\n", encoding="utf-8")
    (root / "src" / "game.py").write_text("WOLF = 1\nwolves = [WOLF]\n", encoding="utf-8")
    (root / "src" / "notes.md").write_text("# Wolves\nthe wolf hides\n", encoding="utf-8")
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "keys.txt").write_text("wolf password\n", encoding="utf-8")
    return root


def call(root: Path, name: str, **arguments: Any) -> str:
    box = Toolbox(root, None)

    async def offer_and_call() -> str:
        tools = await box.tools([name])
        return (await box.call(tools, ToolCall("c1", name, json.dumps(arguments)))).result

    return asyncio.run(offer_and_call())


# ---------------------------------------------------------------------- read


def test_read_returns_a_line_range(project: Path) -> None:
    assert call(project, "read", path="story.txt", start_line=2, end_line=3) == "two\nthree\n"
    assert call(project, "read", path="story.txt", start_line=4) == "four\n"
    assert call(project, "read", path="story.txt", end_line=1) == "one\n"
    assert call(project, "read", path="story.txt", start_line=9) == (
        "'story.txt' has 4 lines; there is no line 9"
    )
    assert "may not come before" in call(
        project, "read", path="story.txt", start_line=3, end_line=2
    )


def test_a_line_range_is_cut_at_the_size_cap(project: Path) -> None:
    line = "x" * 999 + "\n"
    (project / "long.txt").write_text(line * 100, encoding="utf-8")
    result = call(project, "read", path="long.txt", start_line=11)
    body, note = result.rsplit("\n", 1)
    assert body == (line * (READ_LIMIT // 1000)).rstrip("\n")
    assert note == f"[cut: lines 11-60 of 'long.txt' shown; at most {READ_LIMIT} bytes]"


# ---------------------------------------------------------------------- glob


def test_glob_lists_matching_paths_inside_the_root(project: Path) -> None:
    assert call(project, "glob", pattern="**/*.md") == "src/notes.md"
    assert call(project, "glob", pattern="*") == "src/\nstory.txt"
    assert call(project, "glob", pattern="*.py", path="src") == "src/game.py"
    assert call(project, "glob", pattern="*.rs") == "no path matches '*.rs'"


def test_glob_never_leaves_the_root(project: Path) -> None:
    os.symlink(project.parent / "secret", project / "up")
    os.symlink(project.parent / "secret" / "keys.txt", project / "keys.txt")
    for pattern in ("up/*", "**/*.txt", "*"):
        assert "keys" not in call(project, "glob", pattern=pattern)
    assert call(project, "glob", pattern="**/*.txt") == "story.txt"
    for pattern in ("../*", "../secret/*", str(project.parent / "secret" / "*")):
        assert "may not contain '..'" in call(project, "glob", pattern=pattern)
    assert "outside the project folder" in call(project, "glob", pattern="*", path="..")


def test_glob_is_cut_past_its_cap(project: Path) -> None:
    many = project / "many"
    many.mkdir()
    for number in range(LIST_LIMIT + 5):
        (many / f"f{number:04}.txt").write_text("", encoding="utf-8")
    lines = call(project, "glob", pattern="many/*.txt").splitlines()
    assert len(lines) == LIST_LIMIT + 1 and lines[0] == "many/f0000.txt"
    assert lines[-1] == f"[cut: {LIST_LIMIT + 5} paths match; the first {LIST_LIMIT} are shown]"


# ---------------------------------------------------------------------- grep


def test_grep_finds_lines_with_file_and_line(project: Path) -> None:
    assert call(project, "grep", pattern="wol(f|ves)") == (
        "src/game.py:2: wolves = [WOLF]\nsrc/notes.md:2: the wolf hides"
    )
    assert call(project, "grep", pattern="WOL", ignore_case=True, glob="**/*.md") == (
        "src/notes.md:1: # Wolves\nsrc/notes.md:2: the wolf hides"
    )
    assert call(project, "grep", pattern="^t", path="story.txt") == (
        "story.txt:2: two\nstory.txt:3: three"
    )
    assert call(project, "grep", pattern="dragon") == "no line matches 'dragon'"
    assert "invalid regular expression" in call(project, "grep", pattern="(unclosed")


def test_grep_never_reads_outside_the_root(project: Path) -> None:
    os.symlink(project.parent / "secret", project / "up")
    os.symlink(project.parent / "secret" / "keys.txt", project / "leak.txt")
    assert call(project, "grep", pattern="pass") == "no line matches 'pass'"
    assert call(project, "grep", pattern="pass", glob="up/*") == "no line matches 'pass'"
    for path in ("../secret/keys.txt", str(project.parent / "secret"), "leak.txt", "up"):
        result = call(project, "grep", pattern="pass", path=path)
        assert "outside the project folder" in result and "wolf password" not in result
    assert "may not contain '..'" in call(project, "grep", pattern="x", glob="../**/*")


def test_grep_over_a_huge_file_is_bounded(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    huge = project / "huge.log"
    with huge.open("w", encoding="utf-8") as out:
        for number in range(200_000):  # ~5 MB, every line a match
            out.write(f"line {number} of the wolf log\n")
        out.write("wolf " + "y" * 2_000_000 + "\n")  # one very long line
    lines = call(project, "grep", pattern="wolf", path="huge.log").splitlines()
    assert len(lines) == GREP_MATCH_LIMIT + 1
    assert lines[0] == "huge.log:1: line 0 of the wolf log"
    assert lines[-1] == f"[cut: the first {GREP_MATCH_LIMIT} matches are shown; there are more]"
    # a search with few matches stops reading at the byte cap, and says so
    monkeypatch.setattr(builtin_tools, "GREP_READ_LIMIT", 1_000_000)
    last = call(project, "grep", pattern="y{10}", path="huge.log")
    assert last == "[cut: stopped after reading 1000000 bytes; narrow path or glob]"
    monkeypatch.undo()
    long_line = call(project, "grep", pattern="y{10}", path="huge.log")
    assert long_line.startswith("huge.log:200001: wolf yyy")
    assert long_line.endswith(" [cut: the line has 1000000 characters]")  # read in 1 MB parts


def test_grep_skips_binary_files(project: Path) -> None:
    (project / "image.png").write_bytes(b"\x89PNG\x00wolf\x00")
    assert "image.png" not in call(project, "grep", pattern="wolf")


# ---------------------------------------------------------------------- edit


def test_edit_replaces_an_exact_text_once(project: Path) -> None:
    result = call(project, "edit", path="src/game.py", old_text="wolves = [WOLF]", new_text="x = 2")
    assert result == "edited src/game.py at line 2"
    assert (project / "src" / "game.py").read_text(encoding="utf-8") == "WOLF = 1\nx = 2\n"
    twice = call(project, "edit", path="story.txt", old_text="o", new_text="0")
    assert "occurs 3 times" in twice and "include more of the text" in twice
    assert "does not occur" in call(project, "edit", path="story.txt", old_text="six", new_text="6")
    assert (project / "story.txt").read_text(encoding="utf-8") == "one\ntwo\nthree\nfour\n"


def test_edit_never_leaves_the_root(project: Path) -> None:
    secret = project.parent / "secret" / "keys.txt"
    os.symlink(secret, project / "leak.txt")
    for path in ("../secret/keys.txt", str(secret), "leak.txt"):
        result = call(project, "edit", path=path, old_text="wolf", new_text="sheep")
        assert "outside the project folder" in result
    assert secret.read_text(encoding="utf-8") == "wolf password\n"


def test_the_mock_never_writes_or_edits(project: Path) -> None:
    tools = asyncio.run(Toolbox(project, None).tools(["read", "write", "edit", "grep"]))
    offered = tuple(tool.schema()["function"] for tool in tools)
    turn = OfflineTurn(action="fix", actor="@dev", tools=offered, safe_tools=safe_tool_names(tools))
    calls = MockModel(seed=1).tool_calls(turn)
    assert [c.name for c in calls] == ["read", "grep"]
