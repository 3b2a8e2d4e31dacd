"""The front end as one call: read a ``.fems`` file, parse it, check it.

The CLI, the build pipeline and the benchmarks all start here, so that every entry point reports
the same diagnostics for the same file.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from fems2py.checker import CheckedScript, check
from fems2py.checks.usage import excuse_unused
from fems2py.collector import gc_paused
from fems2py.diagnostics import CompileError, Diagnostic
from fems2py.nodes import Span
from fems2py.parser import parse


def read_source(path: Path) -> str:
    """The file's text with ``\\r\\n`` kept (the lexer handles both line ends, §1.1).

    An unreadable or non-UTF-8 file becomes a diagnostic, never a traceback.
    """
    try:
        data = path.read_bytes()
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise CompileError([_encoding_diagnostic(path, data, error.start)]) from None
    except FileNotFoundError:
        raise CompileError([_file_diagnostic(path, "no such file")]) from None
    except IsADirectoryError:
        raise CompileError([_file_diagnostic(path, "is a directory, not a .fems file")]) from None
    except OSError as error:
        raise CompileError([_file_diagnostic(path, error.strerror or str(error))]) from None


def _encoding_diagnostic(path: Path, data: bytes, offset: int) -> Diagnostic:
    """Point at the first byte that is not UTF-8 (§1.1), by line and character column."""
    line_start = data.rfind(b"\n", 0, offset) + 1
    line = data.count(b"\n", 0, offset) + 1
    col = len(data[line_start:offset].decode("utf-8", errors="replace")) + 1
    return Diagnostic(
        "error",
        f"byte 0x{data[offset]:02x} is not valid UTF-8",
        Span(str(path), line, col, line, col + 1),
        hint="FEM scripts are UTF-8; save the file with UTF-8 encoding",
    )


def _file_diagnostic(path: Path, message: str) -> Diagnostic:
    return Diagnostic("error", message, Span(str(path), 1, 1, 1, 1))


def analyze_source(
    source: str, path: str, base_dir: Path, root: Path | None = None
) -> tuple[CheckedScript, list[Diagnostic]]:
    """Parse and check ``source``; returns the checked script and every diagnostic, warnings
    included, in source order. The files it names are read from inside ``root`` (default: the
    script's folder ``base_dir``, see :mod:`fems2py.sources`).

    The checker also runs on a tree with syntax errors (the parser recovers per block), so one
    run reports a file's syntax and semantic mistakes together.
    """
    with gc_paused():
        script, diagnostics = parse(source, path, base_dir, root)
        checked = check(script, base_dir, root)
    excused = excuse_unused(diagnostics, checked.unused_actions)
    return checked, sorted([*excused, *checked.diagnostics], key=_position)


def analyze(path: Path, root: Path | None = None) -> tuple[CheckedScript, list[Diagnostic]]:
    """Parse and check the file at ``path``; raise :class:`CompileError` if it has errors."""
    _, checked, diagnostics = analyze_file(path, root=root)
    return checked, diagnostics


def analyze_file(
    path: Path, strict: bool = False, root: Path | None = None
) -> tuple[str, CheckedScript, list[Diagnostic]]:
    """:func:`analyze` that also returns the source it read (the build hashes it); ``strict``
    makes every warning an error (``--strict``)."""
    source = read_source(path)
    checked, diagnostics = analyze_source(source, str(path), path.parent, root)
    if strict:
        diagnostics = as_errors(diagnostics)
    if any(d.severity == "error" for d in diagnostics):
        raise CompileError(diagnostics)
    return source, checked, diagnostics


def as_errors(diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    """``--strict`` (§12.11): every warning is an error."""
    return [dataclasses.replace(d, severity="error") for d in diagnostics]


def _position(diagnostic: Diagnostic) -> tuple[int, int]:
    return diagnostic.span.line, diagnostic.span.col
