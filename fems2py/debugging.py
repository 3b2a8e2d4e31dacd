"""``fems2py debug`` without FILE: a launch request names the script (``program``) and its
options (``args``); the script is built like ``fems2py run`` builds it (cached)."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

from fems_runtime.options import run_option_parser
from fems_runtime.records import RunError

from fems2py.build import build_cached, load_program
from fems2py.diagnostics import CompileError


def launch_target(arguments: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The program and run options a launch request asks for; a script that does not build
    or options the module refuses are a :class:`RunError` the client shows."""
    if not arguments.get("program"):
        raise RunError("launch: give program, the .fems file to debug")
    file = Path(str(arguments["program"]))
    try:
        built = build_cached(file)
    except CompileError as error:
        raise RunError(f"{file} does not build:\n{error}") from None
    except OSError as error:
        raise RunError(f"{file}: {error.strerror}") from None
    program = load_program(built.output, file.parent, file)
    parser = run_option_parser(f"Debug {file}")
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            parsed = parser.parse_args([str(arg) for arg in arguments.get("args") or ()])
    except SystemExit:
        raise RunError(f"launch args: {errors.getvalue().strip()}") from None
    options = {k: v for k, v in vars(parsed).items() if v is not None}
    for name in ("debug", "listen", "serve", "port", "show"):
        options.pop(name, None)
    return program, options


__all__ = ["launch_target"]
