"""``--debug``: a run under a Debug Adapter Protocol server (§16.3), imported only then.

Why the protocol is written here rather than served by debugpy: pydevd's source maps would map
``.fems`` lines onto lines of the generated module, and a stop there stops the one thread that
runs every branch's asyncio task (one thread for a whole ``par``, the whole run stopped, and an
action's stop before its context exists). A FEM stop is a node or a turn whose model call is
held while the sibling branches wait at their own next node, and it shows the run's state, not
the module's Python locals. So the few messages of the protocol (:mod:`.wire`, :mod:`.adapter`)
are written here on the standard library; the run is held at awaited hooks (a node begins, a
model call is about to be sent or a recorded one replayed), and the lines of ``code:`` files are
traced with :mod:`bdb` (:mod:`.pycode`).
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fems_runtime.debug.adapter import Adapter, DebuggedProgram, Target
from fems_runtime.debug.wire import Channel, stdio_streams

NO_CLIENT = (
    "fems debugger: no Debug Adapter Protocol request came on stdin: start the debugger from "
    "an editor (docs/guide/debugging.md), or use --listen HOST:PORT"
)


def debug_program(
    program: DebuggedProgram, options: Mapping[str, Any], listen: str | None, shown: Sequence[str]
) -> int:
    """``python game.py --debug [--listen HOST:PORT]``: this program with these options. A
    launch request's ``program`` says where the ``.fems`` file is when the module does not
    (it was built elsewhere); its options are those of the command line."""

    def target(arguments: dict[str, Any]) -> tuple[DebuggedProgram, dict[str, Any]]:
        named = arguments.get("program")
        if program.source is None and named and Path(str(named)).name == program.script.file:
            program.source = Path(str(named)).resolve()
        return program, dict(options)

    return asyncio.run(serve(target, listen, shown))


async def serve(target: Target, listen: str | None = None, shown: Sequence[str] = ()) -> int:
    """Serve one client, over stdio or at ``listen``; the exit status of its run."""
    if listen is None:
        reader, write = await stdio_streams()
        adapter = Adapter(Channel(write), target, list(shown))
        status = await adapter.serve(reader)
        if not adapter.heard:  # </dev/null, nohup, CI: say why nothing ran
            print(NO_CLIENT, file=sys.stderr, flush=True)
        return status
    host, _, port = listen.rpartition(":")
    finished: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    taken = False

    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal taken
        if taken:
            writer.close()  # one client per run
            return
        taken = True
        try:
            status = await Adapter(Channel(writer.write), target, list(shown)).serve(reader)
        finally:
            writer.close()
        if not finished.done():
            finished.set_result(status)

    try:
        server = await asyncio.start_server(client, host, int(port))
    except OSError as error:  # a port in use, a host that is not this machine's
        print(f"fems debugger: cannot listen on {listen}: {_reason(error)}", file=sys.stderr)
        return 1
    bound = server.sockets[0].getsockname()
    print(f"fems debugger: listening on {bound[0]}:{bound[1]}", file=sys.stderr, flush=True)
    try:
        return await finished
    finally:
        server.close()


def _reason(error: OSError) -> str:
    """The reason of a failed listen, as the system words it (asyncio wraps it in a sentence
    naming the address again)."""
    if error.errno is not None and error.errno > 0:
        return os.strerror(error.errno)
    return error.strerror or str(error)  # getaddrinfo's errors have negative numbers


__all__ = ["debug_program", "serve"]
