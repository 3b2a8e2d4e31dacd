"""One session of a batch, run where a worker is: a process of the local pool or a Ray task.

A worker imports the built module once (from its path, or from the source the batch ships when
the path does not exist there: another machine of a Ray cluster) and runs each session it is
given as a normal session of the store, tagged with the batch (:class:`~fems2py.batch.table.BatchTag`). A session
that was started before (an interrupted or failed run of this batch) is resumed from its turn
records (§16.4), so nothing is called or stored twice. This module imports only the runtime.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import copy
import hashlib
import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import IO, Any, cast

from fems_runtime import otel
from fems_runtime.app import Program
from fems_runtime.funcs import load_code
from fems_runtime.limits import CostLimit
from fems_runtime.lineage import Branch, open_branch
from fems_runtime.llm import FALLBACK_NOTICE
from fems_runtime.options import replies_conflict
from fems_runtime.records import RunError
from fems_runtime.store import Store

from fems2py.batch import UsageError
from fems2py.batch.sets import initial_values
from fems2py.batch.table import BatchTable, BatchTag, played_models


@dataclass(frozen=True)
class ModuleBundle:
    """A built module as a worker needs it: its path, and its source and ``code:`` files
    (by file name) for a machine where the path does not exist."""

    path: str
    source: str
    code: Mapping[str, str] = field(default_factory=dict)

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.source.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class BatchSpec:
    """What every session of a batch shares, sent once to each worker."""

    batch: str
    module: ModuleBundle
    db: str
    human: str = "fems/mock"
    project_dir: str | None = None
    replies: Mapping[str, Any] | None = None
    sets: Mapping[str, str] = field(default_factory=dict)  # --set NAME=VALUE, as written
    timeout: float | None = None
    retry_budget: float | None = None
    root: str | None = None
    max_cost: float | None = None  # the whole batch's (§15.6)
    fork: Branch | None = None  # every session continues this branch point (§16.4a)
    #: the OTEL_* variables of the batch when its sessions export (None: they do not), for
    #: workers on machines that lack them (Ray)
    otel: Mapping[str, str] | None = None


@dataclass(frozen=True)
class Job:
    """One session of the batch: its index, seed and model, and the session to resume
    (None: start a new one)."""

    index: int
    seed: int
    model: str | None
    session: int | None = None

    def settings(self, sets: Mapping[str, str]) -> dict[str, Any]:
        """The run's settings as the store and the results table keep them."""
        return {"seed": self.seed, "model": self.model, "set": dict(sets)}

    def row(self, status: str, **cells: Any) -> dict[str, Any]:
        """The results-table row of a session that did not run to an end here (a failed
        worker, not started, stopped): who it is, its status, and ``cells``."""
        return {
            "index": self.index,
            "seed": self.seed,
            "model": self.model,
            "session": self.session,
            "status": status,
            **cells,
        }


def load_module(bundle: ModuleBundle) -> ModuleType:
    """Import the built module (once per process, :func:`fems_runtime.funcs.load_code`), from
    its path when it is there with the same source, else from a copy (with its code files
    beside it, where a module looks for them) in a folder named after its digest."""
    path = Path(bundle.path)
    if not (path.is_file() and path.read_text(encoding="utf-8") == bundle.source):
        folder = Path(tempfile.gettempdir()) / f"fems2py-batch-{bundle.digest[:16]}"
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in bundle.code.items():
            _write_whole(folder / name, text)
        path = folder / path.name
        _write_whole(path, bundle.source)
    return load_code(path)


def _write_whole(path: Path, text: str) -> None:
    """Write a file another worker on the machine may be importing: never half-written."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


_programs: dict[str, Program] = {}
_tables: dict[str, BatchTable] = {}


def _program(spec: BatchSpec) -> Program:
    """The batch's program, imported once per worker process, with the ``--set`` values."""
    program = _programs.get(spec.batch)
    if program is None:
        module = load_module(spec.module)
        program = copy.copy(module.PROGRAM)
        if spec.project_dir is not None and Path(spec.project_dir).is_dir():
            program.project_dir = spec.project_dir
        program.variables = {**program.variables, **initial_values(program, spec.sets)}
        _programs[spec.batch] = program
    return program


def _batch_table(db: str) -> BatchTable:
    """The worker's own connection for tagging and accounting (a run opens its own)."""
    table = _tables.get(db)
    if table is None:
        table = _tables[db] = BatchTable(Store(db))
        atexit.register(table.store.close)
    return table


STOP_SIGNAL = signal.SIGUSR1  # the batch asks a pool worker to stop its session
_in_pool = False


def start_worker(log: str) -> None:
    """A pool worker's initializer. Ctrl-C reaches the whole process group, but only the
    batch decides how its workers stop (with :data:`STOP_SIGNAL`, see :func:`run_job`; SIGTERM
    stays the pool's way to end a worker at once); what runs print on stderr (notices, run
    warnings) goes to the batch's log, not over its progress."""
    global _in_pool
    _in_pool = True
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(STOP_SIGNAL, signal.SIG_IGN)
    sys.stderr = open(log, "a", encoding="utf-8", buffering=1)  # noqa: SIM115 (the process's)


def run_job(spec: BatchSpec, job: Job) -> dict[str, Any]:
    """Run (or resume) one session and return its row of the results table. A run error is
    a ``failed`` row; :data:`STOP_SIGNAL` (in a pool worker) or a Ray cancel ends the session
    as the runtime ends an interrupted one (its
    store flushed, resumable) and the row is ``interrupted``."""
    program = _program(spec)
    table = _batch_table(spec.db)
    store = table.store
    settings = job.settings(spec.sets)
    session, resume, branch = job.session, False, False
    if session is None:
        session = _new_session(table, program, spec, BatchTag(spec.batch, job.index, settings))
        branch = spec.fork is not None  # a branch begins as a resumed run (§16.4a)
    elif (store.session(session) or {}).get("status") == "completed":
        # it completed, but its worker died before reporting it
        return completed_row(store, job, settings, table.runs(spec.batch)[job.index])
    else:
        resume = store.run_records(session) is not None
    started = time.perf_counter()
    limit = None
    if spec.max_cost is not None:  # the batch's limit counts the other sessions too
        others = BatchSpending(table, spec.batch, session)
        again = "run the batch again with a higher --max-cost"
        limit = CostLimit(spec.max_cost, elsewhere=others, what="the batch", again=again)
    with tempfile.TemporaryDirectory(prefix="fems2py-batch-") as folder:
        result_file = Path(folder) / "result.json"
        replays = resume or branch
        with _watched_stderr() as stderr:
            run = _run(program, spec, job, session, replays, result_file, limit)
            status, error = asyncio.run(run)
        ended = _read_result(result_file)
    # the session's spans sent before its row (a worker may end any time after); a missing
    # collector is reported in the row, for the batch to say once
    otel_warning = otel.flush()
    row: dict[str, Any] = {
        "index": job.index,
        **settings,
        "model": job.model or _played(store, session),
        "fell_back": stderr.fell_back,
        "otel_warning": otel_warning or None,
        "session": session,
        "status": status,
        "steps": ended.get("steps", 0),
        **store.session_usage(session),
        "wall_s": round(time.perf_counter() - started, 3),
        "resumed": resume,
        "error": error,
        "vars": ended.get("vars", {}),
    }
    if status != "interrupted":
        table.save_result(spec.batch, job.index, row)
    return row


def _new_session(table: BatchTable, program: Program, spec: BatchSpec, tag: BatchTag) -> int:
    """A new session of the batch, tagged; with ``--fork``, one that branches from the
    batch's branch point (checked, with its notices, when the batch was prepared)."""
    title = str(program.script.meta.get("name") or "") or None
    script = program.script
    if spec.fork is None:
        return table.open_session(tag, title=title, script=script.file, script_hash=script.sha256)
    return open_branch(
        table.store,
        spec.fork,
        title=title,
        script=script.file,
        script_hash=script.sha256,
        warn=lambda text: None,
        on_create=table.tag_writer(tag),
    )


def completed_row(
    store: Store, job: Job, settings: Mapping[str, Any], run: Mapping[str, Any]
) -> dict[str, Any]:
    """The row of a completed session (``run``: its entry of :meth:`BatchTable.runs`): the
    one its worker kept, else (the worker died between the two writes) one from the store,
    without final variables."""
    if run["result"] is not None:
        return dict(run["result"])
    session = int(run["session"])
    return {
        "index": job.index,
        **settings,
        "model": job.model or _played(store, session),
        "session": session,
        "status": "completed",
        **store.session_usage(session),
        "error": "final variables unknown: the worker stopped before keeping them",
        "vars": {},
    }


def _played(store: Store, session: int) -> str | None:
    """The model(s) a session played when the batch named none (``fems/mock`` when the
    script names none either)."""
    return ", ".join(played_models(store, session)) or None


class _NoticeWatch:
    """``sys.stderr`` while a session runs: what the run writes goes on to the stream it
    replaced (a pool worker's is the batch's log), and whether it fell back to the offline
    model is noted, for the batch to say on its own stderr."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.fell_back = False

    def write(self, text: str) -> int:
        if FALLBACK_NOTICE in text:
            self.fell_back = True
        return self.stream.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


@contextlib.contextmanager
def _watched_stderr() -> Iterator[_NoticeWatch]:
    """``sys.stderr`` watched for the model fallback's notice while a session runs."""
    stream = sys.stderr
    watch = _NoticeWatch(stream)
    sys.stderr = cast(IO[str], watch)
    try:
        yield watch
    finally:
        sys.stderr = stream


class BatchSpending:
    """What the sessions of a batch have recorded, but ``session`` (None: all of them), for
    the batch's cost limit (§15.6): read from the store each time, except the cost of a
    completed session, which no longer changes and is read once."""

    def __init__(self, table: BatchTable, batch: str, session: int | None = None) -> None:
        self.table = table
        self.batch = batch
        self.session = session
        self._final: dict[int, float] = {}

    def __call__(self) -> float:
        total = 0.0
        for run in self.table.runs(self.batch).values():
            number = int(run["session"])
            if number == self.session:
                continue
            cost = self._final.get(number)
            if cost is None:
                cost = float(self.table.store.session_usage(number)["cost"])
                if run["status"] == "completed":
                    self._final[number] = cost
            total += cost
        return total


async def _run(
    program: Program,
    spec: BatchSpec,
    job: Job,
    session: int,
    resume: bool,
    result: Path,
    limit: CostLimit | None = None,
) -> tuple[str, str | None]:
    """The session on this event loop; in a pool worker, :data:`STOP_SIGNAL` cancels it."""
    task = asyncio.ensure_future(
        program.run_async(
            model=job.model,
            # in a sweep of models, a session whose model the replies contradict gets none
            replies=None if replies_conflict(job.model, spec.replies) else spec.replies,
            db=spec.db,
            session=session,
            resume=resume,
            human=spec.human,
            seed=job.seed,
            result=result,
            timeout=spec.timeout,
            retry_budget=spec.retry_budget,
            root=spec.root,
            max_cost=limit,
            otel=_otel_tags(spec, job),
        )
    )
    loop = asyncio.get_running_loop()
    if _in_pool:
        loop.add_signal_handler(STOP_SIGNAL, task.cancel)
    try:
        await task
    except RunError as error:
        return "failed", str(error)
    except asyncio.CancelledError:
        return "interrupted", "interrupted"
    finally:
        if _in_pool:
            loop.remove_signal_handler(STOP_SIGNAL)
            signal.signal(STOP_SIGNAL, signal.SIG_IGN)  # between sessions
    return "completed", None


def otel_settings(option: bool | None) -> dict[str, str] | None:
    """What the batch's sessions need to export (``--otel``, else the OTEL_* variables say):
    the batch process's OTEL_* variables; None when they do not export. A missing extra is
    a :class:`UsageError` before any session starts."""
    if not otel.wanted(option):
        return None
    problem = otel.missing_extra()
    if problem is not None:
        raise UsageError(problem)
    return {name: value for name, value in os.environ.items() if name.startswith("OTEL_")}


def _otel_tags(spec: BatchSpec, job: Job) -> dict[str, str | int] | bool:
    """The session's export: off, or on with the batch and the index on its span (in this
    worker's environment, the batch's OTEL_* variables filling in what it lacks)."""
    if spec.otel is None:
        return False
    for name, value in spec.otel.items():
        os.environ.setdefault(name, value)
    otel.report_absence()  # the batch says it once, not each worker's export process
    return {"batch.name": spec.batch, "batch.index": job.index}


def _read_result(path: Path) -> dict[str, Any]:
    """The run's ``--result`` file: steps and final variables (JSON-ready as written)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {"steps": data.get("steps", 0), "vars": data.get("vars") or {}}
