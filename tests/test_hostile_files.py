"""Files a script names (§1.5, §5) stay inside its folder tree (or ``--root DIR``), and no build
output replaces a file the compiler did not write (§5, §16.1)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fems2py.build import COPIED_HEADER, BuildRefused, build_file
from fems2py.cli import main

TEXT = """
vars:
    rules = file:"{path}"
mainflow:
    [START] -> [END]
"""
CODE = """
code:
    lib = file:"{path}"
vars:
    x = 0
action add @func(lib.add):
    in: a = 1, b = 2
    out: x
mainflow:
    [START] -> add -> [END]
"""
ADD = "def add(a, b):\n    return a + b\n"


def write_script(folder: Path, template: str, path: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "game.fems"
    script.write_text(template.format(path=path).lstrip(), encoding="utf-8")
    return script


def fems2py(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The command in a child process with a time limit, so a read that blocks (a FIFO)
    fails the test instead of hanging it."""
    return subprocess.run(
        [sys.executable, "-m", "fems2py", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("/proc/self/environ", "is outside the script's folder"),
        ("/etc/passwd", "is outside the script's folder"),
        ("../../../../../../etc/passwd", "is outside the script's folder"),
        ("/dev/zero", "is outside the script's folder"),
        ("outside_link.md", "is outside the script's folder"),
        ("missing.md", "does not exist"),
        ("sub", "is a directory"),
        ("fifo", "is not a regular file"),
        ("big.md", "is larger than 1 MiB"),
        ("a\x00b", "is not a valid path"),  # found by bench fuzz: ValueError from resolve()
    ],
)
@pytest.mark.parametrize("template", [TEXT, CODE], ids=["file", "code"])
def test_files_a_script_may_not_read_are_build_errors(
    tmp_path: Path, path: str, reason: str, template: str
) -> None:
    folder = tmp_path / "game"
    script = write_script(folder, template, path)
    (folder / "sub").mkdir()
    os.mkfifo(folder / "fifo")
    (folder / "big.md").write_bytes(b"x" * ((1 << 20) + 1))
    (tmp_path / "outside.md").write_text("secret outside", encoding="utf-8")
    (folder / "outside_link.md").symlink_to(tmp_path / "outside.md")
    for command in ("check", "build"):
        done = fems2py(command, script, cwd=folder)
        assert done.returncode == 1, done.stderr
        assert reason in done.stderr and "Traceback" not in done.stderr
    assert not (folder / "game.py").exists()


def test_a_fifo_outside_is_never_opened(tmp_path: Path) -> None:
    """Opening a FIFO waits for a writer: the command finishing shows it was never opened."""
    os.mkfifo(tmp_path / "pipe")
    script = write_script(tmp_path / "game", TEXT, "../pipe")
    done = fems2py("check", "--root", tmp_path / "game", script, cwd=tmp_path)
    assert done.returncode == 1 and "is outside --root" in done.stderr


def test_root_widens_the_allowed_tree(tmp_path: Path) -> None:
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "rules.md").write_text("Be kind.", encoding="utf-8")
    (tmp_path / "shared" / "lib.py").write_text(ADD, encoding="utf-8")
    for template, path in ((TEXT, "../shared/rules.md"), (CODE, "../shared/lib.py")):
        script = write_script(tmp_path / "game", template, path)
        assert fems2py("check", script, cwd=tmp_path).returncode == 1
        done = fems2py("build", "--root", tmp_path, script, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
    assert "Be kind." in build_file_text(tmp_path / "game", TEXT, "../shared/rules.md", tmp_path)


def build_file_text(folder: Path, template: str, path: str, root: Path) -> str:
    script = write_script(folder, template, path)
    build_file(script, folder / "out.py", root=root)
    return (folder / "out.py").read_text(encoding="utf-8")


def test_a_symlink_inside_the_tree_is_followed(tmp_path: Path) -> None:
    folder = tmp_path / "game"
    folder.mkdir()
    (folder / "texts").mkdir()
    (folder / "texts" / "rules.md").write_text("Inside.", encoding="utf-8")
    (folder / "rules.md").symlink_to(folder / "texts" / "rules.md")
    assert "Inside." in build_file_text(folder, TEXT, "rules.md", folder)


# ------------------------------------------------------------------------------ outputs


def bundled(tmp_path: Path) -> tuple[Path, Path]:
    """A script whose code file is lib/maths.py; the build goes to out/game.py."""
    (tmp_path / "src" / "lib").mkdir(parents=True)
    (tmp_path / "src" / "lib" / "maths.py").write_text(ADD, encoding="utf-8")
    script = write_script(tmp_path / "src", CODE, "lib/maths.py")
    (tmp_path / "out").mkdir()
    return script, tmp_path / "out"


def test_bundle_never_replaces_a_hand_written_file(tmp_path: Path) -> None:
    script, out = bundled(tmp_path)
    (out / "maths.py").write_text("# my own maths\n", encoding="utf-8")
    with pytest.raises(BuildRefused, match="maths.py exists and was not written by fems2py"):
        build_file(script, out / "game.py", bundle=True)
    assert (out / "maths.py").read_text(encoding="utf-8") == "# my own maths\n"
    assert not (out / "game.py").exists()  # refused before anything was written


def test_bundle_replaces_its_own_copies_and_leaves_identical_ones(tmp_path: Path) -> None:
    script, out = bundled(tmp_path)
    build_file(script, out / "game.py", bundle=True)
    copy = (out / "maths.py").read_text(encoding="utf-8")
    assert copy.startswith(COPIED_HEADER) and copy.endswith(ADD)
    changed = ADD.replace("a + b", "b + a")
    (tmp_path / "src" / "lib" / "maths.py").write_text(changed, encoding="utf-8")
    build_file(script, out / "game.py", bundle=True)
    assert (out / "maths.py").read_text(encoding="utf-8").endswith(changed)
    (out / "maths.py").write_text(changed, encoding="utf-8")  # the same code, by hand
    build_file(script, out / "game.py", bundle=True)
    assert (out / "maths.py").read_text(encoding="utf-8") == changed


def test_bundle_never_replaces_a_copy_edited_since(tmp_path: Path) -> None:
    script, out = bundled(tmp_path)
    build_file(script, out / "game.py", bundle=True)
    copy = out / "maths.py"
    edited = copy.read_text(encoding="utf-8").replace("a + b", "a + b + 0")
    copy.write_text(edited, encoding="utf-8")  # a fix made in the vendored copy
    with pytest.raises(BuildRefused, match="maths.py was edited since fems2py copied maths.py"):
        build_file(script, out / "game.py", bundle=True)
    assert copy.read_text(encoding="utf-8") == edited
    first, _, code = edited.partition("\n")  # a copy from before the digest: replaced
    copy.write_text(first.split(" (sha256")[0] + " from maths.py: edit …\n" + code, "utf-8")
    build_file(script, out / "game.py", bundle=True)
    assert copy.read_text(encoding="utf-8").endswith(ADD)


@pytest.mark.parametrize("kind", ["hand-written", "symlink", "fifo"])
def test_the_module_never_replaces_what_fems2py_did_not_write(tmp_path: Path, kind: str) -> None:
    script, out = bundled(tmp_path)
    target = out / "game.py"
    if kind == "hand-written":
        target.write_text("print('mine')\n", encoding="utf-8")
    elif kind == "symlink":
        (out / "generated.py").write_text("# Generated by fems2py, honestly\n")
        target.symlink_to(out / "generated.py")
    else:
        os.mkfifo(target)
    done = fems2py("build", script, "-o", target, cwd=tmp_path)
    assert done.returncode == 1 and "not overwriting it" in done.stderr
    reason = "is a symbolic link" if kind == "symlink" else "was not written by fems2py"
    assert reason in done.stderr
    assert target.is_symlink() == (kind == "symlink")


def test_a_directory_in_the_way_is_refused_without_a_traceback(tmp_path: Path) -> None:
    """-o naming a directory (the module, a chart) or a directory where a bundle's copy goes
    is a build error, not an IsADirectoryError traceback."""
    script, out = bundled(tmp_path)
    for command in (("build", script, "-o", out), ("graph", script, "-o", out / "flow.mmd")):
        (out / "flow.mmd").mkdir(exist_ok=True)
        done = fems2py(*command, cwd=tmp_path)
        assert done.returncode == 1 and "Traceback" not in done.stderr
        assert "is a directory; not writing over it (give -o a file path)" in done.stderr
    (out / "maths.py").mkdir()
    with pytest.raises(BuildRefused, match="maths.py is a directory"):
        build_file(script, out / "game.py", bundle=True)


def test_graph_never_replaces_a_hand_written_chart(tmp_path: Path, capsys) -> None:
    script = write_script(tmp_path, TEXT, "rules.md")
    (tmp_path / "rules.md").write_text("Rules.", encoding="utf-8")
    chart = tmp_path / "flow.mmd"
    chart.write_text("flowchart LR\n    mine\n", encoding="utf-8")
    assert main(["graph", str(script), "-o", str(chart)]) == 1
    assert "not overwriting it" in capsys.readouterr().err
    chart.unlink()
    assert main(["graph", str(script), "-o", str(chart)]) == 0
    assert main(["graph", str(script), "-o", str(chart)]) == 0  # its own chart: replaced
