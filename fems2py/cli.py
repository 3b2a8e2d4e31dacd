"""The ``fems2py`` command: a thin layer over the library (check, build, run, graph, serve).

Exit codes follow the compiler convention: 0 success (warnings allowed), 1 errors in a script
(or a failed run), 2 usage errors. A user's mistake is printed as diagnostics, never as a
Python traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from fems2py import __version__
from fems2py.diagnostics import CompileError, Diagnostic

EXIT_OK, EXIT_ERRORS, EXIT_USAGE = 0, 1, 2
STRICT_HELP = (
    "treat every warning as an error (unreachable nodes, stub modules, problems inside "
    "actions no flow uses, …); exit 1 if there is any"
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = _argument_parser()
    args, rest = parser.parse_known_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    if rest and args.command != "run":
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.command == "run":
        args.module_args = rest
    return args.handler(args)


def _argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fems2py",
        description="Compile FEM multi-agent scripts (.fems) to plain, readable Python.",
    )
    parser.add_argument("--version", action="version", version=f"fems2py {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    check = commands.add_parser(
        "check", help="report every error and warning of .fems files, build nothing"
    )
    check.add_argument("files", nargs="+", type=Path, metavar="FILE")
    check.add_argument("--strict", action="store_true", help=STRICT_HELP)
    check.set_defaults(handler=_check)

    build = commands.add_parser("build", help="compile a .fems file to one Python module")
    build.add_argument("file", type=Path, metavar="FILE")
    build.add_argument(
        "-o", "--output", type=Path, help="the module to write (default: FILE with .py)"
    )
    build.add_argument(
        "--bundle",
        action="store_true",
        help="copy the script's code: files next to the output, so the module is self-contained",
    )
    build.add_argument("--strict", action="store_true", help=STRICT_HELP)
    build.set_defaults(handler=_build)

    run = commands.add_parser(
        "run",
        help="build (cached by source hash) and run a script; other options go to the module",
        description="Build FILE (cached by its source hash) and run it. Every option after FILE "
        "is passed to the generated module: --model --replies --db --session --human --seed "
        "--trace --result --resume --serve --port --root.",
    )
    run.add_argument("file", type=Path, metavar="FILE")
    run.set_defaults(handler=_run)

    graph = commands.add_parser("graph", help="draw a script's flows as a Mermaid flowchart")
    graph.add_argument("file", type=Path, metavar="FILE")
    graph.add_argument(
        "-o", "--output", type=Path, help="write the chart to this .mmd file (default: stdout)"
    )
    graph.set_defaults(handler=_graph)

    serve = commands.add_parser(
        "serve",
        help="open stored sessions in the browser, read-only (the stage; needs fems-runtime[web])",
        description="Serve the stage on 127.0.0.1 for the sessions of a database: the dialog, "
        "the flow and every actor's view, read-only. The flow is drawn from the session's "
        ".fems file when it is in the working directory, unchanged since the run.",
    )
    serve.add_argument("--db", required=True, help="database path or SQLAlchemy URL")
    serve.add_argument("--session", type=int, help="open this session (default: list the sessions)")
    serve.add_argument("--port", type=int, default=0, help="the port (default: a free one)")
    serve.set_defaults(handler=_serve)

    lsp = commands.add_parser(
        "lsp",
        help="serve the Language Server Protocol over stdio, for editors (needs fems2py[lsp])",
        description="Start the fems2py language server on stdin/stdout: diagnostics as you "
        "type, go to definition, references, rename, hover, completion and the outline. "
        "Editors start it themselves (see editors/vscode).",
    )
    lsp.set_defaults(handler=_lsp)
    return parser


def _check(args: argparse.Namespace) -> int:
    from fems2py.frontend import analyze_source, as_errors, read_source

    failed = False
    for path in args.files:
        try:
            source = read_source(path)
        except CompileError as error:
            _print_diagnostics(error.diagnostics, path, None)
            failed = True
            continue
        _, diagnostics = analyze_source(source, str(path), path.parent)
        if args.strict:
            diagnostics = as_errors(diagnostics)
        _print_diagnostics(diagnostics, path, source)
        failed = failed or any(d.severity == "error" for d in diagnostics)
        if not diagnostics:
            print(f"{path}: ok", file=sys.stderr)
    return EXIT_ERRORS if failed else EXIT_OK


def _build(args: argparse.Namespace) -> int:
    from fems2py.build import BuildRefused, build_file

    output = args.output or args.file.with_suffix(".py")
    try:
        result = build_file(args.file, output, bundle=args.bundle, strict=args.strict)
    except CompileError as error:
        _print_compile_error(error, args.file)
        return EXIT_ERRORS
    except BuildRefused as refusal:
        print(f"fems2py: error: {refusal}", file=sys.stderr)
        return EXIT_ERRORS
    _print_diagnostics(result.warnings, args.file, _source_or_none(args.file))
    print(f"wrote {output}", file=sys.stderr)
    return EXIT_OK


def _run(args: argparse.Namespace) -> int:
    from fems2py.build import build_cached, run_module

    try:
        module_path = build_cached(args.file)
    except CompileError as error:
        _print_compile_error(error, args.file)
        return EXIT_ERRORS
    return run_module(
        module_path, args.module_args, project_dir=Path(args.file).parent, source=args.file
    )


def _graph(args: argparse.Namespace) -> int:
    from fems2py.frontend import analyze
    from fems2py.graph import to_mermaid

    if args.output is not None and args.output.suffix != ".mmd":
        print(
            f"fems2py: error: cannot write {args.output}: only Mermaid (.mmd) output is "
            "supported; render it with any Mermaid tool",
            file=sys.stderr,
        )
        return EXIT_USAGE
    try:
        checked, _ = analyze(args.file)
    except CompileError as error:
        _print_compile_error(error, args.file)
        return EXIT_ERRORS
    chart = to_mermaid(checked.script)
    if args.output is None:
        sys.stdout.write(chart)
    else:
        args.output.write_text(chart, encoding="utf-8")
        print(f"wrote {args.output}", file=sys.stderr)
    return EXIT_OK


def _serve(args: argparse.Namespace) -> int:
    from fems_runtime.records import RunError
    from fems_runtime.stage import missing_web_extra, serve_sessions
    from fems_runtime.stage.chart import chart_for_source
    from fems_runtime.store import Store

    problem = missing_web_extra()
    if problem is not None:
        print(f"fems2py: error: {problem}", file=sys.stderr)
        return EXIT_ERRORS
    if args.db in ("", ":memory:") or ("://" not in args.db and not Path(args.db).is_file()):
        print(f"fems2py: error: no database at {args.db!r}", file=sys.stderr)
        return EXIT_ERRORS
    try:
        store = Store(args.db)
    except RunError as error:
        print(f"fems2py: error: {error}", file=sys.stderr)
        return EXIT_ERRORS
    with store:
        if args.session is not None and store.session(args.session) is None:
            print(f"fems2py: error: {args.db} has no session {args.session}", file=sys.stderr)
            return EXIT_ERRORS
        return serve_sessions(
            store,
            args.session,
            args.port,
            lambda row: chart_for_source([Path(row.get("script") or "")], row.get("script_hash")),
        )


def _lsp(args: argparse.Namespace) -> int:
    try:
        from fems2py.lsp import main as serve
    except ImportError as missing:
        print(
            f"fems2py: error: the language server needs {missing.name}: pip install 'fems2py[lsp]'",
            file=sys.stderr,
        )
        return EXIT_USAGE
    return serve()


def _source_or_none(path: Path) -> str | None:
    """The script's text for excerpts, read like the compiler reads it (None if unreadable)."""
    from fems2py.frontend import read_source

    try:
        return read_source(path)
    except CompileError:
        return None


def _print_compile_error(error: CompileError, path: Path) -> None:
    _print_diagnostics(error.diagnostics, path, _source_or_none(path))


def _print_diagnostics(diagnostics: Sequence[Diagnostic], path: Path, source: str | None) -> None:
    """Print diagnostics with a source excerpt for those in the script itself (one in a
    ``code:`` file, say, is printed without one)."""
    for diagnostic in diagnostics:
        in_script = diagnostic.span.file == str(path)
        print(diagnostic.format(source if in_script else None), file=sys.stderr)
    errors = sum(1 for d in diagnostics if d.severity == "error")
    warnings = len(diagnostics) - errors
    if diagnostics:
        print(f"{_count(errors, 'error')}, {_count(warnings, 'warning')}", file=sys.stderr)


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" + ("" if number == 1 else "s")


if __name__ == "__main__":
    raise SystemExit(main())
