"""The debug adapter's end of a session, driven on one event loop without a client process, so
that the order of what the loop runs is fixed (§16.4b)."""

from __future__ import annotations

import asyncio
import json
import re
from types import SimpleNamespace
from typing import Any, cast

from fems_runtime.debug.adapter import Adapter
from fems_runtime.debug.wire import Channel

FRAME = re.compile(rb"Content-Length: (\d+)\r\n\r\n")


def _messages(written: list[bytes]) -> list[dict[str, Any]]:
    """The messages the adapter wrote, in order."""
    data, found, at = b"".join(written), [], 0
    while match := FRAME.match(data, at):
        at = match.end() + int(match[1])
        found.append(json.loads(data[match.end() : at]))
    return found


def _no_target(args: dict[str, Any]) -> Any:
    raise AssertionError("the session launches nothing")


def test_a_run_cancelled_before_it_began_says_so_before_the_session_closes() -> None:
    """A terminate right after configurationDone (the end of a recorded session) cancels the
    run before it began: the run task ends at once, and saying 'interrupted' is left to a done
    callback that the loop runs later. The session ending then must let it run: the adapter
    used to close its channel first and exit with status 0, without a word."""
    written: list[bytes] = []

    async def session() -> int:
        adapter = Adapter(Channel(written.append), _no_target, [])
        adapter.program = cast(Any, SimpleNamespace(script=SimpleNamespace(file="game.fems")))
        adapter.start_run({})
        run = adapter.run_task
        assert run is not None
        run.cancel()  # the terminate request
        await asyncio.sleep(0)  # the run ends, cancelled; its done callback is only scheduled
        assert run.done()
        await adapter.stop_run()  # the client has gone: the session ends
        adapter.channel.close()
        return adapter.exit_code

    assert asyncio.run(session()) == 1
    events = [(m["event"], m["body"]) for m in _messages(written) if m["type"] == "event"]
    assert ("output", {"category": "stderr", "output": "game.fems: error: interrupted\n"}) in events
    names = [name for name, _ in events]
    assert names[-2:] == ["exited", "terminated"]
    assert events[-2][1] == {"exitCode": 1}
