"""A fake OpenAI-compatible chat server on 127.0.0.1 for the benchmarks (stdlib only).

    python -m bench.fake_server DELAY_MS

Prints its port on the first line of stdout, answers every ``POST …/chat/completions`` after
DELAY_MS milliseconds (concurrent requests wait side by side) with a short reply, keeps
connections alive like a real endpoint, and exits when its standard input closes (the
benchmark that started it is gone). The reply is the text of the last ``FAKE_REPLY[[…]]`` in
the request's last message when there is one (a prompt can dictate a signal); a streaming
request gets it as server-sent events. ``GET /arrivals`` answers the arrival times
(``time.time()``) of the completion requests since the previous ``GET /arrivals``: a benchmark
measures its time to first request, the gaps between requests and their number with them.
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


def _stream(model: str, reply: str) -> bytes:
    """The reply as server-sent events, as a streaming request (``"stream": true``) gets it: a
    role chunk, the text in a few chunks, a stop chunk, a usage chunk and ``[DONE]``."""
    step = max(1, -(-len(reply) // 4))
    deltas = [
        {"role": "assistant"},
        *({"content": reply[i : i + step]} for i in range(0, len(reply), step)),
    ]
    chunks = [{"choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
    chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    chunks.append(
        {"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 4, "total_tokens": 14}}
    )
    head = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 0, "model": model}
    events = [f"data: {json.dumps(head | chunk)}\n\n" for chunk in chunks] + ["data: [DONE]\n\n"]
    return "".join(events).encode()


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
            streamed = False
            if lines[0].startswith("GET /arrivals"):
                data = json.dumps(ARRIVALS).encode()
                ARRIVALS.clear()
            else:
                ARRIVALS.append(time.time())
                request = json.loads(await reader.readexactly(length) or b"{}")
                await asyncio.sleep(delay)
                model, reply = str(request.get("model", "fake")), _reply(request)
                streamed = bool(request.get("stream"))
                data = _stream(model, reply) if streamed else _completion(model, reply)
            kind = "text/event-stream" if streamed else "application/json"
            writer.write(
                f"HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\n".encode()
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
