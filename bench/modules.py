"""Building and loading the generated modules the benchmarks run."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from fems2py.build import build_source


def load_module(folder: Path, name: str, source: str) -> ModuleType:
    """Write ``source`` as ``folder/name.fems``, build it and import the module."""
    return import_path(build_module(folder, name, source), f"bench_{name}")


def build_module(folder: Path, name: str, source: str) -> Path:
    """Write ``source`` as ``folder/name.fems`` and build it to ``folder/name.py``."""
    script = folder / f"{name}.fems"
    script.write_text(source, encoding="utf-8")
    module_path = folder / f"{name}.py"
    module_path.write_text(build_source(script), encoding="utf-8")
    return module_path


def import_path(module_path: Path, name: str) -> ModuleType:
    """Import the module at ``module_path`` under ``name`` (it is not on ``sys.path``)."""
    spec = importlib.util.spec_from_file_location(name, module_path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
