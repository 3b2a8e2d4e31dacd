"""Width: one ``par`` over many AI actors, each making one call, with ``max_concurrency`` = N.

``par`` over 2,000 under ``fems/mock`` is the engine alone; ``par`` over 200 against a fake
OpenAI-compatible server on 127.0.0.1 answering after 50 ms (``bench/fake_server.py``, in its
own process) is the network path, whose floor is one round of 50 ms plus the SDK's own work
(§15.1: the same requests through the SDK alone are timed too). Times are inside the
run (``run()``), the fastest of three after a warm-up run of the same module (imports and
first connections are start-up, measured by ``python -m bench compare`` instead), with
the CPU time and the times the run waited (see ``bench_mock_calls``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from tempfile import TemporaryDirectory

from bench import Figure, load, quick, timed
from bench.modules import load_module

MOCK_WIDTH = 50 if quick() else 2_000
NETWORK_WIDTH = 20 if quick() else 200
LATENCY_MS = 50


def par_script(width: int) -> str:
    """One ``par`` over ``width`` AI actors, all allowed in flight at once."""
    names = [f"@w{i}" for i in range(width)]
    actors = "\n".join(f"    ai {name} = soul:w{i}" for i, name in enumerate(names))
    return f"""\
meta:
    max_concurrency = {width}
vars:
    workers = [{", ".join(names)}]
    @w = ""
actors:
{actors}
action work @ai(@w):
    prompt: You are {{@w}}. Do one unit of work.
    scope: [@w]
mainflow:
    [START] -> par @w in workers:
        -> work ->
    -> [END]
"""


def _timed(module, **options) -> str:
    """Seconds inside the fastest of three runs after a warm-up run, with CPU time and waits."""
    module.run(db=":memory:", **options)
    timing, result = timed(lambda: module.run(db=":memory:", **options), 1 if quick() else 3)
    assert result.model_calls == len(module.VARIABLES["workers"])
    print(f"   ({timing.cpu:.3f} s of CPU, {timing.waits} waits)")
    return f"{timing.wall:.3f} s ({timing.cpu:.3f} s CPU)"


def _sdk_alone(width: int) -> str:
    """The floor of the network half under §15.1: ``width`` streamed requests at once through
    one `AsyncOpenAI` client on the transport and pool a run of that width gets
    (`fems_runtime.endpoints.OpenAIClients`), without the engine; timed as `_timed` does."""
    import asyncio

    from fems_runtime.endpoints import OpenAIClients, openai_route, openai_stream

    route = openai_route("openai/fake-model", {}, os.environ)
    assert route is not None

    async def requests() -> None:
        clients = OpenAIClients(width=width)

        async def one(i: int) -> None:
            messages = [{"role": "user", "content": f"{i}"}]
            async for _ in openai_stream(clients.client(route), route, messages, 60.0):
                pass

        await asyncio.gather(*(one(i) for i in range(width)))
        await clients.aclose()

    asyncio.run(requests())
    timing, _ = timed(lambda: asyncio.run(requests()), 1 if quick() else 3)
    print(f"   ({timing.cpu:.3f} s of CPU, {timing.waits} waits)")
    return f"{timing.wall:.3f} s ({timing.cpu:.3f} s CPU)"


def main() -> list[Figure]:
    print(f"   ({load()})")
    with TemporaryDirectory() as folder:
        module = load_module(Path(folder), "par_mock", par_script(MOCK_WIDTH))
        mock = _timed(module, model="fems/mock", seed=1)
        print(f"   par over {MOCK_WIDTH:,}, fems/mock: {mock} inside the run")
        module = load_module(Path(folder), "par_net", par_script(NETWORK_WIDTH))
        with subprocess.Popen(
            [sys.executable, "-m", "bench.fake_server", str(LATENCY_MS)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        ) as server:
            assert server.stdout is not None and server.stdin is not None
            port = server.stdout.readline().strip()
            saved = dict(os.environ)
            os.environ.update(
                OPENAI_API_KEY="sk-fake-local",
                OPENAI_API_BASE=f"http://127.0.0.1:{port}/v1",
                OPENAI_BASE_URL=f"http://127.0.0.1:{port}/v1",
            )
            try:
                network = _timed(module, model="openai/fake-model")
                sdk = _sdk_alone(NETWORK_WIDTH)
            finally:
                os.environ.clear()
                os.environ.update(saved)
                server.stdin.close()
        print(
            f"   par over {NETWORK_WIDTH}, {LATENCY_MS} ms per call: {network} inside the "
            f"run (floor {LATENCY_MS / 1000:.3f} s); the SDK alone: {sdk}"
        )
    return [
        Figure(f"par over {MOCK_WIDTH:,}, fems/mock, inside the run", mock, "≤ 1 s"),
        Figure(
            f"par over {NETWORK_WIDTH} at {LATENCY_MS} ms, inside the run",
            network,
            "≤ 0.25 s",
        ),
        Figure(f"the same {NETWORK_WIDTH} requests through the SDK alone", sdk, "(floor)"),
    ]


if __name__ == "__main__":
    main()
