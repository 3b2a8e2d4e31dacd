"""A fake OpenAI-compatible chat server on 127.0.0.1 for the width benchmark (stdlib only).

    python -m bench.fake_server DELAY_MS

Prints its port on the first line of stdout, answers every ``POST …/chat/completions`` after
DELAY_MS milliseconds (concurrent requests wait side by side) with a short reply — streamed
as a real API streams it when the request asks (server-sent events over chunked HTTP: a role
chunk, a chunk per word, the finish, the usage, ``[DONE]``), else as one JSON body —, keeps
connections alive like a real endpoint, and exits when its standard input closes (the
benchmark that started it is gone). The reply is the text of the last ``FAKE_REPLY[[…]]`` in
the request's last message when there is one (a prompt can dictate a signal). ``GET /arrivals`` answers the arrival times (``time.time()``)
of the completion requests since the previous ``GET /arrivals``: a benchmark measures its
time to first request and the gaps between requests with them.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time

REPLY = "Work unit finished."
MARKER = re.compile(r"FAKE_REPLY\[\[(.*?)\]\]", re.S)
ARRIVALS: list[float] = []


def _completion(model: str, reply: str) -> bytes:
    body = {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": reply},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 4, "total_tokens": 14},
    }
    return json.dumps(body).encode()


def _events(model: str, reply: str) -> bytes:
    """The streamed answer: each server-sent event in its own HTTP chunk, then the last chunk."""
    base = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 0, "model": model}
    deltas = [{"role": "assistant", "content": ""}]
    deltas += [{"content": word} for word in re.findall(r"\S+\s*", reply)]
    chunks = [
        {**base, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas
    ]
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    usage = {"prompt_tokens": 10, "completion_tokens": 4, "total_tokens": 14}
    chunks.append({**base, "choices": [], "usage": usage})
    events = [f"data: {json.dumps(chunk)}\n\n".encode() for chunk in chunks]
    events.append(b"data: [DONE]\n\n")
    return b"".join(b"%x\r\n%s\r\n" % (len(event), event) for event in events) + b"0\r\n\r\n"


def _reply(request: dict) -> str:
    """The text the request's last message dictates with ``FAKE_REPLY[[…]]``, else `REPLY`."""
    messages = request.get("messages") or [{}]
    found = MARKER.findall(str(messages[-1].get("content") or ""))
    return found[-1] if found else REPLY


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    try:
        while head := await reader.readuntil(b"\r\n\r\n"):
            lines = head.decode("latin-1").split("\r\n")
            headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
            length = int(next((v for k, v in headers.items() if k.lower() == "content-length"), 0))
            if lines[0].startswith("GET /arrivals"):
                data = json.dumps(ARRIVALS).encode()
                ARRIVALS.clear()
            else:
                ARRIVALS.append(time.time())
                request = json.loads(await reader.readexactly(length) or b"{}")
                await asyncio.sleep(delay)
                model = str(request.get("model", "fake"))
                if request.get("stream"):
                    writer.write(
                        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                        b"Transfer-Encoding: chunked\r\n\r\n" + _events(model, _reply(request))
                    )
                    await writer.drain()
                    continue
                data = _completion(model, _reply(request))
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(data)}\r\n\r\n".encode()
                + data
            )
            await writer.drain()
    except (asyncio.IncompleteReadError, asyncio.CancelledError, ConnectionError):
        pass  # the client hung up, or the server is closing
    finally:
        writer.close()


async def main(delay_ms: float) -> None:
    server = await asyncio.start_server(
        lambda r, w: _serve(r, w, delay_ms / 1000), "127.0.0.1", 0, backlog=4096
    )
    print(server.sockets[0].getsockname()[1], flush=True)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.read)  # until the benchmark closes our stdin
    server.close()


if __name__ == "__main__":
    asyncio.run(main(float(sys.argv[1])))
