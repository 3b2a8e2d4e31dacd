"""Size limits of the code (#24): no file over 800 lines, no class over 400, no function over 60.

Measured with :mod:`ast` on every ``.py`` file of the compiler (``fems2py/``) and the runtime
(``runtime/fems_runtime/``): a class or function from its ``class``/``def`` line to its last
line (nested ones are measured too, and count in what holds them). One kind of function is
excepted: an argparse parser builder, a function that itself calls ``ArgumentParser(…)`` or
``….add_parser(…)``, which is one ``add_argument`` after another and reads best whole.

:data:`ALLOWED` lists what is over a limit today while someone takes it apart, each at its
present size: it may shrink, never grow, and an entry no longer over its limit must go (the
lead removes entries as the work is merged).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MEASURED = (ROOT / "fems2py", ROOT / "runtime" / "fems_runtime")
FILE_LINES, CLASS_LINES, FUNCTION_LINES = 800, 400, 60

#: ``"path::Qualified.name"`` (or a path alone for a file) → the size it may keep for now.
ALLOWED: dict[str, int] = {}


@dataclass(frozen=True)
class Size:
    """One measured file, class or function: its key in :data:`ALLOWED`, lines and limit."""

    key: str
    lines: int
    limit: int


def _files() -> list[Path]:
    return sorted(path for root in MEASURED for path in root.rglob("*.py"))


def _builds_a_parser(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether ``function`` itself (not a function inside it) makes an argparse parser."""
    stack: list[ast.AST] = list(function.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        if isinstance(node, ast.Call):
            called = node.func
            name = called.attr if isinstance(called, ast.Attribute) else getattr(called, "id", "")
            if name in ("ArgumentParser", "add_parser"):
                return True
        stack.extend(ast.iter_child_nodes(node))
    return False


Definition = ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef


def _definitions(node: ast.AST, prefix: str = "") -> Iterator[tuple[str, Definition]]:
    """Every class and function under ``node`` with its qualified name, nested ones too."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, Definition):
            name = prefix + child.name
            yield name, child
            yield from _definitions(child, name + ".")
        else:
            yield from _definitions(child, prefix)


def sizes(path: Path, root: Path = ROOT) -> Iterator[Size]:
    """The file's size, and each class's and (not parser-building) function's; keys are
    relative to ``root``."""
    text = path.read_text(encoding="utf-8")
    relative = path.relative_to(root).as_posix()
    yield Size(relative, len(text.splitlines()), FILE_LINES)
    for name, node in _definitions(ast.parse(text)):
        assert node.end_lineno is not None
        lines = node.end_lineno - node.lineno + 1
        if isinstance(node, ast.ClassDef):
            yield Size(f"{relative}::{name}", lines, CLASS_LINES)
        elif not _builds_a_parser(node):
            yield Size(f"{relative}::{name}", lines, FUNCTION_LINES)


def test_no_file_class_or_function_is_over_its_limit() -> None:
    over = [
        f"{size.key}: {size.lines} lines (limit {size.limit}"
        + (f", allowed {ALLOWED[size.key]} for now)" if size.key in ALLOWED else ")")
        for path in _files()
        for size in sizes(path)
        if size.lines > max(size.limit, ALLOWED.get(size.key, 0))
    ]
    assert not over, "split these by what their parts mean:\n" + "\n".join(over)


def test_every_allowance_is_still_needed() -> None:
    """An entry of ALLOWED whose code is gone or back within its limit is removed."""
    measured = {size.key: size for path in _files() for size in sizes(path)}
    stale = [
        key for key in ALLOWED if key not in measured or measured[key].lines <= measured[key].limit
    ]
    assert not stale, "remove from ALLOWED: " + ", ".join(stale)


@pytest.mark.parametrize(
    ("source", "over"),
    [
        ("x = 1\n" * (FILE_LINES + 1), ["m.py"]),
        ("class C:\n" + "    x = 1\n" * CLASS_LINES, ["m.py::C"]),
        ("def f():\n" + "    x = 1\n" * FUNCTION_LINES, ["m.py::f"]),
        ("class C:\n    def f(self):\n" + "        x = 1\n" * FUNCTION_LINES, ["m.py::C.f"]),
        (
            "def f():\n    def g():\n" + "        x = 1\n" * FUNCTION_LINES,
            ["m.py::f", "m.py::f.g"],
        ),
        ("def f():\n    p = ArgumentParser()\n" + "    p.add_argument('-x')\n" * 70, []),
        ("def f(c):\n    p = c.add_parser('x')\n" + "    p.add_argument('-x')\n" * 70, []),
        ("def f():\n" + "    x = 1\n" * (FUNCTION_LINES - 1), []),
    ],
)
def test_what_is_measured(tmp_path: Path, source: str, over: list[str]) -> None:
    """A new oversize file, class, method or nested function is found; a parser builder and
    a function at its limit are not."""
    path = tmp_path / "m.py"
    path.write_text(source, encoding="utf-8")
    found = [size.key for size in sizes(path, tmp_path) if size.lines > size.limit]
    assert found == over
