"""A small Debug Adapter Protocol client for the tests: it speaks the wire protocol
(``Content-Length`` framing) to an adapter process over its stdin/stdout or a TCP socket, as an
editor does, and never calls into the adapter's Python."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
from collections.abc import Callable
from typing import Any, BinaryIO

TIMEOUT = 60.0


class DapError(AssertionError):
    """A request failed, or what was waited for did not come in time."""


class DapClient:
    """Requests with their responses, and the events as they arrive (kept in order)."""

    def __init__(self, reader: BinaryIO, write: Callable[[bytes], None]) -> None:
        self._reader = reader
        self._write = write
        self._seq = 0
        self._messages: list[dict[str, Any]] = []
        self._seen = 0  # events before this index were handed out by wait_event
        self._answered: list[dict[str, Any]] = []  # reverse requests responded to
        self._changed = threading.Condition()
        self._closed = False
        self._socket: socket.socket | None = None
        threading.Thread(target=self._read_all, daemon=True).start()

    @classmethod
    def over_stdio(cls, process: subprocess.Popen[bytes]) -> DapClient:
        assert process.stdin is not None and process.stdout is not None
        stdin = process.stdin

        def write(data: bytes) -> None:
            stdin.write(data)
            stdin.flush()

        return cls(process.stdout, write)

    @classmethod
    def over_tcp(cls, host: str, port: int) -> DapClient:
        sock = socket.create_connection((host, port), timeout=TIMEOUT)
        sock.settimeout(None)
        client = cls(sock.makefile("rb"), sock.sendall)
        client._socket = sock
        return client

    def close(self) -> None:
        """Close a TCP client's socket (a stdio client's pipes belong to its process)."""
        if self._socket is not None:
            self._reader.close()
            self._socket.close()

    def _read_all(self) -> None:
        while True:
            length = None
            while True:
                line = self._reader.readline()
                if not line:
                    with self._changed:
                        self._closed = True
                        self._changed.notify_all()
                    return
                line = line.strip()
                if not line:
                    break
                name, _, value = line.decode().partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            assert length is not None
            message = json.loads(self._reader.read(length))
            with self._changed:
                self._messages.append(message)
                self._changed.notify_all()

    def _wait_for(self, found: Callable[[], Any], what: str, timeout: float) -> Any:
        with self._changed:
            result = found()
            while result is None:
                if self._closed or not self._changed.wait(timeout):
                    raise DapError(f"no {what} within {timeout}s; got: {self.events_text()}")
                result = found()
            return result

    def send(self, command: str, **arguments: Any) -> int:
        self._seq += 1
        self._send(
            {"seq": self._seq, "type": "request", "command": command, "arguments": arguments}
        )
        return self._seq

    def _send(self, message: dict[str, Any]) -> None:
        body = json.dumps(message).encode()
        self._write(b"Content-Length: %d\r\n\r\n" % len(body) + body)

    def response(self, seq: int, timeout: float = TIMEOUT) -> dict[str, Any]:
        def found() -> dict[str, Any] | None:
            return next(
                (
                    m
                    for m in self._messages
                    if m.get("type") == "response" and m.get("request_seq") == seq
                ),
                None,
            )

        return self._wait_for(found, f"response to request {seq}", timeout)

    def request(self, command: str, **arguments: Any) -> dict[str, Any]:
        """Send a request and return its response's body; a failed one raises."""
        answer = self.response(self.send(command, **arguments))
        if not answer["success"]:
            raise DapError(f"{command} failed: {answer.get('message')}")
        return answer.get("body") or {}

    def failure(self, command: str, **arguments: Any) -> str:
        """Send a request that must fail; its message."""
        answer = self.response(self.send(command, **arguments))
        if answer["success"]:
            raise DapError(f"{command} succeeded: {answer}")
        return str(answer.get("message"))

    def wait_event(self, event: str, timeout: float = TIMEOUT) -> dict[str, Any]:
        """The next event named ``event`` after those already waited for."""

        def found() -> dict[str, Any] | None:
            for index in range(self._seen, len(self._messages)):
                message = self._messages[index]
                if message.get("type") == "event" and message.get("event") == event:
                    self._seen = index + 1
                    return message.get("body") or {}
            return None

        return self._wait_for(found, f"{event} event", timeout)

    def wait_closed(self, timeout: float = TIMEOUT) -> list[dict[str, Any]]:
        """Every message the adapter wrote, once it closed its end (it exited)."""
        with self._changed:
            if not self._changed.wait_for(lambda: self._closed, timeout):
                raise DapError(f"the adapter still writes after {timeout}s")
            return list(self._messages)

    def wait_request(self, command: str, timeout: float = TIMEOUT) -> dict[str, Any]:
        """The adapter's next reverse request ``command`` (``startDebugging``), whole."""

        def found() -> dict[str, Any] | None:
            return next(
                (
                    m
                    for m in self._messages
                    if m.get("type") == "request"
                    and m.get("command") == command
                    and m not in self._answered
                ),
                None,
            )

        return self._wait_for(found, f"{command} request", timeout)

    def respond(self, request: dict[str, Any], success: bool = True, message: str = "") -> None:
        """Answer a reverse request, as an editor does."""
        self._answered.append(request)
        self._seq += 1
        answer = {
            "seq": self._seq,
            "type": "response",
            "request_seq": request["seq"],
            "command": request["command"],
            "success": success,
            "message": message,
        }
        self._send(answer)

    def events(self, event: str) -> list[dict[str, Any]]:
        with self._changed:
            return [
                m.get("body") or {}
                for m in self._messages
                if m.get("type") == "event" and m.get("event") == event
            ]

    def output(self) -> str:
        return "".join(body.get("output", "") for body in self.events("output"))

    def events_text(self) -> str:
        return ", ".join(
            f"{m.get('event')}{m.get('body', {}).get('reason', '')}"
            for m in self._messages[-12:]
            if m.get("type") == "event"
        )
