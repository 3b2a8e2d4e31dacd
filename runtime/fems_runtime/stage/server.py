"""The stage's web app (§17): a small Starlette app served by uvicorn on 127.0.0.1.

Every route but the static files needs the token printed in the stage's URL (a query parameter,
or the ``X-Stage-Token`` header the page's own requests send). Reads go to the store through a
source (:class:`~fems_runtime.stage.live.LiveStage` or :class:`~fems_runtime.stage.archive.Archive`);
the only write is ``POST /api/answer`` for a waiting human turn. Live updates are server-sent
events, one stream per perspective (``seat``): the page gets the stage's state, with the replies
being written that the seat may see, and reads its view again when the message count moves.
Reads run on the event loop, like the run's own store calls (the store's writer lives there).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import select
import socket
import stat
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from fems_runtime.records import RunError
from fems_runtime.stage.archive import Archive
from fems_runtime.stage.chart import FlowChart, chart_for_source, source_candidates
from fems_runtime.stage.live import AnswerRefused, LiveStage
from fems_runtime.stage.view import SessionView, shown_path

if TYPE_CHECKING:
    from fems_runtime.store import Store

STATIC = Path(__file__).parent / "static"
EXIT_RUN_ERROR = 1
OUTPUT_CHECK_S = 0.5
"""How often a stage looks whether the reader of its output has left (:func:`_stop_unread`)."""


class StagedProgram(Protocol):
    """What the stage needs of a generated module's :class:`~fems_runtime.app.Program` (named
    by its shape, so the stage and the app, which starts it, do not import each other)."""

    script: Any  # ScriptInfo: file, sha256
    module_file: str
    source: Path | None

    @property
    def run_async(self) -> Callable[..., Awaitable[Any]]: ...


Report = Callable[[Any], int]
"""Prints how a run ended (its RunResult, a RunError or an interrupt); the exit status."""


class StageSource(Protocol):
    """What the web app reads: a live run or an archive of sessions."""

    def sessions(self) -> list[dict[str, Any]]: ...

    def session_view(self, number: int) -> SessionView: ...

    def chart_of(self, number: int) -> FlowChart: ...

    def last_call(self, seat: str) -> dict[str, Any] | None: ...

    def state(self, seat: str = "") -> dict[str, Any]: ...

    def changes(self, seat: str = "") -> AsyncIterator[dict[str, Any]]: ...

    def answer(self, number: int, text: str, values: Mapping[str, Any]) -> None: ...


Handler = Callable[[Request], Awaitable[Response]]


def create_app(source: StageSource, token: str) -> Starlette:
    """The stage's routes over ``source``, guarded by ``token``."""
    guarded = _guard(token)
    handle = _Handlers(source)
    routes = [
        Route("/", guarded(handle.page)),
        Route("/api/sessions", guarded(handle.sessions)),
        Route("/api/sessions/{number:int}", guarded(handle.session)),
        Route("/api/sessions/{number:int}/messages", guarded(handle.messages)),
        Route("/api/events", guarded(handle.events)),
        Route("/api/answer", guarded(handle.answer), methods=["POST"]),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    return Starlette(routes=routes)


def _guard(token: str) -> Callable[[Handler], Handler]:
    """What makes a handler answer only requests that carry the stage's token (the page's
    header, or the URL's query parameter)."""

    def guarded(handler: Handler) -> Handler:
        async def check(request: Request) -> Response:
            given = request.headers.get("x-stage-token") or request.query_params.get("token")
            if not given or not secrets.compare_digest(given, token):
                return JSONResponse({"error": "the stage's URL has a token: use it"}, 403)
            return await handler(request)

        return check

    return guarded


class _Handlers:
    """The routes over one source: the page, the reads (sessions, a session, a seat's
    messages), the event stream of a seat, and the one write (a human turn's answer)."""

    def __init__(self, source: StageSource) -> None:
        self.source = source

    async def page(self, request: Request) -> Response:
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-store"})

    async def sessions(self, request: Request) -> Response:
        return JSONResponse({"sessions": self.source.sessions()})

    async def session(self, request: Request) -> Response:
        number = request.path_params["number"]
        try:
            view = self.source.session_view(number)
        except KeyError:
            return JSONResponse({"error": f"no session {number}"}, 404)
        chart = self.source.chart_of(number).to_json()
        summary = view.summary()
        shown = {**summary, "parent_here": self._can_open(summary["parent"])}
        return JSONResponse({**shown, "seats": view.seats(), "chart": chart})

    def _can_open(self, session: int | None) -> bool:
        """Whether the page can link to ``session`` (a live stage shows its own run only)."""
        if session is None:
            return False
        try:
            self.source.session_view(session)
        except KeyError:
            return False
        return True

    async def messages(self, request: Request) -> Response:
        number = request.path_params["number"]
        seat = request.query_params.get("seat", "")
        try:
            found = self.source.session_view(number).messages(seat)
        except KeyError:
            return JSONResponse({"error": f"no seat {seat} in session {number}"}, 404)
        last_call = self.source.last_call(seat) if seat else None
        return JSONResponse({"seat": seat, "messages": found, "last_call": last_call})

    async def events(self, request: Request) -> Response:
        """The seat's state now and after each change, as server-sent events (the replies
        being written in it are those of the seat's rooms, §17.1)."""
        seat = request.query_params.get("seat", "")

        async def stream() -> AsyncIterator[str]:
            async for state in self.source.changes(seat):
                yield f"data: {json.dumps(state, ensure_ascii=False)}\n\n"

        headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
        return StreamingResponse(stream(), media_type="text/event-stream", headers=headers)

    async def answer(self, request: Request) -> Response:
        try:
            body = await request.json()
            number = int(body["id"])
            text = str(body.get("text", ""))
            values = body.get("outs") or {}
            if not isinstance(values, dict):
                raise ValueError("outs must be an object")
        except (ValueError, KeyError, TypeError) as error:
            return JSONResponse({"error": f"not an answer: {error}"}, 400)
        try:
            self.source.answer(number, text, values)
        except AnswerRefused as refusal:
            return JSONResponse({"error": str(refusal)}, 409)
        return JSONResponse({"taken": number})


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: Ctrl+C stops the run and the stage together."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def _start(app: Starlette, port: int) -> tuple[asyncio.Task[None], str]:
    """Serve ``app`` on 127.0.0.1:``port`` (0: a free port); the task and the address."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(("127.0.0.1", port))
    except OSError:
        listener.close()
        raise
    config = uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False)
    server = _Server(config)
    serving = asyncio.create_task(server.serve(sockets=[listener]))
    while not server.started:
        if serving.done():
            serving.result()
            raise OSError("the server stopped while starting")
        await asyncio.sleep(0.01)
    host, bound = listener.getsockname()[:2]
    return serving, f"{host}:{bound}"


async def run_on_stage(
    program: StagedProgram,
    options: dict[str, Any],
    port: int,
    report: Report,
) -> int:
    """Run ``program`` with the stage up; after the run the page stays until Ctrl+C. Human
    turns are answered in the page unless ``--human`` says otherwise."""
    script = program.script
    sources = source_candidates(program.module_file, script.file)
    if program.source is not None:
        sources.insert(0, program.source)
    chart = await asyncio.to_thread(chart_for_source, sources, script.sha256)
    stage = LiveStage(
        chart, None if program.source is not None else shown_path(program.module_file)
    )
    token = secrets.token_urlsafe(16)
    try:
        serving, address = await _start(create_app(stage, token), port)
    except OSError as error:
        print(
            f"{script.file}: error: cannot serve the stage on 127.0.0.1:{port}: {error}",
            file=sys.stderr,
        )
        return EXIT_RUN_ERROR
    url = f"http://{address}/?token={token}"
    if options.get("human") is None:
        options["human"] = stage
    _say(f"{script.file}: the stage is at {url}")
    watch = _stop_unread()
    try:
        try:
            outcome: Any = await program.run_async(**options, observer=stage)
        except RunError as error:
            outcome = error
        except asyncio.CancelledError:  # Ctrl+C during the run
            return report(KeyboardInterrupt())
        status = report(outcome)
        _say(f"{script.file}: the run has ended; the stage stays at {url} until Ctrl+C")
        with contextlib.suppress(asyncio.CancelledError):
            await serving
        return status
    finally:
        watch.cancel()
        serving.cancel()


async def serve_archive(
    store: Store,
    session: int | None,
    port: int,
    chart_for: Callable[[Mapping[str, Any]], FlowChart],
) -> int:
    """Serve the sessions of ``store`` read-only until Ctrl+C (``fems2py serve``)."""
    token = secrets.token_urlsafe(16)
    try:
        serving, address = await _start(create_app(Archive(store, chart_for), token), port)
    except OSError as error:
        print(f"fems2py: error: cannot serve on 127.0.0.1:{port}: {error}", file=sys.stderr)
        return EXIT_RUN_ERROR
    shown = f"&session={session}" if session is not None else ""
    _say(f"fems2py: the stage is at http://{address}/?token={token}{shown} (Ctrl+C stops it)")
    watch = _stop_unread()
    try:
        with contextlib.suppress(asyncio.CancelledError):
            await serving
        return 0
    finally:
        watch.cancel()
        serving.cancel()


def _stop_unread() -> asyncio.Task[None]:
    """Stop the current task as Ctrl+C does once the reader of the process's output leaves
    (``fems2py serve … | head``): a server writes to its pipe too seldom to die of a broken
    pipe, and would serve on, its URL unread, until Ctrl+C. The watch, to cancel at the end."""
    return asyncio.create_task(_until_unread(asyncio.current_task()))


async def _until_unread(stopped: asyncio.Task[Any] | None) -> None:
    """Wait until standard output or error is a pipe whose reader left (never when neither
    is a pipe: a terminal, a file); then send what is still said there to the null device,
    so that nothing fails writing it, and cancel ``stopped``."""
    pipes = [fd for fd in (1, 2) if _is_pipe(fd)]
    if not pipes or stopped is None or not hasattr(select, "poll"):
        return
    poller = select.poll()
    for fd in pipes:
        poller.register(fd, 0)  # no event asked: only an error (no reader) or a hang-up
    while not (gone := [fd for fd, _ in poller.poll(0)]):
        await asyncio.sleep(OUTPUT_CHECK_S)
    nowhere = os.open(os.devnull, os.O_WRONLY)
    for fd in gone:
        os.dup2(nowhere, fd)
    os.close(nowhere)
    stopped.cancel()


def _is_pipe(fd: int) -> bool:
    """Whether ``fd`` is a pipe: a terminal or a file has no reader that could leave."""
    try:
        return stat.S_ISFIFO(os.fstat(fd).st_mode)
    except OSError:
        return False


def _say(text: str) -> None:
    with contextlib.suppress(BrokenPipeError):  # its reader left: the watch stops the stage
        print(text, file=sys.stderr, flush=True)
