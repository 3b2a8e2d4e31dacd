"""The stage (§17): watch a run live in the browser, from the director's seat or any actor's,
and answer human turns there; or open stored sessions read-only (``fems2py serve``).

``view`` reads a session from the store, ``chart`` draws the flow, ``live`` watches a run in
this process, ``archive`` serves stored sessions, ``server`` is the web app; ``static/`` is the
page, with Mermaid vendored so the page needs no network and no build step. The web parts
(Starlette, uvicorn) are the optional extra ``fems-runtime[web]``: nothing else in the runtime
imports this package, so generated modules run without it.
"""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fems_runtime.stage.chart import FlowChart
    from fems_runtime.stage.server import Report, StagedProgram
    from fems_runtime.store import Store

WEB_EXTRA = "fems-runtime[web]"
EXIT_RUN_ERROR = 1


def missing_web_extra() -> str | None:
    """Why the stage cannot start here (its packages are not installed), or None."""
    missing = [name for name in ("starlette", "uvicorn") if importlib.util.find_spec(name) is None]
    if not missing:
        return None
    return f"the stage needs {' and '.join(missing)}: pip install '{WEB_EXTRA}'"


def serve_run(
    program: StagedProgram,
    options: dict[str, Any],
    port: int,
    report: Report,
) -> int:
    """``--serve``: run ``program`` with the stage up (see :func:`server.run_on_stage`)."""
    problem = missing_web_extra()
    if problem is not None:
        print(f"{program.script.file}: error: {problem}", file=sys.stderr)
        return EXIT_RUN_ERROR
    from fems_runtime.stage.server import run_on_stage

    return asyncio.run(run_on_stage(program, options, port, report))


def serve_sessions(
    store: Store,
    session: int | None,
    port: int,
    chart_for: Callable[[Mapping[str, Any]], FlowChart],
) -> int:
    """``fems2py serve``: the sessions of ``store``, read-only, until Ctrl+C."""
    from fems_runtime.stage.server import serve_archive

    try:
        return asyncio.run(serve_archive(store, session, port, chart_for))
    except KeyboardInterrupt:
        return 0
