"""The Chinese getting-started page's commands, run as written in a copy of its tour folder
(docs/zh/guide/tour, with examples/audit as audit/), as tests/test_readme.py does for the
README: after a ```sh command, a ```text block is its exact output."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "zh" / "guide"
PAGE = (GUIDE / "getting-started.md").read_text(encoding="utf-8")
BLOCK = re.compile(r"```(\w+)\n(.*?)```", re.DOTALL)


def _tour() -> str:
    """The steps of the tour: from step 1 to the "next steps" list, whose commands run
    elsewhere (from the repository's root)."""
    return PAGE.split("## 1. ", 1)[1].split("\n## 下一步", 1)[0]


def _steps() -> list[tuple[str, str | None]]:
    """(command block, expected output or None) pairs of the tour."""
    blocks = [(m.group(1), m.group(2)) for m in BLOCK.finditer(_tour())]
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


def test_the_script_on_the_page_is_the_shipped_file():
    shown = re.search(r"```fems\n(.*?)```", _tour(), re.DOTALL)
    assert shown is not None
    shipped = (GUIDE / "tour" / "dinner.fems").read_text(encoding="utf-8")
    assert shipped.split("\n", 1)[1] == shown.group(1)  # the file adds one comment line


def test_the_typo_script_differs_from_the_tour_script_only_by_its_two_typos():
    tour = (GUIDE / "tour" / "dinner.fems").read_text(encoding="utf-8").splitlines()
    typo = (GUIDE / "tour" / "typo.fems").read_text(encoding="utf-8").splitlines()
    changed = [n for n, (a, b) in enumerate(zip(tour, typo, strict=True), 1) if a != b]
    assert changed == [1, 17, 28]  # the comment line and the two lines the page shows


def test_the_chinese_tour_runs_as_written(tmp_path):
    workdir = tmp_path / "tour"
    shutil.copytree(GUIDE / "tour", workdir)
    shutil.copytree(ROOT / "examples" / "audit", workdir / "audit")  # step 6: tools
    steps = _steps()
    assert len(steps) >= 5
    ran = 0
    for commands, expected in steps:
        if "needs a key" in commands:
            assert "--model deepseek/" in commands
            continue
        for command in filter(None, (line.strip() for line in commands.splitlines())):
            done = subprocess.run(
                command,
                shell=True,
                cwd=workdir,
                env=_environment(),
                capture_output=True,
                text=True,
                encoding="utf-8",
                timeout=120,
            )
            output = done.stdout + done.stderr
            if expected is not None:
                assert output == expected, command
                assert done.returncode == (1 if "error:" in expected else 0), command
            else:
                assert done.returncode == 0, f"{command}: {output}"
            ran += 1
    assert ran >= 5
