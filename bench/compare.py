"""Side by side: fems2py's generated modules against the original FemWA 1.1.11 engine.

    python -m bench compare [--benches chain_200,par_10] [--latencies 0,50] [--reps 3]
        [--max-concurrency N] [--timeout S] [--python PATH] [--out DIR] [--offline]

Both engines run the same scripts (``bench/compare_scripts.py``) against the same fake
OpenAI-compatible server on 127.0.0.1 (``bench/fake_server.py``, one per latency). For each
(bench, rep) the two run back to back, the order alternating per rep, each in a scrubbed
environment with a fresh ``$HOME``. It prints one row per (bench, latency) — process wall time,
the ratio fems2py / FemWA, time to first request, peak RSS, request counts — and writes every
run to ``OUT/results.json`` and the table to ``OUT/summary.md``. FemWA comes from a venv made
once under ``~/.cache/fems-bench/`` (``pip install femwa==1.1.11``). ``--offline`` runs only the
generated modules, under ``fems/mock``, and reports the engine's µs per model call and per step.
Linux only: peak RSS comes from ``wait4``.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import compare_scripts as scripts

FEMWA_VERSION = "1.1.11"
FAKE_KEY = "sk-fake-local"
SCRUBBED_PATH = "/usr/bin:/bin"
LOOPBACK = "127.0.0.1"
HERE = Path(__file__).resolve().parent
COMPLETED = re.compile(r"completed in (\d+) steps, (\d+) model calls")
SYSTEMS = {"femwa": "FemWA", "fems2py": "fems2py", "offline": "fems2py offline"}


class SetupError(Exception):
    """A setup problem the user has to fix; printed without a traceback (exit status 2)."""


def log(message: str = "") -> None:
    print(message, flush=True)


@dataclass
class Settings:
    """What one invocation runs, and where."""

    out: Path
    benches: list[str]
    latencies: list[float]
    reps: int
    offline: bool
    timeout: float | None
    max_concurrency: int | None
    python: str = sys.executable
    femwa_python: str | None = None
    modules: dict[str, Path] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def scripts(self) -> Path:
        return self.out / "scripts"

    def limit(self, bench: str) -> float:
        """The time one run of ``bench`` may take: 300 s, more for long benches."""
        if self.timeout:
            return self.timeout
        kind, n = scripts.parse(bench)
        calls = scripts.expected(bench).model_calls
        return max(300.0, 1.2 * calls, 0.01 * n if kind == "assign" else 0.0)


def parse_arguments(arguments: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench compare",
        description=f"Compare fems2py's generated modules with FemWA {FEMWA_VERSION} on the "
        "same workloads, through the same fake OpenAI-compatible server on 127.0.0.1.",
        epilog="Benches: chain_N, par_N, assign_N (N even) and werewolf_Rr; the default set is "
        + ",".join(scripts.DEFAULT_BENCHES)
        + ". Ratios are fems2py / FemWA (below 1: fems2py is faster).",
    )
    parser.add_argument("--benches", default=",".join(scripts.DEFAULT_BENCHES))
    parser.add_argument("--latencies", default="0,50", help="fake server delays in ms")
    parser.add_argument("--reps", type=int, default=3, help="runs per engine and bench")
    parser.add_argument("--out", metavar="DIR", help="default: a new fems-bench-TIME in $TMPDIR")
    parser.add_argument(
        "--max-concurrency",
        type=int,
        metavar="N",
        help="max_concurrency = N in the par scripts' meta (fems2py's cap, default 8; FemWA "
        "ignores it and uses a pool of 10)",
    )
    parser.add_argument("--timeout", type=float, metavar="S", help="limit for one run")
    parser.add_argument(
        "--python",
        metavar="PATH",
        default=sys.executable,
        help="the interpreter that builds and runs the modules, with fems2py installed "
        "(default: this one; another venv's compares another checkout)",
    )
    parser.add_argument(
        "--offline",
        action="store_true",
        help="only the fems2py modules, on fems/mock (chain_N: a replies file); no server, no "
        "FemWA",
    )
    options = parser.parse_args(arguments)
    try:
        options.benches = [b.strip() for b in options.benches.split(",") if b.strip()]
        for bench in options.benches:
            scripts.parse(bench)
    except scripts.BenchError as error:
        parser.error(str(error))
    try:
        options.latencies = [float(x) for x in options.latencies.split(",") if x.strip()]
    except ValueError:
        parser.error(f"--latencies: expected numbers in ms, got {options.latencies!r}")
    if not options.benches or (not options.latencies and not options.offline) or options.reps < 1:
        parser.error("need at least one bench, one latency and one rep")
    if options.max_concurrency is not None and options.max_concurrency < 1:
        parser.error("--max-concurrency must be at least 1")
    return options


def resolve_python(path: str) -> str:
    """The interpreter's own ``sys.executable`` (so that it works under the scrubbed ``PATH``);
    it must import fems2py and fems_runtime."""
    probe = "import sys, fems2py, fems_runtime; print(sys.executable)"
    try:
        done = subprocess.run([path, "-c", probe], capture_output=True, text=True, timeout=120)
    except OSError as error:
        raise SetupError(f"--python {path}: {error}") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["?"])[-1]
        raise SetupError(f"--python {path} cannot import fems2py and fems_runtime: {last}")
    return done.stdout.strip().splitlines()[-1]


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "fems-bench"


def femwa_python() -> str:
    """``bin/python`` of a venv with ``femwa==1.1.11``, made once under the cache directory."""
    venv = cache_dir() / f"femwa-{FEMWA_VERSION}"
    python = venv / "bin" / "python"
    if (venv / ".complete").exists() and python.exists():
        return str(python)
    venv.parent.mkdir(parents=True, exist_ok=True)
    # built beside its final place and renamed at the end: an interrupted install leaves no
    # half-made venv that a later run would trust
    work = Path(tempfile.mkdtemp(prefix=f"femwa-{FEMWA_VERSION}.partial-", dir=venv.parent))
    log(f"making the FemWA {FEMWA_VERSION} venv (once): {venv}")
    try:
        subprocess.run([sys.executable, "-m", "venv", str(work)], check=True)
        new_python = str(work / "bin" / "python")
        install = [new_python, "-m", "pip", "install", "-q", f"femwa=={FEMWA_VERSION}"]
        subprocess.run(install, check=True)
        version = "import importlib.metadata as m; print(m.version('femwa'))"
        got = subprocess.run(
            [new_python, "-c", version], capture_output=True, text=True, check=True
        ).stdout.strip()
        if got != FEMWA_VERSION:
            raise SetupError(f"pip installed femwa {got}, not {FEMWA_VERSION}")
        (work / ".complete").write_text(f"femwa=={FEMWA_VERSION}\n")
        work.chmod(0o755)
        if venv.exists() and not (venv / ".complete").exists():
            shutil.rmtree(venv)  # left by an older, interrupted attempt
        try:
            os.rename(work, venv)
        except OSError:  # another run finished its venv first: use that one
            if not (venv / ".complete").exists():
                raise
    except subprocess.CalledProcessError as error:
        raise SetupError(
            f"could not make the FemWA venv ({error}); check that pip can install "
            f"femwa=={FEMWA_VERSION}, or use --offline to run the fems2py modules alone"
        ) from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return str(python)


def _output_line(command: list[str]) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
        return (done.stdout.strip() or done.stderr.strip()).splitlines()[-1]
    except (OSError, subprocess.SubprocessError, IndexError):
        return "?"


def project_commit() -> str | None:
    """The checkout's commit (with ``+dirty``), when run from the project's folder."""
    head = _output_line(["git", "rev-parse", "--short", "HEAD"])
    if head == "?" or " " in head:
        return None
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout.strip()
    return head + ("+dirty" if dirty else "")


def build_modules(settings: Settings) -> dict[str, Path]:
    """Write the scripts into ``OUT/scripts`` and build each with ``fems2py build``."""
    written = scripts.write(settings.scripts, settings.benches, settings.max_concurrency)
    modules = {}
    for bench, source in written.items():
        module = settings.scripts / f"{bench}.py"
        began = time.perf_counter()
        done = subprocess.run(
            [settings.python, "-m", "fems2py", "build", str(source), "-o", str(module)],
            capture_output=True,
            text=True,
            timeout=600,
        )
        seconds = time.perf_counter() - began
        settings.meta["build_s"][bench] = round(seconds, 3)
        if done.returncode != 0:
            problem = (done.stderr or done.stdout).strip()
            log(f"fems2py build {bench}.fems failed (exit {done.returncode}); skipping {bench}:")
            log("    " + problem.replace("\n", "\n    "))
            settings.meta["build_errors"][bench] = problem
            continue
        modules[bench] = module
        log(f"built {bench}.py in {seconds:.2f} s")
    return modules


# ---------------------------------------------------------------- processes


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def run_measured(command: list[str], env: dict[str, str], folder: Path, limit: float) -> dict:
    """Run ``command`` in a process group of its own: wall time, peak RSS (``wait4``), exit
    status and the epoch time of the launch; killed after ``limit`` seconds."""
    fired = threading.Event()
    with open(folder / "stdout.log", "wb") as stdout, open(folder / "stderr.log", "wb") as stderr:
        launch = time.time()
        began = time.perf_counter()
        process = subprocess.Popen(
            command,
            env=env,
            cwd=folder,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
        )

        def stop() -> None:
            fired.set()
            _kill_group(process.pid)

        timer = threading.Timer(limit, stop)
        timer.daemon = True
        timer.start()
        reaped = False
        try:
            _, status, usage = os.wait4(process.pid, 0)
            wall = time.perf_counter() - began
            reaped = True
        finally:
            timer.cancel()
            if not reaped:  # interrupted: take the whole process group down too
                _kill_group(process.pid)
                with contextlib.suppress(ChildProcessError):
                    os.wait4(process.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    process.returncode = code
    return {
        "rc": code,
        "timed_out": fired.is_set(),
        "wall_s": wall,
        "rss_mb": usage.ru_maxrss / 1024,  # Linux reports KiB
        "user_s": usage.ru_utime,
        "sys_s": usage.ru_stime,
        "launch_epoch": launch,
    }


class FakeServer:
    """``bench/fake_server.py`` at one latency: it prints its port, records the arrival of every
    completion request, and exits when its standard input (held here) closes."""

    def __init__(self, delay_ms: float, out: Path) -> None:
        self.log = open(out / f"server-lat{delay_ms:g}.log", "w")  # noqa: SIM115 (closed in stop)
        self.process = subprocess.Popen(
            [sys.executable, "-B", str(HERE / "fake_server.py"), f"{delay_ms:g}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )
        assert self.process.stdout is not None
        first = self.process.stdout.readline().strip()
        if not first.isdigit():
            self.stop()
            raise SetupError(f"the fake server did not start; see {self.log.name}")
        self.port = int(first)
        self.base = f"http://{LOOPBACK}:{self.port}/v1"
        self.opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def arrivals(self) -> list[float]:
        """The arrival times of the requests since the last call (and forget them)."""
        with self.opener.open(f"http://{LOOPBACK}:{self.port}/arrivals", timeout=30) as answer:
            return [float(t) for t in json.loads(answer.read().decode())]

    def stop(self) -> None:
        """Close its input (it exits), kill it if it does not; safe to call twice."""
        if self.process.poll() is None:
            with contextlib.suppress(OSError):
                assert self.process.stdin is not None
                self.process.stdin.close()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        if self.process.stdout is not None:
            self.process.stdout.close()
        self.log.close()


# ---------------------------------------------------------------- one run


def scrubbed_env(home: str, **extra: str) -> dict[str, str]:
    """Only these variables, as ``env -i`` gives: no real key or proxy setting leaks in."""
    env = {
        "PATH": SCRUBBED_PATH,
        "HOME": home,
        "LANG": "C.UTF-8",
        "NO_PROXY": f"{LOOPBACK},localhost",
        "no_proxy": f"{LOOPBACK},localhost",
    }
    env.update(extra)
    return env


def _read_json(path: Path) -> dict:
    try:
        return dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        return {}


def _compress_big_logs(folder: Path) -> None:
    """FemWA prints a lot: logs over 1 MB are gzipped."""
    for name in ("stdout.log", "stderr.log"):
        path = folder / name
        if path.exists() and path.stat().st_size > 1_000_000:
            with open(path, "rb") as source, gzip.open(f"{path}.gz", "wb") as target:
                shutil.copyfileobj(source, target)
            path.unlink()


def _last_line(path: Path) -> str:
    try:
        lines = [x for x in path.read_text(errors="replace").splitlines() if x.strip()]
    except OSError:
        return ""
    return lines[-1][:200] if lines else ""


def _command(settings: Settings, system: str, bench: str, home: str, result: Path,
             folder: Path, server: FakeServer | None) -> tuple[list[str], dict[str, str]]:  # fmt: skip
    """The command line and environment of one run of ``system``."""
    module = str(settings.modules[bench])
    database = os.path.join(home, "fems.db")
    if system == "femwa":
        assert server is not None and settings.femwa_python is not None
        env = scrubbed_env(
            home,
            OPENAI_API_KEY=FAKE_KEY,
            OPENAI_API_MODEL="fake-model",
            OPENAI_API_URL=f"{server.base}/chat/completions",
        )
        source = str(settings.scripts / f"{bench}.fems")
        script = str(HERE / "femwa_headless.py")
        return [settings.femwa_python, script, source, "--result", str(result)], env
    if system == "fems2py":
        assert server is not None
        env = scrubbed_env(
            home, OPENAI_API_KEY=FAKE_KEY, OPENAI_API_BASE=server.base, OPENAI_BASE_URL=server.base
        )
        model = ["--model", "openai/fake-model"]
        return [settings.python, module, *model, "--db", database, "--result", str(result)], env
    if scripts.parse(bench)[0] == "chain":
        model = ["--replies", str(settings.scripts / "chain_replies.json")]
    else:
        model = ["--model", "fems/mock", "--seed", "1"]
    timed = [settings.python, str(HERE / "timed_main.py"), module, str(folder / "timings.json")]
    return [*timed, "--", *model, "--db", database, "--result", str(result)], scrubbed_env(home)


def run_one(settings: Settings, system: str, bench: str, latency: float | None, rep: int,
            server: FakeServer | None) -> dict:  # fmt: skip
    """One measured run of ``system``: ``femwa``, ``fems2py``, or ``offline`` (the module on
    ``fems/mock``)."""
    where = f"lat{latency:g}" if latency is not None else "offline"
    folder = settings.out / "runs" / where / bench / f"r{rep}-{system}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    home = tempfile.mkdtemp(prefix="home-", dir=folder)
    result_file = folder / "result.json"
    command, env = _command(settings, system, bench, home, result_file, folder, server)
    record: dict[str, Any] = {
        "system": system,
        "bench": bench,
        "latency_ms": latency,
        "rep": rep,
        "loadavg_1m": os.getloadavg()[0],
        "cmd": command,
        "run_dir": str(folder),
    }
    try:
        if server is not None:
            server.arrivals()  # forget the previous run's requests
        record.update(run_measured(command, env, folder, settings.limit(bench)))
        if server is not None:
            arrivals = server.arrivals()
            record["requests"] = len(arrivals)
            record["ttfr_s"] = arrivals[0] - record["launch_epoch"] if arrivals else None
            # the mean gap between requests: the cost per call once the program is up
            spans = (
                (arrivals[-1] - arrivals[0]) / (len(arrivals) - 1) if len(arrivals) > 1 else None
            )
            record["span_ms_per_call"] = 1000 * spans if spans is not None else None
    finally:
        shutil.rmtree(home, ignore_errors=True)  # the database: big for werewolf, not needed
    result = _read_json(result_file)
    if system == "femwa":
        record["vars"] = result.get("final_vars", {})
        record["model_calls"] = result.get("llm_calls")
        record["run_s"] = result.get("run_s")
    else:
        record["vars"] = result.get("vars", {})
        record["steps"] = result.get("steps")
        done = COMPLETED.search((folder / "stderr.log").read_text(errors="replace"))
        record["model_calls"] = int(done.group(2)) if done else None
        if system == "offline":
            record["run_s"] = _read_json(folder / "timings.json").get("main_s")
    record["error"] = result.get("error")
    if record["rc"] != 0 and not record["error"]:
        record["error"] = _last_line(folder / "stderr.log")
    record["problems"] = problems_of(bench, record)
    _compress_big_logs(folder)
    return record


def problems_of(bench: str, record: dict) -> list[str]:
    """What is wrong with one run: its exit status, final variables, request or call count."""
    if record["timed_out"]:
        return ["timed out"]
    if record["rc"] != 0:
        return [f"exit {record['rc']}: {record.get('error') or '?'}"]
    want = scripts.expected(bench)
    problems = []
    for name, value in want.variables.items():
        got = record["vars"].get(name)
        try:
            fits = float(got) == value  # FemWA reports the numbers it incremented as floats
        except (TypeError, ValueError):
            fits = False
        if not fits:
            problems.append(f"{name}={got!r}, expected {value}")
    count = record.get("requests", record.get("model_calls"))
    if count is not None and count != want.model_calls:
        problems.append(f"{count} model calls, expected {want.model_calls}")
    return problems


def progress(record: dict) -> None:
    where = f"lat {record['latency_ms']:g} ms" if record["latency_ms"] is not None else "offline"
    parts = [
        f"{where:<11} {record['bench']:<13} r{record['rep']} {SYSTEMS[record['system']]:<15}",
        f"wall {record['wall_s']:7.2f} s",
        f"rss {record['rss_mb']:4.0f} MB",
    ]
    if record["system"] == "offline" and record.get("run_s") is not None:
        parts.append(f"run {record['run_s']:.2f} s")
    if "requests" in record:
        parts.append(f"req {record['requests']:4d}")
        if record.get("ttfr_s") is not None:
            parts.append(f"ttfr {record['ttfr_s']:.2f} s")
    problems = record["problems"]
    parts.append("ok" if not problems else "PROBLEM: " + "; ".join(problems))
    log("  ".join(parts))


# ---------------------------------------------------------------- tables


def _median(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _shown(value: float | None, spec: str = ".2f", suffix: str = "") -> str:
    return "–" if value is None else f"{value:{spec}}{suffix}"


def table(headers: list[str], rows: list[list[str]]) -> str:
    """An aligned Markdown table."""
    widths = [max(len(row[i]) for row in [headers, *rows]) for i in range(len(headers))]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(headers), rule, *map(line, rows)])


def _clean(runs: list[dict]) -> list[dict]:
    return [r for r in runs if not r["problems"]]


def _counts(runs: list[dict]) -> str:
    counts = [r.get("requests") for r in runs]
    if counts and all(c == counts[0] for c in counts):
        return str(counts[0])
    return ",".join("?" if c is None else str(c) for c in counts) or "–"


def summarize(settings: Settings, runs: list[dict]) -> tuple[str, list[str], list[dict]]:
    """The comparison table, its warnings and its rows as data."""
    rows, warnings, data = [], [], []
    for latency in settings.latencies:
        for bench in settings.benches:
            mine = [r for r in runs if r["bench"] == bench and r["latency_ms"] == latency]
            if not mine:
                continue
            femwa = sorted((r for r in mine if r["system"] == "femwa"), key=lambda r: r["rep"])
            ours = sorted((r for r in mine if r["system"] == "fems2py"), key=lambda r: r["rep"])
            ratios = []
            for theirs in femwa:
                pair = next((r for r in ours if r["rep"] == theirs["rep"]), None)
                if pair is None:
                    continue
                if theirs.get("requests") != pair.get("requests"):
                    warnings.append(
                        f"WARNING {bench} lat {latency:g} ms rep {theirs['rep']}: the server got "
                        f"{theirs.get('requests')} requests from FemWA but "
                        f"{pair.get('requests')} from fems2py"
                    )
                if not theirs["problems"] and not pair["problems"]:
                    ratios.append(pair["wall_s"] / theirs["wall_s"])
            warnings += [
                f"WARNING {bench} lat {latency:g} ms rep {r['rep']} {SYSTEMS[r['system']]}: "
                + "; ".join(r["problems"])
                + f" (see {r['run_dir']})"
                for r in mine
                if r["problems"]
            ]
            row = {
                "bench": bench,
                "latency_ms": latency,
                "reps": max(len(femwa), len(ours)),
                "femwa_wall_s": _median(r["wall_s"] for r in _clean(femwa)),
                "f2p_wall_s": _median(r["wall_s"] for r in _clean(ours)),
                "ratio": _median(ratios),
                "femwa_ttfr_s": _median(r.get("ttfr_s") for r in _clean(femwa)),
                "f2p_ttfr_s": _median(r.get("ttfr_s") for r in _clean(ours)),
                "femwa_rss_mb": _median(r["rss_mb"] for r in _clean(femwa)),
                "f2p_rss_mb": _median(r["rss_mb"] for r in _clean(ours)),
                "femwa_span_ms_per_call": _median(r.get("span_ms_per_call") for r in _clean(femwa)),
                "f2p_span_ms_per_call": _median(r.get("span_ms_per_call") for r in _clean(ours)),
                "femwa_requests": [r.get("requests") for r in femwa],
                "f2p_requests": [r.get("requests") for r in ours],
            }
            row["ok"] = all(not r["problems"] for r in mine) and (
                row["femwa_requests"] == row["f2p_requests"]
            )
            data.append(row)
            rows.append(
                [
                    bench,
                    f"{latency:g}",
                    str(row["reps"]),
                    _shown(row["femwa_wall_s"]),
                    _shown(row["f2p_wall_s"]),
                    _shown(row["ratio"], ".2f", "x"),
                    _shown(row["femwa_ttfr_s"]),
                    _shown(row["f2p_ttfr_s"]),
                    _shown(row["femwa_rss_mb"], ".0f"),
                    _shown(row["f2p_rss_mb"], ".0f"),
                    f"{_counts(femwa)} / {_counts(ours)}",
                    "ok" if row["ok"] else "WARNING",
                ]
            )
    headers = [
        "bench", "lat ms", "reps", "FemWA s", "fems2py s", "ratio", "TTFR FemWA s",
        "TTFR fems2py s", "RSS FemWA MB", "RSS fems2py MB", "requests FemWA / fems2py", "check",
    ]  # fmt: skip
    return table(headers, rows), warnings, data


def summarize_offline(settings: Settings, runs: list[dict]) -> tuple[str, list[str], list[dict]]:
    """The offline table: the engine's time per model call and per step."""
    rows, warnings, data = [], [], []
    for bench in settings.benches:
        mine = [r for r in runs if r["bench"] == bench]
        if not mine:
            continue
        clean = _clean(mine)
        warnings += [
            f"WARNING {bench} rep {r['rep']}: "
            + "; ".join(r["problems"])
            + f" (see {r['run_dir']})"
            for r in mine
            if r["problems"]
        ]
        run_s = _median(r.get("run_s") for r in clean)
        steps = _median(r.get("steps") for r in clean)
        calls = _median(r.get("model_calls") for r in clean)
        row = {
            "bench": bench,
            "reps": len(mine),
            "model": "replies file" if scripts.parse(bench)[0] == "chain" else "fems/mock",
            "process_wall_s": _median(r["wall_s"] for r in clean),
            "run_s": run_s,
            "steps": steps,
            "model_calls": calls,
            "us_per_call": 1e6 * run_s / calls if run_s and calls else None,
            "us_per_step": 1e6 * run_s / steps if run_s and steps else None,
            "rss_mb": _median(r["rss_mb"] for r in clean),
            "ok": len(clean) == len(mine),
        }
        data.append(row)
        rows.append(
            [
                bench,
                str(row["reps"]),
                str(row["model"]),
                _shown(row["process_wall_s"]),
                _shown(run_s),
                _shown(steps, ".0f"),
                _shown(calls, ".0f"),
                _shown(row["us_per_call"], ".0f"),
                _shown(row["us_per_step"], ".0f"),
                _shown(row["rss_mb"], ".0f"),
                "ok" if row["ok"] else "WARNING",
            ]
        )
    headers = [
        "bench", "reps", "model", "process s", "run s", "steps", "model calls", "µs/call",
        "µs/step", "RSS MB", "check",
    ]  # fmt: skip
    return table(headers, rows), warnings, data


# ---------------------------------------------------------------- main


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def run(settings: Settings) -> tuple[list[dict], bool]:
    """Every run of the comparison; whether it was interrupted."""
    runs: list[dict] = []
    results = settings.out / "results.json"

    def save() -> None:
        settings.meta["loadavg_end"] = os.getloadavg()
        partial = results.with_suffix(".tmp")
        body = {"meta": settings.meta, "runs": runs}
        partial.write_text(json.dumps(body, indent=1, ensure_ascii=False, default=str))
        partial.replace(results)

    benches = [b for b in settings.benches if b in settings.modules]
    servers: list[FakeServer] = []
    try:
        if settings.offline:
            for bench in benches:
                for rep in range(1, settings.reps + 1):
                    runs.append(run_one(settings, "offline", bench, None, rep, None))
                    progress(runs[-1])
                    save()
        for latency in [] if settings.offline else settings.latencies:
            server = FakeServer(latency, settings.out)
            servers.append(server)
            log(f"== fake server on port {server.port}, delay {latency:g} ms")
            for bench in benches:
                for rep in range(1, settings.reps + 1):
                    # alternate the order, so that drift in the machine's load hits both alike
                    order = ("femwa", "fems2py") if rep % 2 else ("fems2py", "femwa")
                    for system in order:
                        runs.append(run_one(settings, system, bench, latency, rep, server))
                        progress(runs[-1])
                        save()
            server.stop()
    except KeyboardInterrupt:
        log("interrupted: stopping; the table below covers the finished runs")
        return runs, True
    finally:
        for server in servers:
            server.stop()
        save()
    return runs, False


def main(arguments: list[str]) -> int:
    options = parse_arguments(arguments)
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGHUP, _interrupt)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = Path(options.out or Path(tempfile.gettempdir()) / f"fems-bench-{stamp}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    settings = Settings(
        out=out,
        benches=options.benches,
        latencies=options.latencies,
        reps=options.reps,
        offline=options.offline,
        timeout=options.timeout,
        max_concurrency=options.max_concurrency,
        python=resolve_python(options.python),
    )
    settings.femwa_python = None if options.offline else femwa_python()
    settings.meta = meta = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "argv": arguments,
        "mode": "offline" if options.offline else "network",
        "benches": options.benches,
        "latencies_ms": None if options.offline else options.latencies,
        "reps": options.reps,
        "max_concurrency": options.max_concurrency,
        "fems2py_version": _output_line([settings.python, "-m", "fems2py", "--version"]),
        "project_commit": project_commit(),
        "python": settings.python,
        "python_version": _output_line([settings.python, "--version"]),
        "femwa_python": settings.femwa_python,
        "femwa_version": None if options.offline else FEMWA_VERSION,
        "cpus": os.cpu_count(),
        "loadavg_start": os.getloadavg(),
        "build_s": {},
        "build_errors": {},
    }
    against = "fems/mock, offline" if options.offline else f"FemWA {FEMWA_VERSION}"
    log(
        f"{meta['fems2py_version']} ({meta['python_version']}) vs {against}; project "
        f"{meta['project_commit'] or '?'}; {meta['cpus']} CPUs, load {meta['loadavg_start'][0]:.1f}"
    )
    log(f"out: {out}")
    settings.modules = build_modules(settings)
    runs, interrupted = run(settings)
    summary = summarize_offline if options.offline else summarize
    text, warnings, rows = summary(settings, runs)
    meta["summary"], meta["interrupted"] = rows, interrupted
    (out / "results.json").write_text(
        json.dumps({"meta": meta, "runs": runs}, indent=1, ensure_ascii=False, default=str)
    )
    note = (
        "run s = time inside PROGRAM.main, with about 0.3 s of one-time store set-up; "
        "µs/call = run s / model calls; µs/step = run s / steps"
        if options.offline
        else "ratio = median over reps of fems2py wall / FemWA wall (below 1: fems2py faster); "
        "TTFR = time from process launch to the server's first request"
    )
    text = "\n".join([text, "", note, *warnings])
    (out / "summary.md").write_text(text + "\n", encoding="utf-8")
    log("")
    log(text)
    log(f"\nresults: {out / 'results.json'}")
    if interrupted:
        return 130
    return 1 if warnings or meta["build_errors"] else 0


def command(arguments: list[str]) -> int:
    """``python -m bench compare …``: setup errors and Ctrl-C without a traceback."""
    try:
        return main(arguments)
    except SetupError as error:
        print(f"python -m bench compare: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("python -m bench compare: interrupted", file=sys.stderr)
        return 130
