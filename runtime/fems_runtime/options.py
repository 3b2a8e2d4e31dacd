"""The generated module's run options (§16.3), listed once: the module's command line is built
from :data:`RUN_OPTIONS`, and ``fems2py run`` names them in its help from the same table."""

from __future__ import annotations

import argparse
import difflib
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fems_runtime.words import SESSION_SPEC


def seconds(text: str) -> float:
    """A number of seconds > 0 (``--timeout``, ``--retry-budget``)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: give a number of seconds > 0")
    return value


def dollars(text: str) -> float:
    """A number of US dollars ≥ 0 (``--max-cost``)."""
    try:
        value = float(text.strip().removeprefix("$"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of US dollars") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: give a number of US dollars ≥ 0")
    return value


def folder(text: str) -> str:
    """An existing folder (``--root``): a mistyped one is said at once, not as files 'outside
    --root' or tools that find nothing."""
    path = Path(text)
    if not path.is_dir():
        raise argparse.ArgumentTypeError(
            f"{text!r} is a file, not a folder" if path.exists() else f"{text!r}: no such folder"
        )
    return text


def port(text: str) -> int:
    """A TCP port, 0 to 65535 (``--port``; 0: a free one)."""
    if not _is_port(text.strip()):
        raise argparse.ArgumentTypeError(f"{text!r}: give a port from 0 to 65535 (0: a free one)")
    return int(text)


def _is_port(text: str) -> bool:
    return text.isdigit() and int(text) <= 65535


#: ``SESSION`` or ``SESSION:TURN``: sessions are numbered from 1 (§3), turns from 0 (none kept).
FORK_POINT = re.compile(r"\s*0*([1-9]\d*)\s*(?::\s*(\d+)\s*)?")


def fork_point(text: str) -> str:
    """``SESSION`` or ``SESSION:TURN`` (``--fork``), checked and kept as written."""
    if FORK_POINT.fullmatch(text) is None:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give SESSION or SESSION:TURN, sessions numbered from 1 (for example "
            "--fork 3:40)"
        )
    return text.strip()


def address(text: str) -> str:
    """``HOST:PORT`` (``--listen``): checked and kept as written."""
    host, _, number = text.rpartition(":")
    if not host or not _is_port(number):
        raise argparse.ArgumentTypeError(f"{text!r}: give HOST:PORT (for example 127.0.0.1:4711)")
    return text


def session_spec(text: str) -> str:
    """``new``, a session number ``N`` ≥ 1 or ``N / new`` (``--session``, §3), kept as written."""
    if SESSION_SPEC.fullmatch(text) is None:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give new, a session number N (from 1) or 'N / new' (for example 3)"
        )
    return text


def session_number(text: str) -> int:
    """A session number ≥ 1 (``--reuse``)."""
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a session number (for example 3)")
    return int(text)


@dataclass(frozen=True)
class RunOption:
    """One option of the module's command line: its flag, help, the type that reads its value
    (None: text) and the value's name in the help; ``switch`` options take no value."""

    flag: str
    help: str
    type: Callable[[str], Any] | None = None
    metavar: str | None = None
    switch: bool = False

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        if self.switch:  # default None: an option not given is not passed to run()
            parser.add_argument(self.flag, action="store_true", default=None, help=self.help)
            return
        extra: dict[str, Any] = {"type": self.type} if self.type is not None else {}
        if self.metavar is not None:
            extra["metavar"] = self.metavar
        parser.add_argument(self.flag, help=self.help, **extra)


RUN_OPTIONS: tuple[RunOption, ...] = (
    RunOption("--model", "default model (litellm string, fems/mock, fems/script)"),
    RunOption("--replies", "JSON replies file for the fems/script model (implies it)"),
    RunOption("--db", "database path or SQLAlchemy URL (default: meta.database)"),
    RunOption(
        "--session",
        "new, N or 'N / new' (default: meta.session)",
        type=session_spec,
        metavar="SESSION",
    ),
    RunOption(
        "--human",
        "'terminal', 'fems/mock' (deterministic answers, for unattended runs) or a JSON "
        "answers file for human turns",
    ),
    RunOption("--seed", "seed for fems/mock", type=int),
    RunOption(
        "--timeout",
        "the longest silence, in seconds, before a reply's first chunk or between two, after "
        "which a model call is retried (default: meta.timeout, 60)",
        type=seconds,
        metavar="S",
    ),
    RunOption(
        "--retry-budget",
        "seconds a model call may spend retrying transient errors (default: "
        "meta.retry_budget, 120)",
        type=seconds,
        metavar="S",
    ),
    RunOption(
        "--max-cost",
        "stop the run once its recorded cost passes this many US dollars, after the turn "
        "that passed it (default: meta.max_cost; --resume with a higher limit goes on)",
        type=dollars,
        metavar="USD",
    ),
    RunOption("--trace", "write a JSONL event trace to this file"),
    RunOption("--result", "write the final result JSON to this file"),
    RunOption(
        "--root",
        "the folder the read/list/write tools may reach (default: the script's folder)",
        type=folder,
        metavar="DIR",
    ),
    RunOption(
        "--souls",
        "load personas and user profiles from a YAML or JSON file (souls:, users:)",
        metavar="FILE",
    ),
    RunOption(
        "--transcript", "print the dialog as it happens: speaker, room, narration", switch=True
    ),
    RunOption(
        "--show",
        "print these final variables when the run completes (e.g. --show winner,day)",
        metavar="VAR,…",
    ),
    RunOption(
        "--resume",
        "continue an interrupted or failed session from its last checkpoint (with "
        "--session N, else the newest session of this script), replaying recorded turns",
        switch=True,
    ),
    RunOption(
        "--fork",
        "start a new session from session SESSION: its first TURN turns (all without :TURN) "
        "are replayed from its records, then the run goes live with this run's options",
        type=fork_point,
        metavar="SESSION[:TURN]",
    ),
    RunOption(
        "--reuse",
        "start a new session that replays each turn of session SESSION whose request is "
        "unchanged, and goes live at the first turn whose request differs (after an edit)",
        type=session_number,
        metavar="SESSION",
    ),
    RunOption(
        "--serve",
        "watch the run in the browser: serve the stage on 127.0.0.1 (needs "
        "fems-runtime[web]); human turns are answered in the page",
        switch=True,
    ),
    RunOption("--port", "the stage's port (with --serve; default: a free one)", type=port),
    RunOption(
        "--otel",
        "export the run's OpenTelemetry GenAI spans and metrics over OTLP/HTTP to "
        "OTEL_EXPORTER_OTLP_ENDPOINT (default http://localhost:4318; needs fems-runtime[otel]; "
        "on too when an OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_SERVICE_NAME or "
        "OTEL_RESOURCE_ATTRIBUTES variable is set)",
        switch=True,
    ),
    RunOption(
        "--debug",
        "run under a Debug Adapter Protocol server on stdin/stdout, for an editor that "
        "launches it (breakpoints on .fems lines)",
        switch=True,
    ),
    RunOption(
        "--listen",
        "with --debug: serve one debugger that attaches at HOST:PORT instead (port 0: a free "
        "one, printed)",
        type=address,
        metavar="HOST:PORT",
    ),
)


def usage_problem(args: argparse.Namespace, variables: Collection[str]) -> str | None:
    """What is wrong with a combination of a run's command-line options, if anything
    (``variables``: the script's, which ``--show`` names)."""
    problem = session_conflict(args.session, args.resume, args.fork, args.reuse)
    if problem is not None:
        return problem
    if args.listen is not None and not args.debug:
        return "--listen serves a debugger: use it with --debug"
    if args.debug and args.serve:
        return "--debug and --serve both drive the run: give one"
    if args.port is not None and not args.serve:
        return "--port chooses the stage's port: use it with --serve"
    if args.db is not None and not args.db.strip():
        return "--db is empty: give a database path or SQLAlchemy URL"
    return (
        unwritable("--result", args.result)
        or replies_conflict(args.model, args.replies)
        or unknown_shown(args.show, variables)
    )


def unwritable(option: str, path: str | None) -> str | None:
    """Why the file ``path`` of ``option`` (``--result``, written when the run ends) cannot be
    written, if it cannot: said before the run, not after it (a missing folder is created, as
    build -o does)."""
    if path is None:
        return None
    target = Path(path)
    if target.is_dir():
        return f"{option} {path} is a folder: give a file path"
    folder = next((parent for parent in target.parents if parent.exists()), None)
    if folder is not None and not folder.is_dir():
        return f"{option} {path}: {folder} is a file, not a folder"
    return None


def session_conflict(session: object, resume: object, fork: object, reuse: object) -> str | None:
    """What contradicts in the options that choose the run's session, if anything: ``--resume``
    continues one (§16.4), ``--fork`` and ``--reuse`` start a new one from another (§16.4a)."""
    new_session = str(session or "").strip().lower() == "new"
    if resume and new_session:
        return "--resume continues a session: give --session N (or leave it out)"
    branch = "--fork" if fork is not None else "--reuse" if reuse is not None else None
    if branch is None:
        return None
    if fork is not None and reuse is not None:
        return "--fork and --reuse both start a new session from another: give one"
    if resume:
        return f"{branch} starts a new session; --resume continues one: give one of them"
    if session is not None and not new_session:
        return f"{branch} starts a new session: leave out --session"
    return None


def resuming(options: Mapping[str, Any]) -> str:
    """What continues an interrupted run of the command line (§16.4): ``--resume``, in place of
    the option that started a new session (it is this script's newest, which --resume takes)."""
    started = (
        f"--fork {options['fork']}"
        if options.get("fork") is not None
        else f"--reuse {options['reuse']}"
        if options.get("reuse") is not None
        else f"--session {options['session']}"
        if str(options.get("session") or "").strip().lower() == "new"
        else None
    )
    return "--resume" if started is None else f"--resume in place of {started}"


def unknown_shown(show: str | None, variables: Collection[str]) -> str | None:
    """What is wrong with ``--show``, if anything: a name that is no variable of the script,
    said before the run rather than as ``(not a variable)`` after it."""
    names = [name.strip() for name in (show or "").split(",") if name.strip()]
    unknown = next((name for name in names if name not in variables), None)
    if unknown is None:
        return None
    close = difflib.get_close_matches(unknown, list(variables), n=1)
    known = ", ".join(list(variables)[:8]) or "none"
    hint = f"did you mean {close[0]}?" if close else f"the script's variables: {known}"
    return f"--show {unknown}: the script declares no variable {unknown} ({hint})"


def replies_conflict(model: str | None, replies: object) -> str | None:
    """What is wrong with ``--model`` beside ``--replies`` (§15.3), if anything: ``--replies``
    plays the ``fems/script`` model, so ``--model fems/mock`` contradicts it."""
    if replies is None or model is None or model.strip() != "fems/mock":
        return None
    return (
        "--replies plays the fems/script model and --model fems/mock the mock: they contradict; "
        "drop --model (--replies implies fems/script) or drop --replies"
    )


def run_option_parser(description: str, prog: str | None = None) -> argparse.ArgumentParser:
    """The module's command line: every option of :data:`RUN_OPTIONS`. ``prog`` is the command
    its usage and errors name (default: the program's file name, ``game.py``)."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description=description,
        epilog="Exit status: 0 completed, 1 run error, 2 usage error. Set FEMS_TRACEBACK=1 to "
        "see the Python traceback behind a run error, mapped to .fems lines.",
    )
    for option in RUN_OPTIONS:
        option.add_to(parser)
    return parser


def run_flags() -> str:
    """The options' flags, for a help text that lists them (``fems2py run``)."""
    return " ".join(option.flag for option in RUN_OPTIONS)
