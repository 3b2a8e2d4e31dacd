"""Generated modules as a user's tools see them (§16.2): mypy --strict, ruff's default rules and
black at the line length of the project they land in, with the runtime installed (not on the
source path) and no ``noqa`` or ``type: ignore`` in them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fems2py.build import build_file
from fems2py.golden import GOLDEN_DIR

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
BIN = Path(sys.executable).parent


def _modules(folder: Path) -> list[Path]:
    """Every golden module and every example built, copied into ``folder`` (a directory of
    the user's own, far from the repository)."""
    modules = []
    for golden in sorted(GOLDEN_DIR.glob("*/expected.py")):
        target = folder / f"golden_{golden.parent.name}.py"
        shutil.copy(golden, target)
        modules.append(target)
    for script in sorted(EXAMPLES.glob("*/*.fems")):
        modules.append(build_file(script, folder / f"{script.stem}.py").output)
    return modules


def _run(folder: Path, *command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=folder, capture_output=True, text=True, check=False)


def test_generated_modules_pass_mypy_strict_with_the_installed_runtime(tmp_path: Path) -> None:
    modules = _modules(tmp_path)
    text = "\n".join(module.read_text(encoding="utf-8") for module in modules)
    assert "type: ignore" not in text and "noqa" not in text
    done = _run(
        tmp_path,
        str(BIN / "mypy"),
        "--strict",
        "--no-incremental",
        "--python-executable",
        sys.executable,
        *[module.name for module in modules],
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_generated_modules_pass_ruff_defaults_and_black(tmp_path: Path) -> None:
    modules = [module.name for module in _modules(tmp_path)]
    ruff = _run(tmp_path, str(BIN / "ruff"), "check", "--isolated", *modules)
    assert ruff.returncode == 0, ruff.stdout + ruff.stderr
    black = _run(tmp_path, str(BIN / "black"), "--check", "--quiet", *modules)
    assert black.returncode == 0, black.stdout + black.stderr


@pytest.mark.parametrize("length", [100, 120])
def test_the_module_takes_the_line_length_of_the_project_it_lands_in(
    tmp_path: Path, length: int
) -> None:
    """The nearest pyproject.toml above the output sets black's line length, so the
    project's own `black --check` leaves the module as it is."""
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    (project / "pyproject.toml").write_text(f"[tool.black]\nline-length = {length}\n", "utf-8")
    script = EXAMPLES / "werewolf" / "werewolf.fems"
    module = build_file(script, project / "src" / "game.py").output.read_text(encoding="utf-8")
    elsewhere = build_file(script, tmp_path / "game.py").output.read_text(encoding="utf-8")
    assert len(module.splitlines()) < len(elsewhere.splitlines())  # fewer wrapped lines
    black = _run(project, str(BIN / "black"), "--check", "--quiet", "src/game.py")
    assert black.returncode == 0, black.stdout + black.stderr


def test_a_module_copied_with_its_code_files_into_another_project_runs(tmp_path: Path) -> None:
    """Vendoring (§5): the module finds a code file at the path it recorded relative to
    itself, else beside itself; so the module plus its code files, copied together anywhere,
    keep working once the script's folder is gone."""
    source = tmp_path / "source"
    shutil.copytree(EXAMPLES / "werewolf", source, ignore=shutil.ignore_patterns("build"))
    built = build_file(source / "werewolf.fems", source / "build" / "werewolf.py").output
    assert '"game": "../game.py"' in built.read_text(encoding="utf-8")
    vendor = tmp_path / "other_project" / "vendor"
    vendor.mkdir(parents=True)
    for file in (built, source / "game.py"):
        shutil.copy(file, vendor / file.name)
    shutil.rmtree(source)
    done = _run(
        tmp_path,
        sys.executable,
        str(vendor / "werewolf.py"),
        *("--model", "fems/mock", "--seed", "1", "--db", ":memory:", "--show", "winner"),
    )
    assert done.returncode == 0, done.stderr
    assert "winner = " in done.stderr
