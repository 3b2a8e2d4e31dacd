"""The README's commands, run as written: the tour in a copy of docs/tour (with examples/audit
as audit/), and `make demo`.

Each ```sh block of the tour is run line by line in a shell with the venv's bin on PATH; when a
```text block follows a command, the command's output must be exactly that text. A block that
says "needs a key" (a real model) is only checked for the model string it names.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
BLOCK = re.compile(r"```(\w+)\n(.*?)```", re.DOTALL)


def _tour_steps() -> list[tuple[str, str | None]]:
    """(command block, expected output or None) pairs of the tour section."""
    tour = README.split("## A five-minute tour", 1)[1].split("\n## ", 1)[0]
    blocks = [(m.group(1), m.group(2)) for m in BLOCK.finditer(tour)]
    steps = []
    for index, (language, body) in enumerate(blocks):
        if language != "sh":
            continue
        following = blocks[index + 1] if index + 1 < len(blocks) else None
        expected = following[1] if following and following[0] == "text" else None
        steps.append((body, expected))
    return steps


def _environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FEMS_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    env["COLUMNS"] = "80"
    return env


def test_the_tour_script_in_the_readme_is_the_shipped_file():
    shown = re.search(r"```fems\n(.*?)```", README, re.DOTALL)
    assert shown is not None
    shipped = (ROOT / "docs" / "tour" / "dinner.fems").read_text(encoding="utf-8")
    assert shipped.split("\n", 1)[1] == shown.group(1)  # the file adds one comment line


def test_the_tour_runs_as_written(tmp_path):
    workdir = tmp_path / "tour"
    shutil.copytree(ROOT / "docs" / "tour", workdir)
    shutil.copytree(ROOT / "examples" / "audit", workdir / "audit")  # step 6: tools
    steps = _tour_steps()
    assert len(steps) >= 4
    ran = 0
    for commands, expected in steps:
        if "needs a key" in commands:
            assert "--model openai/" in commands
            continue
        for command in filter(None, (line.strip() for line in commands.splitlines())):
            done = subprocess.run(
                command,
                shell=True,
                cwd=workdir,
                env=_environment(),
                capture_output=True,
                text=True,
                timeout=120,
            )
            output = done.stdout + done.stderr
            if expected is not None:
                assert output == expected, command
                assert done.returncode == (1 if "error:" in expected else 0), command
            else:
                assert done.returncode == 0, f"{command}: {output}"
            ran += 1
    assert ran >= 3
    module = (workdir / "dinner.py").read_text(encoding="utf-8").splitlines()
    for excerpt in _tour_excerpts():
        for line in excerpt.splitlines():
            assert line == "..." or line in module, f"the tour's excerpt says {line!r}"


def _tour_excerpts() -> list[str]:
    """The ```python blocks of the tour: what `fems2py build dinner.fems` writes."""
    tour = README.split("## A five-minute tour", 1)[1].split("\n## ", 1)[0]
    return [body for kind, body in BLOCK.findall(tour) if kind == "python"]


@pytest.mark.parametrize("target", ["install", "test", "lint", "golden", "bench", "demo"])
def test_the_makefile_has_the_targets_the_readme_names(target):
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert re.search(rf"^{target}:", makefile, re.MULTILINE)
    assert f"make {target}" in README


def test_make_demo_plays_a_whole_game_offline():
    done = subprocess.run(["make", "demo"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "werewolf.fems: completed" in done.stdout
    assert re.search(r"^winner = (village|werewolves)$", done.stdout, re.MULTILINE)
    assert "@Moderator ▸" in done.stdout
