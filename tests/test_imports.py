"""No import circles in the compiler or the runtime (type-only imports included): each module
can be read knowing only the modules below it, and none of them half-initialised."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"fems2py": ROOT / "fems2py", "fems_runtime": ROOT / "runtime" / "fems_runtime"}


def module_name(package: str, path: Path, base: Path) -> str:
    parts = [package, *path.relative_to(base).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package: str) -> dict[str, set[str]]:
    """Each module of ``package`` and the modules of the package it imports anywhere."""
    base = PACKAGES[package]
    files = {module_name(package, path, base): path for path in base.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                imported = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            elif isinstance(node, ast.Import):
                imported = [alias.name for alias in node.names]
            else:
                continue
            targets |= {module for module in imported if module in files}
        graph[name] = targets - {name}
    return graph


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` (a package's ``__init__`` importing its own modules is
    no circle: they do not import the package back), or None."""
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = "open"
        path.append(module)
        for target in sorted(graph[module]):
            if module.startswith(target + "."):
                continue  # a module's own package: the import system handles that order
            if state.get(target) == "open":
                return [*path[path.index(target) :], target]
            if target not in state:
                found = visit(target)
                if found:
                    return found
        path.pop()
        state[module] = "done"
        return None

    for module in sorted(graph):
        if module not in state:
            found = visit(module)
            if found:
                return found
    return None


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_no_import_circles(package: str) -> None:
    found = cycle(import_graph(package))
    assert found is None, " -> ".join(found or ())


def test_a_circle_is_found() -> None:
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) is None


def test_the_runtime_never_imports_the_compiler() -> None:
    """The runtime sits below the compiler: generated modules and vendored copies run without
    fems2py (the stage reaches it through an entry point, fems_runtime.stage.chart)."""
    importing = []
    for path in sorted(PACKAGES["fems_runtime"].rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module is not None:
                names = [node.module]
            else:
                continue
            if any(name.split(".")[0] == "fems2py" for name in names):
                importing.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert importing == []


def _loaded_after(program: str) -> set[str]:
    """The modules a fresh process has loaded after running ``program``."""
    completed = subprocess.run(
        [sys.executable, "-c", f"import sys\n{program}\nprint(' '.join(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    )
    return set(completed.stdout.split())


def test_a_build_loads_neither_parso_nor_the_engine() -> None:
    """Building werewolf (its expressions are the common forms the stdlib parses) imports
    neither parso nor the runtime's engine: both were a good part of a cold build (#13)."""
    script = ROOT / "examples" / "werewolf" / "werewolf.fems"
    loaded = _loaded_after(f"from fems2py.build import build_source\nbuild_source({str(script)!r})")
    assert "fems2py.codegen" in loaded and "fems_runtime.paths" in loaded
    assert not loaded & {"parso", "asyncio", "fems_runtime.app", "fems_runtime.flow"}


def test_the_runtime_exports_load_on_first_use_whatever_was_imported_before() -> None:
    program = (
        "import fems_runtime.linetable, fems_runtime.paths\n"
        "import fems_runtime as fr\n"
        "from fems_runtime import flow\n"
        "assert fr.lines is flow.lines and fr.Program.__module__ == 'fems_runtime.app'\n"
        "from fems_runtime import *\n"
        "assert ScriptInfo is fr.ScriptInfo and __version__ == fr.__version__\n"
        "try:\n"
        "    fr.no_such_name\n"
        "except AttributeError as error:\n"
        "    assert 'no_such_name' in str(error)\n"
        "else:\n"
        "    raise SystemExit('no AttributeError')\n"
    )
    assert "fems_runtime.app" in _loaded_after(program)
    assert "fems_runtime.app" not in _loaded_after("import fems_runtime, fems_runtime.paths")


@pytest.mark.parametrize("own_process", [True, False])
def test_the_command_freezes_what_loading_the_compiler_made(own_process: bool) -> None:
    """The fems2py command, in its own process, keeps the collector off the modules it loads;
    a program calling the command line keeps its collector as it was."""
    program = (
        "import gc\n"
        "from fems2py.collector import loading_modules\n"
        f"with loading_modules(own_process={own_process}):\n"
        "    import fems2py.build\n"
        "print(gc.isenabled(), gc.get_freeze_count() > 10_000)\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True
    )
    assert completed.stdout.split() == ["True", str(own_process)]
