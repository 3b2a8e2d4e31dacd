"""Calling the author's Python (``code:`` functions, memory and context methods, ``resolve:``
hooks) the same way everywhere: off the event loop, and awaited when it is ``async def``."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Mapping
from typing import Any


async def off_loop(func: Callable[..., Any], kwargs: Mapping[str, Any]) -> Any:
    """Call ``func`` by keyword in a worker thread, so a slow function holds up nothing else
    that runs (§8.4). An ``async def`` only makes its coroutine there: that is awaited on the
    run's own loop, where async code expects to run (§5)."""
    value = await asyncio.to_thread(func, **kwargs)
    if inspect.isawaitable(value):
        value = await value
    return value
