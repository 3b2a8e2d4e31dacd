"""Importing the large packages a run may need (the `openai` SDK, SQLAlchemy, litellm) when it
first needs them, at the lowest cost to its start.

Importing the `openai` SDK makes about 650 pydantic models and 550 typed dicts: hundreds of
thousands of objects, none of them garbage, which the cyclic garbage collector walks again and
again while they are made (about 15% of the import) and at every full collection after it,
up to the one at interpreter exit. So the collector is paused during such an import, and what
exists afterwards is frozen (`gc.freeze`): later collections skip it, as they skip any
long-lived object. Objects are still freed when their last reference goes; only reference
cycles that were already garbage when the heap was frozen stay until the process ends.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import sys
from collections.abc import Iterator
from types import ModuleType


def import_large(name: str, *, hide: tuple[str, ...] = ()) -> ModuleType:
    """Import ``name`` with the garbage collector paused, then freeze the heap.

    ``hide``: optional packages the import must not load (see `large_imports`).
    """
    module = sys.modules.get(name)
    if module is not None:
        return module
    with large_imports(hide=hide):
        return importlib.import_module(name)


@contextlib.contextmanager
def large_imports(*, hide: tuple[str, ...] = ()) -> Iterator[None]:
    """Pause the garbage collector for the block (which imports large packages), then freeze
    the heap. ``hide``: optional packages the block must not load (`import` of them fails
    while it runs), for packages that load an optional dependency they can do without."""
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
        gc.freeze()
