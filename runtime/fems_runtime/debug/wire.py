"""The Debug Adapter Protocol's wire format: JSON messages, each after a ``Content-Length``
header, over a pair of asyncio streams (stdin/stdout of an editor that launched the adapter,
or one TCP connection of an editor that attached). A stdin that is a file (a recorded session,
or ``/dev/null``) is read to its end as a pipe would be."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import stat
import sys
import threading
from typing import Any, BinaryIO

HEADER_END = b"\r\n\r\n"


class ProtocolClosed(Exception):
    """The client closed the connection (or sent what is not the protocol)."""


async def read_message(reader: asyncio.StreamReader) -> dict[str, Any]:
    """The next message, or :class:`ProtocolClosed` at the end of the stream."""
    try:
        header = await reader.readuntil(HEADER_END)
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        raise ProtocolClosed from None
    length = None
    for line in header.decode("ascii", "replace").split("\r\n"):
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length" and value.strip().isdigit():
            length = int(value)
    if length is None:
        raise ProtocolClosed
    try:
        body = await reader.readexactly(length)
        message = json.loads(body)
    except (asyncio.IncompleteReadError, ConnectionError, ValueError):
        raise ProtocolClosed from None
    if not isinstance(message, dict):
        raise ProtocolClosed
    return message


def frame(message: dict[str, Any]) -> bytes:
    """``message`` as it goes on the wire."""
    body = json.dumps(message, ensure_ascii=False, default=str).encode("utf-8")
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


class Channel:
    """Where the adapter writes: numbered messages to one client, until the client goes away
    (a write fails: a broken pipe, a reset connection) or the session is over (:meth:`close`);
    from then on nothing is written, and nothing raises."""

    def __init__(self, write: Any) -> None:
        self._write = write  # bytes -> None
        self._seq = 0
        self.closed = False

    def send(self, message: dict[str, Any]) -> int:
        """Send ``message``; its number (a reverse request's response names it)."""
        self._seq += 1
        if not self.closed:
            try:
                self._write(frame({"seq": self._seq, **message}))
            except OSError:  # the client is gone: the run ends as its disconnect ends it
                self.closed = True
        return self._seq

    def close(self) -> None:
        """The session is over: what comes later (a ``code:`` function's worker thread that
        goes on after the run ended) is not written."""
        self.closed = True

    def event(self, event: str, body: dict[str, Any] | None = None) -> None:
        self.send({"type": "event", "event": event, "body": body or {}})


async def stdio_streams() -> tuple[asyncio.StreamReader, Any]:
    """Read stdin as a stream; write to the process's original stdout, which from here on
    belongs to the protocol: whatever the run prints goes to stderr instead."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=2**24)
    stdin = sys.stdin.fileno() if sys.stdin is not None else None
    if stdin is not None and pollable(stdin):
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    else:
        read_in_thread(stdin, reader, loop)
    out: BinaryIO
    if sys.stdout is None:  # closed (``>&-``): nobody hears the answers
        out = open(os.devnull, "wb", buffering=0)  # noqa: SIM115 (open for the session)
    else:
        out = os.fdopen(os.dup(sys.stdout.fileno()), "wb", buffering=0)
        sys.stdout.flush()
        os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    sys.stdout = sys.stderr

    def write(data: bytes) -> None:
        out.write(data)

    return reader, write


def pollable(fd: int) -> bool:
    """Whether the event loop can wait on ``fd``: a pipe, a socket or a terminal (what an
    editor or a shell gives). A regular file or ``/dev/null`` cannot be polled."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd)


def read_in_thread(
    fd: int | None, reader: asyncio.StreamReader, loop: asyncio.AbstractEventLoop
) -> None:
    """Feed ``reader`` what a file that cannot be polled holds (a recorded session, or
    nothing), read on a thread; its end is the client's going away, as a pipe's is. A closed
    stdin (``fd`` None) ends at once."""

    def pump() -> None:
        try:
            while fd is not None and (chunk := os.read(fd, 2**16)):
                loop.call_soon_threadsafe(reader.feed_data, chunk)
        except OSError:
            pass  # unreadable (a directory, a closed descriptor): the stream ends here
        except RuntimeError:
            return  # the loop closed: the session ended before the file did
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(reader.feed_eof)

    threading.Thread(target=pump, name="fems-debug-stdin", daemon=True).start()


__all__ = ["Channel", "ProtocolClosed", "frame", "read_message", "stdio_streams"]
