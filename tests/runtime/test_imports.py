"""Large packages are imported with the collector paused and the heap frozen afterwards
(fems_runtime.imports), hiding the optional packages they can do without."""

from __future__ import annotations

import gc
import subprocess
import sys
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest
from fems_helpers import build_script, python_output
from fems_runtime.imports import import_large, large_imports

from .fake_openai import fake_openai


@pytest.fixture
def packages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder on sys.path; the modules written into it are forgotten after the test."""
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        del sys.modules[name]


def test_an_optional_package_is_hidden_during_the_import_only(packages: Path) -> None:
    (packages / "fems_optional_extra.py").write_text("VALUE = 1\n")
    (packages / "fems_large_pkg.py").write_text(
        "try:\n"
        "    import fems_optional_extra\n"
        "    HAD_EXTRA = True\n"
        "except ImportError:\n"
        "    HAD_EXTRA = False\n"
        "import gc\n"
        "COLLECTING = gc.isenabled()\n"
    )
    module = import_large("fems_large_pkg", hide=("fems_optional_extra",))
    assert module.HAD_EXTRA is False
    assert module.COLLECTING is False  # paused while the package loads
    assert gc.isenabled()
    assert gc.get_freeze_count() > 0
    assert "fems_optional_extra" not in sys.modules
    import fems_optional_extra  # importable again once the large package is in

    assert fems_optional_extra.VALUE == 1
    assert import_large("fems_large_pkg") is module


def test_a_failed_import_leaves_the_collector_on_and_nothing_hidden(packages: Path) -> None:
    (packages / "fems_broken_pkg.py").write_text("raise RuntimeError('broken')\n")
    with pytest.raises(RuntimeError, match="broken"):
        import_large("fems_broken_pkg", hide=("fems_other_extra",))
    assert gc.isenabled()
    assert "fems_other_extra" not in sys.modules


def _write_reexporting_package(root: Path) -> None:
    """fems_lazy_pkg: an __init__ that re-exports its modules' names (as openai.types does)
    and counts how often it ran, a module of its own and a subpackage of the same kind."""
    package = root / "fems_lazy_pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text(
        "import builtins\n"
        "builtins.fems_lazy_inits = getattr(builtins, 'fems_lazy_inits', 0) + 1\n"
        "from .leaf import Leaf as Leaf\n"
        "from .other import OTHER as OTHER\n"
        "from . import sub as sub\n"
    )
    (package / "leaf.py").write_text("class Leaf:\n    pass\n")
    (package / "other.py").write_text("OTHER = 'other'\n")
    (package / "sub" / "__init__.py").write_text("from .deep import DEEP as DEEP\n")
    (package / "sub" / "deep.py").write_text("DEEP = 'deep'\n")
    (root / "fems_lazy_user.py").write_text("from fems_lazy_pkg.leaf import Leaf\n")


def test_a_deferred_package_loads_only_the_modules_imported_directly(packages: Path) -> None:
    import builtins

    _write_reexporting_package(packages)
    builtins.fems_lazy_inits = 0  # type: ignore[attr-defined]
    import_large("fems_lazy_user", defer=("fems_lazy_pkg",))
    assert "fems_lazy_pkg.leaf" in sys.modules
    assert "fems_lazy_pkg.other" not in sys.modules
    assert "fems_lazy_pkg.sub" not in sys.modules
    assert builtins.fems_lazy_inits == 0  # type: ignore[attr-defined]

    import fems_lazy_pkg
    from fems_lazy_pkg import OTHER  # the first name it lacks runs its __init__, once

    assert OTHER == "other"
    assert fems_lazy_pkg.Leaf is sys.modules["fems_lazy_pkg.leaf"].Leaf
    assert fems_lazy_pkg.sub.DEEP == "deep"  # a package imported after the block: as usual
    assert builtins.fems_lazy_inits == 1  # type: ignore[attr-defined]
    with pytest.raises(AttributeError):
        fems_lazy_pkg.missing  # noqa: B018
    assert "__getattr__" not in vars(fems_lazy_pkg)


def test_threads_asking_a_deferred_package_wait_for_its_init(packages: Path) -> None:
    import threading

    _write_reexporting_package(packages)
    (packages / "fems_lazy_pkg" / "other.py").write_text(
        "import time\ntime.sleep(0.2)\nOTHER = 'other'\n"  # a slow body: the threads overlap it
    )
    import_large("fems_lazy_user", defer=("fems_lazy_pkg",))
    import fems_lazy_pkg

    seen: list[object] = []
    threads = [
        threading.Thread(target=lambda: seen.append(getattr(fems_lazy_pkg, "OTHER", None)))
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert seen == ["other"] * 4


def test_the_sdks_type_packages_only_reexport() -> None:
    """What deferring `openai.types` relies on (fems_runtime.endpoints.import_openai): each
    ``__init__`` under it only imports, so running it later changes nothing but when. An SDK
    release that puts other work there fails here."""
    import ast
    import importlib.util

    spec = importlib.util.find_spec("openai")
    assert spec is not None and spec.submodule_search_locations
    inits = sorted((Path(spec.submodule_search_locations[0]) / "types").rglob("__init__.py"))
    assert inits
    for init in inits:
        body = ast.parse(init.read_text(encoding="utf-8")).body
        other = [
            f"{init}:{node.lineno}"
            for node in body
            if not isinstance(node, ast.Import | ast.ImportFrom)
            and not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))
        ]
        assert other == []


def test_the_sdk_loads_few_of_its_types_yet_all_are_reachable() -> None:
    code = (
        "import sys\n"
        "from fems_runtime.endpoints import import_openai\n"
        "openai = import_openai()\n"
        "loaded = sum(name.startswith('openai.types') for name in sys.modules)\n"
        "from openai.types.chat import ChatCompletion\n"
        "print(loaded, ChatCompletion.__name__, openai.types.ChatModel is not None,\n"
        "      sum(name.startswith('openai.types') for name in sys.modules) > loaded)\n"
    )
    loaded, name, re_exported, more = python_output(code).split()
    assert int(loaded) < 200  # of ~470
    assert (name, re_exported, more) == ("ChatCompletion", "True", "True")


def test_a_block_that_loads_nothing_freezes_nothing(packages: Path) -> None:
    """The same large import again (a later run's) leaves the garbage of the moment to the
    collector: a freeze would keep it until the process ends."""
    (packages / "fems_loaded_pkg.py").write_text("VALUE = 1\n")
    import_large("fems_loaded_pkg")
    garbage = _Node()
    garbage.me = garbage
    left = weakref.ref(garbage)
    del garbage
    with large_imports():
        import fems_loaded_pkg  # noqa: F401  # loaded already: nothing new
    gc.collect()
    assert left() is None


class _Node:
    me: _Node | None = None


RUNS_SCRIPT = """
meta:
  name = again
  session = new
actors:
  ai @eve = soul:eve, source:chatty
action ask @ai(@eve):
  prompt: "Say something."
mainflow:
  [START] -> ask -> [END]
"""


def test_a_process_that_runs_many_sessions_keeps_nothing_of_earlier_ones(tmp_path: Path) -> None:
    """A batch worker runs session after session in one process: each run's first model client
    loads nothing new, so nothing of the runs before it is frozen, and the frozen heap stays
    what the first run's imports made."""
    module = build_script(tmp_path, RUNS_SCRIPT)
    program = (
        "import gc, importlib.util, weakref\n"
        f"spec = importlib.util.spec_from_file_location('again', {str(module)!r})\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(module)\n"
        "def run():\n"
        "    assert module.run(db=':memory:', transcript=False).status == 'completed'\n"
        "run()\n"
        "frozen = gc.get_freeze_count()\n"
        "class Node: pass\n"
        "garbage = Node(); garbage.me = garbage; left = weakref.ref(garbage); del garbage\n"
        "run(); run()\n"
        "gc.collect()\n"
        "print(gc.get_freeze_count() == frozen, left() is None)\n"
    )
    with fake_openai() as server:
        (tmp_path / "fems.toml").write_text(
            '[models]\nchatty = { model = "openai/fake", api_key = "sk-test", '
            f'api_base = "{server.api_base}" }}\n',
            encoding="utf-8",
        )
        completed = subprocess.run(
            [sys.executable, "-c", program], capture_output=True, text=True, cwd=tmp_path
        )
        requests = len(server.requests)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.split() == ["True", "True"]
    assert requests == 3
