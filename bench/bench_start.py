"""Start-up and the network path, against their floor: the `openai` SDK alone (#13 items 1–2).

Spec §15.1 sends every OpenAI-protocol call through the official SDK's async client, so the
SDK's own costs are a floor no engine can go under. Each figure is measured twice, in fresh
processes run in turn against ``bench/fake_server.py`` at 0 ms (its arrival times give the
time to first request and the gaps between requests; the gap is the mean from the second
request on, since the first gap of a run whose store opens behind its first request holds that
opening, a cost of start-up printed beside it, not of each request):

- **fems2py**: the generated module of ``python -m bench compare``'s ``par_10`` or
  ``chain_200`` with ``--model openai/fake-model``, a SQLite file as its store;
- **the SDK alone**: a process that imports the SDK as the runtime does (aiohttp hidden,
  `openai.types` deferred: `fems_runtime.imports`, loaded alone), makes one `AsyncOpenAI`
  client and posts the same number of requests, each streamed as the runtime's are (§15.4)
  and shaped as the chain's are: one user message, the replies before it as its context, then
  the prompt. (Until 2026-12-07 it posted a growing list of messages instead, prompts and
  replies apart: a third more instructions per request than this, a floor set too high);
- for ``par_10``, **the SDK alone and the store**: the same, with SQLAlchemy imported and the
  runtime's tables made in a SQLite file behind the first request, and the replies written
  there at the end. The two libraries a run must use cost that much together, before any of
  the engine's own work: the floor of ``par_10``'s process time, and so of its ratio to FemWA's.

Figures are medians over the runs, with the peak RSS of each process; FemWA's side is
``python -m bench compare``'s. Every process keeps Python's bytecode (in a temporary
``PYTHONPYCACHEPREFIX``, written by an untimed first run of each side), as an installed package
has it: under ``PYTHONDONTWRITEBYTECODE`` each fems2py process compiled the runtime's sources
again (~60 ms of CPU), while the SDK, installed and compiled, never does. The fems2py runs also print where the time to first request
goes: interpreter, runtime imported, store opened (SQLAlchemy imported, tables, session: behind
the first request for a new database), the SDK imported and its client made, the first request
on the server. Both sides also note
their CPU time (user + system, all threads) when they open their first connection: on a shared
machine it moves far less with the load than the wall-clock times do.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from tempfile import TemporaryDirectory, TemporaryFile

import fems_runtime.imports

from bench import Figure, load, quick
from bench.modules import build_module

RUNS = 1 if quick() else 5
CHAIN = 10 if quick() else 200

PAR_10 = """\
meta:
  name = bench-par-10
  session = new
vars:
  workers = [@w0, @w1, @w2, @w3, @w4, @w5, @w6, @w7, @w8, @w9]
  @w = ""
actors:
{actors}
action work @ai(@w):
  prompt: "You are {{@w}}. Do one unit of work. FAKE_REPLY[[Work unit finished.]]"
  scope: [@w]
mainflow:
  [START] -> [A] -> par @w in workers:
    -> [W]:work ->
  -> [END]
""".format(actors="\n".join(f"  ai @w{i} = soul:bench_w{i}" for i in range(10)))

CHAIN_N = f"""\
meta:
  name = bench-chain
  session = new
vars:
  n = 0
actors:
  ai @eve = soul:bench_eve
action ask @ai(@eve):
  prompt: "Step {{n}}: say something short. FAKE_REPLY[[Step done. SET VARIABLE: <<n += 1>>]]"
  scope: [@eve]
mainflow:
  [A]: ask
  [B]: ask
  [START] -> [A] -> [B]
  [B] -> if (n < {CHAIN}) -> [A]
  [B] -> if (n >= {CHAIN}) -> [END]
"""

# Notes, as JSON on the last line of stdout, when (time.time()), at which peak RSS (MB) and
# after how much CPU time (s) the process reached each phase, up to its first connection.
MARKS = """\
import json, sys, time
def peak():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) / 1024 for line in status if line.startswith("VmHWM"))
marks = [("interpreter started", time.time(), peak(), time.process_time())]
def mark(name):
    if name not in (m[0] for m in marks):
        marks.append((name, time.time(), peak(), time.process_time()))
def connecting(event, args):
    if event == "socket.connect":
        mark("first connection opened")
sys.addaudithook(connecting)
"""

# Runs a generated module (argv[1:]) and notes its phases before its first request.
PHASES = (
    MARKS
    + """\
import runpy
import fems_runtime.turns.services, fems_runtime.endpoints as endpoints
from fems_runtime.store import Store
mark("runtime imported")
start_run, client = Store.start_run, endpoints.OpenAIClients.client
def _start_run(self, session):
    start_run(self, session)
    mark("store opened (SQLAlchemy, tables, session)")
def first_client(self, route):
    made = client(self, route)
    mark("SDK imported, client made")
    return made
Store.start_run, endpoints.OpenAIClients.client = _start_run, first_client
sys.argv = sys.argv[1:]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
finally:
    print(json.dumps(marks))
"""
)

# The SDK alone: argv[1] = fems_runtime/imports.py, argv[2] = the number of requests. With
# argv[3] = fems_runtime/store/schema.py and argv[4] = a new SQLite file, the SDK alone and the
# store (see above): the tables are made by a thread started once the first request is out, as
# a run's store opens, and one transaction writes the replies at the end.
SDK_ALONE = (
    MARKS
    + """\
import asyncio, importlib.util, threading
def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = sys.modules[name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
imports = load("fems_imports", sys.argv[1])
openai = imports.import_large("openai", hide=("aiohttp",), defer=("openai.types",))
schema = load("fems_schema", sys.argv[3]) if len(sys.argv) > 3 else None
def open_store():
    engine = schema.tables().sa.create_engine(f"sqlite:///{sys.argv[4]}")
    with engine.begin() as db:
        schema.tables().meta.create_all(db)
    return engine
opened = []
opening = threading.Thread(target=lambda: opened.append(open_store()))
async def main(calls):
    client = openai.AsyncOpenAI(max_retries=0)
    context = []
    for n in range(calls):
        prompt = f"Step {n}: say something short. FAKE_REPLY[[Step done. SET VARIABLE: <<n += 1>>]]"
        messages = [{"role": "user", "content": "\\n\\n".join([*context, prompt])}]
        body = {"model": "fake-model", "messages": messages, "stream": True,
                "stream_options": {"include_usage": True}}
        chunks = await client.post(
            "/chat/completions", body=body, cast_to=object, options={"timeout": 60.0},
            stream=True, stream_cls=openai.AsyncStream[object],
        )
        if n == 0 and schema is not None:
            opening.start()
        text = ""
        async for chunk in chunks:
            for choice in chunk.get("choices") or ():
                text += choice["delta"].get("content") or ""
        context.append(f"[@eve]: {text}")
    await client.close()
    return context
replies = asyncio.run(main(int(sys.argv[2])))
if schema is not None:
    opening.join()
    t = schema.tables()
    with opened[0].begin() as db:
        db.execute(t.sessions.insert(), {"id": 1, "created": time.time()})
        rows = [dict(session_id=1, seq=n + 1, turn=n + 1, kind="ai", content=text,
                     created=time.time()) for n, text in enumerate(replies)]
        db.execute(t.messages.insert(), rows)
print(json.dumps(marks))
"""
)


def _arrivals(base: str) -> list[float]:
    with urllib.request.urlopen(f"{base}/arrivals") as answer:
        return list(json.load(answer))


def _run(command: list[str], env: dict[str, str], base: str) -> dict[str, object]:
    """One process: its wall time, peak RSS (MB), time to first request, the first gap between
    requests and the mean of the others (from the server's arrival times), and the phases it
    printed."""
    _arrivals(base)  # forget earlier requests
    with TemporaryFile() as out, TemporaryFile() as err:
        started = time.time()
        process = subprocess.Popen(command, env=env, stdout=out, stderr=err)
        _, status, usage = os.wait4(process.pid, 0)  # wait4: the peak RSS of this process
        process.returncode = os.waitstatus_to_exitcode(status)
        wall = time.time() - started
        out.seek(0)
        err.seek(0)
        assert process.returncode == 0, err.read().decode()
        lines = out.read().decode().strip().splitlines()
    arrivals = _arrivals(base)
    phases = [(name, at - started, rss, cpu) for name, at, rss, cpu in json.loads(lines[-1])]
    return {
        "wall": wall,
        "rss": usage.ru_maxrss / 1024,
        "ttfr": arrivals[0] - started,
        "cpu": next(cpu for name, _, _, cpu in phases if name == "first connection opened"),
        "first_gap": arrivals[1] - arrivals[0] if len(arrivals) > 1 else 0.0,
        "gap": (arrivals[-1] - arrivals[1]) / max(1, len(arrivals) - 2) if arrivals[1:] else 0.0,
        "phases": phases,
    }


def _commands(module: Path, calls: int, database: str, *, floor: bool) -> dict[str, list[str]]:
    """The processes of one bench: the generated module, the SDK alone and, with ``floor``, the
    SDK alone and the store (a run's floor at start; a chain measures gaps)."""
    imports_py = str(Path(fems_runtime.imports.__file__))
    schema_py = str(Path(fems_runtime.imports.__file__).parent / "store" / "schema.py")
    model = ["--model", "openai/fake-model", "--db", database]
    commands = {
        "fems2py": [sys.executable, "-c", PHASES, str(module), *model],
        "sdk": [sys.executable, "-c", SDK_ALONE, imports_py, str(calls)],
    }
    if floor:
        commands["store"] = [*commands["sdk"], schema_py, database]
    return commands


def _median(runs: list[dict[str, object]], key: str) -> float:
    return statistics.median(float(run[key]) for run in runs)  # type: ignore[arg-type]


def _phases(runs: list[dict[str, object]]) -> None:
    """Where the time to first request goes (medians of the fems2py runs)."""
    noted: dict[str, list[tuple[float, float, float]]] = {}
    for run in runs:
        for name, at, rss, cpu in run["phases"]:  # type: ignore[attr-defined]
            noted.setdefault(name, []).append((at, rss, cpu))
    medians = {
        name: tuple(statistics.median(values) for values in zip(*marks, strict=True))
        for name, marks in noted.items()
    }
    lines = [
        (at, f"CPU {cpu:5.3f} s  peak RSS {rss:5.1f} MB  {name}")
        for name, (at, rss, cpu) in medians.items()
    ]
    lines.append((_median(runs, "ttfr"), "first request on the server"))
    previous = 0.0
    for at, line in sorted(lines):
        print(f"     {at:6.3f} s (+{at - previous:5.3f})  {line}")
        previous = at


def main() -> list[Figure]:
    print(f"   ({load()}; {RUNS} runs of each, in turn)")
    with (
        TemporaryDirectory() as folder,
        subprocess.Popen(
            [sys.executable, "-m", "bench.fake_server", "0"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        ) as server,
    ):
        assert server.stdout is not None and server.stdin is not None
        base = f"http://127.0.0.1:{server.stdout.readline().strip()}"
        env = dict(
            os.environ,
            OPENAI_API_KEY="sk-fake-local",
            OPENAI_BASE_URL=f"{base}/v1",
            PYTHONPYCACHEPREFIX=str(Path(folder) / "pycache"),
        )
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        results: dict[tuple[str, str], list[dict[str, object]]] = {}
        for bench, source, calls in (("par_10", PAR_10, 10), ("chain", CHAIN_N, CHAIN)):
            module = build_module(Path(folder), bench, source)
            database = str(Path(folder) / f"{bench}.db")
            commands = _commands(module, calls, database, floor=bench == "par_10")
            for rep in range(RUNS + 1):  # the first, untimed, writes the bytecode
                for name, command in commands.items():
                    for stale in Path(folder).glob(f"{bench}.db*"):
                        stale.unlink()
                    run = _run(command, env, base)
                    if rep:
                        results.setdefault((bench, name), []).append(run)
        server.stdin.close()
    par, par_sdk = results[("par_10", "fems2py")], results[("par_10", "sdk")]
    par_store = results[("par_10", "store")]
    chain, chain_sdk = results[("chain", "fems2py")], results[("chain", "sdk")]
    print("   par_10 at 0 ms, fems2py: where the time to first request goes (medians)")
    _phases(par)
    labels = ("fems2py", "the SDK alone", "the SDK alone and the store")
    for label, runs in zip(labels, (par, par_sdk, par_store), strict=True):
        print(
            f"   par_10, {label}: first request {_median(runs, 'ttfr'):.3f} s (CPU "
            f"{_median(runs, 'cpu'):.3f} s), process {_median(runs, 'wall'):.3f} s, peak RSS "
            f"{_median(runs, 'rss'):.1f} MB"
        )
    for label, runs in (("fems2py", chain), ("the SDK alone", chain_sdk)):
        print(
            f"   chain of {CHAIN}, {label}: {1000 * _median(runs, 'gap'):.2f} ms between requests "
            f"from the second on (first gap {1000 * _median(runs, 'first_gap'):.1f} ms)"
        )
    return [
        Figure(
            "time to first request, par_10: fems2py / the SDK alone",
            f"{_median(par, 'ttfr'):.3f} s / {_median(par_sdk, 'ttfr'):.3f} s",
            "≤ the SDK alone + 0.15 s (#30); ≤ FemWA's (compare.py)",
        ),
        Figure(
            "process, par_10: fems2py / the SDK alone and the store",
            f"{_median(par, 'wall'):.3f} s / {_median(par_store, 'wall'):.3f} s",
            "— (the floor of the SDK and SQLAlchemy together)",
        ),
        Figure(
            "CPU time to first connection, par_10: fems2py / the SDK alone",
            f"{_median(par, 'cpu'):.3f} s / {_median(par_sdk, 'cpu'):.3f} s",
            "— (moves less with the load than wall time)",
        ),
        Figure(
            "peak RSS, par_10: fems2py / the SDK alone",
            f"{_median(par, 'rss'):.1f} MB / {_median(par_sdk, 'rss'):.1f} MB",
            "≤ 1.3× FemWA's",
        ),
        Figure(
            f"gap between requests, chain of {CHAIN}: fems2py / the SDK alone",
            f"{1000 * _median(chain, 'gap'):.2f} ms / {1000 * _median(chain_sdk, 'gap'):.2f} ms",
            "≤ 1.05× the SDK alone (#30); ≤ 0.1× FemWA's",
        ),
    ]


if __name__ == "__main__":
    main()
