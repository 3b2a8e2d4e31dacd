"""Where fems2py keeps what it can compute again: builds for ``fems2py run``, black's output per
part, and its own tables (the compiled templates, the Python grammar), which every process
would otherwise rebuild before its first build. Losing any of it only makes builds slower."""

from __future__ import annotations

import contextlib
import copyreg
import io
import os
import pickle
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

_Value = TypeVar("_Value")


def cache_root() -> Path:
    """The user's cache directory for fems2py (``$XDG_CACHE_HOME/fems2py``, else the
    platform's usual place): a build writes nothing beside the script but its outputs."""
    configured = os.environ.get("XDG_CACHE_HOME")
    if configured:
        base = Path(configured)
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches"
    elif sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    else:
        base = Path.home() / ".cache"
    return base / "fems2py"


def cache_folder(name: str) -> Path | None:
    """``cache_root()/name``, made if missing; None when it cannot be made (read-only home)."""
    folder = cache_root() / name
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return folder


def pickled(
    name: str, make: Callable[[], _Value], reducers: dict[type, Callable[[Any], Any]] | None = None
) -> _Value:
    """``make()``, kept in the cache as a pickle named ``name`` (which should say what the
    value depends on, such as library versions). ``reducers`` pickle the types that pickle
    cannot restore by itself (enum members whose values are objects)."""
    folder = cache_folder("tables")
    path = folder / f"{name}.pickle" if folder else None
    if path is not None and path.is_file():
        with contextlib.suppress(Exception):  # a stale or broken file is made again
            return pickle.loads(path.read_bytes())  # noqa: S301 (the user's own cache)
    value = make()
    if path is not None:
        buffer = io.BytesIO()
        pickler = pickle.Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL)
        pickler.dispatch_table = {**copyreg.dispatch_table, **(reducers or {})}
        with contextlib.suppress(Exception):
            pickler.dump(value)
            temporary = path.with_suffix(f".{os.getpid()}.tmp")
            temporary.write_bytes(buffer.getvalue())
            os.replace(temporary, path)
    return value
