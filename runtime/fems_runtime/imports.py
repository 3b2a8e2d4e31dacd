"""Importing the large packages a run may need (the `openai` SDK, SQLAlchemy, litellm) when it
first needs them, at the lowest cost to its start.

Importing the `openai` SDK makes about 650 pydantic models and 550 typed dicts: hundreds of
thousands of objects, none of them garbage, which the cyclic garbage collector walks again and
again while they are made (about 15% of the import) and at every full collection after it,
up to the one at interpreter exit. So the collector is paused during such an import, and what
exists afterwards is frozen (`gc.freeze`): later collections skip it, as they skip any
long-lived object. Objects are still freed when their last reference goes; only reference
cycles that were already garbage when the heap was frozen stay until the process ends.

A package whose ``__init__`` only re-exports its modules' names can also have that body
deferred (``defer``): the `openai` SDK's `openai.types` re-exports every model of every OpenAI
API (~470 modules, ~0.3 s and ~10 MB of each run's start) although the client itself needs
about 80 of them. See `deferred_inits`.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import importlib.machinery
import sys
import threading
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import Any


def import_large(
    name: str, *, hide: tuple[str, ...] = (), defer: tuple[str, ...] = ()
) -> ModuleType:
    """Import ``name`` with the garbage collector paused, then freeze the heap.

    ``hide``: optional packages the import must not load (see `large_imports`); ``defer``:
    packages whose ``__init__`` (and their subpackages') runs only when a name of theirs is
    first asked for (see `deferred_inits`).
    """
    module = sys.modules.get(name)
    if module is not None:
        return module
    with large_imports(hide=hide), deferred_inits(defer):
        return importlib.import_module(name)


@contextlib.contextmanager
def deferred_inits(packages: tuple[str, ...]) -> Iterator[None]:
    """While the block runs, importing one of ``packages`` or a package inside them makes the
    package module without running its ``__init__``: its modules import as usual (``import
    pkg.mod``, ``from .mod import X``), and the ``__init__`` runs, once, when a name the
    package module lacks is first asked for (``pkg.X``, ``from pkg import X``). So a package
    that re-exports hundreds of modules costs only the ones imported directly, and anyone who
    uses its re-exports still finds them. Packages imported after the block load normally.

    Only for packages whose ``__init__`` does nothing but import and re-export: anything else
    it did would be delayed too.
    """
    if not packages:
        yield
        return
    finder = _DeferredInitFinder(packages)
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)


class _DeferredInitFinder:
    """Finds the packages of `deferred_inits` as the path finder does, with a deferring loader
    (a meta path finder; `importlib.abc` is not imported for its base class: ~60 ms)."""

    def __init__(self, packages: tuple[str, ...]) -> None:
        self._packages = packages

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not any(fullname == p or fullname.startswith(p + ".") for p in self._packages):
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or spec.submodule_search_locations is None or spec.loader is None:
            return spec  # a plain module (or nothing): imported as usual
        spec.loader = _DeferredInitLoader(spec.loader)  # type: ignore[assignment]  # a Loader by protocol
        return spec


class _InBody(threading.local):
    """Whether this thread is running a package's body: each thread starts outside it."""

    body = False


class _DeferredInitLoader:
    """Makes a package module whose ``__init__`` runs on the first name it lacks (a module
    `__getattr__`, removed once the body has run). A thread asking while the body runs waits
    for it; the body's own imports, asking from inside it, are told the name is not there yet,
    as during any import."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def __getattr__(self, name: str) -> Any:  # get_source, get_resource_reader …
        return getattr(self._loader, name)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        loader, lock, running = self._loader, threading.RLock(), _InBody()

        def __getattr__(name: str) -> Any:
            with lock:
                if running.body:  # asked from inside the body
                    raise AttributeError(name)
                if module.__dict__.get("__getattr__") is __getattr__:
                    running.body = True
                    try:
                        loader.exec_module(module)
                    finally:
                        running.body = False
                        if module.__dict__.get("__getattr__") is __getattr__:
                            del module.__dict__["__getattr__"]
            return getattr(module, name)

        module.__getattr__ = __getattr__  # type: ignore[method-assign]


@contextlib.contextmanager
def large_imports(*, hide: tuple[str, ...] = ()) -> Iterator[None]:
    """Pause the garbage collector for the block (which imports large packages), then freeze
    the heap if the block loaded a module. ``hide``: optional packages the block must not
    load (`import` of them fails while it runs), for packages that load an optional dependency
    they can do without.

    A block that loaded nothing (the same import again, in a later run of the process: a batch
    worker runs thousands) freezes nothing: a freeze also keeps the reference cycles that were
    garbage at that moment until the process ends, so freezing at every run would keep what
    each earlier run left (~0.17 MB a run)."""
    loaded = len(sys.modules)
    hidden = [other for other in hide if other not in sys.modules]
    for other in hidden:
        sys.modules[other] = None  # type: ignore[assignment]  # makes `import other` fail
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        for other in hidden:
            if sys.modules.get(other, 0) is None:
                del sys.modules[other]
        if enabled:
            gc.enable()
        if len(sys.modules) > loaded:
            gc.freeze()
