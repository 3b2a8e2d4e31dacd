"""``fems2py batch``: build once, then run the batch's sessions W at a time on a local process
pool or as Ray tasks, resuming what an earlier invocation left unfinished.

The store is the batch's memory: each session is tagged with the batch and its index when it
is created (:meth:`~fems2py.batch.table.BatchTable.open_session`), and its results-table row is
kept with the tag when it ends. So rerunning the same command skips the completed sessions, resumes the others from
their turn records (§16.4), and writes the table of every session, old and new. A pool
process that dies takes the pool down with it: the sessions it ran are resumed in a new pool
(up to :data:`MAX_RESTARTS` times), so a killed worker loses nothing.
"""

from __future__ import annotations

import concurrent.futures as futures
import contextlib
import dataclasses
import json
import logging
import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from fems_runtime.llm import FALLBACK_NOTICE
from fems_runtime.records import RunError

from fems2py.batch import UsageError, results
from fems2py.batch.plan import Plan, batch_id, make_plan, parse_sets
from fems2py.batch.sets import initial_values
from fems2py.batch.table import BatchTable
from fems2py.batch.worker import (
    STOP_SIGNAL,
    BatchSpec,
    BatchSpending,
    Job,
    ModuleBundle,
    completed_row,
    load_module,
    otel_settings,
    run_job,
    start_worker,
)

if TYPE_CHECKING:
    from fems_runtime.lineage import Branch

MAX_RESTARTS = 3  # pools rebuilt after a worker died, per invocation
STOP_GRACE_S = 15.0  # how long stopped sessions may take to flush and mark themselves
EXIT_OK, EXIT_FAILED, EXIT_INTERRUPTED = 0, 1, 130


@dataclass
class BatchOptions:
    """The command line of ``fems2py batch`` (see :func:`fems2py.cli`)."""

    script: Path
    runs: int | None = None
    seeds: str | None = None
    sets: Sequence[str] = ()
    models: Sequence[str] = ()
    workers: int | None = None
    db: str | None = None
    collect: Sequence[str] = ()
    out: Path | None = None
    results: Sequence[Path] = ()
    batch: str | None = None
    ray: str | None = None  # None: the process pool; "": a local Ray; else a cluster address
    human: str = "fems/mock"
    replies: Path | None = None
    souls: Path | None = None
    timeout: float | None = None
    retry_budget: float | None = None
    root: Path | None = None
    max_cost: float | None = None
    fork: str | None = None  # SESSION:TURN: every session continues that one (§16.4a)
    progress: bool = True
    otel: bool | None = None  # None: as the OTEL_* variables say (fems_runtime.otel)


@dataclass
class Prepared:
    """A batch ready to run: its spec for the workers, its plan, the jobs left to run and the
    rows of sessions an earlier invocation completed."""

    spec: BatchSpec
    plan: Plan
    collect: list[str]
    jobs: list[Job]
    rows: dict[int, dict[str, Any]] = field(default_factory=dict)


def prepare(options: BatchOptions, module_path: Path) -> Prepared:
    """Check the options against the built module and the database; raise :class:`UsageError`
    for a mistake (and :class:`fems_runtime.records.RunError` for a database that fails)."""
    plan = make_plan(options.runs, options.seeds, options.models)
    _check_settings(options)
    sets = parse_sets(options.sets)
    source = module_path.read_text(encoding="utf-8")
    program = load_module(ModuleBundle(str(module_path), source)).PROGRAM
    initial_values(program, sets)  # a --set the script cannot take: a UsageError
    collect = _collected(options, program)
    url = _database(options, program)
    fork = _branch_point(options.fork, url)
    replies = _read_replies(options.replies)
    name = batch_id(
        options.batch, program.script.file, source, plan, sets, options.human, replies, fork
    )
    spec = BatchSpec(
        batch=name,
        module=ModuleBundle(str(module_path), source, _code_files(module_path, program)),
        db=url,
        human=str(options.human),
        project_dir=str(options.script.resolve().parent),
        replies=replies,
        sets=sets,
        timeout=options.timeout,
        retry_budget=options.retry_budget,
        root=str(options.root.resolve()) if options.root is not None else None,
        max_cost=options.max_cost,
        fork=fork,
        otel=otel_settings(options.otel),
    )
    prepared = Prepared(spec, plan, collect, [])
    _sort_jobs(prepared, options.souls)
    return prepared


def _check_settings(options: BatchOptions) -> None:
    """The options that need nothing but themselves: a cost limit, an unattended human."""
    if options.max_cost is not None and not 0 <= options.max_cost < float("inf"):
        raise UsageError(
            f"--max-cost {options.max_cost:g}: give a number of US dollars ≥ 0", "e.g. --max-cost 5"
        )
    if options.human == "terminal":
        raise UsageError(
            "--human terminal: a batch runs unattended",
            "use --human fems/mock or an answers file",
        )


def _collected(options: BatchOptions, program: Any) -> list[str]:
    """The ``--collect`` variables, each one of the script's."""
    collect = [name.strip() for item in options.collect for name in item.split(",")]
    collect = [name for name in dict.fromkeys(collect) if name]
    for name in collect:
        if name not in program.variables:
            from fems2py.diagnostics import suggest

            raise UsageError(
                f"--collect {name}: the script has no variable {name!r}",
                suggest(name, program.variables) or "--collect names variables of vars:",
            )
    return collect


def _database(options: BatchOptions, program: Any) -> str:
    """The batch's database URL: one its workers share (a file, or a server for Ray)."""
    from fems_runtime.store import database_url

    db = options.db if options.db is not None else str(program.script.meta.get("database") or "")
    if options.db is not None and not options.db.strip():
        raise UsageError("--db is empty: give a database path or SQLAlchemy URL")
    url = database_url(db or None)
    if url in ("sqlite://", "sqlite:///:memory:"):
        raise UsageError(
            f"--db {db}: a batch needs a database its workers share",
            "give a SQLite file or a PostgreSQL URL",
        )
    if options.ray and url.startswith("sqlite"):
        raise UsageError(
            f"--ray {options.ray}: a cluster's machines cannot share the SQLite file {db}",
            "give --db a PostgreSQL URL every machine reaches "
            "(postgresql+psycopg://user@host/db), or run on this machine with --ray alone",
        )
    return url


def _branch_point(fork: str | None, url: str) -> Branch | None:
    """``--fork SESSION:TURN``: the turn every session branches at, checked against the
    database once (with its notice, §16.4a), so the workers branch silently."""
    if fork is None:
        return None
    from fems_runtime.lineage import Branch, fork_turn, parent_run
    from fems_runtime.store import Store

    branch = Branch.fork(fork)
    with Store(url) as store:
        if store.session(branch.parent) is None:
            raise UsageError(f"--fork {fork}: session {branch.parent} does not exist")
        run = parent_run(store, branch.parent, branch.option)
    turn = fork_turn(
        run, branch, lambda text: print(f"fems2py batch: notice: {text}", file=sys.stderr)
    )
    return Branch(branch.parent, turn)


def _sort_jobs(prepared: Prepared, souls: Path | None) -> None:
    """Which of the plan's sessions an earlier invocation completed (their rows), and which
    are left to run: new ones, and interrupted ones to resume."""
    from fems_runtime.store import Store

    spec = prepared.spec
    with Store(spec.db) as store:
        if souls is not None:
            store.seed_file(souls)
        earlier = BatchTable(store).runs(spec.batch)
        for job in prepared.plan.jobs():
            run = earlier.get(job.index)
            if run is None:
                prepared.jobs.append(job)
            elif run["status"] == "completed":
                row = completed_row(store, job, job.settings(spec.sets), run)
                prepared.rows[job.index] = row
            else:
                prepared.jobs.append(dataclasses.replace(job, session=run["session"]))


def _read_replies(path: Path | None) -> dict[str, Any] | None:
    """The ``--replies`` file, read once here so every worker (on any machine) gets it."""
    if path is None:
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise UsageError(f"--replies {path}: {error.strerror}") from None
    except ValueError as error:
        raise UsageError(f"--replies {path} is not valid JSON: {error}") from None
    if not isinstance(data, dict):
        raise UsageError(f"--replies {path}: expected a JSON object of replies (§15.3)")
    return data


def _code_files(module_path: Path, program: Any) -> dict[str, str]:
    """The module's ``code:`` files by file name, for workers where its path does not exist."""
    files = {}
    for relative in program.script.code.values():
        with contextlib.suppress(OSError, UnicodeDecodeError):
            path = module_path.parent / relative
            files[Path(relative).name] = path.read_text(encoding="utf-8")
    return files


# ---------------------------------------------------------------------- executors


class WorkerLost(Exception):
    """A job whose worker died (killed, out of memory): its session is resumed."""


class Executor(Protocol):
    """Where jobs run: the local pool or Ray."""

    slots: int
    shared_fate: bool  # one dead worker ends every running job (a broken process pool)

    def submit(self, job: Job) -> Any: ...

    def wait(self, handles: Sequence[Any], timeout: float) -> list[tuple[Any, Any]]:
        """The handles done within ``timeout``, each with its row or exception."""
        ...

    def restart(self) -> None: ...

    def stop(self, handles: Sequence[Any]) -> None:
        """Stop the running sessions (they flush and stay resumable)."""
        ...

    def close(self) -> None: ...


class PoolExecutor:
    """A process pool (spawned processes: each imports the built module once)."""

    shared_fate = True

    def __init__(self, spec: BatchSpec, workers: int, log: Path) -> None:
        self.spec = spec
        self.slots = workers
        self.log = log
        self.pool = self._new_pool()

    def _new_pool(self) -> futures.ProcessPoolExecutor:
        return futures.ProcessPoolExecutor(
            max_workers=self.slots,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=start_worker,
            initargs=(str(self.log),),
        )

    def submit(self, job: Job) -> futures.Future[dict[str, Any]]:
        return self.pool.submit(run_job, self.spec, job)

    def wait(self, handles: Sequence[Any], timeout: float) -> list[tuple[Any, Any]]:
        done, _ = futures.wait(handles, timeout=timeout, return_when=futures.FIRST_COMPLETED)
        finished = []
        for handle in done:
            error = handle.exception()
            if isinstance(error, futures.process.BrokenProcessPool):
                error = WorkerLost("a worker process died")
            finished.append((handle, error if error is not None else handle.result()))
        return finished

    def restart(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.pool = self._new_pool()

    def stop(self, handles: Sequence[Any]) -> None:
        for process in list(getattr(self.pool, "_processes", {}).values()):
            with contextlib.suppress(OSError):
                os.kill(process.pid, STOP_SIGNAL)  # the worker cancels its session (run_job)

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


class RayExecutor:
    """Ray tasks on a local Ray (started here unless one is running) or a cluster."""

    shared_fate = False

    def __init__(self, spec: BatchSpec, workers: int, address: str) -> None:
        import ray

        self.ray = ray
        self.started = False
        if not ray.is_initialized():
            try:
                if address:
                    ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
                else:
                    ray.init(
                        num_cpus=workers,
                        include_dashboard=False,
                        logging_level=logging.WARNING,
                        log_to_driver=False,
                    )
            except Exception as error:  # no cluster there, a version mismatch …
                where = f"the Ray cluster at {address}" if address else "a local Ray"
                reason = str(error).strip().splitlines()
                raise RunError(f"cannot start {where}: {reason[0] if reason else error}") from None
            self.started = True
        self.slots = workers
        self.spec_ref = ray.put(spec)
        # no retries by Ray: a retried task would start a second session; the runner
        # resumes the session a lost task started
        self.task = ray.remote(num_cpus=1, max_retries=0)(run_job)

    def machines(self) -> int:
        return sum(1 for node in self.ray.nodes() if node.get("Alive"))

    def submit(self, job: Job) -> Any:
        return self.task.remote(self.spec_ref, job)

    def wait(self, handles: Sequence[Any], timeout: float) -> list[tuple[Any, Any]]:
        exceptions = self.ray.exceptions
        ready, _ = self.ray.wait(list(handles), num_returns=1, timeout=timeout)
        finished = []
        for handle in ready:
            try:
                outcome: Any = self.ray.get(handle)
            except exceptions.TaskCancelledError:
                outcome = KeyboardInterrupt()
            except exceptions.RayTaskError as error:  # the task raised: its own exception
                outcome = error.as_instanceof_cause()
            except exceptions.RayError as error:  # its worker or machine died, out of memory …
                outcome = WorkerLost(str(error).strip().splitlines()[0])
            finished.append((handle, outcome))
        return finished

    def restart(self) -> None:
        """Nothing to rebuild: Ray replaces dead workers itself."""

    def stop(self, handles: Sequence[Any]) -> None:
        for handle in handles:
            with contextlib.suppress(Exception):
                self.ray.cancel(handle)  # KeyboardInterrupt in the task: the session flushes

    def close(self) -> None:
        if self.started:
            self.ray.shutdown()


def make_executor(options: BatchOptions, spec: BatchSpec, workers: int) -> Executor:
    """The process pool, or Ray with ``--ray`` (refusing SQLite on several machines)."""
    if options.ray is None:
        log = worker_log(options, spec.batch)
        log.parent.mkdir(parents=True, exist_ok=True)
        return PoolExecutor(spec, workers, log)
    try:
        import ray  # noqa: F401
    except ImportError:
        raise UsageError(
            "--ray needs Ray, which is not installed", "pip install 'fems2py[ray]'"
        ) from None
    executor = RayExecutor(spec, workers, options.ray)
    if spec.db.startswith("sqlite") and (machines := executor.machines()) > 1:
        executor.close()
        raise UsageError(
            f"the running Ray cluster has {machines} machines: they cannot share "
            f"the SQLite file {spec.db}",
            "give --db a PostgreSQL URL every machine reaches",
        )
    return executor


# ---------------------------------------------------------------------- running


class Display(Protocol):
    def update(self, done: int, failed: int, running: int, cost: float) -> None: ...


@dataclass
class Outcome:
    """What one invocation ran: a row per session it finished, whether it was stopped, and
    how many sessions the cost limit kept from starting."""

    rows: dict[int, dict[str, Any]] = field(default_factory=dict)
    interrupted: bool = False
    gave_up: str | None = None
    not_started: int = 0


@dataclass(frozen=True)
class CostBudget:
    """``--max-cost`` as the runner applies it (§15.6): no session starts once the batch's
    recorded cost (``spent``, read from the store) has passed ``limit``; the sessions already
    running stop by themselves, after the turn that passed it."""

    limit: float
    spent: Callable[[], float]

    def exhausted(self) -> bool:
        return self.spent() > self.limit


class WorkerNotices:
    """What sessions' workers report rather than say (a pool worker's stderr is the batch's
    log, a Ray task's is Ray's; each worker exports through a process of its own): the model
    fallback's notice and the warning that no OpenTelemetry collector answers, each said once
    for the batch, as a run says it."""

    def __init__(self) -> None:
        self.said: set[str] = set()

    def say(self, row: dict[str, Any]) -> None:
        """Say what the session of ``row`` reports that the batch has not said yet."""
        notices = {
            "fallback": FALLBACK_NOTICE if row.get("fell_back") else None,
            "otel": row.get("otel_warning"),
        }
        for kind, text in notices.items():
            if text and kind not in self.said:
                self.said.add(kind)
                print(text, file=sys.stderr)


def execute(
    executor: Executor,
    jobs: Iterable[Job],
    refresh: Callable[[list[Job]], list[Job]],
    display: Display,
    earlier: Sequence[dict[str, Any]] = (),
    budget: CostBudget | None = None,
) -> Outcome:
    """Run ``jobs`` at most ``executor.slots`` at a time; jobs whose worker died are given
    their sessions again by ``refresh`` (from the store) and resumed in a fresh pool. Once
    ``budget`` is exhausted, the jobs still waiting are not started."""
    outcome = Outcome()
    waiting = list(jobs)
    running: dict[Any, Job] = {}
    restarts = 0
    done = len(earlier)
    failed = 0
    cost = sum(row.get("cost") or 0.0 for row in earlier)
    notices = WorkerNotices()
    try:
        while waiting or running:
            while waiting and len(running) < executor.slots:
                if budget is not None and budget.exhausted():
                    outcome.not_started = len(waiting)
                    waiting.clear()
                    break
                job = waiting.pop(0)
                running[executor.submit(job)] = job
            display.update(done, failed, len(running), cost)
            lost = []
            for handle, result in executor.wait(list(running), 0.25):
                job = running.pop(handle)
                if isinstance(result, WorkerLost):
                    lost.append(job)
                    continue
                if isinstance(result, BaseException):
                    result = _error_row(job, result)
                outcome.rows[job.index] = result
                notices.say(result)
                done += result["status"] == "completed"
                failed += result["status"] != "completed"
                cost += result.get("cost") or 0.0
            if lost:
                if executor.shared_fate:  # a broken pool loses every session it ran
                    lost += running.values()
                    running.clear()
                restarts += 1
                if restarts > MAX_RESTARTS:
                    outcome.gave_up = f"workers died {restarts} times"
                    break
                executor.restart()
                waiting[:0] = refresh(sorted(lost, key=lambda job: job.index))
        display.update(done, failed, len(running), cost)
    except KeyboardInterrupt:
        outcome.interrupted = True
        _stop(executor, running, outcome)
    return outcome


def _stop(executor: Executor, running: dict[Any, Job], outcome: Outcome) -> None:
    """Ctrl-C: stop the running sessions and collect what they say within a grace period."""
    executor.stop(list(running))
    deadline = time.monotonic() + STOP_GRACE_S
    with contextlib.suppress(KeyboardInterrupt):  # a second Ctrl-C: stop waiting
        while running and time.monotonic() < deadline:
            for handle, result in executor.wait(list(running), 0.25):
                job = running.pop(handle)
                if isinstance(result, dict):
                    outcome.rows[job.index] = result


def _error_row(job: Job, error: BaseException) -> dict[str, Any]:
    """A session whose worker raised (a database that failed, say): failed, resumed on the
    next invocation."""
    status = "interrupted" if isinstance(error, KeyboardInterrupt) else "failed"
    message = str(error).strip().splitlines()
    return job.row(status, error=f"{type(error).__name__}: {message[0] if message else ''}")


class RichDisplay:
    """A progress bar on stderr: done, failed and running sessions, and the cost so far."""

    def __init__(self, total: int, title: str) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn(
                "[red]{task.fields[failed]} failed[/] · {task.fields[running]} running · "
                "${task.fields[cost]:.4f}"
            ),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=False,
        )
        self.task = self.progress.add_task(title, total=total, failed=0, running=0, cost=0.0)
        self.progress.start()

    def update(self, done: int, failed: int, running: int, cost: float) -> None:
        self.progress.update(
            self.task, completed=done + failed, failed=failed, running=running, cost=cost
        )

    def close(self) -> None:
        self.progress.stop()


class QuietDisplay:
    def update(self, done: int, failed: int, running: int, cost: float) -> None:
        pass

    def close(self) -> None:
        pass


def run_batch(options: BatchOptions, module_path: Path) -> int:
    """Run the batch and write its results; the exit status (0: every session completed,
    1: some failed or were not run, 130: stopped by Ctrl-C)."""
    from fems_runtime.store import Store

    prepared = prepare(options, module_path)
    spec, plan = prepared.spec, prepared.plan

    def refresh(jobs: list[Job]) -> list[Job]:
        with Store(spec.db) as store:
            runs = BatchTable(store).runs(spec.batch)
        return [
            dataclasses.replace(job, session=runs[job.index]["session"])
            if job.index in runs
            else job
            for job in jobs
        ]

    outcome = Outcome()
    if not prepared.jobs:
        print(
            f"batch {spec.batch}: all {len(plan.jobs())} sessions already completed",
            file=sys.stderr,
        )
    else:
        outcome = _run_jobs(options, prepared, refresh)
    rows = _all_rows(plan, prepared, outcome, refresh)
    summary = results.summarize(rows, prepared.collect, plan.models)
    try:
        _write(options, spec.batch, results.table(rows, prepared.collect), summary)
    except OSError as error:
        raise RunError(f"cannot write the results: {error}") from None
    print(results.summary_text(summary), file=sys.stderr)
    if outcome.interrupted:
        print(
            f"batch {spec.batch}: stopped; run the same command again to finish it",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    if outcome.gave_up:
        print(
            f"batch {spec.batch}: {outcome.gave_up}; run the same command again to resume",
            file=sys.stderr,
        )
    return EXIT_OK if all(row["status"] == "completed" for row in rows) else EXIT_FAILED


def _run_jobs(
    options: BatchOptions, prepared: Prepared, refresh: Callable[[list[Job]], list[Job]]
) -> Outcome:
    """Run the jobs left on the pool or on Ray, with a progress display and the cost limit."""
    from fems_runtime.store import Store

    spec, total = prepared.spec, len(prepared.plan.jobs())
    workers = max(1, min(options.workers or os.cpu_count() or 1, len(prepared.jobs)))
    executor = make_executor(options, spec, workers)
    where = "Ray task slots" if options.ray is not None else "processes"
    log = f" (their messages: {worker_log(options, spec.batch)})" if options.ray is None else ""
    print(
        f"batch {spec.batch}: {total} sessions{_branch_text(spec.fork)}, "
        f"{len(prepared.rows)} already completed, {len(prepared.jobs)} to run on {workers} "
        f"{where}{log}",
        file=sys.stderr,
    )
    display: RichDisplay | QuietDisplay = (
        RichDisplay(total, spec.batch) if options.progress else QuietDisplay()
    )
    with contextlib.ExitStack() as stack:
        budget = None
        if options.max_cost is not None:
            store = stack.enter_context(Store(spec.db))
            budget = CostBudget(options.max_cost, BatchSpending(BatchTable(store), spec.batch))
        try:
            earlier = list(prepared.rows.values())
            outcome = execute(executor, prepared.jobs, refresh, display, earlier, budget)
        finally:
            display.close()
            executor.close()
        if outcome.not_started and budget is not None:
            print(
                f"batch {spec.batch}: the batch's recorded cost ${budget.spent():.4f} passed "
                f"--max-cost ${budget.limit:g}: {outcome.not_started} sessions not started; "
                "run the same command with a higher --max-cost to go on",
                file=sys.stderr,
            )
    return outcome


def _branch_text(fork: Branch | None) -> str:
    """How the batch's header names its branch point (§16.4a)."""
    if fork is None:
        return ""
    return f" continuing session {fork.parent} from turn {fork.turn}"


def _all_rows(
    plan: Plan,
    prepared: Prepared,
    outcome: Outcome,
    refresh: Callable[[list[Job]], list[Job]],
) -> list[dict[str, Any]]:
    """A row for every session of the plan: finished now, earlier, or not (interrupted: it
    has a session to resume; pending: not started)."""
    found = {**prepared.rows, **outcome.rows}
    missing = refresh([job for job in plan.jobs() if job.index not in found])
    for job in missing:
        found[job.index] = job.row("interrupted" if job.session is not None else "pending")
    sets = dict(prepared.spec.sets)
    return [{"set": sets, **found[index]} for index in sorted(found)]


def results_folder(options: BatchOptions, batch: str) -> Path:
    """``--out DIR``, else the folder of the first ``--results`` file, else ``./BATCH``."""
    if options.out is None and options.results:
        return options.results[0].parent
    return options.out or Path(batch)


def worker_log(options: BatchOptions, batch: str) -> Path:
    """Where pool workers write what runs print on stderr (notices, run warnings)."""
    return results_folder(options, batch) / f"{batch}.workers.log"


def _write(
    options: BatchOptions,
    batch: str,
    table: list[dict[str, Any]],
    summary: dict[str, Any],
) -> None:
    """The results files: ``--results FILE`` (.csv or .json, repeatable), else ``--out DIR``
    (default ``./BATCH``) with results.csv, results.json, summary.json and summary.txt."""
    targets = list(options.results)
    written = []
    if not targets:
        folder = results_folder(options, batch)
        targets = [folder / "results.csv", folder / "results.json"]
        written = results.write_summary(folder, batch, summary)
    for path in targets:
        results.write_results(path, batch, table, summary)
    shown = ", ".join(str(path) for path in [*targets, *written])
    print(f"wrote {shown}", file=sys.stderr)
