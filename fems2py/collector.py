"""Python's cycle collector around work whose objects all live on (see each function)."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

from fems_runtime.imports import large_imports


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cycle collector off for one compile stage. A stage allocates many objects that
    all live until it ends (syntax trees, black's lines), so the collector's runs during it find
    nothing to free and walk an ever larger heap: a third of the time of checking a long
    script, and more the longer it is. The garbage is collected at the next run after it."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@contextlib.contextmanager
def loading_modules(own_process: bool) -> Iterator[None]:
    """For the ``fems2py`` command in a process of its own: the collector off while it imports
    the compiler (black, Jinja2, the front end), and what the imports made frozen after
    (``gc.freeze``). Modules, classes and functions live as long as the process, so the
    seventy-odd collections the imports set off find nothing to free (~20 ms of ``fems2py
    build``), and no later collection walks them again. Pausing without freezing would cost more
    than it saves: the first collection after it walks everything the imports made. A program
    that calls the command line in its own process (``own_process`` false) keeps its collector.
    The runtime's `large_imports` does this for its own large imports; the compiler uses it too."""
    if not own_process:
        yield
        return
    with large_imports():
        yield
